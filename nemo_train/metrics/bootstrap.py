"""Bootstrap 95 % intervals of a mean, over items or over groups of items.

Every headline mean of an evaluation table is a mean over a few dozen errors or items; these functions put
a percentile (or BCa) bootstrap interval beside it, computed by ``scipy.stats.bootstrap`` with a fixed seed
so the same records always give the same interval.

API
---
``mean_interval(values, *, n_resamples=2000, confidence_level=0.95, method="percentile", seed=0)``
    Interval ``(low, high)`` of the mean of ``values`` (numbers; ``None`` and ``nan`` entries are items
    without a value and are skipped). ``None`` when no value is left; ``(v, v)`` when one value is left or
    all are equal (no resampling, no scipy warning).

``grouped_mean_interval(groups, *, ...)``
    Interval of the *pooled* mean of items that come in groups (e.g. the errors of several classifiers,
    pooled into one row). This is the simple cluster bootstrap: groups are resampled with replacement and
    the statistic is the pooled mean of all items of the drawn groups (sum of their values / number of
    their items); items within a group are not resampled again. Groups are ``Sequence[Sequence[float]]``
    or a mapping from group name to its values. With a single non-empty group the interval is the item
    interval of that group (``mean_interval``). Degenerate cases as for ``mean_interval``.

``statistic_interval(samples, statistic, *, ...)``
    Interval of any statistic of aligned per-item arrays (``statistic(*samples) -> float``, e.g. a Pearson
    correlation over items), the items resampled together (paired). ``None`` without items.

``summary(values, **kwargs)`` / ``grouped_summary(groups, **kwargs)``
    ``{"mean", "ci_low", "ci_high", "n"}`` for a results json (``None`` for each where there are no values).

``interval_fields(name, interval)``
    ``{"<name>_ci_low", "<name>_ci_high"}`` to store beside a mean of a results json.

``format_with_interval(mean, low, high, digits=2, interval_digits=None)``
    ``"0.72 [0.61, 0.83]"``; only the mean when the interval is ``None``; ``"-"`` when the mean is ``None`` or
    ``nan``; ``interval_digits`` gives the bounds other decimals than the mean.

``method`` is ``"percentile"`` (default) or ``"BCa"`` (scipy's bias-corrected and accelerated interval).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

import numpy as np
from scipy import stats

Method = Literal["percentile", "BCa"]

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0


def _finite(values: Iterable[float | None]) -> np.ndarray:
    """The values that exist, as float64 (``None`` and ``nan`` dropped)."""
    array = np.asarray([float(v) for v in values if v is not None], dtype=np.float64)
    return array[~np.isnan(array)]


def _check(n_resamples: int, confidence_level: float, method: str) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level}")
    if method not in ("percentile", "BCa"):
        raise ValueError(f"method must be 'percentile' or 'BCa', got {method!r}")


def _run(
    data: tuple[np.ndarray, ...],
    statistic,
    *,
    paired: bool,
    n_resamples,
    confidence_level,
    method,
    seed,
    vectorized=True,
):
    with warnings.catch_warnings():
        # A resample set that is constant after all (e.g. BCa on a two-valued sample) warns and may give nan;
        # the caller falls back to the point value rather than printing scipy's warning.
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            data,
            statistic,
            n_resamples=n_resamples,
            confidence_level=confidence_level,
            method=method,
            paired=paired,
            vectorized=vectorized,
            random_state=np.random.default_rng(seed),
        )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _sane(low: float, high: float, point: float) -> tuple[float, float]:
    if math.isnan(low) or math.isnan(high):
        return point, point
    return low, high


def mean_interval(
    values: Iterable[float | None],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence_level: float = 0.95,
    method: Method = "percentile",
    seed: int = DEFAULT_SEED,
) -> tuple[float, float] | None:
    """Bootstrap interval of the mean of ``values``; ``None`` without values, ``(v, v)`` when constant."""
    _check(n_resamples, confidence_level, method)
    sample = _finite(values)
    if sample.size == 0:
        return None
    point = float(sample.mean())
    if sample.size == 1 or np.all(sample == sample[0]):
        return point, point
    low, high = _run(
        (sample,),
        lambda x, axis=-1: np.mean(x, axis=axis),
        paired=False,
        n_resamples=n_resamples,
        confidence_level=confidence_level,
        method=method,
        seed=seed,
    )
    return _sane(low, high, point)


def _group_lists(groups: Mapping[object, Sequence[float | None]] | Sequence[Sequence[float | None]]):
    members = groups.values() if isinstance(groups, Mapping) else groups
    return [sample for sample in (_finite(group) for group in members) if sample.size]


def grouped_mean_interval(
    groups: Mapping[object, Sequence[float | None]] | Sequence[Sequence[float | None]],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence_level: float = 0.95,
    method: Method = "percentile",
    seed: int = DEFAULT_SEED,
) -> tuple[float, float] | None:
    """Cluster-bootstrap interval of the pooled mean of grouped items (groups resampled, items kept whole)."""
    _check(n_resamples, confidence_level, method)
    samples = _group_lists(groups)
    if not samples:
        return None
    if len(samples) == 1:
        return mean_interval(
            samples[0], n_resamples=n_resamples, confidence_level=confidence_level, method=method, seed=seed
        )
    pooled = np.concatenate(samples)
    point = float(pooled.mean())
    if np.all(pooled == pooled[0]):
        return point, point
    sums = np.asarray([sample.sum() for sample in samples])
    counts = np.asarray([float(sample.size) for sample in samples])
    low, high = _run(
        (sums, counts),
        lambda s, c, axis=-1: np.sum(s, axis=axis) / np.sum(c, axis=axis),
        paired=True,
        n_resamples=n_resamples,
        confidence_level=confidence_level,
        method=method,
        seed=seed,
    )
    return _sane(low, high, point)


def statistic_interval(
    samples: Sequence[Sequence[float]],
    statistic: Callable[..., float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence_level: float = 0.95,
    method: Method = "percentile",
    seed: int = DEFAULT_SEED,
) -> tuple[float, float] | None:
    """Bootstrap interval of any ``statistic(*samples)`` of aligned per-item arrays (e.g. a correlation over
    items): the items (one value from each array) are resampled together. ``None`` without items; the point
    value twice with one item or when every resample gives the point value back."""
    _check(n_resamples, confidence_level, method)
    arrays = [np.asarray(sample, dtype=np.float64) for sample in samples]
    if not arrays or arrays[0].size == 0:
        return None
    if any(array.shape != arrays[0].shape or array.ndim != 1 for array in arrays):
        raise ValueError("statistic_interval needs one-dimensional samples of one length")
    point = float(statistic(*arrays))
    if arrays[0].size == 1:
        return point, point
    low, high = _run(
        tuple(arrays),
        statistic,
        paired=True,
        n_resamples=n_resamples,
        confidence_level=confidence_level,
        method=method,
        seed=seed,
        vectorized=False,
    )
    return _sane(low, high, point)


def _as_summary(point: float | None, interval: tuple[float, float] | None, n: int) -> dict:
    low, high = interval if interval is not None else (None, None)
    return {"mean": point, "ci_low": low, "ci_high": high, "n": n}


def summary(values: Iterable[float | None], **kwargs) -> dict:
    """``{"mean", "ci_low", "ci_high", "n"}`` of ``values`` (``None`` for each when there are none)."""
    sample = _finite(values)
    point = float(sample.mean()) if sample.size else None
    return _as_summary(point, mean_interval(sample, **kwargs), int(sample.size))


def grouped_summary(groups, **kwargs) -> dict:
    """``{"mean", "ci_low", "ci_high", "n"}`` of the pooled items of ``groups`` (cluster bootstrap)."""
    samples = _group_lists(groups)
    pooled = np.concatenate(samples) if samples else np.asarray([], dtype=np.float64)
    point = float(pooled.mean()) if pooled.size else None
    return _as_summary(point, grouped_mean_interval(samples, **kwargs), int(pooled.size))


def interval_fields(name: str, interval: tuple[float, float] | None) -> dict[str, float | None]:
    """``{"<name>_ci_low": low, "<name>_ci_high": high}`` (``None`` for both without an interval), to store
    beside the mean ``name`` in a results json."""
    low, high = interval if interval is not None else (None, None)
    return {f"{name}_ci_low": low, f"{name}_ci_high": high}


def format_with_interval(
    mean: float | None,
    low: float | None = None,
    high: float | None = None,
    digits: int = 2,
    interval_digits: int | None = None,
) -> str:
    """``"0.72 [0.61, 0.83]"``; the mean alone without an interval, ``"-"`` without a mean (``None`` or ``nan``).

    ``interval_digits`` (default: ``digits``) sets the bounds' decimals, e.g. ``"0.725 [0.61, 0.83]"``.
    """
    if mean is None or math.isnan(mean):
        return "-"
    if low is None or high is None:
        return f"{mean:.{digits}f}"
    bounds = digits if interval_digits is None else interval_digits
    return f"{mean:.{digits}f} [{low:.{bounds}f}, {high:.{bounds}f}]"
