"""The PaRCE estimator of a run: the classifier and autoencoder it needs, trained or loaded, then calibrated.

Plain Python usable without the CLI: :func:`load_or_train_classifier`, :func:`prepare_estimator`, and
:func:`load_run` (the estimator and data of an earlier ``counterfactuals`` run, for benchmarks and sweeps).
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.cli import instantiate_class

from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.parce import PaRCE
from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule
from nemo_train.models.trainer import quiet_lightning, quiet_trainer


def load_classifier(path: str | Path) -> ClassifierModule:
    """A ``ClassifierModule`` checkpoint in eval mode (weights only)."""
    return ClassifierModule.load_from_checkpoint(str(path), map_location="cpu", weights_only=True).eval()


def load_or_train_classifier(
    datamodule: L.LightningDataModule,
    checkpoint: str | None,
    epochs: int,
    accelerator: str,
    save_to: Path | None = None,
) -> ClassifierModule:
    """A :class:`ClassifierModule` from ``checkpoint``; without one, the one saved at ``save_to`` by an earlier
    run, else a ``bias_cnn`` trained for ``epochs`` on ``datamodule`` (and saved to ``save_to``)."""
    if not checkpoint and save_to is not None and save_to.is_file():
        checkpoint = str(save_to)
    if checkpoint:
        if not Path(checkpoint).is_file():
            raise UserInputError(
                f"classifier checkpoint {checkpoint!r} does not exist; train it first (e.g. `nemo-train fit --config "
                "configs/cmnist/model_a.yaml`) or set estimator.classifier_checkpoint to null to train a small "
                "bias_cnn here"
            )
        return load_classifier(checkpoint)
    module = ClassifierModule(backbone="bias_cnn", num_classes=datamodule.num_classes, lr=3e-3)
    with quiet_lightning():
        trainer = quiet_trainer(epochs, accelerator)
        trainer.fit(module, datamodule)
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(str(save_to), weights_only=True)
    return module.eval()


def prepare_estimator(
    classifier: torch.nn.Module,
    datamodule: L.LightningDataModule,
    autoencoder: CompetencyAutoencoder,
    epochs: int,
    threshold: float,
    accelerator: str,
    estimator_dir: Path | None = None,
    autoencoder_checkpoint: str | None = None,
    loss_scale: float = 2.0,
) -> PaRCE:
    """Load a saved estimator from ``estimator_dir`` if there is one, else calibrate PaRCE on the
    datamodule's validation split and save it there. The autoencoder is loaded from
    ``autoencoder_checkpoint`` (a ``nemo-train fit`` checkpoint of :class:`CompetencyAutoencoder`) when
    given, else ``autoencoder`` is trained on the training split for ``epochs``."""
    if estimator_dir is not None and (estimator_dir / "parce.json").is_file():
        return PaRCE.load(estimator_dir, classifier)
    if autoencoder_checkpoint:
        if not Path(autoencoder_checkpoint).is_file():
            raise UserInputError(f"autoencoder checkpoint {autoencoder_checkpoint!r} does not exist")
        autoencoder = CompetencyAutoencoder.load_from_checkpoint(
            autoencoder_checkpoint, map_location="cpu", weights_only=True
        )
    else:
        with quiet_lightning():
            quiet_trainer(epochs, accelerator).fit(autoencoder, datamodule)
    estimator = PaRCE(
        classifier, autoencoder.eval(), datamodule.num_classes, threshold=threshold, loss_scale=loss_scale
    )
    estimator.fit(datamodule.val_dataloader(), progress=True)
    if estimator_dir is not None:
        estimator.save(estimator_dir)
    return estimator


def load_run(run_dir: str | Path) -> tuple[PaRCE, L.LightningDataModule, dict]:
    """The PaRCE estimator (bound to its classifier), the datamodule and the ``results.json`` contents of an
    earlier ``counterfactuals`` run in ``run_dir``, rebuilt from the run record it wrote."""
    results_file = Path(run_dir) / "results.json"
    if not results_file.is_file():
        raise UserInputError(
            f"no results.json in {str(run_dir)!r}; run `nemo-train counterfactuals` with that out_dir first"
        )
    results = json.loads(results_file.read_text())
    run = results.get("run", {})
    if "datamodule" not in run:
        raise UserInputError(f"{results_file} records no datamodule; rerun `nemo-train counterfactuals` to record one")
    classifier_path = run["classifier_checkpoint"]
    if not Path(classifier_path).is_file():
        raise UserInputError(f"the run's classifier checkpoint {classifier_path!r} does not exist")
    estimator = PaRCE.load(Path(run["estimator_dir"]), load_classifier(classifier_path)).eval()
    return estimator, instantiate_class((), run["datamodule"]), results
