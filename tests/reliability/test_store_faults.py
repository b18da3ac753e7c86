"""Faults against the result store: kill -9 during the torn-tail repair, unreadable lines, changed settings, locks."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemo_train.errors import UserInputError
from nemo_train.store import ResultStore, RunLock, fingerprint

pytestmark = pytest.mark.fault
ROOT = Path(__file__).resolve().parents[2]


def complete_keys(path: Path) -> list[str]:
    """Keys of the complete (newline-terminated) records in the file, as a reader after a crash sees them."""
    data = path.read_bytes()
    return [json.loads(line)["key"] for line in data[: data.rfind(b"\n") + 1].splitlines()]


def test_kill_during_torn_tail_repair_keeps_every_complete_record(tmp_path):
    """20 kill -9s of a process opening (and so repairing) a 20,000-record file with a torn last line.

    Even repetitions kill the moment the file's size first changes (the repair is under way: a rewrite
    in place would be caught with the file emptied); odd ones at a random moment.
    """
    path = tmp_path / "results.jsonl"
    records = [{"key": f"t|m|{i:05d}", "explanation": "x" * 150, "cei": i / 7} for i in range(20_000)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    expected = [r["key"] for r in records]
    code = "import sys; from nemo_train.store import ResultStore; print('ready', flush=True); ResultStore(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(0)
    for repetition in range(20):
        with path.open("ab") as f:
            f.write(b'{"key": "t|m|torn", "explana')  # a record cut short by an earlier kill
        size = path.stat().st_size
        proc = subprocess.Popen([sys.executable, "-c", code, str(path)], env=env, stdout=subprocess.PIPE)
        assert proc.stdout.readline() == b"ready\n"
        if repetition % 2 == 0:
            while proc.poll() is None and path.stat().st_size == size:
                pass
        else:
            time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert complete_keys(path) == expected  # 100 % of complete records, in order
    store = ResultStore(path)
    assert list(store.records) == expected and path.read_bytes().endswith(b"\n")


def test_torn_tail_is_cut_in_place_not_rewritten(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"key": "a"}) + "\n" + '{"key": "b", "x"')
    inode = path.stat().st_ino
    store = ResultStore(path)
    assert list(store.records) == ["a"] and path.stat().st_ino == inode  # same file, cut with truncate()
    store.append({"key": "c"})
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["a", "c"]


def test_unreadable_lines_are_skipped_and_counted_in_one_warning(tmp_path, caplog):
    path = tmp_path / "results.jsonl"
    path.write_bytes(
        b'{"key": "a", "v": 1}\n\xff\xfe not utf-8\nnull\n{"no_key": 1}\n{"key": 7}\n[1, 2]\n{"key": "b", "v": 2}\n'
    )
    with caplog.at_level(logging.WARNING, logger="nemo_train.store"):
        store = ResultStore(path)
    assert list(store.records) == ["a", "b"] and store.skipped_lines == 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "5 unreadable" in warnings[0].getMessage()


def test_a_changed_setting_is_named_and_the_record_recomputed(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    old = {"method.k": 8, "method.m": 3, "target.sha256": "aa"}
    store.append({"key": "t|SciTX|1", "cei": 5.0}, old)
    assert store.lookup("t|SciTX|1", old)["cei"] == 5.0
    reopened = ResultStore(tmp_path / "r.jsonl")
    assert reopened.lookup("t|SciTX|1", {**old, "method.k": 4}) is None
    assert reopened.lookup("t|SciTX|1", {**old, "target.sha256": "bb"}) is None
    assert dict(reopened.changed) == {"method.k": 1, "target.sha256": 1}
    reopened.append({"key": "t|SciTX|1", "cei": 7.0}, {**old, "method.k": 4})
    assert ResultStore(tmp_path / "r.jsonl").get("t|SciTX|1")["fingerprint"] == fingerprint({**old, "method.k": 4})


def test_failed_records_are_retried(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append({"key": "k", "failed": True, "reason": "HTTP 500"}, {"a": 1})
    assert store.lookup("k", {"a": 1}) is None and store.lookup("k", {"a": 1}, retry_failed=False) is not None


def test_second_writer_is_refused_with_the_holders_pid(tmp_path):
    code = "import sys, time; from nemo_train.store import RunLock; RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        with pytest.raises(UserInputError, match=f"in use by another run \\(pid {holder.pid}\\)"):
            RunLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunLock(tmp_path):  # a killed holder leaves no stale lock
        pass


def test_out_dir_that_is_a_file_is_one_line(tmp_path):
    path = tmp_path / "out"
    path.write_text("not a folder")
    with pytest.raises(UserInputError, match="is a file"):
        RunLock(path).acquire()
