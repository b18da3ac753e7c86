"""The trivial rows of a generated benchmark as configurable methods (:mod:`nemo_train.nemo.methods.trivial`).

The causes they blame come from the benchmark's fact sheet and, for the class prior, from a split disjoint from
the evaluated errors (:func:`mined_prior`); none of them asks the classifier about the error it explains.
"""

from __future__ import annotations

from typing import Any

from jsonargparse.typing import PositiveInt

from nemo_train.errors import UserInputError
from nemo_train.nemo.components.method_specs import BuildContext, MethodSpec
from nemo_train.nemo.methods import trivial
from nemo_train.nemo.methods.base import Method
from nemo_train.scoring.benchmark import NemoBenchmark
from nemo_train.scoring.shift_benchmark import build_shift_benchmark


def most_frequent_cause(benchmark: NemoBenchmark) -> str:
    """The benchmark's most frequent single-factor cause: the planted cause of a biased benchmark, else the most
    frequent established cause among the target's errors (``cause_counts``; the errors themselves when absent)."""
    if benchmark.facts is None:
        raise UserInputError(f"benchmark {benchmark.name!r} has no fact sheet; the trivial rows need a generated one")
    if benchmark.facts.cause is not None:
        return benchmark.facts.cause
    counts = benchmark.cause_counts or {}
    found = trivial.most_frequent([c for c, k in counts.items() for _ in range(k)])
    found = found or trivial.most_frequent(s.cause for s in benchmark.errors)
    if found is None:
        raise UserInputError(f"benchmark {benchmark.name!r} has no error with a single cause")
    return found


def mined_prior(
    benchmark: NemoBenchmark, target, gaps: str, seed: int, data_kwargs: dict[str, Any] | None, size: int
) -> tuple[dict[int, str], str]:
    """``(predicted class -> cause, fallback)``: on a biased benchmark the planted cause for every class; on the
    shifts digits the most frequent cause per predicted class among ``target``'s errors on the mining split (the
    shift distribution rendered from the training handwriting, disjoint from the test images)."""
    if benchmark.name != "shifts":
        cause = most_frequent_cause(benchmark)
        return {k: cause for k in range(len(benchmark.class_names))}, cause
    mined = build_shift_benchmark(
        target, gaps, n=size, seed=seed, split="mining", size=size, datamodule_kwargs=data_kwargs
    )
    prior, overall = trivial.class_prior((s.prediction, s.cause) for s in mined.errors)
    return prior, overall or most_frequent_cause(benchmark)


class EverythingMethod(MethodSpec):
    """Trivial row naming every factor of the fact sheet (generated benchmarks)."""

    def build(self, ctx: BuildContext) -> list[Method]:
        return [trivial.EverythingExplainer()]


class ClassFreeConstantMethod(MethodSpec):
    """Trivial row: the most frequent cause for every error, with no class claim (generated benchmarks)."""

    def build(self, ctx: BuildContext) -> list[Method]:
        return [trivial.ClassFreeExplainer(most_frequent_cause(ctx.benchmark))]


class ClassPriorMethod(MethodSpec):
    """Trivial row: per predicted class, the cause most frequent among that class's errors on the mining split.

    Args:
        mining_size: images of the shifts mining split that are classified (the prior's errors come from them).
    """

    def __init__(self, mining_size: PositiveInt = 3000) -> None:
        self.mining_size = mining_size

    def build(self, ctx: BuildContext) -> list[Method]:
        args = ctx.benchmark_args
        gaps = getattr(args, "gaps", "gaps_a")
        seed, data_kwargs = ctx.seed, getattr(args, "data_kwargs", None)
        prior, fallback = mined_prior(ctx.benchmark, ctx.target, gaps, seed, data_kwargs, self.mining_size)
        return [trivial.ClassPriorExplainer(prior, fallback)]


class OddOneOutMethod(MethodSpec):
    """Trivial row: one of the image's off-typical factors, drawn with the command's seed (no classifier)."""

    def build(self, ctx: BuildContext) -> list[Method]:
        return [trivial.OddOneOutExplainer(ctx.seed)]
