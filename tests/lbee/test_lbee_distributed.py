"""``lbee --devices 2``: two processes (Lightning Fabric, gloo on CPU) share out the classification and embedding
of the images batch by batch; the first trains the missing joint space once, gathers, clusters and scores, and
the run equals the one-process run (same results, same tables)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import forked_commands
import pytest
from distributed_runs import holding, printed_table, run_to_end
from lbee_runs import ENV, lbee_argv, run_lbee, write_lbee_config

pytestmark = pytest.mark.slow


def run(classifier: str, folder: Path, devices: int) -> tuple[Path, str]:
    """The tiny lbee run (``tests/lbee_runs.py``) in ``folder / "run"`` on ``devices`` processes, to its end."""
    out = folder / "run"
    return out, run_lbee(write_lbee_config(classifier, folder / "lbee.yaml"), out, devices)


def results(out: Path) -> dict:
    saved = json.loads((out / "results.json").read_text())
    saved.pop("files")  # paths under each run's own folder
    return saved


def test_two_processes_give_the_one_process_result(tiny_nico_classifier, lbee_one_process_run, tmp_path):
    one, one_stdout = lbee_one_process_run
    two, two_stdout = run(tiny_nico_classifier, tmp_path / "two", 2)
    assert results(two) == results(one)
    title = "Failure-mode sentences"
    assert printed_table(two_stdout, title) == printed_table(one_stdout, title)  # both tables
    assert two_stdout.count("Failure-mode sentences") == 1  # only the first process prints
    assert (two / "hard_clusters.png").is_file() and (two / "clip" / "config.json").is_file()
    assert json.loads((two / "provenance.json").read_text())["world_size"] == 2


@pytest.mark.fault
def test_a_killed_two_process_run_reruns_on_one_process(tiny_nico_classifier, lbee_one_process_run, tmp_path):
    """A two-process run killed once its joint space is saved (both processes then classify and embed), rerun on
    one process in the same folder: the rerun finishes and equals an uninterrupted one-process run."""
    import signal
    import time

    one, _ = lbee_one_process_run
    folder = tmp_path / "killed"
    out = folder / "run"
    args = lbee_argv(write_lbee_config(tiny_nico_classifier, folder / "lbee.yaml"), out)
    proc = forked_commands.start([*args, "--devices", "2"], holding(ENV, "zero_shot.json"), folder)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (out / "clip" / "zero_shot.json").is_file():
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "results.json").exists()
    run_to_end([*args, "--devices", "1"], ENV, folder)
    assert results(out) == results(one)
