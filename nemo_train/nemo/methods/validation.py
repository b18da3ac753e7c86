"""The "+validation" variant of a baseline (NEMO paper, Table 2): ``m`` candidates from the baseline,
each put through the counterfactual test, the argmax-CEI one kept (SciTX's selection, nothing else)."""

from __future__ import annotations

from collections.abc import Sequence

from nemo_train.errors import UserInputError
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.batched_scoring import select_many
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark


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
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        """Every error's candidates (one batched request where the baseline can), each error's argmax CEI."""
        batch = getattr(self.base, "candidates_batch", None)
        if batch is not None:
            found = batch(list(samples), benchmark, self.m)
        else:
            found = [self.base.candidates(sample, benchmark, self.m) for sample in samples]
        out = []
        selected = select_many(self.scorer, samples, found, benchmark.class_names)  # the chunk tested together
        for candidates, (best, trials) in zip(found, selected):
            out.append(Explanation(best.hypothesis if best else "", candidates, trials, best))
        return out
