"""The "+validation" variant of a baseline (NEMO paper, Table 2): ``m`` candidates from the baseline,
each put through the counterfactual test, the argmax-CEI one kept (SciTX's selection, nothing else)."""

from __future__ import annotations

from nemo_train.errors import UserInputError
from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark
from nemo_train.nemo.methods.base import Explanation, select_by_cei


class WithValidation:
    """Wrap a baseline that has ``candidates(sample, benchmark, m)``; named ``"<baseline>+validation"``."""

    def __init__(self, base, scorer, m: int = 3) -> None:
        if not hasattr(base, "candidates"):
            raise UserInputError(
                f"{type(base).__name__} cannot propose several candidates; +validation needs candidates()"
            )
        if m < 1:
            raise UserInputError(f"m={m}; expected at least one candidate")
        self.base, self.scorer, self.m = base, scorer, m
        self.name = f"{base.name}+validation"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        candidates = self.base.candidates(sample, benchmark, self.m)
        best, trials = select_by_cei(self.scorer, sample, candidates, benchmark.class_names)
        return Explanation(best.hypothesis if best else "", candidates, trials, best)
