"""What the reinforcement stage of the explainer (:mod:`nemo_train.explainer.grpo`) asks of a reward.

A reward is any object with ``__call__(errors, texts) -> (rewards, parts)``, configured by ``class_path`` /
``init_args``: ``errors[i]`` describes the error ``texts[i]`` explains (the ``error`` mapping each item of the
data carries: the classifier that made it, its id, its classes, ...); it returns one reward per text and the named
parts the rewards were made of (``parts[name][i]``, logged beside them; ``nan`` where a part is undefined, e.g. the
grounding of a text that makes no checkable claim). The explainer package never scores an explanation itself: the
reward that scores it the way the evaluation tables do lives with the scoring (``nemo_train.nemo.reward``) and is
injected by the preset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from nemo_train.errors import UserInputError

#: One reward per text, and each named part per text.
RewardOutput = tuple[list[float], dict[str, list[float]]]


@runtime_checkable
class ExplanationReward(Protocol):
    """Scores explanations of errors: one reward (and its parts) per ``(error, text)`` pair."""

    def __call__(self, errors: Sequence[Mapping[str, Any]], texts: Sequence[str]) -> RewardOutput: ...


def checked_output(output: RewardOutput, n: int) -> RewardOutput:
    """``output`` when it holds ``n`` finite rewards and ``n`` values per part; a one-line error otherwise."""
    rewards, parts = output
    if len(rewards) != n or any(len(v) != n for v in parts.values()):
        lengths = {k: len(v) for k, v in parts.items()}
        raise UserInputError(f"a reward returned {len(rewards)} rewards and parts {lengths} for {n} texts")
    if not all(math.isfinite(r) for r in rewards):
        raise UserInputError(f"a reward returned a non-finite value: {list(rewards)}")
    return list(rewards), dict(parts)


def nan_mean(values: Sequence[float]) -> float:
    """The mean of the finite values (``nan`` when none is)."""
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
