"""Partition quality of split-and-cluster (precision@K against the true bias-conflicting groups).

Protocol of the slice-discovery comparisons (Domino, FACTS), per class: split and cluster the images of
the class in set A (easy and hard clusters, e.g. 5 + 5, on a biased validation set); assign the images
of the class in set B (e.g. the unbiased test set) to the nearest of all A prototypes and rank each
cluster's members by cosine similarity to its prototype; for each ground-truth bias-conflicting group
(the class shown in a context other than its correlated one) take the best overlap with any cluster's
top ``k``; precision@k is that overlap over ``k``, averaged over groups and classes.
"""

from __future__ import annotations

import torch

from nemo_train.lbee.clustering import WardClustering
from nemo_train.lbee.metrics import precision_at_k
from nemo_train.lbee.selection import similarities
from nemo_train.lbee.split import SplitRule


def partition_precision(
    fit: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    correlated: torch.Tensor,
    split: SplitRule,
    clustering: WardClustering,
    k: int = 10,
) -> float:
    """Mean precision@``k`` over classes.

    ``fit`` / ``test``: ``(embeddings [M, D], probs [M, C], labels [M])`` of set A / ``(embeddings, labels,
    contexts)`` of set B; ``correlated[c]``: the correlated context of class ``c`` (its group is left out).
    """
    emb_a, probs_a, labels_a = fit
    emb_b, labels_b, context_b = test
    scores = []
    for c in labels_a.unique().tolist():
        rows = torch.nonzero(labels_a == c).flatten()
        s = split(probs_a[rows], labels_a[rows], c)
        protos = [clustering(emb_a[rows[mask]]).prototypes for mask in (s.easy, s.hard) if mask.any()]
        if not protos:
            continue
        prototypes = torch.cat(protos)
        members = torch.nonzero(labels_b == c).flatten()
        if len(members) == 0:
            continue
        sims = similarities(emb_b[members], prototypes)  # [m, P]
        assigned = sims.argmax(-1)
        rankings = []
        for p in range(len(prototypes)):
            inside = torch.nonzero(assigned == p).flatten()
            order = sims[inside, p].argsort(descending=True)
            rankings.append(members[inside[order]].tolist())
        groups = [
            members[context_b[members] == g].tolist()
            for g in context_b.unique().tolist()
            if g != int(correlated[c]) and bool((context_b[members] == g).any())
        ]
        if groups:
            scores.append(precision_at_k(groups, rankings, k))
    return sum(scores) / len(scores) if scores else float("nan")
