"""The trivial rows of ``distill-eval`` (generated data): Everything, Class-free constant, Class prior, Odd-one-out,
Distractor.

The same explainers as ``nemo-eval``'s (:mod:`nemo_train.nemo.methods.trivial`); none asks the student or the
classifier about the error it explains, and each answer's edit is derived from its sentence like every row's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from jsonargparse.typing import PositiveInt

from nemo_train.errors import UserInputError
from nemo_train.nemo.components.trivial_specs import mined_prior, most_frequent_cause
from nemo_train.nemo.distill.rows import DistillContext, DistillMethod
from nemo_train.nemo.distill.zoo_members import ZooClassifier
from nemo_train.nemo.methods import trivial
from nemo_train.nemo.methods.base import Method
from nemo_train.nemo.methods.reference import DistractorExplainer
from nemo_train.scoring.interventions import CounterfactualScorer
from nemo_train.scoring.shift_benchmark import build_shift_benchmark


class _TrivialRow(DistillMethod):
    uses_student: ClassVar[bool] = False

    def scorer(self, ctx: DistillContext) -> CounterfactualScorer:
        if ctx.keyword is None:
            raise UserInputError(f"{type(self).__name__} needs a generated benchmark (a fact sheet)")
        return ctx.keyword


class Everything(_TrivialRow):
    """Names every factor of the fact sheet."""

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        return trivial.EverythingExplainer(), self.scorer(ctx)


class ClassFreeConstant(_TrivialRow):
    """The most frequent cause among the target's errors for every error, with no class claim."""

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        return trivial.ClassFreeExplainer(most_frequent_cause(ctx.benchmark)), self.scorer(ctx)


class ClassPrior(_TrivialRow):
    """Per predicted class, the cause most frequent among errors predicted as that class on a mining split.

    On one classifier the prior comes from that classifier's own errors on its mining split. On a member of a
    held-out zoo (``distill-eval`` with ``zoo``) it comes from the **training zoo**: the errors of every training
    member on its own mining split, pooled (:func:`training_zoo_prior`); the held-out member's errors are never
    used. That is the "digit -> factor" shortcut a student distilled on the training zoo could learn without
    reading the classifier in front of it, so this row is the bar such a student has to clear.

    Args:
        data_kwargs: the shifts datamodule options of the mining split (default: the run's ``data_kwargs``, so the
            mining split has as many factors off per image as the held-out errors).
        mining_size: images of each mining split classified.
    """

    def __init__(self, data_kwargs: dict[str, Any] | None = None, mining_size: PositiveInt = 3000) -> None:
        self.data_kwargs, self.mining_size = data_kwargs, mining_size
        self._zoo_priors: dict[tuple, tuple[dict[int, str], str | None]] = {}

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        data_kwargs = self.data_kwargs if self.data_kwargs is not None else ctx.data_kwargs
        if ctx.training_zoo:
            key = (tuple(m.name for m in ctx.training_zoo), ctx.seed, repr(data_kwargs))
            if key not in self._zoo_priors:  # one prior for every held-out member of the run
                self._zoo_priors[key] = training_zoo_prior(ctx.training_zoo, ctx.seed, data_kwargs,
                                                           self.mining_size)  # fmt: skip
            prior, overall = self._zoo_priors[key]
            fallback = overall or most_frequent_cause(ctx.benchmark)
        else:
            prior, fallback = mined_prior(ctx.benchmark, ctx.target, "gaps_a", ctx.seed, data_kwargs, self.mining_size)
        return trivial.ClassPriorExplainer(prior, fallback), self.scorer(ctx)

    def settings(self) -> dict[str, Any]:
        return {"class": type(self).__name__, "data_kwargs": self.data_kwargs, "mining_size": self.mining_size}


def training_zoo_prior(
    members: Sequence[ZooClassifier], seed: int, data_kwargs: dict[str, Any] | None, size: int
) -> tuple[dict[int, str], str | None]:
    """``(predicted class -> cause, overall most frequent cause)`` of the single-cause errors of every training
    member on its mining split (the shift distribution rendered from the training handwriting with its own gaps),
    pooled."""
    found: list[tuple[int, str]] = []
    for member in members:
        target = member.spec.build()
        mined = build_shift_benchmark(
            target, member.gaps, n=size, seed=seed, split="mining", size=size, datamodule_kwargs=data_kwargs
        )
        found += [(s.prediction, s.cause) for s in mined.errors]
    return trivial.class_prior(found)


class OddOneOut(_TrivialRow):
    """One of the image's off-typical factors, drawn with the command's seed (no classifier)."""

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        return trivial.OddOneOutExplainer(ctx.seed), self.scorer(ctx)


class Distractor(_TrivialRow):
    """Blames a factor that is never a cause (the benchmark's distractor, e.g. the digit's position on shifts).

    Its sentence is true of the image, so it shows what a well-grounded explanation of the wrong factor scores.

    Args:
        attribute: the factor to blame (default: the benchmark's distractor).
    """

    def __init__(self, attribute: str | None = None) -> None:
        self.attribute = attribute

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        attribute = self.attribute or (ctx.benchmark.cause or {}).get("distractor")
        if attribute is None:
            raise UserInputError(f"benchmark {ctx.benchmark.name!r} names no distractor; give Distractor an attribute")
        return DistractorExplainer(attribute), self.scorer(ctx)
