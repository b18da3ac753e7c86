"""Sentence selection rules on crafted similarity vectors, worked out by hand.

v_h = [.30, .28, .20, .10, .26], v_e = [.31, .10, .05, -.20, .27], K = 2, tau = .25
TopS: hard ranking 0, 1, 4, 2, 3 -> [0, 1]
SetDiff: S^e = top-2 of v_e {0, 4} + above tau {0, 4} -> first two hard-ranked not in S^e: [1, 2]
PDiff: d = [-.01, .18, .15, .30, -.01] -> [3, 1]
FPDiff: S^h = top-2 {0, 1} + above tau {0, 1, 4}; d ranking 3, 1, 2, 0, 4 restricted to S^h -> [1, 0]
"""

from __future__ import annotations

import pytest
import torch

from nemo_train.errors import UserInputError
from nemo_train.lbee.selection import closest, relevant_set, select, similarities

V_H = torch.tensor([0.30, 0.28, 0.20, 0.10, 0.26])
V_E = torch.tensor([0.31, 0.10, 0.05, -0.20, 0.27])


@pytest.mark.parametrize(
    "method, expected", [("TopS", [0, 1]), ("SetDiff", [1, 2]), ("PDiff", [3, 1]), ("FPDiff", [1, 0])]
)
def test_methods_by_hand(method, expected):
    assert select(method, V_H, V_E, k=2, tau=0.25) == expected


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
