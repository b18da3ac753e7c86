"""Races on a run's folder: the ranks of one command opening (and closing) the run at the same moment."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from distributed_runs import FixedRanks

from nemo_train.runs import RunArgs, open_run


def _open_together(out: Path, rank: int, barrier) -> None:
    barrier.wait()
    with open_run("toy", RunArgs(out_dir=str(out), device="cpu"), ranks=FixedRanks(rank, 3)):
        pass


@pytest.mark.slow  # several processes, many trials: the full suite's, not the fast lane's
def test_ranks_opening_one_run_folder_at_once_all_open_it(tmp_path):
    """Every rank checks that the folder can be written (a probe file, created and removed) while rank 0 lists the
    folder to know later what the run wrote: a probe listed, then removed before it was looked at, must not
    crash rank 0."""
    out = tmp_path / "run"
    out.mkdir()
    for i in range(2000):  # a rerun's folder: listing it takes a while
        (out / f"item{i}").touch()
    context = multiprocessing.get_context("fork")
    for trial in range(30):
        barrier = context.Barrier(3)
        workers = [context.Process(target=_open_together, args=(out, rank, barrier)) for rank in range(3)]
        for p in workers:
            p.start()
        for p in workers:
            p.join(60)
        assert [p.exitcode for p in workers] == [0, 0, 0], f"trial {trial}"
