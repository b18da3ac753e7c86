"""``nemo-eval --devices 2``: two processes (Lightning Fabric, gloo on CPU) give the one-process result; a run
killed mid-way resumes at another world size with nothing lost or computed twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from distributed_runs import kill_mid_run, printed_table, run_to_end

from nemo_train.sharding import shard_paths

ROOT = Path(__file__).resolve().parents[2]
NEMO_TRAIN = str(Path(sys.executable).with_name("nemo-train"))
N = 12
#: rows per target: SciTX, ChangeMLLM, KnownCause, Distractor and the Constant row, N errors each
TOTAL = 5 * N

pytestmark = pytest.mark.slow


def command(checkpoint: str, out_dir: Path, devices: int) -> list[str]:
    return [
        NEMO_TRAIN, "nemo-eval", "--targets", f"[{checkpoint}]", "--out_dir", str(out_dir),
        "--benchmark.n", str(N), "--benchmark.test_styles", "1", "--device", "cpu", "--devices", str(devices),
        "--methods", json.dumps([{"class_path": f"nemo_train.nemo.components.{m}"} for m in METHODS]),
    ]  # fmt: skip


METHODS = ["SciTXMethod", "ChangeMLLMMethod", "KnownCauseMethod", "DistractorMethod"]
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}


def run(args: list[str]) -> subprocess.CompletedProcess:
    return run_to_end(args, ENV, ROOT)


def rows(out_dir: Path) -> dict[str, tuple]:
    """Every stored record's result fields by key (what the table is computed from)."""
    records = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == len({r["key"] for r in records})  # no record written twice
    fields = ("explanation", "llm_match", "grounding", "cei", "failed")
    return {r["key"]: tuple(r.get(f) for f in fields) for r in records}


def table(stdout: str) -> str:
    """The printed table (the lines from the table's title up to the counts line, which holds a timing)."""
    return printed_table(stdout, "NEMO evaluation on", "samples computed")


@pytest.fixture(scope="module")
def one_process(model_a_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "run"
    done = run(command(model_a_checkpoint, out, 1))
    return out, done.stdout


def test_two_processes_give_the_one_process_rows_and_table(model_a_checkpoint, one_process, tmp_path):
    reference, reference_stdout = one_process
    out = tmp_path / "two"
    done = run(command(model_a_checkpoint, out, 2))
    assert rows(out) == rows(reference)
    assert table(done.stdout) == table(reference_stdout)
    assert f"{TOTAL} samples computed, 0 resumed" in done.stdout  # summed over both processes: each once
    assert done.stdout.count("NEMO evaluation on") == 1  # only the first process prints
    assert shard_paths(out / "results.jsonl") == []  # merged into results.jsonl
    assert json.loads((out / "provenance.json").read_text())["world_size"] == 2


def test_a_killed_two_process_run_resumes_on_one_process(model_a_checkpoint, one_process, tmp_path):
    reference, _ = one_process
    out = tmp_path / "killed"
    left = kill_mid_run(command(model_a_checkpoint, out, 2), ENV, ROOT, out / "results.jsonl", min_lines=8)
    assert 8 <= len(left) < TOTAL

    done = run(command(model_a_checkpoint, out, 1))
    assert f"{TOTAL - len(left)} samples computed, {len(left)} resumed" in done.stdout  # only what was missing
    assert rows(out) == rows(reference)
    assert shard_paths(out / "results.jsonl") == []
