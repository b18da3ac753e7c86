"""``lbee --devices 2``: two processes (Lightning Fabric, gloo on CPU) share out the classification and embedding
of the images batch by batch; the first trains the missing joint space once, gathers, clusters and scores, and
the run equals the one-process run (same results, same tables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from distributed_runs import holding, printed_table
from training_seed import TRAINING_SEED

from tests.models.tiny_clip import TINY_CLIP

ROOT = Path(__file__).resolve().parents[2]
NEMO_TRAIN = str(Path(sys.executable).with_name("nemo-train"))
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
DATA = {"correlation": 0.85, "image_size": 16, "train_size": 240, "test_per_pair": 4, "batch_size": 32}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory, lightning_checkpoint) -> str:
    import lightning as L

    from datamodules.nico import NICODataModule
    from nemo_train.models import ClassifierModule
    from nemo_train.models.trainer import fit_quietly

    L.seed_everything(TRAINING_SEED, verbose=False)
    module = ClassifierModule(backbone="bias_cnn", num_classes=6, lr=3e-3)
    fit_quietly(module, NICODataModule(**DATA), 1, limit_val_batches=0)
    return lightning_checkpoint(module, tmp_path_factory.mktemp("nico_cnn") / "checkpoints" / "best.ckpt")


def config(classifier: str, out_dir: Path) -> dict:
    """A tiny lbee run whose joint space is trained inside ``out_dir`` (so each run trains its own)."""
    return {
        "data": {"class_path": "datamodules.nico.NICODataModule", "init_args": DATA},
        "encoder": {
            "class_path": "nemo_train.lbee.encoders.SyntheticCLIP",
            "init_args": {
                "path": str(out_dir / "clip"),
                "train_per_source": 96,
                "max_epochs": 1,
                "batch_size": 32,
                "group_size": 3,
                "model": {**TINY_CLIP, "attribute_head_weight": 1.0},
            },
        },
        "search": {"clustering": {"n_clusters": 4}, "tau": 1.0, "tau_scale": "sentence_z"},
        "classifier": classifier,
        "evaluation": {"sweep": [0.0, 0.5], "batch_size": 16},  # several batches to share out
        "out_dir": str(out_dir),
        "device": "cpu",
    }


def run(classifier: str, folder: Path, devices: int) -> tuple[Path, str]:
    out = folder / "run"
    folder.mkdir(parents=True)
    path = folder / "lbee.yaml"
    path.write_text(yaml.safe_dump(config(classifier, out)))
    args = [NEMO_TRAIN, "lbee", "--config", str(path), "--devices", str(devices)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout


def results(out: Path) -> dict:
    saved = json.loads((out / "results.json").read_text())
    saved.pop("files")  # paths under each run's own folder
    return saved


def test_two_processes_give_the_one_process_result(tiny_classifier, tmp_path):
    one, one_stdout = run(tiny_classifier, tmp_path / "one", 1)
    two, two_stdout = run(tiny_classifier, tmp_path / "two", 2)
    assert results(two) == results(one)
    title = "Failure-mode sentences"
    assert printed_table(two_stdout, title) == printed_table(one_stdout, title)  # both tables
    assert two_stdout.count("Failure-mode sentences") == 1  # only the first process prints
    assert (two / "hard_clusters.png").is_file() and (two / "clip" / "config.json").is_file()
    assert json.loads((two / "provenance.json").read_text())["world_size"] == 2


@pytest.mark.fault
def test_a_killed_two_process_run_reruns_on_one_process(tiny_classifier, tmp_path):
    """A two-process run killed once its joint space is saved (both processes then classify and embed), rerun on
    one process in the same folder: the rerun finishes and equals an uninterrupted one-process run."""
    import signal
    import time

    one, _ = run(tiny_classifier, tmp_path / "one", 1)
    folder = tmp_path / "killed"
    folder.mkdir()
    out = folder / "run"
    path = folder / "lbee.yaml"
    path.write_text(yaml.safe_dump(config(tiny_classifier, out)))
    args = [NEMO_TRAIN, "lbee", "--config", str(path)]
    proc = subprocess.Popen(
        [*args, "--devices", "2"], env=holding(ENV, "zero_shot.json"), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (out / "clip" / "zero_shot.json").is_file():
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "results.json").exists()
    done = subprocess.run([*args, "--devices", "1"], capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert results(out) == results(one)
