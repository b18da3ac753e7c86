"""Easy / hard splits and Ward clustering (direct and two-stage)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch
from scipy.stats import entropy as scipy_entropy
from sklearn.metrics import adjusted_rand_score

from nemo_train.errors import UserInputError
from nemo_train.lbee.clustering import WardClustering, prototypes
from nemo_train.lbee.split import ClassProbabilitySplit, CorrectnessSplit, EntropySplit, entropy

PROBS = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.9, 0.1], [0.7, 0.3], [0.99, 0.01]])


def test_entropy_matches_scipy():
    assert entropy(PROBS).tolist() == pytest.approx([scipy_entropy(p) for p in PROBS.numpy()], abs=1e-6)


def test_entropy_split_thresholds_avg_plus_minus_a_std():
    phi = np.array([scipy_entropy(p) for p in PROBS.numpy()])
    lo, hi = phi.mean() - 0.2 * phi.std(), phi.mean() + 0.2 * phi.std()
    split = EntropySplit(a=0.2)(PROBS)
    assert split.hard.tolist() == (phi > hi).tolist() == [False, True, False, True, False]
    assert split.easy.tolist() == (phi < lo).tolist()
    assert not (split.easy & split.hard).any()


def test_class_probability_and_correctness_splits():
    split = ClassProbabilitySplit(a=0.0)(PROBS, class_index=1)
    rho = PROBS[:, 1]
    assert split.hard.tolist() == (rho < rho.mean()).tolist()
    assert split.easy.tolist() == (rho > rho.mean()).tolist()
    labels = torch.tensor([0, 1, 0, 1, 0])
    correct = CorrectnessSplit()(PROBS, labels)
    assert correct.hard.tolist() == [False, True, False, True, False]  # argmax of [0.5, 0.5] is 0, label 1
    with pytest.raises(UserInputError):
        ClassProbabilitySplit()(PROBS)


def _blobs(n_per: int, seed: int = 0) -> tuple[torch.Tensor, np.ndarray]:
    gen = torch.Generator().manual_seed(seed)
    centers = torch.eye(8)[:4] * 5
    points = torch.cat([c + 0.3 * torch.randn(n_per, 8, generator=gen) for c in centers])
    return points, np.repeat(np.arange(4), n_per)


def test_ward_recovers_blobs_and_prototypes_are_member_means():
    points, truth = _blobs(40)
    clusters = WardClustering(n_clusters=4, normalize=False)(points)
    assert not clusters.two_stage
    assert adjusted_rand_score(truth, clusters.labels.numpy()) == 1.0
    for c in range(4):
        assert torch.allclose(clusters.prototypes[c], points[clusters.labels == c].mean(0), atol=1e-5)
    assert torch.allclose(prototypes(points, clusters.labels, 4), clusters.prototypes)


@pytest.mark.parametrize(
    "first_stage",
    [
        pytest.param(
            "faiss",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("faiss") is None,
                reason="faiss-cpu is optional (pip install nemo-train[faiss])",
            ),
        ),
        "minibatch",
    ],
)
def test_two_stage_path_agrees_with_direct_ward(first_stage):
    points, truth = _blobs(300)
    direct = WardClustering(n_clusters=4, normalize=False)(points)
    staged = WardClustering(n_clusters=4, max_direct=500, n_centroids=60, first_stage=first_stage, normalize=False)(
        points
    )
    assert staged.two_stage and not direct.two_stage
    assert staged.labels.shape == direct.labels.shape and staged.prototypes.shape == direct.prototypes.shape
    assert adjusted_rand_score(direct.labels.numpy(), staged.labels.numpy()) == 1.0


def test_default_two_stage_needs_no_faiss_and_faiss_absent_is_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss now raises ImportError, as where it is absent
    points, truth = _blobs(100)
    default = WardClustering(n_clusters=4, max_direct=100, n_centroids=40, normalize=False)
    assert default.first_stage == "minibatch"
    clusters = default(points)
    assert clusters.two_stage and adjusted_rand_score(truth, clusters.labels.numpy()) == 1.0
    with pytest.raises(UserInputError, match="faiss-cpu"):
        WardClustering(n_clusters=4, max_direct=100, n_centroids=40, first_stage="faiss")(points)
    assert not WardClustering(n_clusters=4, first_stage="faiss", normalize=False)(points[:100]).two_stage


def test_fewer_points_than_clusters():
    clusters = WardClustering(n_clusters=5)(torch.randn(3, 4))
    assert clusters.num_clusters == 3
    assert sorted(clusters.labels.tolist()) == [0, 1, 2]


def test_partition_precision_recovers_context_groups():
    from nemo_train.lbee.partition import partition_precision

    gen = torch.Generator().manual_seed(0)
    centers = torch.eye(6)[:3] * 4

    def blobs(n):
        context = torch.arange(3).repeat_interleave(n)
        return centers[context] + 0.2 * torch.randn(3 * n, 6, generator=gen), context

    emb_a, ctx_a = blobs(20)
    probs_a = torch.stack([torch.where(ctx_a == 0, 0.95, 0.3), torch.where(ctx_a == 0, 0.05, 0.7)], -1)
    labels_a = torch.zeros(len(emb_a), dtype=torch.long)
    emb_b, ctx_b = blobs(12)
    labels_b = torch.zeros(len(emb_b), dtype=torch.long)
    split = ClassProbabilitySplit(a=0.2)
    p10 = partition_precision(
        (emb_a, probs_a, labels_a), (emb_b, labels_b, ctx_b), torch.tensor([0]), split, WardClustering(2), k=10
    )
    assert p10 == 1.0  # both bias-conflicting contexts (1 and 2) fill the top 10 of a cluster each
