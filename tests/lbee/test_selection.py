"""Sentence selection rules on crafted similarity vectors, worked out by hand.

v_h = [.30, .28, .20, .10, .26], v_e = [.31, .10, .05, -.20, .27], K = 2, tau = .25
TopS: hard ranking 0, 1, 4, 2, 3 -> [0, 1]
SetDiff: S^e = top-2 of v_e {0, 4} + above tau {0, 4} -> first two hard-ranked not in S^e: [1, 2]
PDiff: d = [-.01, .18, .15, .30, -.01] -> [3, 1]
FPDiff: S^h = top-2 {0, 1} + above tau {0, 1, 4}; d ranking 3, 1, 2, 0, 4 restricted to S^h -> [1, 0]

Sentence-standardised fill, tau = 1 (in standard deviations), fill scores given:
z_h = [3.0, 0.2, 1.5, 0.0, -1.0]: S^h = top-2 of v_h {0, 1} + z_h above 1 {0, 2} = {0, 1, 2};
    FPDiff: d ranking 3, 1, 2, 0, 4 restricted to S^h -> [1, 2]  (sentence 4, 0.26 raw, stays out)
z_e = [0.5, 2.0, 0.1, 0.0, 0.0]: S^e = top-2 of v_e {0, 4} + z_e above 1 {1} = {0, 1, 4};
    SetDiff: hard ranking 0, 1, 4, 2, 3 without S^e -> [2, 3]
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nemo_train.errors import UserInputError
from nemo_train.lbee.clustering import WardClustering
from nemo_train.lbee.search import FailureModeSearch
from nemo_train.lbee.selection import (
    closest,
    relevant_set,
    select,
    sentence_statistics,
    similarities,
    standardize,
)
from nemo_train.lbee.split import CorrectnessSplit

V_H = torch.tensor([0.30, 0.28, 0.20, 0.10, 0.26])
V_E = torch.tensor([0.31, 0.10, 0.05, -0.20, 0.27])


@pytest.mark.parametrize(
    "method, expected", [("TopS", [0, 1]), ("SetDiff", [1, 2]), ("PDiff", [3, 1]), ("FPDiff", [1, 0])]
)
def test_methods_by_hand(method, expected):
    assert select(method, V_H, V_E, k=2, tau=0.25) == expected


Z_H = torch.tensor([3.0, 0.2, 1.5, 0.0, -1.0])
Z_E = torch.tensor([0.5, 2.0, 0.1, 0.0, 0.0])


@pytest.mark.parametrize(
    "method, expected", [("TopS", [0, 1]), ("SetDiff", [2, 3]), ("PDiff", [3, 1]), ("FPDiff", [1, 2])]
)
def test_methods_with_sentence_standardised_fill_by_hand(method, expected):
    assert select(method, V_H, V_E, k=2, tau=1.0, fill_hard=Z_H, fill_easy=Z_E) == expected


def test_sentence_statistics_and_standardize_match_numpy():
    gen = torch.Generator().manual_seed(0)
    images, text = torch.randn(50, 6, generator=gen), torch.randn(4, 6, generator=gen)
    sims = similarities(images, text).double().numpy()
    mean, std = sentence_statistics(images, text, chunk=7)  # several chunks
    assert mean.tolist() == pytest.approx(sims.mean(0).tolist(), abs=1e-5)
    assert std.tolist() == pytest.approx(sims.std(0).tolist(), abs=1e-5)
    v = torch.tensor([[0.5, 0.0, -0.2, 0.1]])
    assert standardize(v, mean, std)[0].tolist() == pytest.approx(
        ((v[0].numpy() - sims.mean(0)) / sims.std(0)), abs=1e-4
    )
    assert standardize(torch.tensor([0.3]), torch.tensor([0.3]), torch.tensor([0.0])).tolist() == [0.0]


def test_search_fills_with_standardised_scores_of_the_analysed_images():
    gen = torch.Generator().manual_seed(1)
    emb, text = torch.randn(40, 8, generator=gen), torch.randn(12, 8, generator=gen)
    labels = torch.zeros(40, dtype=torch.long)
    probs = torch.stack([torch.linspace(0.1, 0.9, 40), 1 - torch.linspace(0.1, 0.9, 40)], -1)
    search = FailureModeSearch(
        split=CorrectnessSplit(), clustering=WardClustering(2), k=2, tau=0.5, tau_scale="sentence_z"
    )
    result = search(emb, text, probs, labels)
    mean, std = sentence_statistics(emb, text)
    for cluster in result.clusters:
        easy_proto = F.normalize(emb[cluster.easy_members], dim=-1).mean(0)
        v_h, v_e = similarities(cluster.prototype[None], text)[0], similarities(easy_proto[None], text)[0]
        for method in ("SetDiff", "FPDiff"):
            expected = select(method, v_h, v_e, 2, 0.5, standardize(v_h, mean, std), standardize(v_e, mean, std))
            assert cluster.selections[method] == expected


def test_setdiff_takes_the_hard_set_minus_the_easy_set_first():
    """v_h = [.5, .4, .3, .2], v_e = [.5, .3, .1, .0], K = 2, tau = 1 on given fill scores:
    z_h = [2, 0, 2, 0] -> S^h = top-2 {0, 1} + {0, 2} = {0, 1, 2}; z_e = [2, 0, 0, 0] -> S^e = top-2
    {0, 1} + {0} = {0, 1}; S^h minus S^e = {2} -> [2], completed by the next hard-ranked sentence outside
    S^e: 3 -> [2, 3]. With K = 1 and z_h = [2, 0, 2, 0]: S^h = {0, 2}, S^e = {0}: sentence 1 (raw .4, but
    z 0: it fits every image alike) is outside both sets and comes after 2 -> [2]."""
    v_h, v_e = torch.tensor([0.5, 0.4, 0.3, 0.2]), torch.tensor([0.5, 0.3, 0.1, 0.0])
    z_h, z_e = torch.tensor([2.0, 0.0, 2.0, 0.0]), torch.tensor([2.0, 0.0, 0.0, 0.0])
    assert select("SetDiff", v_h, v_e, k=2, tau=1.0, fill_hard=z_h, fill_easy=z_e) == [2, 3]
    assert select("SetDiff", v_h, v_e, k=1, tau=1.0, fill_hard=z_h, fill_easy=z_e) == [2]
    # with the raw similarities as fill S^h is a prefix of the hard ranking: the K best outside S^e
    assert select("SetDiff", v_h, v_e, k=1, tau=0.35) == [1]


def test_relevant_set_fills_above_tau():
    assert relevant_set(V_H, 2, 0.25) == {0, 1, 4}
    assert relevant_set(V_H, 2, 0.5) == {0, 1}


def test_setdiff_falls_back_to_hard_ranking_when_all_sentences_are_easy():
    v = torch.tensor([0.5, 0.4, 0.3])
    assert select("SetDiff", v, v, k=2, tau=-1.0) == [0, 1]


def test_similarities_and_closest_easy_prototype():
    hard = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    easy = torch.tensor([[0.0, 1.0], [3.0, 0.1]])
    assert closest(hard, easy).tolist() == [1, 0]
    sims = similarities(hard, torch.tensor([[1.0, 1.0]]))
    assert sims[:, 0].tolist() == pytest.approx([2**-0.5, 2**-0.5])


def test_unknown_method_and_bad_k_are_user_errors():
    with pytest.raises(UserInputError):
        select("Nope", V_H, V_E)
    with pytest.raises(UserInputError):
        select("TopS", V_H, V_E, k=0)
