"""``distill-eval --devices 2``: two processes (Lightning Fabric, gloo on CPU) score each row's held-out errors
as one process does (same records, same table, the Constant row from every process's teacher answers), and a
run killed mid-way resumes on one process with nothing lost or scored twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from distributed_runs import kill_mid_run, run_in_process, run_to_end

from nemo_train.sharding import shard_paths

ROOT = Path(__file__).resolve().parents[3]
NEMO_TRAIN = str(Path(sys.executable).with_name("nemo-train"))
N = 12
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}

pytestmark = pytest.mark.slow


def command(checkpoint: str, student: Path, out_dir: Path, devices: int) -> list[str]:
    """The teacher and KnownCause rows (they never load the student) and the Constant row, on ``N`` errors."""
    return [
        NEMO_TRAIN, "distill-eval", "--student", str(student), "--targets", json.dumps([checkpoint]),
        "--methods", "[ExhaustiveTeacher, KnownCause]", "--n", str(N), "--test_styles", "1", "--error_batch", "1",
        "--out_dir", str(out_dir), "--device", "cpu", "--devices", str(devices),
    ]  # fmt: skip


def run(args: list[str]) -> subprocess.CompletedProcess:
    return run_to_end(args, ENV, ROOT)


def records(out_dir: Path) -> dict[str, dict]:
    """Every stored record by key (no key twice), without the time it took."""
    rows = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["key"] for r in rows})
    return {r["key"]: {k: v for k, v in r.items() if "second" not in k and "time" not in k} for r in rows}


def table(stdout: str) -> str:
    """The printed table: from its title to the line that gives the run's time."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "Distilled explainer on held-out" in line)
    end = next(i for i, line in enumerate(lines) if " rows in " in line and "results in" in line)
    return "\n".join(lines[start:end])


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("student")  # the rows here never load it


@pytest.fixture(scope="module")
def one_process(model_a_checkpoint, student, tmp_path_factory):
    """The uninterrupted one-process run, in this process (``distributed_runs.run_in_process``)."""
    out = tmp_path_factory.mktemp("one") / "eval"
    return out, run_in_process(command(model_a_checkpoint, student, out, 1), out.parent)


def test_two_processes_score_as_one(model_a_checkpoint, student, one_process, tmp_path):
    reference, reference_stdout = one_process
    out = tmp_path / "two"
    done = run(command(model_a_checkpoint, student, out, 2))
    assert len(records(reference)) == 3 * N  # teacher, KnownCause, Constant
    assert records(out) == records(reference)
    assert table(done.stdout) == table(reference_stdout)
    assert shard_paths(out / "results.jsonl") == []  # merged into results.jsonl
    assert json.loads((out / "provenance.json").read_text())["world_size"] == 2


@pytest.mark.fault
def test_a_killed_two_process_run_resumes_on_one_process(model_a_checkpoint, student, one_process, tmp_path):
    reference, _ = one_process
    out = tmp_path / "killed"
    left = kill_mid_run(command(model_a_checkpoint, student, out, 2), ENV, ROOT, out / "results.jsonl", min_lines=2)
    assert 2 <= len(left) < 3 * N
    run(command(model_a_checkpoint, student, out, 1))
    assert records(out) == records(reference)
