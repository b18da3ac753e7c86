"""Counterfactual metrics against hand-computed values and independent references (sklearn, scipy)."""

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from scipy import linalg  # noqa: E402
from sklearn.metrics.pairwise import cosine_similarity  # noqa: E402
from torch import nn  # noqa: E402

from nemo_train.metrics.counterfactual import (  # noqa: E402
    MeanCosineSimilarity,
    PerceptualDistance,
    SuccessRate,
    TimePerImage,
    cosine_similarities,
    mean_cosine_similarity,
    realism_metrics,
    success_rate,
    successes,
)


def test_success_rate_on_a_crafted_batch():
    scores = torch.tensor([0.95, 0.90, 0.89, 0.10, 0.99])
    assert success_rate(scores, 0.9) == pytest.approx(3 / 5)
    metric = SuccessRate(0.9)
    metric.update(scores[:2])
    metric.update(scores[2:])
    assert metric.compute() == pytest.approx(0.6)
    with pytest.raises(ValueError, match="threshold"):
        SuccessRate(1.0)
    assert successes(scores, 0.9).tolist() == [True, True, False, False, True]


def test_cosine_similarities_per_row_by_hand():
    # rows: (1,0)·(1,1) -> 1/sqrt(2); (0,2)·(0,-1) -> -1; (3,4)·(6,8) -> 1; only rows 0 and 2 valid
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    b = torch.tensor([[1.0, 1.0], [0.0, -1.0], [6.0, 8.0]])
    sims = cosine_similarities(a, b)
    assert sims.dtype == torch.float64 and sims.tolist() == pytest.approx([2**-0.5, -1.0, 1.0])
    assert cosine_similarities(a, b, torch.tensor([True, False, True])).tolist() == pytest.approx([2**-0.5, 1.0])
    metric = MeanCosineSimilarity()
    metric.update(a, b, torch.tensor([True, False, True]))
    assert metric.compute().item() == pytest.approx((2**-0.5 + 1.0) / 2)


def test_mean_cosine_similarity_matches_sklearn_and_counts_valid_rows_only():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    valid = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool)
    reference = np.diag(cosine_similarity(a.numpy(), b.numpy()))
    assert mean_cosine_similarity(a, b) == pytest.approx(reference.mean(), abs=1e-6)
    assert mean_cosine_similarity(a, b, valid) == pytest.approx(reference[valid.numpy()].mean(), abs=1e-6)
    metric = MeanCosineSimilarity()
    metric.update(a[:3], b[:3], valid[:3])
    metric.update(a[3:], b[3:], valid[3:])
    assert metric.compute() == pytest.approx(reference[valid.numpy()].mean(), abs=1e-6)
    assert mean_cosine_similarity(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]])) == pytest.approx(2**-0.5)


class L1Distance(nn.Module):
    name = "l1"

    def forward(self, x, y):
        return (x - y).abs().flatten(1).mean(1)


def test_perceptual_distance_averages_the_module_and_carries_its_name():
    metric = PerceptualDistance(L1Distance())
    x = torch.zeros(2, 3, 4, 4)
    metric.update(x, x + 0.2)
    metric.update(x[:1], x[:1] + 0.5)
    assert metric.name == "l1" and metric.compute() == pytest.approx((0.2 + 0.2 + 0.5) / 3)


def test_time_per_image_divides_by_processed_images():
    metric = TimePerImage()
    metric.update(1.5, 3)
    metric.update(0.5, 1)
    assert metric.compute() == pytest.approx(0.5)


class PixelFeatures(nn.Module):
    """A stand-in classifier whose features are the four pixels of the first channel of a 3x2x2 image."""

    def __init__(self):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))

    def features(self, images):
        return images[:, 0].flatten(1) + 0 * self.dummy


def test_fid_in_classifier_space_matches_the_scipy_formula():
    metrics = realism_metrics(PixelFeatures(), (3, 2, 2), kid_subset_size=10)
    assert set(metrics) == {"fid[classifier]", "kid[classifier]"}  # no torch-fidelity / Inception weights here
    gen = torch.Generator().manual_seed(0)
    real, fake = torch.rand(40, 3, 2, 2, generator=gen), torch.rand(30, 3, 2, 2, generator=gen) * 0.5
    fid = metrics["fid[classifier]"]
    fid.update(real, real=True)
    fid.update(fake, real=False)
    fr, ff = real[:, 0].flatten(1).double().numpy(), fake[:, 0].flatten(1).double().numpy()
    mu1, mu2 = fr.mean(0), ff.mean(0)
    s1, s2 = np.cov(fr, rowvar=False), np.cov(ff, rowvar=False)
    expected = ((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * linalg.sqrtm(s1 @ s2).real)
    assert float(fid.compute()) == pytest.approx(expected, rel=1e-3)
    kid = metrics["kid[classifier]"]
    kid.update(real, real=True)
    kid.update(fake, real=False)
    far = float(kid.compute()[0])
    kid.reset()
    kid.update(real[20:], real=False)
    assert float(kid.compute()[0]) < far


def test_means_accumulate_in_float64_after_a_device_move():
    metric = MeanCosineSimilarity().to("cpu")
    a = torch.tensor([[1.0, 1e-4]], dtype=torch.float64)
    b = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    metric.update(a, b)
    expected = 1 / (1 + 1e-8) ** 0.5  # 0.999999995: rounds to 1.0 in float32 before averaging
    assert metric.dtype == torch.float64 and metric.mean_value.item() == pytest.approx(expected, abs=1e-12)
    assert metric.mean_value.item() != 1.0


def test_kept_values_are_the_per_item_values_of_the_mean():
    success = SuccessRate(0.5, keep_values=True)
    success.update(torch.tensor([0.2, 0.7, 0.9]))
    success.update(torch.tensor([0.6]))
    assert success.values().tolist() == [0.0, 1.0, 1.0, 1.0]
    assert float(success.compute()) == pytest.approx(success.values().mean().item())
    sims = MeanCosineSimilarity(keep_values=True)
    a, b = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    sims.update(a, b, torch.tensor([True, True, False]))  # the invalid row is neither averaged nor kept
    assert sims.values().tolist() == pytest.approx([1.0, 0.0])
    success.reset()
    assert success.values().numel() == 0
    with pytest.raises(RuntimeError, match="keep_values"):
        SuccessRate(0.5).values()
