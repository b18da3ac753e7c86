"""The PaRCE estimator of a run: its autoencoder trained or loaded, then calibrated on the classifier.

Plain Python usable without the CLI: :func:`prepare_estimator`, and :func:`load_run` (the estimator and data
of an earlier ``counterfactuals`` run, for benchmarks and sweeps). The classifier itself is always a
``nemo-train fit`` checkpoint, read by :func:`nemo_train.models.loading.load_classifier`.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.cli import instantiate_class

from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.parce import PaRCE
from nemo_train.errors import UserInputError
from nemo_train.models.loading import load_classifier
from nemo_train.models.trainer import fit_quietly


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
        autoencoder = load_autoencoder(autoencoder_checkpoint)
    else:
        fit_quietly(autoencoder, datamodule, epochs, accelerator)
    estimator = PaRCE(
        classifier, autoencoder.eval(), datamodule.num_classes, threshold=threshold, loss_scale=loss_scale
    )
    estimator.fit(datamodule.val_dataloader(), progress=True)
    if estimator_dir is not None:
        estimator.save(estimator_dir)
    return estimator


def load_autoencoder(path: str) -> CompetencyAutoencoder:
    """The ``CompetencyAutoencoder`` of a ``nemo-train fit`` checkpoint; another model's checkpoint (a
    classifier's) or a damaged file is a one-line error naming it."""
    try:
        return CompetencyAutoencoder.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    except (TypeError, RuntimeError, KeyError, ValueError, EOFError, pickle.UnpicklingError) as err:
        reason = " ".join(str(err).split())[:160]
        raise UserInputError(
            f"autoencoder checkpoint {path!r} is not a CompetencyAutoencoder checkpoint ({type(err).__name__}: "
            f"{reason}); pass the checkpoint of `nemo-train fit --config configs/competency/cmnist_autoencoder.yaml`"
        ) from None


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
    classifier_path = run.get("classifier") or run.get("classifier_checkpoint")  # the key before --classifier
    if not classifier_path:
        raise UserInputError(f"{results_file} records no classifier; rerun `nemo-train counterfactuals` to record one")
    estimator = PaRCE.load(Path(run["estimator_dir"]), load_classifier(classifier_path)).eval()
    return estimator, instantiate_class((), run["datamodule"]), results
