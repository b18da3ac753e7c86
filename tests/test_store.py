"""Races on the run store's files: several processes writing one path at the same moment."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from nemo_train.store import write_bytes_atomic

PAYLOAD = 1 << 20  # big enough that the writers' writes overlap


def _write_together(path: Path, barrier, mark: int) -> None:
    barrier.wait()
    write_bytes_atomic(path, bytes([mark]) * PAYLOAD)


@pytest.mark.slow  # several processes, many trials: the full suite's, not the fast lane's
def test_processes_writing_one_file_at_once_each_leave_it_whole(tmp_path):
    """Two commands (or the ranks of one) filling one shared cache file at once (the tiktoken file in the system
    temp folder): each rename must move its own whole scratch file, none may truncate or rename another's."""
    context = multiprocessing.get_context("fork")
    for trial in range(30):
        path = tmp_path / f"shared{trial}" / "file.bin"
        barrier = context.Barrier(3)
        workers = [context.Process(target=_write_together, args=(path, barrier, mark)) for mark in (1, 2, 3)]
        for p in workers:
            p.start()
        for p in workers:
            p.join(60)
        assert [p.exitcode for p in workers] == [0, 0, 0], f"trial {trial}"
        data = path.read_bytes()
        assert len(data) == PAYLOAD and data in {bytes([m]) * PAYLOAD for m in (1, 2, 3)}, f"trial {trial}: mixed"
        assert sorted(p.name for p in path.parent.iterdir()) == ["file.bin"], f"trial {trial}: scratch left"
