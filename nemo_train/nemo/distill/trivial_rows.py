"""The trivial rows of ``distill-eval`` (generated data): Everything, Class-free constant, Class prior, Odd-one-out.

The same explainers as ``nemo-eval``'s (:mod:`nemo_train.nemo.methods.trivial`); none asks the student or the
classifier about the error it explains, and each answer's edit is derived from its sentence like every row's.
"""

from __future__ import annotations

from typing import Any, ClassVar

from jsonargparse.typing import PositiveInt

from nemo_train.errors import UserInputError
from nemo_train.nemo.components.trivial_specs import mined_prior, most_frequent_cause
from nemo_train.nemo.distill.rows import DistillContext, DistillMethod
from nemo_train.nemo.interventions import CounterfactualScorer
from nemo_train.nemo.methods import trivial
from nemo_train.nemo.methods.base import Method


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
    """Per predicted class, the cause most frequent among the target's errors of that class on the mining split.

    Args:
        data_kwargs: the shifts datamodule options of the mining split (as the run's ``data_kwargs``).
        mining_size: images of the mining split classified.
    """

    def __init__(self, data_kwargs: dict[str, Any] | None = None, mining_size: PositiveInt = 3000) -> None:
        self.data_kwargs, self.mining_size = data_kwargs, mining_size

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        prior, fallback = mined_prior(ctx.benchmark, ctx.target, "gaps_a", ctx.seed, self.data_kwargs, self.mining_size)
        return trivial.ClassPriorExplainer(prior, fallback), self.scorer(ctx)


class OddOneOut(_TrivialRow):
    """One of the image's off-typical factors, drawn with the command's seed (no classifier)."""

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        return trivial.OddOneOutExplainer(ctx.seed), self.scorer(ctx)
