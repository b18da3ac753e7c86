"""present_means: the means of the metrics that saw values, then a reset."""

from __future__ import annotations

import warnings

import torch
from torchmetrics import MeanMetric, MetricCollection

from nemo_train.metrics.means import present_means


def test_a_metric_without_values_is_left_out_and_the_collection_is_reset():
    collection = MetricCollection({"seen": MeanMetric(), "unseen": MeanMetric()}, compute_groups=False)
    for value in (1.0, 0.0, 1.0, 1.0):
        collection["seen"].update(torch.tensor(value))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the "compute before update" warning of the unseen metric is silenced
        assert present_means(collection) == {"seen": 0.75}
        assert present_means(collection) == {}  # reset after computing
