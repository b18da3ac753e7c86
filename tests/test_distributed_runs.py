"""The kill tests' helper: a command started with :func:`distributed_runs.holding` stops for good right after it
wrote the named file, so a test that kills it mid-run finds it there however fast the machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked_commands
import pytest
from distributed_runs import holding

ROOT = Path(__file__).resolve().parents[1]
WRITES = (
    "import sys; from pathlib import Path; from nemo_train.store import ResultStore;"
    "store = ResultStore(Path(sys.argv[1]) / 'results.jsonl');"
    "[store.append({'key': str(i)}) for i in range(5)];"
    "(Path(sys.argv[1]) / 'done.json').write_text('{}')"
)


def run_held(tmp_path: Path, after: str, count: int) -> subprocess.Popen:
    env = holding({**os.environ, "PYTHONPATH": str(ROOT)}, after, count)
    return subprocess.Popen([sys.executable, "-c", WRITES, str(tmp_path)], env=env, start_new_session=True)


def test_a_held_command_stops_after_its_nth_record_until_killed(tmp_path):
    proc = run_held(tmp_path, "results.jsonl", 3)
    results = tmp_path / "results.jsonl"
    while proc.poll() is None and not (results.is_file() and results.read_text().count("\n") >= 3):
        time.sleep(0.01)
    assert proc.poll() is None  # it can never get past its third record
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert results.read_text().count("\n") == 3 and not (tmp_path / "done.json").exists()


def test_a_command_held_on_another_file_runs_to_its_end(tmp_path):
    proc = run_held(tmp_path, "other.json", 1)
    assert proc.wait(timeout=120) == 0
    assert (tmp_path / "results.jsonl").read_text().count("\n") == 5 and (tmp_path / "done.json").is_file()


#: what a fresh interpreter shows of itself (the hold installed when PYTHONPATH names ``tests/hold``: its patch)
SELF = (
    "import json, os, pathlib, sys, multiprocessing as mp; print(json.dumps([sys.argv, os.getcwd(), os.environ['X'],"
    " sys.path[:3], os.getpgid(0) == os.getpid(), mp.current_process().name, mp.get_start_method(),"
    " pathlib.Path.write_text.__module__])); sys.exit(3)"
)


@pytest.mark.slow
def test_a_forked_command_starts_as_a_fresh_interpreter_would(tmp_path):
    """``tests/forked_commands.py``: the same command line, forked pre-imported, sees what it sees in a fresh
    interpreter started in a session of its own (arguments, folder, environment, path, process group, the hold)."""
    env = holding({**os.environ, "X": "1", "PYTHONPATH": str(ROOT)}, "never.json")
    argv = [sys.executable, "-c", SELF, "a"]
    fresh = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, start_new_session=True)
    forked = forked_commands.run(argv, env, tmp_path)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout) == (3, forked.stdout)
    assert json.loads(forked.stdout)[:3] == [["-c", "a"], str(tmp_path), "1"]
    proc = forked_commands.start([sys.executable, "-c", "import time; time.sleep(60)"], env, tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
