"""The competency configs parse, and the ``counterfactuals`` command runs end to end on tiny CMNIST."""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import forked_commands  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402
from cli_errors import one_line_error  # noqa: E402
from jsonargparse import ActionConfigFile, ArgumentParser  # noqa: E402

from nemo_train.cli import main, run_pipeline  # noqa: E402
from nemo_train.competency.autoencoder import CompetencyAutoencoder  # noqa: E402
from nemo_train.competency.gradient_counterfactuals import LatentGradientDescent  # noqa: E402
from nemo_train.competency.pipeline import counterfactuals  # noqa: E402
from nemo_train.competency.settings import CauseArgs, CounterfactualRun, EstimatorArgs, EvalArgs  # noqa: E402
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
    assert [m.name for m in config.methods] == ["IGD", "FGD", "Reco", "LGD", "LNN"]
    # the shipped presets keep the paper's lr / gamma / iterations and state LGD's two departures
    for method in config.methods:
        if method.name in ("IGD", "FGD"):
            assert (method.lr, method.gamma, method.max_iter, method.objective) == (1e-3, 0.1, 100, "score")
    (lgd,) = [m for m in config.methods if isinstance(m, LatentGradientDescent)]
    assert lgd.objective == "log_score" and lgd.lr == 0.1 and (lgd.gamma, lgd.max_iter) == (0.1, 100)
    assert config.estimator.threshold == 0.9 and config.estimator.dir is None  # <out_dir>/parce


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*_autoencoder.yaml")), ids=lambda p: p.stem)
def test_autoencoder_configs_build_the_model(path):
    config = yaml.safe_load(path.read_text())
    assert config["model"]["class_path"] == "nemo_train.competency.autoencoder.CompetencyAutoencoder"
    model = CompetencyAutoencoder(**config["model"]["init_args"])
    data_size = config["data"]["init_args"].get("image_size", 28)
    assert model.hparams.image_size == data_size


def _classifier_preset(checkpoint: str) -> dict:
    """The shipped classifier preset that writes ``checkpoint`` (``<default_root_dir>/checkpoints/best.ckpt``)."""
    root = str(Path(checkpoint).parent.parent)
    for path in sorted((CONFIGS.parent).glob("*/*.yaml")):
        config = yaml.safe_load(path.read_text())
        if (config.get("trainer") or {}).get("default_root_dir") == root:
            return config
    raise AssertionError(f"no preset in configs/ writes {checkpoint}")


# Settings that change how the data are read or batched, not which images the classifier was trained on.
LOADING_ONLY = {"data_dir", "batch_size", "num_workers", "test_styles"}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("counterfactuals_*.yaml")), ids=lambda p: p.stem)
def test_competency_data_is_the_classifier_training_data(path):
    # PaRCE's autoencoder must learn the classifier's training distribution (competency-counterfactuals paper,
    # Sec. 2.1), so the counterfactual preset and its autoencoder preset use the data of the classifier preset
    # they name.
    config = yaml.safe_load(path.read_text())
    classifier = _classifier_preset(config["classifier"])["data"]
    autoencoder = yaml.safe_load(
        (CONFIGS / path.name.replace("counterfactuals_", "").replace(".yaml", "_autoencoder.yaml")).read_text()
    )["data"]

    def training_data(data: dict) -> tuple[str, dict]:
        return data["class_path"], {k: v for k, v in data["init_args"].items() if k not in LOADING_ONLY}

    assert training_data(config["datamodule"]) == training_data(classifier)
    assert training_data(autoencoder) == training_data(classifier)


@pytest.mark.slow
def test_counterfactuals_command_prints_table_one(tmp_path, monkeypatch, capsys, model_a_checkpoint):
    gradient = "nemo_train.competency.gradient_counterfactuals"
    config = {
        "datamodule": {
            "class_path": "datamodules.cmnist.CMNISTDataModule",
            "init_args": {"train_size": 1000, "test_styles": 1, "batch_size": 32},
        },
        "autoencoder": {
            "class_path": "nemo_train.competency.autoencoder.CompetencyAutoencoder",
            "init_args": {"image_size": 28, "widths": [8, 16], "latent_dim": 16},
        },
        "methods": [
            {"class_path": f"{gradient}.ImageGradientDescent", "init_args": {"max_iter": 3}},
            {"class_path": f"{gradient}.FeatureGradientDescent", "init_args": {"max_iter": 3}},
            {"class_path": "nemo_train.competency.counterfactuals.ReconstructionCounterfactual"},
            {"class_path": f"{gradient}.LatentGradientDescent", "init_args": {"max_iter": 3}},
            {"class_path": "nemo_train.competency.counterfactuals.LatentNearestNeighbor"},
        ],
        "classifier": model_a_checkpoint,
        "out_dir": str(tmp_path / "out"),
        "causes": {"per_cause": 2},
        "estimator": {"threshold": 0.1},
        "train": {"autoencoder_epochs": 1},
        "device": "cpu",
    }
    path = tmp_path / "cf.yaml"
    path.write_text(yaml.safe_dump(config))
    run = run_pipeline("counterfactuals", ["--config", str(path)])
    out = capsys.readouterr().out
    for method in ("Orig", "IGD", "FGD", "Reco", "LGD", "LNN"):
        assert f"│ {method} " in out
    assert "Success Rate" in out and "fid[classifier]" in out and "1-ssim" in out
    assert isinstance(run, CounterfactualRun) and set(run.table) == {"Orig", "IGD", "FGD", "Reco", "LGD", "LNN"}
    assert set(run.success) == {"IGD", "FGD", "Reco", "LGD", "LNN"} and 0 <= run.calibration.holdout_accuracy <= 1
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["table"]["Orig"]["success"] == 0.0  # the six-cause set holds low-competency images only
    assert written["table"] == json.loads(json.dumps(run.table))
    for row in written["table"].values():  # each per-image mean with its bootstrap interval over the images
        assert row["success_ci_low"] <= row["success"] <= row["success_ci_high"]
        assert row["1-ssim_ci_low"] <= row["1-ssim"] <= row["1-ssim_ci_high"]
        assert "fid[classifier]_ci_low" not in row and "sec_per_image_ci_low" not in row  # set-level: none
    assert "bootstrap 95 % interval over the images" in out
    assert written["generator_options"]["LGD"]["init_args"]["max_iter"] == 3
    for name in (
        "table.txt",
        "grid.png",
        "reliability.png",
        "parce/parce.json",
        "parce/parce.safetensors",
    ):
        assert (tmp_path / "out" / name).is_file()
    assert run.files["estimator"] == tmp_path / "out" / "parce" and run.files["grid"].is_file()
    assert "Success Rate" in (tmp_path / "out" / "table.txt").read_text()
    # the run records what it used, so the benchmark can time the same classifier and estimator
    assert written["run"]["classifier"] == model_a_checkpoint and run.files["classifier"] == Path(model_a_checkpoint)
    assert not (tmp_path / "out" / "classifier.ckpt").exists()  # the command never trains a classifier
    assert (
        written["run"]["estimator_dir"] == str(tmp_path / "out" / "parce") and written["run"]["channels_last"] is True
    )
    init_args = written["run"]["datamodule"]["init_args"]
    assert written["run"]["datamodule"]["class_path"] == "datamodules.cmnist.CMNISTDataModule"
    assert {k: init_args[k] for k in ("data_dir", "bias", "train_size", "test_styles", "batch_size", "seed")} == {
        "data_dir": None,
        "bias": "model_a",
        "train_size": 1000,
        "test_styles": 1,
        "batch_size": 32,
        "seed": 0,
    }
    assert written["run"]["cause_directions"] == {"brightness": "up", "contrast": "down", "saturation": "down"}
    # the sweep script rebuilds the run's data and estimator from that record
    sweep = forked_commands.run(  # a process of its own, forked pre-imported
        [sys.executable, str(ROOT / "scripts" / "sweep_causes.py"), "--run_dir", str(tmp_path / "out"), "--images",
         "12", "--severities", "1"],
        {**os.environ, "PYTHONPATH": str(ROOT)},
        ROOT,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    rows = [line for line in sweep.stdout.splitlines() if line.startswith("│ ")]
    assert len(rows) == 1 + 3 + 2 * 3  # clean, 3 causes with one direction, 3 with two
    assert any(r.split("│")[1:4] == [" brightness ", " down ", " 1 "] for r in rows) or "brightness" in sweep.stdout
    # a second run trains a new autoencoder (the parser builds it from another random state): the seed decides
    run_pipeline(
        "counterfactuals",
        [
            "--config",
            str(path),
            "--estimator.dir",
            str(tmp_path / "parce2"),
            "--methods",
            '[{"class_path": "nemo_train.competency.counterfactuals.ReconstructionCounterfactual"}]',
        ],
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
        EstimatorArgs(threshold=1.5)
    with pytest.raises(UserInputError, match="loss_scale"):
        EstimatorArgs(loss_scale=0.0)
    with pytest.raises(UserInputError, match="per_cause"):
        CauseArgs(per_cause=0)
    with pytest.raises(UserInputError, match="severity"):
        CauseArgs(severity=(0.5, 1.5))
    with pytest.raises(UserInputError, match="batch_size"):
        EvalArgs(batch_size=0)
    with pytest.raises(UserInputError, match="more than once"):
        counterfactuals(methods=[LatentGradientDescent(), LatentGradientDescent(lr=0.1)], out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="directions"):
        counterfactuals(causes=CauseArgs(directions={"noise": "up"}), out_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="nemo-train fit"):
        counterfactuals(classifier=str(tmp_path / "missing.ckpt"), causes=CauseArgs(per_cause=1), out_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())  # nothing trained or written


def test_help_lists_the_choices_and_a_bad_choice_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["counterfactuals", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for text in ("--estimator.loss_scale", "--causes.per_cause", "{auto,cpu,cuda}", "--methods"):
        assert text in help_text
    config = yaml.safe_load((CONFIGS / "counterfactuals_cmnist.yaml").read_text())
    config["methods"][3]["init_args"]["stopping"] = "sometimes"
    config["out_dir"] = str(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    line = one_line_error(capsys, ["counterfactuals", "--config", str(path)])
    assert "stopping" in line and "per_image" in line  # names the option and its choices
    config["methods"][3]["init_args"] = {"learning_rate": 0.1}
    path.write_text(yaml.safe_dump(config))
    assert "learning_rate" in one_line_error(capsys, ["counterfactuals", "--config", str(path)])
