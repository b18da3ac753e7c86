"""LBEE metrics on a crafted set of six images, four sentences and two hard clusters, worked out by hand.

Gamma (rows: images 0-5, columns: sentences 0-3) and per-image performance omega:

    img  s0 s1 s2 s3  omega
     0    1  1  0  0    1
     1    1  0  0  0    1
     2    1  0  0  1    1
     3    0  1  1  0    0
     4    0  0  1  0    0
     5    0  0  1  1    1

omega_avg = 4/6, std = sqrt(2/9) = 0.4714, beta = 0.2 * std = 0.0943, threshold = 0.5724.
Hardness: s0 = 1, s1 = 1/2, s2 = 1/3, s3 = 1  ->  S* = {s1, s2}.
Cluster A = images {3, 4}, R_A = [s2, s1]; cluster B = images {5, 2}, R_B = [s0, s1].
HR_A = 2/2, HR_B = 1/2 -> AHR = 0.75.
CR_A = (s2: 2/2 + s1: 1/2) / 2 = 0.75; CR_B = (s0: 1/2 + s1: 0/2) / 2 = 0.25 -> ACR = 0.5.
R_S = {s0, s1, s2}: TPR = 2/2 = 1, JI = |{s1,s2}| / |{s0,s1,s2}| = 2/3.
"""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import jaccard_score, recall_score

from nemo_train.errors import UserInputError
from nemo_train.lbee import metrics

GAMMA = torch.tensor(
    [[1, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 1, 0], [0, 0, 1, 1]], dtype=torch.bool
)
OMEGA = torch.tensor([1.0, 1, 1, 0, 0, 1])
CLUSTERS = [[3, 4], [5, 2]]
RETRIEVED = [[2, 1], [0, 1]]


def test_beta_and_hardness_by_hand():
    beta = metrics.beta_from(OMEGA)
    assert beta == pytest.approx(0.2 * math.sqrt(2 / 9))
    assert metrics.sentence_hardness(GAMMA, OMEGA).tolist() == pytest.approx([1.0, 0.5, 1 / 3, 1.0])
    assert metrics.hard_sentences(GAMMA, OMEGA, beta) == {1, 2}
    # a larger margin keeps only the hardest sentence (1/3 < 2/3 - 0.3 = 0.367 but 1/2 is not)
    assert metrics.hard_sentences(GAMMA, OMEGA, 0.3) == {2}


def test_sentence_describing_no_image_is_never_hard():
    gamma = torch.cat([GAMMA, torch.zeros(6, 1, dtype=torch.bool)], 1)
    assert math.isnan(metrics.sentence_hardness(gamma, OMEGA)[-1])
    assert metrics.hard_sentences(gamma, OMEGA, 0.0) == {1, 2}


def test_hardness_and_coverage_ratios_by_hand():
    s_star = {1, 2}
    assert metrics.hardness_ratio(RETRIEVED[0], s_star) == 1.0
    assert metrics.hardness_ratio(RETRIEVED[1], s_star) == 0.5
    assert metrics.average_hardness_ratio(RETRIEVED, s_star) == pytest.approx(0.75)
    assert metrics.coverage_ratio(RETRIEVED[0], CLUSTERS[0], GAMMA) == pytest.approx(0.75)
    assert metrics.coverage_ratio(RETRIEVED[1], CLUSTERS[1], GAMMA) == pytest.approx(0.25)
    assert metrics.average_coverage_ratio(RETRIEVED, CLUSTERS, GAMMA) == pytest.approx(0.5)


def test_tpr_and_jaccard_by_hand_and_against_sklearn():
    r_s, s_star = metrics.union(RETRIEVED), {1, 2}
    assert r_s == {0, 1, 2}
    assert metrics.true_positive_rate(r_s, s_star) == 1.0
    assert metrics.jaccard_index(r_s, s_star) == pytest.approx(2 / 3)
    predicted = [int(i in r_s) for i in range(4)]
    truth = [int(i in s_star) for i in range(4)]
    assert metrics.true_positive_rate(r_s, s_star) == pytest.approx(recall_score(truth, predicted))
    assert metrics.jaccard_index(r_s, s_star) == pytest.approx(jaccard_score(truth, predicted))
    assert math.isnan(metrics.true_positive_rate({0}, set()))


def test_precision_at_k_by_hand():
    groups = [[0, 1, 2], [7, 8]]
    rankings = [[0, 5, 1, 9], [8, 6, 7, 2]]
    # k=2: group 0 best overlap {0} (ranking 0) -> 1/2; group 1 best {8} -> 1/2
    assert metrics.precision_at_k(groups, rankings, k=2) == pytest.approx(0.5)
    # k=3: group 0 {0, 1} -> 2/3; group 1 {8, 7} -> 2/3
    assert metrics.precision_at_k(groups, rankings, k=3) == pytest.approx(2 / 3)


def test_empty_cluster_selection_is_user_error():
    with pytest.raises(UserInputError):
        metrics.hardness_ratio([], {1})


def test_evaluate_puts_a_cluster_bootstrap_interval_beside_acr_and_ahr():
    """Two clusters: a resample holds A twice, B twice or one of each, each at least a quarter of the time, so
    the 2.5 % and 97.5 % percentiles of the resampled means are the two clusters' own values."""
    from nemo_train.lbee.search import HardCluster, SearchResult, evaluate

    clusters = [
        HardCluster(torch.tensor(members), torch.zeros(2), torch.tensor([0]), {"m": retrieved})
        for members, retrieved in zip(CLUSTERS, RETRIEVED)
    ]
    (scores,) = evaluate(SearchResult(clusters, ["m"]), GAMMA, OMEGA, metrics.beta_from(OMEGA))
    assert scores.ahr == pytest.approx(0.75) and (scores.ahr_ci_low, scores.ahr_ci_high) == (0.5, 1.0)
    assert scores.acr == pytest.approx(0.5) and (scores.acr_ci_low, scores.acr_ci_high) == pytest.approx((0.25, 0.75))
