"""PaRCE against scipy on a toy autoencoder with known losses; persistence; bad input."""

import math

import numpy as np
import pytest
import torch
from competency_toys import MeanClassifier, constant_images
from scipy.special import logsumexp
from scipy.stats import norm

from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.parce import Z_GRID, PaRCE, parce_log_score, parce_score, reliability
from nemo_train.errors import UserInputError


def _reference_score(losses, probs, means, stds, z, k=2.0):
    p_id = 1 - norm.cdf((losses[:, None] - k * means[None]) / stds[None] - z)
    return probs.max(1) * (probs * p_id).sum(1)


def test_parce_score_matches_scipy():
    rng = np.random.default_rng(0)
    losses = rng.uniform(0, 0.2, 7)
    probs = rng.dirichlet(np.ones(3), 7)
    means, stds = np.array([0.05, 0.08, 0.1]), np.array([0.01, 0.02, 0.03])
    for z in (0.0, 1.3):
        ours = parce_score(torch.tensor(losses), torch.tensor(probs), torch.tensor(means), torch.tensor(stds), z)
        np.testing.assert_allclose(ours.numpy(), _reference_score(losses, probs, means, stds, z), rtol=1e-10)


def test_log_score_matches_scipy_also_where_the_score_underflows():
    rng = np.random.default_rng(1)
    losses = np.concatenate([rng.uniform(0, 0.2, 5), [5.0, 40.0]])  # the last two are far in the tail
    probs = rng.dirichlet(np.ones(3), 7)
    means, stds = np.array([0.05, 0.08, 0.1]), np.array([0.01, 0.02, 0.03])
    t = (losses[:, None] - 2 * means[None]) / stds[None] - 0.7
    expected = np.log(probs.max(1)) + logsumexp(np.log(probs) + norm.logsf(t), axis=1)
    as_tensors = [torch.tensor(a) for a in (losses, probs, means, stds)]
    ours = parce_log_score(as_tensors[0], as_tensors[1].log(), *as_tensors[2:], 0.7)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-9)
    score = parce_score(*as_tensors, 0.7)
    np.testing.assert_allclose(ours[:5].exp().numpy(), score[:5].numpy(), rtol=1e-9)
    assert (score[5:] == 0).all() and np.isfinite(ours.numpy()).all() and (ours[5:] < -100).all()


def test_fit_gives_class_statistics_and_the_grid_z_closest_to_accuracy(toy_estimator):
    values = np.concatenate([np.linspace(0.05, 0.35, 12), np.linspace(0.65, 0.95, 12)])
    losses = values**2  # the zero autoencoder: loss = mean squared pixel
    labels = np.array([0] * 12 + [1] * 12)
    means = np.array([losses[labels == c].mean() for c in (0, 1)])
    stds = np.array([losses[labels == c].std() for c in (0, 1)])
    np.testing.assert_allclose(toy_estimator.class_means.numpy(), means, rtol=1e-5)
    np.testing.assert_allclose(toy_estimator.class_stds.numpy(), stds, rtol=1e-5)
    m = values[:, None]
    logits = np.concatenate([8 * (0.5 - m), 8 * (m - 0.5)], 1)
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    accuracy = (probs.argmax(1) == labels).mean()
    assert accuracy == 1.0
    mean_scores = [_reference_score(losses, probs, means, stds, z).mean() for z in Z_GRID.numpy()]
    best = Z_GRID[int(np.argmin(np.abs(np.array(mean_scores) - accuracy)))]
    assert math.isclose(float(toy_estimator.zscore), float(best), abs_tol=1e-6)
    assert toy_estimator.holdout_accuracy == 1.0
    # scoring new images reproduces the reference formula
    images = constant_images([0.1, 0.5, 0.9])
    expected = _reference_score(np.array([0.01, 0.25, 0.81]), _softmax_of([0.1, 0.5, 0.9]), means, stds, float(best))
    np.testing.assert_allclose(toy_estimator(images).detach().numpy(), expected, rtol=1e-4)


def _softmax_of(values):
    m = np.array(values)[:, None]
    logits = np.concatenate([8 * (0.5 - m), 8 * (m - 0.5)], 1)
    return np.exp(logits) / np.exp(logits).sum(1, keepdims=True)


def test_score_is_differentiable_in_the_image(toy_estimator):
    images = constant_images([0.3]).requires_grad_(True)
    toy_estimator(images).sum().backward()
    assert images.grad is not None and images.grad.abs().sum() > 0


def test_save_and_load_round_trip_without_pickle(toy_estimator, tmp_path):
    toy_estimator.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parce.json", "parce.safetensors"]
    loaded = PaRCE.load(tmp_path, MeanClassifier())
    images = constant_images([0.1, 0.4, 0.8])
    # the loaded autoencoder is a plain CompetencyAutoencoder: compare statistics and scores of a real one
    assert torch.equal(loaded.class_means, toy_estimator.class_means) and float(loaded.zscore) == float(
        toy_estimator.zscore
    )
    assert loaded.holdout_accuracy == toy_estimator.holdout_accuracy
    real = PaRCE(MeanClassifier(), CompetencyAutoencoder(image_size=8, widths=(4,), latent_dim=4), 2)
    real.fit_from(torch.rand(10), torch.rand(10, 2).softmax(-1), torch.arange(10) % 2)
    real.save(tmp_path / "real")
    again = PaRCE.load(tmp_path / "real", MeanClassifier())
    assert torch.allclose(again(images), real(images))


def test_reliability_bins_by_hand():
    scores = torch.tensor([0.05, 0.15, 0.12, 0.95, 0.91])
    correct = torch.tensor([0, 1, 0, 1, 1])
    rel = reliability(scores, correct, bins=10)
    assert rel.count.tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0, 2]
    assert torch.allclose(rel.mean_score[[0, 1, 9]], torch.tensor([0.05, 0.135, 0.93]))
    assert torch.allclose(rel.accuracy[[0, 1, 9]], torch.tensor([0.0, 0.5, 1.0]))
    assert torch.isnan(rel.accuracy[2])
    fig = rel.figure()
    assert fig.axes[0].get_xlabel() == "mean competency score"


def test_bad_input_gives_clear_errors(toy_estimator, tmp_path):
    unfitted = PaRCE(MeanClassifier(), CompetencyAutoencoder(image_size=8, widths=(4,), latent_dim=4), 2)
    with pytest.raises(UserInputError, match="not fitted"):
        unfitted(constant_images([0.2]))
    with pytest.raises(UserInputError, match="not fitted"):
        unfitted.save(tmp_path)
    with pytest.raises(UserInputError, match=r"\[B, 3, 8, 8\]"):
        toy_estimator(torch.rand(2, 3, 16, 16))
    with pytest.raises(UserInputError, match=r"\[B, 3, 8, 8\]"):
        toy_estimator(torch.rand(2, 1, 8, 8))
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(UserInputError, match="threshold"):
            PaRCE(MeanClassifier(), CompetencyAutoencoder(image_size=8, widths=(4,)), 2, threshold=bad)
    with pytest.raises(UserInputError, match="class 1"):
        unfitted.fit_from(torch.rand(4), torch.rand(4, 2), torch.tensor([0, 0, 0, 1]))
    with pytest.raises(UserInputError, match="no saved PaRCE"):
        PaRCE.load(tmp_path / "missing", MeanClassifier())
