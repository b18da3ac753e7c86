"""Metrics of language-based error explanations (sentence hardness, HR/AHR, CR/ACR, TPR, JI, P@K).

Notation: ``omega`` ``[M]`` is the model's per-image performance (1/0 correctness for a classifier),
``gamma`` ``bool[M, N]`` says whether sentence ``n`` describes image ``m``. A sentence's hardness is the
mean performance over the images it describes; it *describes a failure mode* when that mean lies
below the global mean by more than ``beta`` (``beta = o * std(omega)``, ``o = 0.2`` by default). The
ground-truth set ``S*_beta`` holds those sentences.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from nemo_train.errors import UserInputError


def beta_from(omega: torch.Tensor, o: float = 0.2) -> float:
    """``beta = o * std(omega)`` (population standard deviation)."""
    return float(o * omega.double().std(unbiased=False))


def sentence_hardness(gamma: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """``omega^{s_n}`` ``[N]``: mean of ``omega`` over the images each sentence describes (``nan`` if none)."""
    if gamma.ndim != 2 or gamma.shape[0] != len(omega):
        raise UserInputError(f"relevance {list(gamma.shape)} does not match {len(omega)} performance values")
    g = gamma.double()
    counts = g.sum(0)
    return (g.T @ omega.double()) / counts.where(counts > 0, torch.tensor(float("nan"), dtype=torch.float64))


def hard_sentences(gamma: torch.Tensor, omega: torch.Tensor, beta: float) -> set[int]:
    """``S*_beta``: indices of sentences with ``omega^{s_n} < omega^avg - beta`` (Eq. 9)."""
    hardness = sentence_hardness(gamma, omega)
    threshold = float(omega.double().mean()) - beta
    return set(torch.nonzero(hardness < threshold).flatten().tolist())  # nan compares False


def hardness_ratio(retrieved: Sequence[int], s_star: set[int]) -> float:
    """``HR_i = |R_i ∩ S*| / |R_i|``."""
    if not retrieved:
        raise UserInputError("a hard cluster retrieved no sentence")
    return sum(1 for s in retrieved if s in s_star) / len(retrieved)


def coverage_ratio(retrieved: Sequence[int], members: Sequence[int] | torch.Tensor, gamma: torch.Tensor) -> float:
    """``CR_i``: mean over the retrieved sentences of the fraction of the cluster's images they describe (Eq. 4)."""
    members = torch.as_tensor(members, dtype=torch.long)
    if len(retrieved) == 0 or len(members) == 0:
        raise UserInputError("coverage needs a non-empty cluster and at least one retrieved sentence")
    block = gamma[members][:, torch.as_tensor(list(retrieved), dtype=torch.long)].double()
    return float(block.mean(0).mean())


def average_hardness_ratio(per_cluster: Sequence[Sequence[int]], s_star: set[int]) -> float:
    """AHR: mean of ``HR_i`` over the hard clusters (Eq. 3)."""
    return sum(hardness_ratio(r, s_star) for r in per_cluster) / len(per_cluster)


def average_coverage_ratio(
    per_cluster: Sequence[Sequence[int]], members: Sequence[Sequence[int] | torch.Tensor], gamma: torch.Tensor
) -> float:
    """ACR: mean of ``CR_i`` over the hard clusters."""
    return sum(coverage_ratio(r, m, gamma) for r, m in zip(per_cluster, members)) / len(per_cluster)


def union(per_cluster: Iterable[Sequence[int]]) -> set[int]:
    """``R_S``: the union of the per-cluster sentence sets (Eq. 2)."""
    return {s for r in per_cluster for s in r}


def true_positive_rate(r_s: set[int], s_star: set[int]) -> float:
    """``TPR = |R_S ∩ S*| / |S*|`` (``nan`` when ``S*`` is empty)."""
    return len(r_s & s_star) / len(s_star) if s_star else math.nan


def jaccard_index(r_s: set[int], s_star: set[int]) -> float:
    """``JI = |R_S ∩ S*| / |R_S ∪ S*|`` (``nan`` when both are empty)."""
    both = r_s | s_star
    return len(r_s & s_star) / len(both) if both else math.nan


def precision_at_k(groups: Sequence[Sequence[int]], rankings: Sequence[Sequence[int]], k: int = 10) -> float:
    """Partition quality: for each ground-truth group, the best overlap with any predicted partition's
    top-``k`` ranked elements, divided by ``k``; averaged over the groups.

    ``groups``: element indices of each ground-truth group (e.g. the bias-conflicting contexts of a
    class); ``rankings``: each predicted partition's elements, most likely member first (for clusters:
    ordered by distance to the prototype).
    """
    if k < 1 or not groups:
        raise UserInputError("precision@k needs k >= 1 and at least one ground-truth group")
    tops = [set(list(r)[:k]) for r in rankings]
    return sum(max((len(set(g) & t) for t in tops), default=0) / k for g in groups) / len(groups)
