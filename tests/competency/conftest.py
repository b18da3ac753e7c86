"""Fixtures of the competency tests (toy estimators with closed-form losses)."""

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
from competency_toys import ShrinkAutoencoder, toy_estimator_fitted  # noqa: E402


@pytest.fixture
def toy_estimator():
    """PaRCE on a zero-reconstruction autoencoder and a mean-intensity classifier, calibrated."""
    return toy_estimator_fitted()


@pytest.fixture
def latent_estimator():
    """PaRCE on an autoencoder with a meaningful latent (ShrinkAutoencoder), calibrated like toy_estimator."""
    return toy_estimator_fitted(ShrinkAutoencoder)
