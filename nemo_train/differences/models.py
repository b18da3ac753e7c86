"""The two vision models being compared: anything that maps images to predicted labels.

:class:`LightningClassifier` loads a ``nemo-train fit`` checkpoint through the shared loader
(:func:`nemo_train.models.loading.load_classifier`): a missing file is an error naming the ``fit`` command
that writes it, never a model trained here. A plain path on the command line is such a classifier
(:func:`as_compared_model`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from pathlib import Path

import torch

from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule
from nemo_train.models.loading import check_classifier_file, load_classifier


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
    """A :class:`ClassifierModule` checkpoint of ``nemo-train fit``.

    Args:
        checkpoint: the ``.ckpt`` file, e.g. ``checkpoints/cmnist_model_a/checkpoints/best.ckpt``.
        name: short name (part of the Diff_Model cache key); default: the checkpoint's experiment folder
            (``cmnist_model_a``).
    """

    def __init__(self, checkpoint: str, name: str | None = None) -> None:
        self.checkpoint = str(checkpoint)
        self.name = name or experiment_name(self.checkpoint)
        self.module: ClassifierModule | None = None
        self.device = torch.device("cpu")

    def check(self) -> None:
        """A one-line error naming the ``fit`` command when the checkpoint file is missing."""
        check_classifier_file(self.checkpoint, what=f"model {self.name!r}")

    def prepare(self, work_dir: Path, device: torch.device) -> None:
        if self.module is None:
            self.module = load_classifier(self.checkpoint, what=f"model {self.name!r}")
        self.device = device
        self.module = self.module.to(device)

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        return self.module(images.to(self.device)).argmax(-1).cpu()

    @property
    def identity(self) -> str:
        return f"{self.name}:{state_digest(self.module)}"

    @classmethod
    def from_module(cls, name: str, module: ClassifierModule) -> LightningClassifier:
        """Wrap an already trained module (tests, notebooks, benchmarks)."""
        model = cls("", name=name)
        model.module = module.eval()
        return model


def experiment_name(checkpoint: str) -> str:
    """The run folder that names a ``fit`` checkpoint: ``cmnist_model_a`` for
    ``checkpoints/cmnist_model_a/checkpoints/best.ckpt``."""
    folder = Path(checkpoint).resolve().parent
    return folder.parent.name if folder.name == "checkpoints" else folder.name


def as_compared_model(target: str | ComparedModel) -> ComparedModel:
    """A plain string is a ``nemo-train fit`` checkpoint (:class:`LightningClassifier`)."""
    return LightningClassifier(target) if isinstance(target, str) else target


def model_pair(targets: list[str | ComparedModel] | None) -> tuple[ComparedModel, ComparedModel]:
    """Model A and Model B from ``--targets``: exactly two, with distinct names (a clash of experiment folders
    falls back to ``folder/stem``); each checkpoint is checked before anything is written."""
    if not targets or len(targets) != 2:
        count = len(targets or [])
        raise UserInputError(
            f"--targets names {count} model(s); expected two, Model A then Model B (checkpoints of `nemo-train fit` "
            "or model objects), e.g. --targets [checkpoints/cmnist_model_a/checkpoints/best.ckpt, "
            "checkpoints/cmnist_model_b/checkpoints/best.ckpt]"
        )
    model_a, model_b = (as_compared_model(t) for t in targets)
    if (
        model_a.name == model_b.name
        and isinstance(model_a, LightningClassifier)
        and isinstance(model_b, LightningClassifier)
    ):
        model_a.name = f"{model_a.name}/{Path(model_a.checkpoint).stem}"
        model_b.name = f"{model_b.name}/{Path(model_b.checkpoint).stem}"
    if model_a.name == model_b.name:
        raise UserInputError(f"both targets are named {model_a.name!r}; give each a distinct `name`")
    for model in (model_a, model_b):
        if isinstance(model, LightningClassifier):
            model.check()
    return model_a, model_b
