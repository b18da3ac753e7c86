import math

import torch

from nemo_train.metrics.group_accuracy import GroupAccuracy, group_accuracy


def test_group_accuracy_by_hand():
    preds = torch.tensor([0, 1, 1, 2, 2, 0])
    target = torch.tensor([0, 1, 0, 2, 1, 1])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    # group 0: 2 of 3 right; group 1: 1 of 3 right; group 2: empty
    values = group_accuracy(preds, target, groups, 3)
    assert values[0].item() == 2 / 3 and values[1].item() == 1 / 3 and math.isnan(values[2].item())


def test_metric_accumulates_over_batches_and_takes_logits():
    metric = GroupAccuracy(2)
    metric.update(torch.tensor([[2.0, 0.1], [0.1, 2.0]]), torch.tensor([0, 0]), torch.tensor([0, 1]))
    metric.update(torch.tensor([1, 1]), torch.tensor([1, 0]), torch.tensor([1, 1]))
    # group 0: 1/1; group 1: preds [1, 1, 1] vs [0, 1, 0] -> 1/3
    assert torch.allclose(metric.compute(), torch.tensor([1.0, 1 / 3]))
    metric.reset()
    assert metric.total.sum() == 0


def test_bad_group_index_raises():
    metric = GroupAccuracy(2)
    try:
        metric.update(torch.tensor([0]), torch.tensor([0]), torch.tensor([2]))
    except ValueError as err:
        assert "group indices" in str(err)
    else:
        raise AssertionError("expected ValueError")


def test_attribute_grouping_and_named_values_in_one_collection():
    from torchmetrics import ClasswiseWrapper, MetricCollection

    collection = MetricCollection(
        {
            "group": ClasswiseWrapper(GroupAccuracy(2), ["aligned", "conflicting"], prefix="acc_"),
            "by_context": ClasswiseWrapper(
                GroupAccuracy(3, attribute="context"), ["a", "b", "c"], prefix="acc_context_"
            ),
        },
        compute_groups=False,
    ).clone(prefix="val/")
    preds, target = torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 0, 0])
    attrs = {"context": torch.tensor([0, 1, 1, 1])}
    collection.update(preds=preds, target=target, groups=torch.tensor([0, 0, 1, 1]), attrs=attrs)
    values = {k: float(v) for k, v in collection.compute().items()}
    # aligned: 2/2 right; conflicting: 1/2; context a: 1/1, b: 2/3, c: no sample
    assert values["val/acc_aligned"] == 1.0 and values["val/acc_conflicting"] == 0.5
    assert values["val/acc_context_a"] == 1.0 and abs(values["val/acc_context_b"] - 2 / 3) < 1e-6
    assert math.isnan(values["val/acc_context_c"])
