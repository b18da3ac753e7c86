"""Step 1 of the failure-mode search: split the target set into easy, hard and neutral images.

Three confidence measures, each an object configured by ``class_path``:

* :class:`EntropySplit` (unsupervised): output entropy ``phi``; hard when ``phi > avg + a*std``, easy
  when ``phi < avg - a*std``;
* :class:`ClassProbabilitySplit` (per class): the probability ``rho`` of the analysed class; hard when
  ``rho < avg - a*std``, easy when ``rho > avg + a*std``;
* :class:`CorrectnessSplit` (ground truth): hard when the prediction is wrong, easy when it is right.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nemo_train.errors import UserInputError


@dataclass
class Split:
    """Boolean masks ``[N]`` of the easy and hard images (the rest is neutral) and the score used."""

    easy: torch.Tensor
    hard: torch.Tensor
    score: torch.Tensor


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of each row of ``probs`` ``[N, K]``."""
    p = probs.float().clamp_min(1e-12)
    return -(probs.float() * p.log()).sum(-1)


def _check(probs: torch.Tensor) -> torch.Tensor:
    if probs.ndim != 2 or len(probs) == 0:
        raise UserInputError(f"expected class probabilities of shape [N, K] with N > 0, got {list(probs.shape)}")
    return probs


class _BandSplit:
    """A split on a score with thresholds ``avg -/+ a * std``; ``high_is_hard`` says which side is hard."""

    high_is_hard: bool

    def __init__(self, a: float = 0.2) -> None:
        if a < 0:
            raise UserInputError(f"a={a}; the threshold width must be >= 0")
        self.a = a

    def _band(self, score: torch.Tensor) -> Split:
        avg, std = score.mean(), score.std(unbiased=False)
        low, high = score < avg - self.a * std, score > avg + self.a * std
        return Split(easy=low, hard=high, score=score) if self.high_is_hard else Split(easy=high, hard=low, score=score)


class EntropySplit(_BandSplit):
    """Unsupervised split on output entropy with thresholds ``avg -/+ a * std`` (``a = 0.2`` by default)."""

    high_is_hard = True

    def __call__(
        self, probs: torch.Tensor, labels: torch.Tensor | None = None, class_index: int | None = None
    ) -> Split:
        return self._band(entropy(_check(probs)))


class ClassProbabilitySplit(_BandSplit):
    """Per-class split on the probability of ``class_index``: hard below ``avg - a*std``, easy above ``avg + a*std``."""

    high_is_hard = False

    def __call__(
        self, probs: torch.Tensor, labels: torch.Tensor | None = None, class_index: int | None = None
    ) -> Split:
        if class_index is None:
            raise UserInputError("the class-probability split analyses one class at a time; use per_class: true")
        return self._band(_check(probs)[:, class_index].float())


class CorrectnessSplit:
    """Ground-truth split: hard = misclassified, easy = correctly classified (no neutral set)."""

    def __call__(
        self, probs: torch.Tensor, labels: torch.Tensor | None = None, class_index: int | None = None
    ) -> Split:
        if labels is None:
            raise UserInputError("the correctness split needs ground-truth labels")
        correct = _check(probs).argmax(-1) == labels
        return Split(easy=correct, hard=~correct, score=correct.float())


SplitRule = EntropySplit | ClassProbabilitySplit | CorrectnessSplit
