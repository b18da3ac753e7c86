"""``distill-teacher --devices 2``: two processes (Lightning Fabric, gloo on CPU) label the same mined errors as
one process and write the same pairs; a run killed mid-way resumes on one process with nothing lost or
labelled twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from distributed_runs import kill_mid_run, printed_table, run_in_process, run_to_end

from nemo_train.sharding import shard_paths

ROOT = Path(__file__).resolve().parents[3]
NEMO_TRAIN = str(Path(sys.executable).with_name("nemo-train"))
N = 16
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
#: what a label holds (everything but its bookkeeping)
FIELDS = ("sample_id", "kept", "cei", "label", "prediction", "hypothesis", "edit", "answer", "failed")

pytestmark = pytest.mark.slow


def command(checkpoint: str, out_dir: Path, devices: int) -> list[str]:
    return [
        NEMO_TRAIN, "distill-teacher", "--classifier", checkpoint, "--out_dir", str(out_dir), "--n", str(N),
        "--styles", "1", "--error_batch", "1", "--device", "cpu", "--devices", str(devices),
    ]  # fmt: skip


def run(args: list[str]) -> subprocess.CompletedProcess:
    return run_to_end(args, ENV, ROOT)


def labels(out_dir: Path) -> dict[str, tuple]:
    records = [json.loads(line) for line in (out_dir / "teacher.jsonl").read_text().splitlines()]
    assert len(records) == len({r["key"] for r in records})  # no label written twice
    return {r["key"]: tuple(r.get(f) for f in FIELDS) for r in records}


def pairs(out_dir: Path) -> dict[str, list[dict]]:
    """The pair files (image paths are relative to the pairs folder), and every image's bytes by name."""
    found = {split: (out_dir / "pairs" / f"{split}.jsonl").read_text().splitlines() for split in ("train", "val")}
    images = {p.name: p.read_bytes() for p in sorted((out_dir / "pairs" / "images").iterdir())}
    return {"records": found, "images": images}


def table(stdout: str) -> str:
    return printed_table(stdout, "Distillation teacher", "errors labelled in")


@pytest.fixture(scope="module")
def one_process(model_a_checkpoint, tmp_path_factory):
    """The uninterrupted one-process run, in this process (``distributed_runs.run_in_process``)."""
    out = tmp_path_factory.mktemp("one") / "teacher"
    return out, run_in_process(command(model_a_checkpoint, out, 1), out.parent)


def test_two_processes_label_and_pair_as_one(model_a_checkpoint, one_process, tmp_path):
    reference, reference_stdout = one_process
    out = tmp_path / "two"
    done = run(command(model_a_checkpoint, out, 2))
    assert len(labels(reference)) == N
    assert labels(out) == labels(reference)
    assert pairs(out) == pairs(reference)
    assert table(done.stdout) == table(reference_stdout)
    assert f"{N} errors labelled in" in done.stdout  # summed over both processes: each error once
    assert done.stdout.count("Distillation teacher") == 1  # only the first process prints
    assert shard_paths(out / "teacher.jsonl") == []  # merged into teacher.jsonl
    assert json.loads((out / "provenance.json").read_text())["world_size"] == 2


def test_a_killed_two_process_run_resumes_on_one_process(model_a_checkpoint, one_process, tmp_path):
    reference, _ = one_process
    out = tmp_path / "killed"
    left = kill_mid_run(command(model_a_checkpoint, out, 2), ENV, ROOT, out / "teacher.jsonl", min_lines=4)
    assert 4 <= len(left) < N
    assert not (out / "pairs" / "train.jsonl").exists()  # pairs come only after every label is merged

    done = run(command(model_a_checkpoint, out, 1))
    assert f"{N - len(left)} errors labelled in" in done.stdout  # only what was missing
    assert labels(out) == labels(reference)
    assert pairs(out) == pairs(reference)
    assert shard_paths(out / "teacher.jsonl") == []
