"""``scripts/lbee_seeds.py``: a preset repeated over CLIP and data seeds, and its summary."""

from __future__ import annotations

import json
import runpy
import statistics
import sys
from pathlib import Path

import pytest
import yaml

from tests.models.tiny_clip import TINY_CLIP

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "lbee_seeds.py"))


def _scores(**ahr: float) -> dict[str, dict[str, float]]:
    return {m: {"acr": 0.5, "ahr": a, "tpr": 0.25, "ji": 0.125} for m, a in ahr.items()}


def test_summary_by_hand():
    runs = [_scores(TopS=0.4, SetDiff=0.5, PDiff=0.3), _scores(TopS=0.4, SetDiff=0.3, PDiff=0.2)]
    rows = {r[0]: r[1:] for r in SCRIPT["summary"](runs)}
    # SetDiff AHR 0.5 and 0.3: mean 0.4, sample sd sqrt(((0.1)^2 + (0.1)^2) / 1) = 0.141; above TopS once.
    assert rows["SetDiff"] == ["0.500 ± 0.000", "0.400 ± 0.141", "0.250 ± 0.000", "0.125 ± 0.000", "1/2"]
    assert rows["PDiff"][1] == "0.250 ± 0.071" and rows["PDiff"][-1] == "0/2"
    assert rows["TopS"][-1] == ""  # no comparison with itself
    # a tie in the last bit (17 / 45 summed in another order) is not a win
    tie = [_scores(TopS=0.3, SetDiff=0.1 + 0.2, PDiff=0.31)]
    assert 0.1 + 0.2 > 0.3  # the two differ in the last bit
    rows = {r[0]: r[1:] for r in SCRIPT["summary"](tie)}
    assert rows["SetDiff"][-1] == "0/1" and rows["PDiff"][-1] == "1/1"


def test_seed_zero_keeps_the_preset_paths():
    config, base = (str(ROOT / "configs" / "lbee" / name) for name in ("nico95.yaml", "nico_base.yaml"))
    args = SCRIPT["run_config"](config, 0, 0, Path("/x"), [base])
    assert "--classifier" not in args and "--encoder.init_args.seed" not in args
    assert args[:4] == ["--config", base, "--config", config]  # the shared recipe first, then the preset
    assert dict(zip(args[4::2], args[5::2], strict=True))["--encoder.init_args.path"] == "/x/clips/seed0"
    args = SCRIPT["run_config"](config, 2, 1, Path("/x"), [base])
    options = dict(zip(args[4::2], args[5::2], strict=True))
    assert options["--encoder.init_args.path"] == "/x/clips/seed2"  # one joint space per CLIP seed, shared
    assert options["--encoder.init_args.seed"] == "2"
    assert options["--data.init_args.seed"] == options["--seed"] == "1"
    assert options["--classifier"] == "/x/nico95_cnn/data1/checkpoints/best.ckpt"  # the preset's classifier experiment
    assert options["--out_dir"] == "/x/nico95/clip2_data1"


TINY_DATA = {
    "class_path": "datamodules.nico.NICODataModule",
    "init_args": {"correlation": 0.85, "image_size": 16, "train_size": 240, "test_per_pair": 4, "batch_size": 32},
}


@pytest.fixture
def tiny_fit(tmp_path):
    """A one-epoch classifier recipe on the tiny data (a fit preset writing checkpoints/best.ckpt)."""
    checkpoint = {"filename": "best", "monitor": "val/acc", "mode": "max", "enable_version_counter": False}
    preset = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "max_epochs": 1,
            "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": checkpoint}],
        },
        "model": {"class_path": "nemo_train.models.ClassifierModule", "init_args": {"num_classes": 6, "lr": 0.003}},
        "data": TINY_DATA,
    }
    path = tmp_path / "tiny_fit.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


@pytest.fixture
def tiny_preset(tmp_path, tiny_fit):
    seed0 = SCRIPT["train_classifier"](tiny_fit, 0, tmp_path / "tiny_cnn")  # the preset's own classifier
    preset = {
        "data": TINY_DATA,
        "classifier": str(seed0),
        "encoder": {
            "class_path": "nemo_train.lbee.encoders.SyntheticCLIP",
            "init_args": {
                "path": str(tmp_path / "clip"),
                "train_per_source": 96,
                "max_epochs": 1,
                "batch_size": 32,
                "model": TINY_CLIP,
            },
        },
        "search": {"clustering": {"n_clusters": 4}, "tau": 1.0, "tau_scale": "sentence_z"},
        "evaluation": {"sweep": [0.0], "partition_k": 0},
        "out_dir": str(tmp_path / "preset"),
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


def test_runs_every_seed_pair_and_summarises(tiny_preset, tiny_fit, tmp_path, monkeypatch, capsys):
    out = tmp_path / "seeds"
    argv = ["lbee_seeds.py", "--config", str(tiny_preset), "--clip-seeds", "0", "1", "--data-seeds", "0", "1"]
    argv += ["--fit-config", str(tiny_fit)]
    monkeypatch.setattr(sys, "argv", [*argv, "--out_dir", str(out)])
    SCRIPT["main"]()
    printed = capsys.readouterr().out
    lines = [json.loads(line) for line in (out / "seeds.jsonl").read_text().splitlines()]
    assert [r["key"] for r in lines] == [f"{tiny_preset} clip {c} data {d}" for c in (0, 1) for d in (0, 1)]
    record = lines
    # one joint space per CLIP seed under out_dir, shared by the data seeds; data seed 0 uses the preset's
    # classifier, other data seeds train their own under out_dir
    assert sorted(p.name for p in (out / "clips").iterdir() if p.is_dir()) == ["seed0", "seed1"]  # and their locks
    assert (out / "tiny_cnn" / "data1" / "checkpoints" / "best.ckpt").is_file()  # by the --fit-config recipe
    ahr = [r["scores"]["SetDiff"]["ahr"] for r in record]
    assert f"{statistics.fmean(ahr):.3f} ± {statistics.stdev(ahr):.3f}" in printed
    wins = sum(SCRIPT["above"](r["scores"]["SetDiff"]["ahr"], r["scores"]["TopS"]["ahr"]) for r in record)
    assert f"{wins}/4" in printed
    assert "Failure-mode sentences" not in printed  # the runs' own tables only with --verbose

    # a rerun (or one after a kill) finds every run in the store: same tables, nothing recomputed
    def no_run(*args):
        raise AssertionError("a stored run was recomputed")

    monkeypatch.setitem(SCRIPT["main"].__globals__, "run", no_run)
    SCRIPT["main"]()
    assert capsys.readouterr().out == printed
