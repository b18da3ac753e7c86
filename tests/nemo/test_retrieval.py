"""Exact cosine top-k retrieval against a brute-force reference (scikit-learn)."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
import torch
from sklearn.metrics.pairwise import cosine_similarity

from nemo_train.errors import UserInputError
from nemo_train.nemo.retrieval import ReferenceIndex, cosine_topk


def brute_force(queries, refs, k, allowed=None):
    """Top-k by sklearn's cosine similarity, restricted to an allowed [Q, N] mask."""
    sims = cosine_similarity(queries.numpy(), refs.numpy())
    if allowed is not None:
        sims = np.where(allowed, sims, -np.inf)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return [[int(i) for i in row if np.isfinite(sims[q, i])] for q, row in enumerate(order)]


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    refs = torch.randn(500, 16, generator=g)
    labels = torch.randint(0, 7, (500,), generator=g)
    correct = torch.rand(500, generator=g) > 0.3
    queries = torch.randn(12, 16, generator=g)
    return refs, labels, correct, queries


@pytest.mark.parametrize("chunk_size", [7, 64, 100000])
def test_cosine_topk_matches_brute_force(data, chunk_size):
    refs, _, _, queries = data
    result = cosine_topk(queries, refs * 3.0, k=5, chunk_size=chunk_size)  # scale must not matter
    assert result.as_lists() == brute_force(queries, refs, 5)
    expected = np.sort(cosine_similarity(queries.numpy(), refs.numpy()), axis=1)[:, ::-1][:, :5]
    np.testing.assert_allclose(result.scores.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_single_query_and_padding_when_fewer_than_k():
    refs = torch.eye(3)
    result = cosine_topk(torch.tensor([1.0, 0.1, 0.0]), refs, k=5)
    assert result.indices.tolist() == [[0, 1, 2, -1, -1]]
    assert torch.isinf(result.scores[0, 3:]).all()


@pytest.mark.parametrize("chunk_size", [5, 1000])
def test_class_filtered_search_keeps_correct_references_of_allowed_classes(data, chunk_size):
    refs, labels, correct, queries = data
    y = torch.arange(12) % 7
    y_hat = (y + 3) % 7
    index = ReferenceIndex(refs, labels, correct, chunk_size=chunk_size)
    assert len(index) == int(correct.sum())
    got = index.retrieve(queries, y, y_hat, k=6)
    allowed = correct[None, :] & ((labels[None, :] == y[:, None]) | (labels[None, :] == y_hat[:, None]))
    assert got == brute_force(queries, refs, 6, allowed.numpy())
    for row, yy, pp in zip(got, y.tolist(), y_hat.tolist()):
        assert len(row) == 6
        assert all(bool(correct[i]) and int(labels[i]) in (yy, pp) for i in row)


def test_unfiltered_search_and_missing_classes(data):
    refs, labels, correct, queries = data
    index = ReferenceIndex(refs, labels, correct)
    assert index.retrieve(queries, labels[:12], labels[:12], k=4, class_relevance=False) == brute_force(
        queries, refs, 4, np.broadcast_to(correct.numpy(), (12, 500))
    )
    # class 99 has no reference, -1 is padding, a class listed twice is searched once
    result = index.search(queries[:2], k=3, classes=torch.tensor([[99, -1], [2, 2]]))
    assert result.indices[0].tolist() == [-1, -1, -1]
    allowed = (correct & (labels == 2)).numpy()[None, :]
    assert result.as_lists()[1] == brute_force(queries[1:2], refs, 3, allowed)[0]


def test_fewer_allowed_references_than_k_are_padded():
    refs = torch.randn(6, 4)
    labels = torch.tensor([0, 0, 1, 1, 1, 2])
    index = ReferenceIndex(refs, labels, correct=torch.tensor([True, False, True, True, True, True]))
    rows = index.retrieve(torch.randn(1, 4), torch.tensor([0]), torch.tensor([2]), k=5)
    assert sorted(rows[0]) == [0, 5]


def test_bad_input_raises_user_input_error(data):
    refs, labels, correct, queries = data
    with pytest.raises(UserInputError, match="labels for 500"):
        ReferenceIndex(refs, labels[:10])
    index = ReferenceIndex(refs, labels)
    with pytest.raises(UserInputError, match="query dimension 3"):
        index.search(torch.randn(2, 3), k=2)
    with pytest.raises(UserInputError, match="k=0"):
        index.search(queries, k=0)


def test_faiss_agrees_with_matmul(data):
    pytest.importorskip("faiss")
    refs, labels, correct, queries = data
    y, y_hat = torch.arange(12) % 7, (torch.arange(12) + 1) % 7
    exact = ReferenceIndex(refs, labels, correct).retrieve(queries, y, y_hat, k=5)
    assert ReferenceIndex(refs, labels, correct, use_faiss=True).retrieve(queries, y, y_hat, k=5) == exact
