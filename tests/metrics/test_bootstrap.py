"""Bootstrap intervals checked against an independent numpy bootstrap and exact degenerate cases."""

import warnings

import numpy as np
import pytest

from nemo_train.metrics.bootstrap import (
    format_with_interval,
    grouped_mean_interval,
    grouped_summary,
    interval_fields,
    mean_interval,
    summary,
)


def _numpy_percentile_bootstrap(values, n_resamples, seed):
    sample = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = sample[rng.integers(0, sample.size, (n_resamples, sample.size))].mean(axis=1)
    return np.percentile(means, 2.5), np.percentile(means, 97.5)


def test_mean_interval_matches_a_numpy_percentile_bootstrap():
    values = [1, 0, 0.5, 1, 1, 0, 0.5, 1, 0, 1, 1, 0.5, 0, 1, 1, 0]
    low, high = mean_interval(values, n_resamples=4000, seed=3)
    ref_low, ref_high = _numpy_percentile_bootstrap(values, 4000, 3)
    assert low == pytest.approx(ref_low, abs=0.02)
    assert high == pytest.approx(ref_high, abs=0.02)
    assert low < np.mean(values) < high


def test_mean_interval_is_close_to_the_normal_approximation_for_a_large_sample():
    rng = np.random.default_rng(0)
    values = rng.normal(5.0, 2.0, 400)
    low, high = mean_interval(values, n_resamples=3000)
    half = 1.96 * values.std(ddof=1) / np.sqrt(values.size)
    assert low == pytest.approx(values.mean() - half, abs=0.05)
    assert high == pytest.approx(values.mean() + half, abs=0.05)


def test_mean_interval_is_reproducible_and_depends_on_the_seed():
    values = [0.1, 0.4, 0.35, 0.8, 0.9, 0.2, 0.55]
    assert mean_interval(values, seed=1) == mean_interval(values, seed=1)
    assert mean_interval(values, seed=1) != mean_interval(values, seed=2)


def test_bca_interval_contains_the_mean():
    values = [0.1, 0.4, 0.35, 0.8, 0.9, 0.2, 0.55, 0.6, 0.7]
    low, high = mean_interval(values, method="BCa", n_resamples=1000)
    assert low < np.mean(values) < high


def test_degenerate_cases_are_exact_and_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mean_interval([]) is None
        assert mean_interval([None, float("nan")]) is None
        assert mean_interval([0.7]) == (0.7, 0.7)
        assert mean_interval([1.0, 1.0, 1.0], method="BCa") == (1.0, 1.0)
        assert grouped_mean_interval([[], []]) is None
        assert grouped_mean_interval({"a": [0.5, 0.5], "b": [0.5]}) == (0.5, 0.5)


def test_missing_values_are_skipped():
    assert mean_interval([1.0, None, 0.0, float("nan"), 1.0]) == mean_interval([1.0, 0.0, 1.0])


def test_grouped_interval_matches_a_numpy_cluster_bootstrap():
    groups = [[1, 1, 0, 1], [0, 0, 0.5], [1, 0.5, 1, 1, 1], [0, 1], [0.5, 0.5, 0, 0]]
    low, high = grouped_mean_interval(groups, n_resamples=4000, seed=5)
    sums = np.asarray([sum(g) for g in groups], dtype=float)
    counts = np.asarray([len(g) for g in groups], dtype=float)
    index = np.random.default_rng(5).integers(0, len(groups), (4000, len(groups)))
    pooled = sums[index].sum(axis=1) / counts[index].sum(axis=1)
    assert low == pytest.approx(np.percentile(pooled, 2.5), abs=0.02)
    assert high == pytest.approx(np.percentile(pooled, 97.5), abs=0.02)


def test_one_group_falls_back_to_the_item_interval():
    items = [0.2, 0.9, 0.4, 0.6]
    assert grouped_mean_interval({"only": items}) == mean_interval(items)


def test_summaries_and_format():
    assert summary([]) == {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    assert summary([0.25, 0.25]) == {"mean": 0.25, "ci_low": 0.25, "ci_high": 0.25, "n": 2}
    pooled = grouped_summary([[1.0, 0.0], [1.0]])
    assert pooled["mean"] == pytest.approx(2 / 3) and pooled["n"] == 3
    assert interval_fields("cei", (1.0, 2.0)) == {"cei_ci_low": 1.0, "cei_ci_high": 2.0}
    assert interval_fields("cei", None) == {"cei_ci_low": None, "cei_ci_high": None}
    assert format_with_interval(0.7234, 0.61, 0.834) == "0.72 [0.61, 0.83]"
    assert format_with_interval(90.456, 88.1, 92.0, digits=1) == "90.5 [88.1, 92.0]"
    assert format_with_interval(0.5) == "0.50"
    assert format_with_interval(None) == "-" and format_with_interval(float("nan"), 0.1, 0.2) == "-"
    assert format_with_interval(0.725, 0.6149, 0.83, digits=3, interval_digits=2) == "0.725 [0.61, 0.83]"


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        mean_interval([1, 2], n_resamples=0)
    with pytest.raises(ValueError):
        mean_interval([1, 2], confidence_level=1.5)


def test_statistic_interval_of_a_correlation_matches_a_numpy_paired_bootstrap():
    from nemo_train.metrics.bootstrap import statistic_interval

    rng = np.random.default_rng(1)
    x = rng.normal(size=40)
    y = 0.6 * x + rng.normal(scale=0.8, size=40)

    def corr(a, b):
        return float(np.corrcoef(a, b)[0, 1])

    low, high = statistic_interval([x, y], corr, n_resamples=3000, seed=4)
    index = np.random.default_rng(4).integers(0, 40, (3000, 40))
    ref = [corr(x[i], y[i]) for i in index]
    assert low == pytest.approx(np.percentile(ref, 2.5), abs=0.03)
    assert high == pytest.approx(np.percentile(ref, 97.5), abs=0.03)
    assert low < corr(x, y) < high
    assert statistic_interval([[], []], corr) is None
    assert statistic_interval([[0.3], [0.4]], lambda a, b: float(a[0] + b[0])) == (0.7, 0.7)
    with pytest.raises(ValueError):
        statistic_interval([[1.0, 2.0], [1.0]], corr)
