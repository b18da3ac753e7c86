"""Means of a collection of ``MeanMetric``s, leaving out those that saw no value."""

from __future__ import annotations

import math
import warnings

from torchmetrics import MetricCollection


def present_means(collection: MetricCollection) -> dict[str, float]:
    """Each metric's value, then a reset; a metric no process updated (its mean is NaN) is left out.

    Every metric is computed on every process, whichever it updated: under DDP the sync is collective."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*compute.*called before.*update.*")
        computed = {name: float(value) for name, value in collection.compute().items()}
    collection.reset()
    return {name: value for name, value in computed.items() if not math.isnan(value)}
