"""distill-eval's table: each mean with a bootstrap interval over the stored records (scipy as reference)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from nemo_train.nemo.distill.summary import mean_scores, print_summary


def _scipy_interval(values):
    ci = stats.bootstrap(
        (np.asarray(values, dtype=float),),
        np.mean,
        n_resamples=2000,
        method="percentile",
        random_state=np.random.default_rng(0),
    ).confidence_interval
    return ci.low, ci.high


def _records():
    cei = [40.0, 10.0, -5.0, 25.0, 0.0]
    match = [1.0, 0.5, 0.0, 1.0, None]  # the last was not judged
    rows = [
        {"method": "Student (greedy)", "target": "gaps_a", "sample_id": f"s{i}", "cei": c, "llm_match": m}
        for i, (c, m) in enumerate(zip(cei, match))
    ]
    rows.append({"method": "Student (greedy)", "target": "gaps_a", "sample_id": "s9", "failed": True, "cei": None})
    rows.append({"method": "KnownCause", "target": "gaps_a", "sample_id": "s0", "cei": 50.0, "llm_match": 1.0})
    return rows, cei, match


def test_means_and_intervals_come_from_the_records():
    records, cei, match = _records()
    summary = mean_scores(reversed(records))  # the record order does not matter
    cell = summary[("Student (greedy)", "gaps_a")]
    assert cell["cei"] == pytest.approx(np.mean(cei))
    assert (cell["cei_ci_low"], cell["cei_ci_high"]) == pytest.approx(_scipy_interval(cei))
    judged = [m for m in match if m is not None]
    assert cell["llm_match"] == pytest.approx(np.mean(judged))
    assert (cell["llm_match_ci_low"], cell["llm_match_ci_high"]) == pytest.approx(_scipy_interval(judged))
    assert cell["grounding"] is None and cell["grounding_ci_low"] is None and cell["grounding_ci_high"] is None
    known = summary[("KnownCause", "gaps_a")]
    assert (known["cei"], known["cei_ci_low"], known["cei_ci_high"]) == (50.0, 50.0, 50.0)  # one error: a point


def test_the_table_prints_each_mean_with_its_interval():
    records, cei, _ = _records()
    summary = mean_scores(records)
    text = print_summary(summary, "toy", ["grounded judge"])
    cell = summary[("Student (greedy)", "gaps_a")]
    assert f"{cell['cei']:.2f} [{cell['cei_ci_low']:.2f}, {cell['cei_ci_high']:.2f}]" in text
    assert "gaps_a LLM Match" in text and "bootstrap 95 % interval" in text
    assert "50.00 [50.00, 50.00]" in text
