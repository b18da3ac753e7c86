"""Completeness, Density, Token Length, attribution scores and the effective-token-ratio curve.

Functional core (:func:`pearson`, :func:`density_from_answers`, :func:`effective_token_ratio`,
:func:`curve_auc`) on plain arrays, and thin wrappers that ask an :class:`Evaluator` the questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
from typing_extensions import Unpack  # typing.Unpack needs Python 3.11

from nemo_train.differences.conditions import Condition
from nemo_train.differences.evaluators import Evaluator
from nemo_train.differences.tokens import detokenize, drop_tokens, token_length, token_strings, tokenize
from nemo_train.metrics.bootstrap import interval_fields, statistic_interval

THRESHOLDS = np.round(np.arange(0.0, 1.0 + 1e-9, 0.05), 2)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; 0.0 when either side is constant (an evaluator that always answers
    "cannot be determined" explains nothing)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    return float((dx * dy).sum() / denom) if denom > 1e-12 else 0.0


def completeness(
    evaluator: Evaluator, explanation: str, conditions: Sequence[Condition], diffs: Sequence[float]
) -> tuple[float, list[int]]:
    """Completeness = corr_c(Diff_Model(c), Diff_LLM(c; explanation)) over ``conditions``; also the answers."""
    answers = evaluator.answer([(explanation, c) for c in conditions])
    return pearson(diffs, answers), answers


@dataclass
class DensityResult:
    """Density and what it is made of: Completeness with and without the dropped tokens."""

    density: float
    completeness: float
    completeness_dropped: float
    #: the answers on the perturbed copies, ``[repeats, conditions]``
    dropped: np.ndarray | None = None


def density_from_answers(diffs: np.ndarray, full: np.ndarray, dropped: np.ndarray) -> float:
    """Density from answers (functional core): ``C(e) - mean_r C(ẽ_r)``, where ``full[c]`` are the
    answers on the whole explanation and ``dropped[r, c]`` those on the r-th perturbed copy for
    question c."""
    dropped = np.atleast_2d(dropped)
    return pearson(diffs, full) - float(np.mean([pearson(diffs, row) for row in dropped]))


class DensityOptions(TypedDict, total=False):
    """How :func:`density` perturbs an explanation (defaults in its signature)."""

    #: share of the explanation's tokens removed per perturbed copy
    drop_ratio: float
    #: perturbed copies per question
    repeats: int
    #: seed of the token removal
    seed: int


def density(
    evaluator: Evaluator,
    explanation: str,
    conditions: Sequence[Condition],
    diffs: Sequence[float],
    drop_ratio: float = 0.25,
    repeats: int = 1,
    seed: int = 0,
    full_answers: Sequence[int] | None = None,
) -> DensityResult:
    """Density (Def. 2) as derived here from "Towards automatic discovery and explanation of
    differences between vision models":

        Density(e) = Completeness(e) - (1/R) sum_r corr_c(Diff_Model(c), Diff_LLM(c; ẽ_{r,c}))

    where ẽ_{r,c} is ``e`` with ``round(drop_ratio * |e|)`` of its o200k_base tokens removed uniformly
    at random, drawn independently for every question c and repeat r (seeded by ``seed``, r, c). It is
    0 when the removed tokens did not matter, > 0 when they carried the answers (informative) and < 0
    when removing them helped (misleading). Per-token classes (unnecessary Δ = 0, informative Δ > 0,
    misleading Δ < 0) are read from the leave-one-out changes of :func:`attribution`, where each
    token's own Δ is exact.
    """
    tokens = tokenize(explanation)
    diffs = np.asarray(diffs, dtype=float)
    if full_answers is None:
        full_answers = evaluator.answer([(explanation, c) for c in conditions])
    texts = []
    for r in range(repeats):
        for i in range(len(conditions)):
            kept, _ = drop_tokens(tokens, drop_ratio, np.random.default_rng([seed, r, i]))
            texts.append(detokenize(kept))
    answers = evaluator.answer([(t, c) for t, c in zip(texts, list(conditions) * repeats)])
    dropped = np.asarray(answers).reshape(repeats, len(conditions))
    value = density_from_answers(diffs, np.asarray(full_answers), dropped)
    c_full = pearson(diffs, full_answers)
    return DensityResult(value, c_full, c_full - value, dropped)


@dataclass
class Attribution:
    """Leave-one-out attribution of one explanation: token texts, raw loss changes, normalised scores."""

    tokens: list[str]
    delta: np.ndarray
    scores: np.ndarray


def attribution(
    evaluator: Evaluator, explanation: str, conditions: Sequence[Condition], diffs: Sequence[float]
) -> Attribution:
    """Loss change when each token is left out: Loss(e without t) - Loss(e), with Loss = -Completeness
    over ``conditions`` (a loss that falls as Completeness rises). Scores are normalised by
    :func:`normalise_attributions` (one factor shared by the explanations compared)."""
    ids = tokenize(explanation)
    base, _ = completeness(evaluator, explanation, conditions, diffs)
    texts = [detokenize(ids[:t] + ids[t + 1 :]) for t in range(len(ids))]
    answers = evaluator.answer([(text, c) for text in texts for c in conditions])
    matrix = np.asarray(answers, dtype=float).reshape(len(ids), len(conditions))
    delta = np.array([base - pearson(diffs, row) for row in matrix])
    return Attribution(token_strings(explanation), delta, delta.clip(min=0))


def token_classes(delta: np.ndarray, tol: float = 1e-9) -> dict[str, int]:
    """Counts of tokens whose removal changes Completeness by Δ > 0 (informative), Δ < 0 (misleading)
    or not at all (unnecessary)."""
    delta = np.asarray(delta, dtype=float)
    return {
        "informative": int((delta > tol).sum()),
        "misleading": int((delta < -tol).sum()),
        "unnecessary": int((np.abs(delta) <= tol).sum()),
    }


def normalise_attributions(items: Sequence[Attribution]) -> None:
    """Scale every explanation's positive loss changes into [0, 1] by one shared factor (the largest)."""
    top = max((float(a.delta.max()) for a in items if len(a.delta)), default=0.0)
    for a in items:
        a.scores = a.delta.clip(min=0) / top if top > 0 else np.zeros_like(a.delta)


def effective_token_ratio(scores: np.ndarray, thresholds: np.ndarray = THRESHOLDS) -> np.ndarray:
    """Share of tokens whose normalised score exceeds each threshold."""
    scores = np.asarray(scores, dtype=float)
    if scores.size == 0:
        return np.zeros(len(thresholds))
    return np.array([(scores > t).mean() for t in thresholds])


def curve_auc(thresholds: np.ndarray, ratios: np.ndarray) -> float:
    """Area under the effective-token-ratio curve (trapezoid rule)."""
    return float(np.trapezoid(ratios, thresholds))


@dataclass
class Scores:
    """The three headline numbers of one explanation, and the answers they were computed from (per condition:
    ``answers`` on the whole explanation, ``dropped`` ``[repeats, conditions]`` on the perturbed copies)."""

    completeness: float
    density: float
    token_length: int
    answers: list[int] = field(default_factory=list)
    dropped: np.ndarray | None = None

    @property
    def objective(self) -> float:
        return self.completeness + self.density


def score(
    evaluator: Evaluator,
    explanation: str,
    conditions: Sequence[Condition],
    diffs: Sequence[float],
    **density_options: Unpack[DensityOptions],
) -> Scores:
    """Completeness, Density (perturbed as ``density_options`` say) and Token Length of ``explanation``."""
    value, answers = completeness(evaluator, explanation, conditions, diffs)
    dens = density(evaluator, explanation, conditions, diffs, full_answers=answers, **density_options)
    return Scores(value, dens.density, token_length(explanation), list(answers), dens.dropped)


def score_intervals(diffs: Sequence[float], answers: Sequence[int], dropped: np.ndarray) -> dict[str, float | None]:
    """Bootstrap 95 % intervals of Completeness and Density over the test conditions, each condition resampled
    with its model difference and all its answers: ``{"completeness_ci_low", "completeness_ci_high",
    "density_ci_low", "density_ci_high"}`` (:func:`nemo_train.metrics.bootstrap.statistic_interval`)."""
    diffs, full, dropped = np.asarray(diffs, float), np.asarray(answers, float), np.atleast_2d(dropped)

    def dens(d, f, *rows):
        return density_from_answers(d, f, np.stack(rows))

    return {
        **interval_fields("completeness", statistic_interval([diffs, full], pearson)),
        **interval_fields("density", statistic_interval([diffs, full, *dropped], dens)),
    }
