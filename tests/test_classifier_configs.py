"""Every classifier preset in configs/ parses and runs one fast_dev_run step on the embedded default.

(Explainer presets are covered in tests/explainer/test_configs.py, pipeline configs by their pipeline tests.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nemo_train.cli import main
from nemo_train.lightning_cli import NemoLightningCLI

ROOT = Path(__file__).resolve().parents[1]
CLASSIFIER_CONFIGS = sorted(
    p for folder in ("cmnist", "clevr", "nico", "shifts") for p in (ROOT / "configs" / folder).glob("*.yaml")
)


def test_there_are_presets_for_every_dataset():
    names = {p.relative_to(ROOT / "configs").as_posix() for p in CLASSIFIER_CONFIGS}
    assert {
        "cmnist/model_a.yaml",
        "cmnist/model_b.yaml",
        "clevr/rubber.yaml",
        "clevr/metal.yaml",
        "nico/nico75_resnet50.yaml",
        "nico/nico85_resnet50.yaml",
        "nico/nico95_resnet50.yaml",
        "shifts/gaps_a.yaml",
        "shifts/gaps_b.yaml",
    } <= names


@pytest.mark.parametrize("path", CLASSIFIER_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_preset_names_its_experiment_once_and_one_override_moves_its_outputs(path, tmp_path):
    root = yaml.safe_load(path.read_text())["trainer"]["default_root_dir"]
    assert root.startswith("checkpoints/") and path.stem in root
    assert sum(line.count(root) for line in path.read_text().splitlines() if not line.lstrip().startswith("#")) == 1
    cli = NemoLightningCLI(
        args=["--config", str(path), "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"], run=False
    )
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes
    checkpoint_dirs = [str(cb.dirpath) for cb in cli.trainer.callbacks if hasattr(cb, "dirpath") and cb.dirpath]
    assert checkpoint_dirs == [str(tmp_path / "checkpoints")]


def fast_dev_run_case(path: Path):
    """A preset's case; the ResNet-50 ones (about 20 s each on 2 CPU cores) run in the full lane only."""
    marks = [pytest.mark.slow] if "resnet50" in path.name else []
    return pytest.param(path, marks=marks, id=f"{path.parent.name}/{path.name}")


@pytest.mark.parametrize("path", [fast_dev_run_case(p) for p in CLASSIFIER_CONFIGS])
def test_preset_runs_fast_dev_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory either
    main(
        [
            "fit",
            "--config",
            str(path),
            "--trainer.fast_dev_run=1",
            "--trainer.logger=false",
            "--trainer.accelerator=cpu",
            f"--trainer.default_root_dir={tmp_path}",
            "--data.init_args.train_size=64",
        ]
    )
