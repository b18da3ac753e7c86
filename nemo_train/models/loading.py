"""The one way a pipeline gets the classifier it analyses: a ``nemo-train fit`` checkpoint, loaded, never trained.

:func:`load_classifier` reads a ``ClassifierModule`` checkpoint (``weights_only=True``, on CPU, in eval mode).
A missing file is a one-line :class:`~nemo_train.errors.UserInputError` that names the ``nemo-train fit``
command writing it (the shipped preset whose ``trainer.default_root_dir`` holds the checkpoint, else the
caller's hint, else a generic one); a damaged or foreign file is a one-line error naming the file. No
pipeline trains a stand-in when the file is missing, so a number never depends on whether ``fit`` ran first.

The objects that say *which* classifier a command analyses (this loader's checkpoints, published timm models,
zero-shot models) are the specs of :mod:`nemo_train.models.specs`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import yaml

from nemo_train.errors import UserInputError
from nemo_train.models.classifier import ClassifierModule

__all__ = [
    "GENERIC_FIT_HINT",
    "check_classifier_file",
    "experiment_name",
    "fit_preset_for",
    "load_classifier",
    "load_damaged_checked",
]

T = TypeVar("T")

#: The presets shipped with the repository (``configs/`` next to the package).
PRESET_DIR = Path(__file__).resolve().parents[2] / "configs"

#: What to run when no shipped preset is known to write the missing checkpoint.
GENERIC_FIT_HINT = "nemo-train fit --config <a classifier preset of configs/cmnist, clevr, nico or shifts>"

#: The hyper-parameters a ``ClassifierModule`` is built from (a LightningCLI run also records ``_instantiator``).
_INIT_ARGS = frozenset(inspect.signature(ClassifierModule.__init__).parameters) - {"self"}


def _experiment_dir(path: Path) -> Path:
    """The run folder of a checkpoint: ``<default_root_dir>`` for ``<default_root_dir>/checkpoints/best.ckpt``."""
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def fit_preset_for(path: str | Path, preset_dir: Path = PRESET_DIR) -> Path | None:
    """The shipped ``fit`` preset whose ``trainer.default_root_dir`` holds the checkpoint ``path``, if any."""
    folder = _experiment_dir(Path(path))
    wanted = {os.path.normpath(folder), str(folder.resolve())}
    if not preset_dir.is_dir():
        return None
    for preset in sorted(preset_dir.rglob("*.yaml")):
        try:
            config = yaml.safe_load(preset.read_text(encoding="utf-8"))
        except (yaml.YAMLError, OSError, UnicodeDecodeError):
            continue
        trainer = config.get("trainer") if isinstance(config, dict) else None
        root = trainer.get("default_root_dir") if isinstance(trainer, dict) else None
        if isinstance(root, str) and {os.path.normpath(root), str(Path(root).resolve())} & wanted:
            return preset
    return None


def fit_command(path: str | Path, fit_hint: str | None = None) -> str:
    """The command that writes the checkpoint ``path``: its shipped preset's, else ``fit_hint``, else a generic one.

    ``fit_hint`` is a preset path (``configs/cmnist/model_a.yaml``) or a whole command.
    """
    preset = fit_preset_for(path)
    if preset is not None:
        shown = preset.relative_to(PRESET_DIR.parent) if preset.is_relative_to(PRESET_DIR.parent) else preset
        return f"nemo-train fit --config {shown.as_posix()}"
    if fit_hint:
        return fit_hint if fit_hint.startswith("nemo-train ") else f"nemo-train fit --config {fit_hint}"
    return GENERIC_FIT_HINT


def check_classifier_file(path: str | Path, *, fit_hint: str | None = None, what: str = "classifier") -> Path:
    """``path`` as a ``Path`` when it is a file; otherwise a one-line error naming the command that writes it."""
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{what} checkpoint {str(path)!r} is a folder; expected the .ckpt file `fit` writes")
    if not path.is_file():
        raise UserInputError(
            f"{what} checkpoint {str(path)!r} does not exist; train it first: `{fit_command(path, fit_hint)}`"
        )
    return path


def load_classifier(path: str | Path, *, fit_hint: str | None = None, what: str = "classifier") -> ClassifierModule:
    """The ``ClassifierModule`` saved at ``path`` by ``nemo-train fit``, on CPU in eval mode (weights only).

    Args:
        path: the checkpoint (``<default_root_dir>/checkpoints/best.ckpt``).
        fit_hint: the preset (or command) that trains it, named in the error when the file is missing and no
            shipped preset writes that path.
        what: how the error names the checkpoint (``classifier``, ``model A``, ...).
    """
    path = check_classifier_file(path, fit_hint=fit_hint, what=what)
    name = f"{what} checkpoint {str(path)!r}"
    expected = "expected a ClassifierModule checkpoint written by `nemo-train fit`"
    try:
        checkpoint = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # any failure to unpickle the file: truncated, not a checkpoint, unsafe content
        raise UserInputError(f"{name} cannot be read ({_first_line(err)}); {expected}") from None
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not isinstance(hparams, dict):
        raise UserInputError(f"{name} holds no state_dict and hyper_parameters; {expected}")
    try:
        module = ClassifierModule(**{k: v for k, v in hparams.items() if k in _INIT_ARGS})
        module.load_state_dict(state)
    except (TypeError, RuntimeError) as err:  # another model's hyper-parameters or weights
        raise UserInputError(f"{name} does not fit a ClassifierModule ({_first_line(err)}); {expected}") from None
    return module.eval()


def load_damaged_checked(load: Callable[..., T], source: str | Path, *, what: str, **kwargs: Any) -> T:
    """``load(source, **kwargs)``; a file that cannot be read (truncated weights, a cut zip archive, a damaged
    ``model.safetensors``) is a one-line :class:`UserInputError` naming ``source`` and what to do."""
    try:
        return load(source, **kwargs)
    except UserInputError:
        raise
    except Exception as err:  # safetensors, zip, pickle and JSON readers each raise their own type
        raise UserInputError(
            f"{what} {str(source)!r} cannot be read ({_first_line(err)}); it is damaged or incomplete: "
            "copy it again or delete it and run the command that writes it"
        ) from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().split(". ")[0]
    return f"{type(err).__name__}: {text.splitlines()[0][:120] if text else 'damaged file'}"


def experiment_name(checkpoint: str | Path) -> str:
    """The run folder that names a ``fit`` checkpoint: ``cmnist_model_a`` for
    ``checkpoints/cmnist_model_a/checkpoints/best.ckpt``."""
    return _experiment_dir(Path(checkpoint).resolve()).name
