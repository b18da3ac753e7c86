"""The two vision models being compared: anything that maps images to predicted labels.

``--targets`` names them as :class:`~nemo_train.models.specs.ClassifierSpec` objects, the spec every command
takes (a plain path is a ``nemo-train fit`` checkpoint: a missing file is an error naming the ``fit`` command that
writes it, never a model trained here); :class:`SpecClassifier` runs one. Tests and benchmarks may pass any other
:class:`ComparedModel` (a rule, an already trained module).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from pathlib import Path

import torch

from nemo_train.errors import UserInputError
from nemo_train.models.specs import ClassifierSpec, FitCheckpoint, as_classifier, unique_names
from nemo_train.models.targets import ClassifierTarget, Target


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


class SpecClassifier(ComparedModel):
    """A :class:`ClassifierSpec` (a ``fit`` checkpoint, a published timm model, a zero-shot model) as Model A or B.

    Args:
        spec: the classifier; its ``label`` (the checkpoint's experiment folder, the hub id) is the default name.
        name: short name (part of the Diff_Model cache key).
    """

    def __init__(self, spec: ClassifierSpec, name: str | None = None) -> None:
        self.spec = spec
        self.name = name or spec.label
        self.target: Target | None = None
        self._identity: str | None = None

    def check(self) -> None:
        """Fail before anything is written (a missing checkpoint names the ``fit`` command)."""
        self.spec.check()

    def prepare(self, work_dir: Path, device: torch.device) -> None:
        if self.target is None:
            self.target = self.spec.build()
        self.target = self.target.to(device)

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        return self.target.predict(images).cpu()

    @property
    def identity(self) -> str:
        if self._identity is None:
            self._identity = f"{self.name}:{state_digest(self.target)}"
            prompts = getattr(self.target, "prompts", None)  # a zero-shot model: its class prompts decide too
            if prompts is not None:
                self._identity += ":" + hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:12]
        return self._identity

    @classmethod
    def from_module(cls, name: str, module: torch.nn.Module) -> SpecClassifier:
        """Wrap an already trained module with ``forward -> logits`` and ``features`` (tests, notebooks, benchmarks)."""
        model = cls(FitCheckpoint("", name=name))
        model.target = ClassifierTarget(module, [str(i) for i in range(module.hparams.num_classes)])
        return model


def as_compared_model(target: str | ClassifierSpec | ComparedModel) -> ComparedModel:
    """A plain string is a ``nemo-train fit`` checkpoint; a spec is run by :class:`SpecClassifier`."""
    return target if isinstance(target, ComparedModel) else SpecClassifier(as_classifier(target))


def model_pair(targets: list[str | ClassifierSpec | ComparedModel] | None) -> tuple[ComparedModel, ComparedModel]:
    """Model A and Model B from ``--targets``: exactly two, with distinct names (a clash of experiment folders
    falls back to ``folder/stem``); each classifier is checked before anything is written."""
    if not targets or len(targets) != 2:
        count = len(targets or [])
        raise UserInputError(
            f"--targets names {count} model(s); expected two, Model A then Model B (checkpoints of `nemo-train fit` "
            "or classifier specs), e.g. --targets [checkpoints/cmnist_model_a/checkpoints/best.ckpt, "
            "checkpoints/cmnist_model_b/checkpoints/best.ckpt]"
        )
    model_a, model_b = (as_compared_model(t) for t in targets)
    specs = [m.spec for m in (model_a, model_b) if isinstance(m, SpecClassifier)]
    if len(specs) == 2:
        model_a.name, model_b.name = unique_names(specs)
    if model_a.name == model_b.name:
        raise UserInputError(f"both targets are named {model_a.name!r}; give each a distinct `name`")
    for model in (model_a, model_b):
        if isinstance(model, SpecClassifier):
            model.check()
    return model_a, model_b
