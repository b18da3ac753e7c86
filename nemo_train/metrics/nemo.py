"""NEMO metrics: Counterfactual Explanation Impact (CEI), LLM Match and the mean of per-error scores.

CEI (NEMO Eq. 6) is the change, in percentage points, of the classifier's probability of the true
class once the cause named by an explanation is neutralised: ``100 * (P(y|s_e) - P(y|s_o))``;
:func:`cei_points` is the one place the formula is written (a trial's CEI, a teacher's label, the
:class:`CEI` metric all call it). LLM Match is the judges' 1 / 0.5 / 0 score of an explanation, averaged
over judges (one explanation's: :func:`judge_mean`) then samples. :class:`ScoreMean` averages stored per-error
scores (CEI, LLM Match, grounding) for the tables of ``nemo-eval``, ``distill-eval`` and the distillation teacher.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat


def _true_class_probability(probs: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    if probs.ndim == 1:
        return probs
    if probs.ndim != 2 or target is None:
        raise ValueError(f"probabilities of shape {tuple(probs.shape)}; expected [N] or [N, C] with a target of [N]")
    return probs.gather(1, target.long().view(-1, 1)).squeeze(1)


def cei_points(p_edited: float | torch.Tensor, p_original: float | torch.Tensor) -> float | torch.Tensor:
    """The CEI formula, ``100 * (P(y|s_e) - P(y|s_o))`` in percentage points, on true-class probabilities:
    Python floats (float64 arithmetic) or tensors (in their own dtype; :func:`cei` passes float64)."""
    return 100.0 * (p_edited - p_original)


def cei(edited_probs: torch.Tensor, original_probs: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample CEI in percentage points.

    Either pass the true-class probabilities ``P(y|s_e)`` and ``P(y|s_o)`` as ``[N]`` tensors, or full
    ``[N, C]`` probability matrices and the true classes ``target`` ``[N]``.
    """
    p_edit = _true_class_probability(edited_probs, target)
    p_orig = _true_class_probability(original_probs, target)
    if p_edit.shape != p_orig.shape:
        raise ValueError(
            f"edited {tuple(p_edit.shape)} and original {tuple(p_orig.shape)} probabilities differ in shape"
        )
    return cei_points(p_edit.double(), p_orig.double())


def llm_match(scores: torch.Tensor) -> torch.Tensor:
    """LLM Match of ``scores`` ``[N, J]`` (sample x judge; ``nan`` = the judge failed).

    Each sample's score is the mean of its valid judges; the result is the mean over samples with at
    least one valid judge (``nan`` if there is none).
    """
    per_sample = _per_sample_means(scores)
    valid = ~torch.isnan(per_sample)
    return per_sample[valid].mean() if valid.any() else torch.tensor(float("nan"), dtype=torch.float64)


def _per_sample_means(scores: torch.Tensor) -> torch.Tensor:
    if scores.ndim != 2:
        raise ValueError(f"judge scores of shape {tuple(scores.shape)}; expected [samples, judges]")
    scores = scores.double()
    valid = ~torch.isnan(scores)
    counts = valid.sum(1)
    sums = torch.where(valid, scores, torch.zeros_like(scores)).sum(1)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, float("nan")))


Scores = float | None | torch.Tensor | Sequence[float | None]


def _accumulate(
    total: float, count: float, values: Scores, weights: Sequence[float] | None = None
) -> tuple[float, float]:
    """``(total + sum(w * v), count + sum(w))`` over the scored values (``None`` = not scored, skipped),
    added one at a time in the given order: the same float64 sum as Python's left-to-right ``+``, where a
    tensor's vectorised ``sum`` would round differently in the last bits."""
    if isinstance(values, torch.Tensor):
        values = values.reshape(-1).tolist()
    elif values is None or isinstance(values, (int, float)):
        values = [values]
    if weights is None:
        for value in values:
            if value is not None:
                total, count = total + value, count + 1.0
        return total, count
    if len(weights) != len(values):
        raise ValueError(f"{len(weights)} weights for {len(values)} scores; expected one weight per score")
    for value, weight in zip(values, weights):
        if value is not None:
            total, count = total + value * weight, count + weight
    return total, count


def score_mean(values: Scores, weights: Sequence[float] | None = None) -> float:
    """Mean of per-error scores (``None`` skipped; ``weights``: a weighted mean), ``nan`` when none is scored."""
    total, count = _accumulate(0.0, 0.0, values, weights)
    return total / count if count else math.nan


def judge_mean(scores: Iterable[float | None]) -> float | None:
    """The mean over a panel's judges of one explanation's scores (``None``: the judge failed or reported nothing,
    skipped), ``None`` when no judge scored it: the explanation's LLM Match (judges' 1 / 0.5 / 0, the row
    :func:`llm_match` and :class:`LLMMatch` average per sample) or its grounding. Summed in judge order by
    :func:`score_mean`."""
    value = score_mean(list(scores))
    return None if math.isnan(value) else value


class ScoreMean(Metric):
    """Mean of per-error scores in float64: CEI, LLM Match or grounding of stored evaluation records.

    ``update(values, weights=None)`` takes one score, a sequence (``None`` = not scored, skipped) or a tensor;
    scores are summed in update order (see :func:`score_mean`, its functional form). ``compute`` is ``nan``
    while nothing was scored; ``count`` is the number of scores (or their total weight).
    """

    is_differentiable = False
    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, values: Scores, weights: Sequence[float] | None = None) -> None:
        total, count = _accumulate(float(self.total), float(self.count), values, weights)
        self.total.fill_(total)
        self.count.fill_(count)

    def compute(self) -> torch.Tensor:
        return self.total / self.count if self.count > 0 else torch.tensor(math.nan, dtype=torch.float64)


class CEI(ScoreMean):
    """Mean Counterfactual Explanation Impact in percentage points (higher: the explanation's
    intervention moves the prediction further toward the true class).

    ``update(edited_probs, original_probs, target=None)`` as in :func:`cei`. :meth:`per_sample`
    returns every sample's CEI in update order (gathered across processes under DDP).
    """

    higher_is_better = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("values", default=[], dist_reduce_fx="cat")

    def update(
        self, edited_probs: torch.Tensor, original_probs: torch.Tensor, target: torch.Tensor | None = None
    ) -> None:
        values = cei(edited_probs, original_probs, target)
        super().update(values)
        self.values.append(values)

    def per_sample(self) -> torch.Tensor:
        """Every sample's CEI (``[N]``, float64)."""
        with self.sync_context(should_sync=not self._is_synced):
            values = self.values
            if isinstance(values, torch.Tensor):
                return values.clone()
            return dim_zero_cat(values).clone() if values else torch.zeros(0, dtype=torch.float64)


class LLMMatch(Metric):
    """LLM Match: judges' scores (1 / 0.5 / 0) averaged over judges, then over samples.

    ``update(scores)`` takes ``[N, J]`` scores in the order of ``judge_names`` (``nan`` where a judge
    failed: it is skipped for that sample; a sample no judge scored is counted in ``failures`` and
    left out). :meth:`per_judge` gives each judge's mean over the samples it scored. All states are
    sums, so the metric is exact under DDP.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, judge_names: Sequence[str], **kwargs) -> None:
        super().__init__(**kwargs)
        if not judge_names:
            raise ValueError("LLMMatch needs at least one judge name")
        self.judge_names = list(judge_names)
        num = len(self.judge_names)
        self.add_state("sample_total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("sample_count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("failures", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("judge_total", default=torch.zeros(num, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("judge_count", default=torch.zeros(num, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, scores: torch.Tensor | Sequence[Sequence[float | None]]) -> None:
        if not isinstance(scores, torch.Tensor):
            scores = torch.tensor(
                [[math.nan if s is None else float(s) for s in row] for row in scores], dtype=torch.float64
            ).view(-1, len(self.judge_names))
        scores = scores.to(self.judge_total.device, torch.float64)
        if scores.ndim != 2 or scores.shape[1] != len(self.judge_names):
            raise ValueError(
                f"scores of shape {tuple(scores.shape)}; expected [N, {len(self.judge_names)}] (one column per judge)"
            )
        valid = ~torch.isnan(scores)
        self.judge_total += torch.where(valid, scores, torch.zeros_like(scores)).sum(0)
        self.judge_count += valid.sum(0)
        per_sample = _per_sample_means(scores)
        scored = ~torch.isnan(per_sample)
        self.sample_total += per_sample[scored].sum()
        self.sample_count += scored.sum()
        self.failures += (~scored).sum()

    def compute(self) -> torch.Tensor:
        if self.sample_count == 0:
            return torch.tensor(float("nan"), dtype=torch.float64)
        return self.sample_total / self.sample_count

    def per_judge(self) -> dict[str, float]:
        """Each judge's mean score over the samples it scored (``nan`` for a judge that scored none),
        synchronised across processes like :meth:`compute`."""
        with self.sync_context(should_sync=not self._is_synced):
            total, count = self.judge_total.clone(), self.judge_count.clone()
        means = torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))
        return dict(zip(self.judge_names, means.tolist()))
