"""torchmetrics-style metrics: a pure functional core under a thin ``Metric`` class.

Import metrics from their modules (``nemo_train.metrics.group_accuracy`` ...).
"""
