"""The two vision models being compared: anything that maps images to predicted labels.

:class:`LightningClassifier` loads a ``nemo-train fit`` checkpoint (``weights_only=True``); without
one it trains a small ``bias_cnn`` on the given datamodule (the embedded default) and saves it under
the run's folder, so a second run loads it instead of training again.
"""

from __future__ import annotations

import hashlib
import logging
import warnings
from abc import ABC, abstractmethod
from pathlib import Path

import lightning as L
import torch

from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule
from nemo_train.models.trainer import quiet_trainer


class ComparedModel(ABC):
    """One of the two models: :meth:`prepare` once, then :meth:`predict` on image batches."""

    name: str = "model"

    @abstractmethod
    def prepare(self, work_dir: Path, device: torch.device) -> None:
        """Load (or build) the model; ``work_dir`` is the run's folder for anything it must save."""

    @abstractmethod
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """Predicted labels ``long[B]`` for images ``float[B, C, H, W]`` in [0, 1]."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """A digest of the weights (part of every Diff_Model cache key)."""


def state_digest(module: torch.nn.Module) -> str:
    """SHA-256 (first 16 hex digits) of a module's parameters and buffers."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class LightningClassifier(ComparedModel):
    """A :class:`ClassifierModule` from a checkpoint, or trained here on ``datamodule``.

    Args:
        name: short name (file name of a model trained here).
        checkpoint: a ``nemo-train fit`` checkpoint; ``None`` or a missing file with ``datamodule`` set
            trains a ``bias_cnn`` for ``epochs`` and saves it to ``<work_dir>/models/<name>.ckpt``.
        datamodule: the biased training data of this model (embedded default).
        epochs: training epochs for the embedded default.
        seed: seed of that training.
    """

    def __init__(
        self,
        name: str,
        checkpoint: str | None = None,
        datamodule: L.LightningDataModule | None = None,
        epochs: int = 3,
        seed: int = 0,
    ) -> None:
        self.name, self.checkpoint, self.datamodule, self.epochs, self.seed = name, checkpoint, datamodule, epochs, seed
        self.module: ClassifierModule | None = None
        self.device = torch.device("cpu")

    def prepare(self, work_dir: Path, device: torch.device) -> None:
        if self.module is not None:
            return
        saved = Path(work_dir) / "models" / f"{self.name}.ckpt"
        path = self.checkpoint if self.checkpoint and Path(self.checkpoint).is_file() else None
        path = path or (str(saved) if saved.is_file() else None)
        if path is not None:
            module = ClassifierModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
        elif self.datamodule is not None:
            module = self._train(saved)
        else:
            raise UserInputError(
                f"checkpoint {self.checkpoint!r} of model {self.name!r} does not exist and no datamodule is set to train one"
            )
        self.device = device
        self.module = module.eval().to(device)

    def _train(self, save_to: Path) -> ClassifierModule:
        print(f"training {self.name} ({self.epochs} epochs) ...", flush=True)
        for name in ("lightning.pytorch", "lightning.fabric", "lightning"):  # no trainer banners
            logging.getLogger(name).setLevel(logging.ERROR)
        L.seed_everything(self.seed, verbose=False)
        module = ClassifierModule(backbone="bias_cnn", num_classes=self.datamodule.num_classes, lr=3e-3)
        trainer = quiet_trainer(max_epochs=self.epochs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(module, self.datamodule)
        save_to.parent.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(str(save_to), weights_only=True)
        return module

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        return self.module(images.to(self.device)).argmax(-1).cpu()

    @property
    def identity(self) -> str:
        return f"{self.name}:{state_digest(self.module)}"

    @classmethod
    def from_module(cls, name: str, module: ClassifierModule) -> LightningClassifier:
        """Wrap an already trained module (tests, notebooks)."""
        model = cls(name)
        model.module = module.eval()
        return model
