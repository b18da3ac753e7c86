"""CounterfactualMetricsCallback while a competency autoencoder trains."""

import os
import sys
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "competency"))
from competency_toys import MeanClassifier, constant_images  # noqa: E402

from nemo_train.callbacks.counterfactual_metrics import CounterfactualMetricsCallback  # noqa: E402
from nemo_train.competency.autoencoder import CompetencyAutoencoder  # noqa: E402
from nemo_train.competency.counterfactuals import LatentNearestNeighbor, ReconstructionCounterfactual  # noqa: E402
from nemo_train.competency.gradient_counterfactuals import LatentGradientDescent  # noqa: E402
from nemo_train.competency.parce import PaRCE  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.models.trainer import quiet_trainer  # noqa: E402


def _batches(values, labels, batch_size=8):
    images = constant_images(values)
    data = [{"image": images[i], "label": torch.tensor(labels[i])} for i in range(len(values))]
    return DataLoader(data, batch_size=batch_size)


def test_callback_logs_table_metrics_after_validation_only():
    torch.manual_seed(0)
    values = torch.linspace(0.05, 0.35, 12).tolist() + torch.linspace(0.65, 0.95, 12).tolist()
    labels = [0] * 12 + [1] * 12
    train, holdout = _batches(values, labels), list(_batches(values, labels))
    autoencoder = CompetencyAutoencoder(image_size=8, widths=(4,), latent_dim=4, lr=1e-2)
    estimator = PaRCE(MeanClassifier(), autoencoder, num_classes=2)
    callback = CounterfactualMetricsCallback(
        estimator,
        constant_images([0.45, 0.5, 0.55]),
        holdout,
        methods=[ReconstructionCounterfactual(), LatentGradientDescent(max_iter=3), LatentNearestNeighbor()],
    )
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=1, callbacks=[callback])
    trainer.fit(autoencoder, train_dataloaders=train, val_dataloaders=_batches(values, labels))
    assert estimator.fitted and estimator.autoencoder is autoencoder
    assert set(callback.last_results) == {"Orig", "Reco", "LGD", "LNN"}
    metrics = trainer.callback_metrics
    for method in ("Orig", "Reco", "LGD", "LNN"):
        for key in ("success", "1-ssim", "fid[classifier]", "kid[classifier]", "sec_per_image"):
            assert f"cf/{method}/{key}" in metrics
    assert float(metrics["cf/Orig/1-ssim"]) == pytest.approx(0.0, abs=1e-5)
    assert float(metrics["cf/Orig/success"]) == callback.last_results["Orig"]["success"]
    assert "Success Rate" in callback.table() and "LGD" in callback.table()

    class FakeWandb:
        def __init__(self):
            self.tables, self.images = [], []

        def log_table(self, key, columns, data, step):
            self.tables.append((key, columns, data))

        def log_image(self, key, images, caption, step):
            self.images.append((key, images[0]))

    fake = FakeWandb()
    rows, outputs = callback._evaluate(estimator)
    callback._log_wandb([fake], 0, rows, outputs)
    key, columns, data = fake.tables[0]
    assert key == "cf/table" and columns[0] == "method" and [r[0] for r in data] == ["Orig", "Reco", "LGD", "LNN"]
    key, grid = fake.images[0]
    pixels = np.asarray(grid)  # 8-bit RGB: a float [0, 1] array would reach W&B as black
    assert key == "cf/grid" and pixels.dtype == np.uint8 and pixels.shape[2] == 3 and pixels.max() > 128


def test_callback_rejects_a_repeated_method():
    estimator = PaRCE(MeanClassifier(), CompetencyAutoencoder(image_size=8, widths=(4,)), 2)
    with pytest.raises(UserInputError, match="repeat"):
        CounterfactualMetricsCallback(
            estimator, torch.rand(1, 3, 8, 8), [], methods=[LatentNearestNeighbor(), LatentNearestNeighbor("l2")]
        )
