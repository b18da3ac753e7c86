"""The competency configs parse, and the ``counterfactuals`` command runs end to end on tiny CMNIST."""

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import yaml  # noqa: E402
from jsonargparse import ActionConfigFile, ArgumentParser  # noqa: E402

from nemo_train.cli import PIPELINE_COMMANDS, run_pipeline  # noqa: E402
from nemo_train.competency.autoencoder import CompetencyAutoencoder  # noqa: E402
from nemo_train.competency.pipeline import counterfactuals  # noqa: E402
from nemo_train.errors import UserInputError  # noqa: E402

ROOT = Path(__file__).parents[2]
CONFIGS = ROOT / "configs" / "competency"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("counterfactuals_*.yaml")), ids=lambda p: p.stem)
def test_pipeline_configs_parse_and_instantiate(path):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_function_arguments(counterfactuals)
    config = parser.instantiate_classes(parser.parse_args(["--config", str(path)]))
    assert isinstance(config.autoencoder, CompetencyAutoencoder)
    assert config.autoencoder.hparams.image_size == config.datamodule.hparams.get("image_size", 28)
    assert set(config.methods) == {"IGD", "FGD", "Reco", "LGD", "LNN"}
    # the shipped presets keep the paper's lr / gamma / iterations and state their two departures
    assert (config.lr, config.gamma, config.max_iter) == (1e-3, 0.1, 100)
    assert config.objective == "score" and config.lgd_objective == "log_score" and config.lgd_lr == 0.1


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*_autoencoder.yaml")), ids=lambda p: p.stem)
def test_autoencoder_configs_build_the_model(path):
    config = yaml.safe_load(path.read_text())
    assert config["model"]["class_path"] == "nemo_train.competency.autoencoder.CompetencyAutoencoder"
    model = CompetencyAutoencoder(**config["model"]["init_args"])
    data_size = config["data"]["init_args"].get("image_size", 28)
    assert model.hparams.image_size == data_size


def _classifier_preset(checkpoint: str) -> dict:
    """The shipped classifier preset whose ModelCheckpoint writes ``checkpoint``."""
    folder = str(Path(checkpoint).parent)
    for path in sorted((CONFIGS.parent).glob("*/*.yaml")):
        config = yaml.safe_load(path.read_text())
        callbacks = (config.get("trainer") or {}).get("callbacks") or []
        if any(c.get("init_args", {}).get("dirpath") == folder for c in callbacks):
            return config
    raise AssertionError(f"no preset in configs/ writes {checkpoint}")


# Settings that change how the data are read or batched, not which images the classifier was trained on.
LOADING_ONLY = {"data_dir", "batch_size", "num_workers", "test_styles"}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("counterfactuals_*.yaml")), ids=lambda p: p.stem)
def test_competency_data_is_the_classifier_training_data(path):
    # PaRCE's autoencoder must learn the classifier's training distribution (paper 004, Sec. 2.1), so the
    # counterfactual preset and its autoencoder preset use the data of the classifier preset they name.
    config = yaml.safe_load(path.read_text())
    classifier = _classifier_preset(config["classifier_checkpoint"])["data"]
    autoencoder = yaml.safe_load(
        (CONFIGS / path.name.replace("counterfactuals_", "").replace(".yaml", "_autoencoder.yaml")).read_text()
    )["data"]

    def training_data(data: dict) -> tuple[str, dict]:
        return data["class_path"], {k: v for k, v in data["init_args"].items() if k not in LOADING_ONLY}

    assert training_data(config["datamodule"]) == training_data(classifier)
    assert training_data(autoencoder) == training_data(classifier)


@pytest.mark.slow
def test_counterfactuals_command_prints_table_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PIPELINE_COMMANDS, "counterfactuals", "nemo_train.competency.pipeline:counterfactuals")
    config = {
        "datamodule": {
            "class_path": "datamodules.cmnist.CMNISTDataModule",
            "init_args": {"train_size": 1000, "test_styles": 1, "batch_size": 32},
        },
        "autoencoder": {
            "class_path": "nemo_train.competency.autoencoder.CompetencyAutoencoder",
            "init_args": {"image_size": 28, "widths": [8, 16], "latent_dim": 16},
        },
        "out_dir": str(tmp_path / "out"),
        "per_cause": 2,
        "threshold": 0.1,
        "max_iter": 3,
        "classifier_epochs": 2,
        "autoencoder_epochs": 1,
        "device": "cpu",
    }
    path = tmp_path / "cf.yaml"
    path.write_text(yaml.safe_dump(config))
    results = run_pipeline("counterfactuals", ["--config", str(path)])
    out = capsys.readouterr().out
    for method in ("Orig", "IGD", "FGD", "Reco", "LGD", "LNN"):
        assert f"\n{method} " in out
    assert "Success Rate" in out and "fid[classifier]" in out and "1-ssim" in out
    assert set(results["table"]) == {"Orig", "IGD", "FGD", "Reco", "LGD", "LNN"}
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["table"]["Orig"]["success"] == 0.0  # the six-cause set holds low-competency images only
    for name in (
        "table.txt",
        "grid.png",
        "reliability.png",
        "classifier.ckpt",
        "parce/parce.json",
        "parce/parce.safetensors",
    ):
        assert (tmp_path / "out" / name).is_file()
    # the run records what it used, so the benchmark can time the same classifier and estimator
    assert written["run"]["classifier_checkpoint"] == str(tmp_path / "out" / "classifier.ckpt")
    assert (
        written["run"]["estimator_dir"] == str(tmp_path / "out" / "parce") and written["run"]["channels_last"] is True
    )
    assert written["run"]["datamodule"] == {
        "class_path": "datamodules.cmnist.CMNISTDataModule",
        "init_args": {
            "data_dir": None,
            "bias": "model_a",
            "train_size": 1000,
            "test_styles": 1,
            "batch_size": 32,
            "num_workers": 0,
            "seed": 0,
        },
    }
    assert written["run"]["cause_directions"] == {"brightness": "up", "contrast": "down", "saturation": "down"}
    # the sweep script rebuilds the run's data and estimator from that record
    sweep = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "sweep_causes.py"),
            "--run_dir",
            str(tmp_path / "out"),
            "--images",
            "12",
            "--severities",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    rows = [line for line in sweep.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 1 + 3 + 2 * 3  # header, clean, 3 causes with one direction, 3 with two
    assert "| brightness | down | 1 |" in sweep.stdout and "| brightness | up (default) | 1 |" in sweep.stdout
    # a second run trains a new autoencoder (the parser builds it from another random state): the seed decides
    run_pipeline(
        "counterfactuals", ["--config", str(path), "--estimator_dir", str(tmp_path / "parce2"), "--methods", "[Reco]"]
    )
    first, second = (tmp_path / "out" / "parce" / "parce.safetensors"), (tmp_path / "parce2" / "parce.safetensors")
    assert first.read_bytes() == second.read_bytes()


def test_estimator_uses_a_trained_autoencoder_checkpoint_without_training(tmp_path):
    import lightning as L
    import torch

    from datamodules.cmnist import CMNISTDataModule
    from nemo_train.competency.pipeline import prepare_estimator
    from nemo_train.models import ClassifierModule

    datamodule = CMNISTDataModule(train_size=600, test_styles=1, batch_size=64)
    trained = CompetencyAutoencoder(image_size=28, widths=(8, 16), latent_dim=8)
    trainer = L.Trainer(
        max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(trained, datamodule)
    path = tmp_path / "autoencoder.ckpt"
    trainer.save_checkpoint(str(path))
    untrained = CompetencyAutoencoder(image_size=28, widths=(4,), latent_dim=4)
    classifier = ClassifierModule(backbone="bias_cnn", num_classes=10).eval()
    estimator = prepare_estimator(classifier, datamodule, untrained, 5, 0.9, "cpu", tmp_path / "parce", str(path))
    assert list(estimator.autoencoder.hparams.widths) == [8, 16]
    for key, value in trained.state_dict().items():
        assert torch.equal(estimator.autoencoder.state_dict()[key], value)
    assert (tmp_path / "parce" / "parce.json").is_file()
    with pytest.raises(UserInputError, match="autoencoder checkpoint"):
        prepare_estimator(
            classifier, datamodule, untrained, 5, 0.9, "cpu", tmp_path / "other", str(tmp_path / "missing.ckpt")
        )


def test_counterfactuals_command_rejects_bad_values(tmp_path):
    with pytest.raises(UserInputError, match="threshold"):
        counterfactuals(threshold=1.5, out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="unknown counterfactual method"):
        counterfactuals(methods=["GAN"], out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="stopping"):
        counterfactuals(stopping="sometimes", out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="objective"):
        counterfactuals(objective="loss", out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="lgd_objective"):
        counterfactuals(lgd_objective="loss", out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="lgd_lr"):
        counterfactuals(lgd_lr=-0.1, out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="directions"):
        counterfactuals(cause_directions={"noise": "up"}, out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="nemo-train fit"):
        counterfactuals(classifier_checkpoint=str(tmp_path / "missing.ckpt"), out_dir=str(tmp_path), per_cause=1)


def test_demo_step_runs_the_pipeline_on_the_demo_checkpoint(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import nemo_train.competency.pipeline as pipeline

    calls = []
    monkeypatch.setattr(pipeline, "counterfactuals", lambda **kwargs: calls.append(kwargs))
    checkpoint = tmp_path / "model_a.ckpt"
    checkpoint.write_bytes(b"")
    ctx = SimpleNamespace(out_dir=tmp_path, checkpoints={"cmnist_model_a": checkpoint}, artifacts={}, fast=True)
    pipeline.demo_step(ctx)
    (kwargs,) = calls
    assert kwargs["classifier_checkpoint"] == str(checkpoint) and kwargs["out_dir"] == str(tmp_path / "counterfactuals")
    assert kwargs["lgd_objective"] == "log_score" and kwargs["lgd_lr"] == 0.1  # the shipped preset's settings
    assert ctx.artifacts["counterfactual_table"] == tmp_path / "counterfactuals" / "table.txt"
    ctx = SimpleNamespace(out_dir=tmp_path, checkpoints={}, artifacts={}, fast=False)
    pipeline.demo_step(ctx)
    assert calls[-1]["classifier_checkpoint"] is None and calls[-1]["per_cause"] == 10
