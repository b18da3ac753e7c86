"""The sentence table (S*_beta and each method's retained sentences), worked out by hand.

Images x sentences (a, b, c, d): img0 {a, d}, img1 {b, c}, img2 {b}, img3 {a, c}; omega = [1, 0, 0, 1].
Hardness: a = (1 + 1) / 2 = 1, b = (0 + 0) / 2 = 0, c = (0 + 1) / 2 = 0.5, d = 1; omega_avg = 0.5,
beta = 0.1 -> threshold 0.4 -> S* = {b}. TopS keeps {a, b}, SetDiff {c}: rows b (in S*), then the
others by hardness: c (0.5), a (1.0); d is in no set and not shown.
"""

from __future__ import annotations

import torch

from nemo_train.lbee import metrics
from nemo_train.lbee.report import print_sentence_table, sentence_rows
from nemo_train.lbee.search import MethodScores

GAMMA = torch.tensor([[1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 0], [1, 0, 1, 0]], dtype=torch.bool)
OMEGA = torch.tensor([1.0, 0.0, 0.0, 1.0])
SCORES = [MethodScores("TopS", 0, 0, 0, 0, 2, [0, 1]), MethodScores("SetDiff", 0, 0, 0, 0, 1, [2])]


def test_sentence_rows_by_hand():
    s_star = metrics.hard_sentences(GAMMA, OMEGA, 0.1)
    assert s_star == {1}
    assert sentence_rows(["a", "b", "c", "d"], GAMMA, OMEGA, s_star, SCORES) == [
        ["b", 2, 0.0, "yes", "TP", ""],
        ["c", 2, 0.5, "no", "", "FP"],
        ["a", 2, 1.0, "no", "FP", ""],
    ]


def test_sentence_table_prints_threshold_and_methods(capsys):
    text = print_sentence_table(["a", "b", "c", "d"], GAMMA, OMEGA, {1}, SCORES, beta=0.1)
    assert "0.400" in text and "SetDiff" in text and "TP" in text
    assert capsys.readouterr().out == text
