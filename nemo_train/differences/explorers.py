"""Explorers: propose the next conditions to test (Optimization's exploration step).

:class:`LLMExplorer` prompts a language model with the candidates' history and scores, the allowed
ranges, and the exploration / exploitation choice. :class:`NeighbourhoodExplorer` is the embedded
default (a stand-in, not a language model): half of the proposals are neighbours (one attribute
changed) of tested conditions the best candidate got wrong (exploitation), half random untested
conditions (exploration). Every proposal is checked against the vocabulary by the caller.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nemo_train.backends import BackendError, ChatBackend, user_message
from nemo_train.differences import prompts
from nemo_train.differences.conditions import AttributeSpace, Condition, ConditionSpace
from nemo_train.differences.diff_model import Observation
from nemo_train.differences.failures import UNREADABLE

log = logging.getLogger(__name__)


@dataclass
class Candidate:
    """One explanation kept by Optimization, with its scores on the conditions explored so far."""

    text: str
    completeness: float = 0.0
    density: float = 0.0
    token_length: int = 0
    origin: str = "summary"

    @property
    def objective(self) -> float:
        return self.completeness + self.density

    def metrics(self) -> dict[str, float]:
        return {"completeness": round(self.completeness, 3), "density": round(self.density, 3)}


class Explorer(ABC):
    """Proposes ``k`` conditions; returns raw proposals ``{"strategy": ..., "condition": ...}``.

    A language-model explorer counts its ``requests`` and the ``failures`` among them (failed for good, or a reply
    without a list of conditions), keeping the first reason in ``first_error``.
    """

    label = "explorer"
    requests, failures, first_error = 0, 0, ""

    def bind(self, space: ConditionSpace, task: str) -> None:
        self.space, self.task = space, task

    @abstractmethod
    def propose(
        self,
        candidates: Sequence[Candidate],
        observations: Sequence[Observation],
        wrong: Sequence[Condition],
        k: int,
        seed: int,
    ) -> list[dict[str, Any]]:
        """Proposals; ``wrong`` lists tested conditions the best candidate mispredicts."""


class LLMExplorer(Explorer):
    """The exploration language model (JSON object output; malformed replies are re-asked by the
    backend and recorded as failures).

    Args:
        backend: chat backend.
        temperature, max_tokens: generation settings.
    """

    def __init__(self, backend: ChatBackend, temperature: float = 1.0, max_tokens: int = 800) -> None:
        self.backend, self.temperature, self.max_tokens = backend, temperature, max_tokens
        self.label = f"LLM {backend.model}"
        self.requests, self.failures, self.first_error = 0, 0, ""

    def prompt(self, candidates: Sequence[Candidate], observations: Sequence[Observation], k: int) -> str:
        history = "\n".join(
            f"Explanation {i + 1}: {c.text}\nMetrics {i + 1}: {json.dumps(c.metrics())}"
            for i, c in enumerate(candidates)
        )
        tested = "; ".join(self.space.describe(o.condition) for o in observations) or "none"
        return prompts.EXPLORE.format(
            task=self.task,
            definitions=prompts.METRIC_DEFINITIONS,
            history=history,
            space=self.space.description(),
            tested=tested,
            k=k,
            example=json.dumps(self.space.example()),
        )

    def propose(self, candidates, observations, wrong, k, seed):
        self.requests += 1
        try:
            reply = self.backend.chat_json(
                [user_message(self.prompt(candidates, observations, k))],
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                seed=seed,
            )[0]
        except BackendError as err:
            log.warning("explorer request failed for good: %s", err)
            reply, reason = None, " ".join(str(err).split())[:200]
        else:
            reason = UNREADABLE if reply is None else "a JSON reply without a list of conditions"
        items = reply.get("conditions") if isinstance(reply, dict) else None
        if not isinstance(items, list):
            self.failures += 1
            self.first_error = self.first_error or reason
            return []
        out = []
        for item in items:
            if isinstance(item, dict) and "condition" in item:
                out.append({"strategy": str(item.get("strategy", "")), "condition": item["condition"]})
            else:
                out.append(
                    {"strategy": str(item.get("strategy", "")) if isinstance(item, dict) else "", "condition": item}
                )
        return out


class NeighbourhoodExplorer(Explorer):
    """Embedded explorer (stand-in, not an LLM): neighbours of mispredicted conditions + random ones.

    Args:
        exploit_fraction: share of proposals that are neighbours of mispredicted conditions.
    """

    label = "neighbourhood sampler (stand-in, not an LLM)"

    def __init__(self, exploit_fraction: float = 0.5) -> None:
        self.exploit_fraction = exploit_fraction

    def propose(self, candidates, observations, wrong, k, seed):
        rng = np.random.default_rng(seed)
        space: AttributeSpace = self.space
        tested = {o.condition for o in observations}
        proposals: list[dict[str, Any]] = []
        seen: set[Condition] = set()
        for condition in [wrong[i] for i in rng.permutation(len(wrong))]:
            if len(proposals) >= round(self.exploit_fraction * k):
                break
            attribute = space.attributes[rng.integers(len(space.attributes))]
            values = condition.values
            values[attribute.name] = attribute.values[rng.integers(len(attribute.values))]
            neighbour = space.parse(values)
            if neighbour not in tested and neighbour not in seen:
                seen.add(neighbour)
                proposals.append({"strategy": "exploitation", "condition": neighbour.as_dict()})
        for _ in range(100 * k):
            if len(proposals) >= k:
                break
            values = {a.name: a.values[rng.integers(len(a.values))] for a in space.attributes}
            condition = space.parse(values)
            if condition not in tested and condition not in seen:
                seen.add(condition)
                proposals.append({"strategy": "exploration", "condition": values})
        return proposals
