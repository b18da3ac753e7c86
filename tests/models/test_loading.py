"""The one classifier loader: a checkpoint of ``nemo-train fit`` loads; a missing, damaged or foreign file is one line."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule
from nemo_train.models.loading import (
    GENERIC_FIT_HINT,
    check_classifier_file,
    fit_preset_for,
    load_classifier,
)
from nemo_train.models.trainer import quiet_trainer

ROOT = Path(__file__).resolve().parents[2]


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_fit_checkpoint_loads_on_cpu_in_eval_mode(tmp_path, trained_cmnist_classifier):
    module, datamodule = trained_cmnist_classifier
    trainer = quiet_trainer()
    trainer.strategy.connect(module)
    path = tmp_path / "run" / "checkpoints" / "best.ckpt"
    path.parent.mkdir(parents=True)
    trainer.save_checkpoint(path)  # what `nemo-train fit` writes (trainer state and hyper-parameters included)
    loaded = load_classifier(path)
    assert not loaded.training and loaded.device == torch.device("cpu")
    images = torch.stack([datamodule.test_set[i]["image"] for i in range(3)])
    with torch.no_grad():
        assert torch.allclose(loaded(images), module.eval()(images), atol=1e-6)


def test_missing_checkpoint_names_the_fit_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the shipped presets' relative checkpoint paths do not exist here
    with pytest.raises(UserInputError) as err:
        load_classifier("checkpoints/cmnist_model_a/checkpoints/best.ckpt")
    assert "`nemo-train fit --config configs/cmnist/model_a.yaml`" in one_line(err)
    assert "does not exist" in str(err.value)
    assert fit_preset_for("checkpoints/nico85_cnn/checkpoints/last.ckpt") == ROOT / "configs/nico/nico85_cnn.yaml"
    with pytest.raises(UserInputError) as err:  # no shipped preset writes it: the caller's hint
        load_classifier(tmp_path / "mine" / "best.ckpt", fit_hint="configs/clevr/rubber.yaml")
    assert "`nemo-train fit --config configs/clevr/rubber.yaml`" in one_line(err)
    with pytest.raises(UserInputError) as err:  # no hint either: the generic command
        load_classifier(tmp_path / "mine" / "best.ckpt")
    assert GENERIC_FIT_HINT in one_line(err)
    with pytest.raises(UserInputError, match="is a folder"):
        check_classifier_file(tmp_path)


def _save(obj, path: Path) -> Path:
    torch.save(obj, path)
    return path


@pytest.mark.parametrize(
    "kind", ["empty", "truncated", "zip_like", "text", "tensor", "no_state_dict", "other_model", "unsafe_pickle"]
)
def test_damaged_or_foreign_checkpoint_is_one_line_naming_the_file(kind, tmp_path):
    module = ClassifierModule(num_classes=10)
    good = _save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": L.__version__,
        },
        tmp_path / "good.ckpt",
    )
    path = tmp_path / f"{kind}.ckpt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "zip_like":
        path.write_bytes(b"PK\x03\x04 not really a zip archive" * 10)
    elif kind == "text":
        path.write_text("best.ckpt\n")
    elif kind == "tensor":
        _save(torch.zeros(3), path)
    elif kind == "no_state_dict":
        _save({"epoch": 3}, path)
    elif kind == "other_model":  # a checkpoint of another LightningModule
        other = torch.nn.Linear(2, 2)
        _save({"state_dict": other.state_dict(), "hyper_parameters": {"in_features": 2}}, path)
    else:  # a pickle that `weights_only` refuses to run
        _save({"state_dict": {}, "hyper_parameters": {"backbone": Path("x")}}, path)
    with pytest.raises(UserInputError) as err:
        load_classifier(path)
    message = one_line(err)
    assert str(path) in message and "nemo-train fit" in message
    assert load_classifier(good).hparams.num_classes == 10
