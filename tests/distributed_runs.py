"""Test helper: kill a multi-process command mid-run, as a crash or a preempted job would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from nemo_train.sharding import shard_paths


def kill_mid_run(command: list[str], env: dict, cwd: Path, results: Path, min_lines: int) -> set[str]:
    """Start ``command`` (a 2-process run), wait until both processes' result shards of ``results`` hold
    ``min_lines`` records together, SIGKILL one process and then the whole job; the keys the shards kept."""
    proc = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        shards = shard_paths(results)
        if len(shards) == 2 and sum(p.read_bytes().count(b"\n") for p in shards) >= min_lines:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    for pid in children:  # first one process, then the whole job
        os.kill(int(pid), signal.SIGKILL)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return {json.loads(line)["key"] for p in shard_paths(results) for line in p.read_text().splitlines()}


def run_to_end(command: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``command`` to its end (at most 10 minutes); it must exit 0."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done
