"""Test helper: kill a multi-process command mid-run, as a crash or a preempted job would.

A command killed mid-run is first made to stop for good at a known point (:func:`holding`), so that the kill
always lands mid-run: a fast machine cannot finish the run between two polls."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import forked_commands

from nemo_train.sharding import Ranks, shard_paths

HOLD = Path(__file__).resolve().parent / "hold"


def holding(env: dict, after: str, count: int = 1) -> dict:
    """``env`` for a command that stops for good once it has written a file named ``after`` (a glob) ``count``
    times (``tests/hold/sitecustomize.py``); it waits there until the test kills it."""
    path = os.pathsep.join(p for p in (str(HOLD), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "NEMO_TEST_HOLD_AFTER": after, "NEMO_TEST_HOLD_COUNT": str(count)}


def kill_mid_run(command: list[str], env: dict, cwd: Path, results: Path, min_lines: int) -> set[str]:
    """Start ``command`` (a 2-process run; its first process forked pre-imported: ``tests/forked_commands.py``)
    so that each process stops after appending ``min_lines`` records to its shard of ``results``, wait until both
    shards hold ``min_lines`` records together, SIGKILL one process and then the whole job; the keys the shards
    kept."""
    env = holding(env, f"{results.stem}.rank-*{results.suffix}", min_lines)
    handle, name = tempfile.mkstemp(prefix="nemo-train-killed-", suffix=".stderr")  # shown if it ends unkilled
    os.close(handle)
    printed = Path(name)
    proc = forked_commands.start(command, env, cwd, stderr=printed)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        shards = shard_paths(results)
        if len(shards) == 2 and sum(p.read_bytes().count(b"\n") for p in shards) >= min_lines:
            break
        time.sleep(0.01)
    if proc.poll() is not None:
        tail = errors_of(printed.read_text(errors="replace")) if printed.exists() else ""
        printed.unlink(missing_ok=True)
        raise AssertionError(f"the run finished (exit {proc.returncode}) before it could be killed:\n{tail}")
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    for pid in children:  # first one process, then the whole job
        os.kill(int(pid), signal.SIGKILL)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    printed.unlink(missing_ok=True)
    return {json.loads(line)["key"] for p in shard_paths(results) for line in p.read_text().splitlines()}


def run_to_end(command: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``command`` to its end (at most 10 minutes) in a process of its own (forked pre-imported:
    ``tests/forked_commands.py``); it must exit 0."""
    done = forked_commands.run(command, env, cwd, timeout=600)
    assert done.returncode == 0, errors_of(done.stderr)
    return done


def errors_of(stderr: str, limit: int = 8000) -> str:
    """What every process of a failed run printed to its standard error, less its progress bars (each rank's
    traceback, not only the last one's)."""
    kept = [line for line in stderr.splitlines() if not re.search(r"\d+%\|?.*\[\d\d:\d\d", line)]
    return "\n".join(kept)[-limit:]


def printed_table(stdout: str, title: str, *timing: str) -> str:
    """What a command printed from the line holding ``title`` on, without the lines holding a ``timing`` text and
    the line naming the run's report page (its path differs from run folder to run folder)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    drop = (*timing, "report: ")
    return "\n".join(line for line in lines[start:] if not any(text in line for text in drop))


def run_in_process(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``command`` (``[nemo-train, name, *args]``) to its end in this process, started in ``cwd``, as the
    command line runs it (``run_pipeline``), on one thread as the children run (``OMP_NUM_THREADS=1``), W&B off,
    with ``env`` set; what it printed. For a one-process reference: a child process would spend most of its time
    importing."""
    import contextlib
    import io

    import pytest
    import torch

    from nemo_train.cli import run_pipeline

    printed, threads = io.StringIO(), torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        for name, value in {"WANDB_MODE": "disabled", **(env or {})}.items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        torch.set_num_threads(1)
        try:
            run_pipeline(command[1], command[2:])
        finally:
            torch.set_num_threads(threads)
    return printed.getvalue()


class FixedRanks(Ranks):
    """Process ``rank`` of a run of ``world_size`` processes, without a launcher: for a test that plays each rank's
    part itself (what the processes share is a folder or the work they split)."""

    def __init__(self, rank: int, world_size: int) -> None:
        super().__init__()
        self._rank, self._world_size = rank, world_size

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size
