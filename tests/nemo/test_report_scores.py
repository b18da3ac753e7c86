"""The NEMO table's per-cell scores against values worked out by hand."""

from __future__ import annotations

import math
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402

from nemo_train.nemo.report import summarize  # noqa: E402


def record(sample_id: str, cei: float | None, llm_match: float | None, judges: dict, **extra) -> dict:
    return {
        "method": "SciTX",
        "target": "cnn",
        "sample_id": sample_id,
        "explanation": "the colour",
        "cei": cei,
        "llm_match": llm_match,
        "judges": judges,
        **extra,
    }


def test_cell_scores_by_hand():
    records = [
        record("b", 30.0, 0.5, {"j1": 1.0, "j2": 0.0}, grounding=0.5),
        record("a", -6.0, None, {"j1": None, "j2": None}),  # no judge answered: CEI counts, LLM Match does not
        record("c", 0.0, 1.0, {"j2": 1.0}, grounding=1.0, explanation=" "),
        record("d", None, None, {}, failed=True),
    ]
    (cell,) = summarize(records)
    assert (cell.n, cell.failed, cell.empty) == (3, 1, 1)
    assert cell.cei == 8.0  # (30 - 6 + 0) / 3
    assert cell.llm_match == 0.75  # (0.5 + 1) / 2
    assert cell.grounding == 0.75  # (0.5 + 1) / 2, "a" has none
    assert cell.per_judge == {"j1": 1.0, "j2": 0.5}
    assert list(cell.per_judge) == ["j1", "j2"]


def test_cells_without_scores_are_nan_and_cells_follow_record_order():
    records = [
        record("a", 10.0, None, {"j": None}, target="vit"),
        record("a", 20.0, 1.0, {"j": 1.0}),
    ]
    vit, cnn = summarize(records)
    assert (vit.target, cnn.target) == ("vit", "cnn")
    assert vit.cei == 10.0 and math.isnan(vit.llm_match) and math.isnan(vit.grounding) and vit.per_judge == {}
    assert cnn.cei == 20.0 and cnn.llm_match == 1.0


def test_cell_means_add_scores_in_sample_order():
    # sorted by sample id the CEIs are 1e16, 1, -1e16, 1: added left to right (1e16 + 1 rounds back to 1e16)
    # the sum is 1 and the mean 1/4 (the exact mean would be 1/2); the record order must not matter
    cei = {"s0": 1e16, "s1": 1.0, "s2": -1e16, "s3": 1.0}
    records = [record(s, cei[s], 1.0, {"j": 1.0}) for s in ("s3", "s0", "s2", "s1")]
    (cell,) = summarize(records)
    assert cell.cei == pytest.approx(0.25, abs=0)


def test_cell_intervals_are_scipy_bootstraps_of_the_records():
    import numpy as np
    from scipy import stats

    from nemo_train.nemo.report import print_report

    cei = [30.0, -6.0, 0.0, 12.5, 40.0, 8.0]
    match = [0.5, 1.0, 0.0, 1.0, 1.0, None]
    records = [record(f"s{i}", c, m, {"j": m}) for i, (c, m) in enumerate(zip(cei, match))]
    (cell,) = summarize(records)
    for metric, values in (("cei", cei), ("llm_match", [m for m in match if m is not None])):
        ref = stats.bootstrap(
            (np.asarray(values),), np.mean, n_resamples=2000, method="percentile", random_state=np.random.default_rng(0)
        ).confidence_interval
        assert cell.intervals[metric] == pytest.approx((ref.low, ref.high))
    assert "grounding" not in cell.intervals  # no record has a grounding
    low, high = cell.intervals["cei"]
    assert f"{cell.cei:.2f} [{low:.2f}, {high:.2f}]" in print_report([cell], "toy")
    stored = cell.to_json()
    assert (stored["cei_ci_low"], stored["cei_ci_high"]) == (low, high)
    assert stored["grounding"] is None and stored["grounding_ci_low"] is None


def test_a_cell_of_equal_scores_has_a_point_interval():
    records = [record(s, 50.0, 1.0, {"j": 1.0}) for s in "abc"]
    (cell,) = summarize(records)
    assert cell.intervals == {"llm_match": (1.0, 1.0), "cei": (50.0, 50.0)}


def test_known_cause_wins_per_error_and_their_interval_in_the_summary_json():
    from nemo_train.metrics.bootstrap import mean_interval
    from nemo_train.nemo.report import NemoEvalSummary, known_cause_win_rate, known_cause_wins

    def pair(sample, known, distractor, **extra):
        return [
            {**record(sample, known, 1.0, {}), "method": "KnownCause", **extra},
            {**record(sample, distractor, 0.0, {}), "method": "Distractor(rotation)", **extra},
        ]

    records = pair("c", 50.0, 10.0) + pair("a", 5.0, 20.0) + pair("b", 30.0, 30.0) + pair("d", 40.0, 0.0)
    records += [{**record("e", 90.0, 1.0, {}), "method": "KnownCause"}]  # no distractor: not a pair
    wins = known_cause_wins(records)
    assert wins == [0.0, 0.0, 1.0, 1.0]  # a, b (a tie is no win), c, d
    assert known_cause_win_rate(records) == (0.5, 4)
    summary = NemoEvalSummary("toy", [], known_cause_win_rate=0.5, known_cause_win_rate_ci=mean_interval(wins))
    stored = summary.to_json()
    assert (stored["known_cause_win_rate_ci_low"], stored["known_cause_win_rate_ci_high"]) == mean_interval(wins)
    assert "known_cause_win_rate_ci" not in stored
