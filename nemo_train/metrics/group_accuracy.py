"""Accuracy per group (bias-aligned / conflicting, per context, per material)."""

from __future__ import annotations

import torch
from torchmetrics import Metric


def group_accuracy(preds: torch.Tensor, target: torch.Tensor, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Accuracy of ``preds`` (class indices) within each group; ``nan`` for a group with no sample."""
    correct, total = _group_counts(preds, target, groups, num_groups)
    return correct / total


def _group_counts(preds, target, groups, num_groups):
    groups = groups.long()
    hits = (preds == target).to(torch.float64)
    correct = torch.zeros(num_groups, dtype=torch.float64, device=preds.device).index_add_(0, groups, hits)
    total = torch.zeros(num_groups, dtype=torch.float64, device=preds.device).index_add_(
        0, groups, torch.ones_like(hits)
    )
    return correct, total


class GroupAccuracy(Metric):
    """Accuracy within each of ``num_groups`` groups; ``compute`` returns ``float[num_groups]``.

    ``update(preds, target, groups=None, attrs=None)`` takes class indices (or logits / probabilities,
    reduced by argmax over the last dimension) and the group index of every sample: ``groups``, or, when
    the metric was built with ``attribute``, ``attrs[attribute]`` (a batch's generator attributes, e.g. the
    NICO++ context). Both keywords may be passed at once, so one ``MetricCollection`` update serves every
    grouping; wrap the metric in torchmetrics' ``ClasswiseWrapper`` to name each group's value. Groups never
    seen give ``nan``. States are sums, so the metric is exact under DDP.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_groups: int, attribute: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {num_groups}")
        self.num_groups = num_groups
        self.attribute = attribute
        self.add_state("correct", default=torch.zeros(num_groups, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.zeros(num_groups, dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self,
        preds: torch.Tensor,
        target: torch.Tensor,
        groups: torch.Tensor | None = None,
        attrs: dict[str, torch.Tensor] | None = None,
    ) -> None:
        if self.attribute is not None:
            if attrs is None or self.attribute not in attrs:
                raise ValueError(f"GroupAccuracy groups by attrs[{self.attribute!r}], which the update lacks")
            groups = attrs[self.attribute]
        if groups is None:
            raise ValueError("GroupAccuracy.update needs the group index of every sample (groups=...)")
        if preds.ndim == target.ndim + 1:
            preds = preds.argmax(-1)
        if groups.numel() and (groups.min() < 0 or groups.max() >= self.num_groups):
            raise ValueError(f"group indices must lie in [0, {self.num_groups}), got {groups.unique().tolist()}")
        correct, total = _group_counts(preds, target, groups, self.num_groups)
        self.correct += correct
        self.total += total

    def compute(self) -> torch.Tensor:
        return (self.correct / self.total).float()
