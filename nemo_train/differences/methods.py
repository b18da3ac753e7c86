"""The three explainers: Raw Differences (Alg. 1), Summarization (Alg. 2) and Optimization (Alg. 3)
of "Towards automatic discovery and explanation of differences between vision models"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nemo_train.differences.conditions import AttributeSpace, Condition, Rejected, sample_conditions
from nemo_train.differences.diff_model import DiffModel, Observation
from nemo_train.differences.evaluators import Evaluator
from nemo_train.differences.explorers import Candidate, Explorer
from nemo_train.differences.metrics import completeness, score
from nemo_train.differences.summarizers import Summarizer, format_observations


def raw_differences(diff_model: DiffModel, conditions: Sequence[Condition]) -> tuple[str, list[Observation]]:
    """Alg. 1: measure every condition; the explanation is the list ``condition: verdict (gap)``."""
    observations = diff_model.observe(conditions)
    return format_observations(observations, diff_model.generator.space), observations


def summarization(summarizer: Summarizer, observations: Sequence[Observation], seed: int = 0) -> str:
    """Alg. 2: condense the Raw Differences list into a short explanation."""
    return summarizer.summarize(observations, seed=seed)


@dataclass
class OptimizationArgs:
    """Settings of Optimization.

    Args:
        iterations: T, rounds of exploration and update.
        conditions_per_iteration: conditions the explorer proposes each round.
        candidates: n, explanations kept (the best n of 2n each round).
        initial_conditions: conditions of the starting Raw Differences list (C_0).
    """

    iterations: int = 10
    conditions_per_iteration: int = 10
    candidates: int = 3
    initial_conditions: int = 10


@dataclass
class OptimizationResult:
    """The best explanation, the kept candidates, and the record of every round."""

    best: Candidate
    candidates: list[Candidate]
    observations: list[Observation]
    history: list[dict[str, Any]] = field(default_factory=list)
    explored: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)


class Optimization:
    """Alg. 3 with n candidates: explore, observe, update each candidate, keep the n best of 2n by
    Completeness + Density on the conditions explored so far.

    Conditions in ``held_out`` (the test set) are never explored: a proposal of one is rejected and
    recorded like a proposal outside the vocabulary or one already tested. When fewer valid
    proposals than asked remain and the vocabulary is finite, random untested conditions fill up
    (marked ``fill``).
    """

    def __init__(
        self,
        diff_model: DiffModel,
        summarizer: Summarizer,
        explorer: Explorer,
        evaluator: Evaluator,
        args: OptimizationArgs,
        held_out: Sequence[Condition] = (),
        drop_ratio: float = 0.25,
        seed: int = 0,
    ) -> None:
        self.diff_model, self.summarizer, self.explorer, self.evaluator = diff_model, summarizer, explorer, evaluator
        self.args, self.held_out, self.drop_ratio, self.seed = args, set(held_out), drop_ratio, seed
        self.space = diff_model.generator.space

    def _score(self, text: str, observations: Sequence[Observation], origin: str) -> Candidate:
        conditions = [o.condition for o in observations]
        s = score(
            self.evaluator, text, conditions, [o.diff for o in observations], drop_ratio=self.drop_ratio, seed=self.seed
        )
        return Candidate(text, s.completeness, s.density, s.token_length, origin)

    def _accept(self, proposals: list[dict], tested: set[Condition], iteration: int, result: OptimizationResult):
        accepted: list[tuple[Condition, str]] = []
        for proposal in proposals:
            try:
                condition = self.space.parse(proposal.get("condition"))
                if condition in tested or any(condition == c for c, _ in accepted):
                    raise Rejected("already tested")
                if condition in self.held_out:
                    raise Rejected("held out for evaluation")
            except Rejected as why:
                result.rejected.append({"iteration": iteration, "proposal": str(proposal)[:200], "reason": str(why)})
                continue
            accepted.append((condition, proposal.get("strategy") or "unspecified"))
        missing = self.args.conditions_per_iteration - len(accepted)
        if missing > 0 and isinstance(self.space, AttributeSpace):
            rng = np.random.default_rng([self.seed, iteration, 7])
            exclude = tested | self.held_out | {c for c, _ in accepted}
            accepted += [(c, "fill") for c in sample_conditions(self.space.grid(), missing, rng, exclude)]
        return accepted[: self.args.conditions_per_iteration]

    def _wrong(self, candidate: Candidate, observations: Sequence[Observation]) -> list[Condition]:
        _, answers = completeness(
            self.evaluator, candidate.text, [o.condition for o in observations], [o.diff for o in observations]
        )
        return [o.condition for o, a in zip(observations, answers) if a != int(np.sign(round(o.diff, 6)))]

    def run(self, initial: Sequence[Condition]) -> OptimizationResult:
        observations = self.diff_model.observe(initial)
        texts = [self.summarizer.summarize(observations, seed=self.seed + i) for i in range(self.args.candidates)]
        texts = [t for t in dict.fromkeys(texts) if t]
        for i in range(self.args.candidates):  # too few distinct summaries: refine the first one
            if len(texts) >= self.args.candidates or not texts:
                break
            _, text = self.summarizer.update(texts[0], observations, observations, {}, {}, seed=self.seed + 100 + i)
            texts += [text] if text and text not in texts else []
        candidates = [self._score(t, observations, "summary") for t in texts]
        candidates = sorted(candidates, key=lambda c: (-c.objective, c.token_length))
        result = OptimizationResult(candidates[0] if candidates else Candidate(""), candidates, list(observations))
        result.explored += [{"iteration": 0, "condition": c.as_dict(), "strategy": "initial"} for c in initial]
        self._record(result, 0, candidates, candidates)
        if not candidates:  # the summariser wrote no explanation: nothing to explore for or refine
            return result
        for t in range(1, self.args.iterations + 1):
            tested = {o.condition for o in observations}
            wrong = self._wrong(candidates[0], observations) if candidates else []
            proposals = self.explorer.propose(
                candidates, observations, wrong, self.args.conditions_per_iteration, seed=self.seed * 1000 + t
            )
            accepted = self._accept(proposals, tested, t, result)
            if not accepted:
                self._record(result, t, candidates, candidates)
                continue
            new = self.diff_model.observe([c for c, _ in accepted])
            result.explored += [{"iteration": t, "condition": c.as_dict(), "strategy": s} for c, s in accepted]
            observations = observations + new
            rescored = [self._score(c.text, observations, c.origin) for c in candidates]
            drafts = []
            for i, (old, now) in enumerate(zip(candidates, rescored)):
                feedback, text = self.summarizer.update(
                    old.text, observations, new, old.metrics(), now.metrics(), seed=self.seed * 1000 + 10 * t + i
                )
                if text and text not in {c.text for c in rescored + drafts}:
                    drafts.append(self._score(text, observations, f"update t={t}"))
            pool = sorted(rescored + drafts, key=lambda c: (-c.objective, c.token_length))
            candidates = pool[: self.args.candidates]
            self._record(result, t, pool, candidates)
        result.candidates, result.observations = candidates, observations
        result.best = candidates[0] if candidates else Candidate("")
        return result

    @staticmethod
    def _record(result: OptimizationResult, t: int, pool: list[Candidate], kept: list[Candidate]) -> None:
        kept_ids = {id(c) for c in kept}
        for c in pool:
            result.history.append(
                {
                    "iteration": t,
                    "explanation": c.text,
                    "origin": c.origin,
                    "completeness": c.completeness,
                    "density": c.density,
                    "token_length": c.token_length,
                    "kept": id(c) in kept_ids,
                }
            )
