"""The shared evaluation runner: deterministic shards, one writer per file, merge, resume across world sizes."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import forked_commands
import pytest

from nemo_train.errors import UserInputError
from nemo_train.sharding import DeviceArgs, Ranks, ShardedResultStore, merge_shards, shard_path, shard_paths
from nemo_train.store import ResultStore

SETTINGS = {"k": 1}


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_process_shard_is_everything_in_order():
    ranks = Ranks()
    assert (ranks.rank, ranks.world_size, ranks.is_main) == (0, 1, True)
    assert ranks.shard(["a", "b", "c"]) == ["a", "b", "c"]


def test_shards_of_every_rank_partition_the_items_once():
    items = [f"e{i}" for i in range(11)]
    parts = []
    for rank in range(4):
        ranks = Ranks()
        ranks.fabric = type("F", (), {"global_rank": rank, "world_size": 4})()
        parts.append(ranks.shard(items))
    assert sorted(x for p in parts for x in p) == sorted(items)
    assert parts[1] == ["e1", "e5", "e9"]


def test_bad_device_count_is_a_one_line_error():
    with pytest.raises(UserInputError, match="devices=0"):
        DeviceArgs(devices=0)


def test_rank_appends_go_to_its_own_shard_and_lookups_see_every_file(tmp_path):
    results = tmp_path / "results.jsonl"
    ResultStore(results).append({"key": "a", "v": 1}, SETTINGS)
    ResultStore(shard_path(results, 3)).append({"key": "b", "v": 2}, SETTINGS)  # left by a wider run
    store = ShardedResultStore(results, rank=1, world_size=2)
    assert store.lookup("a", SETTINGS)["v"] == 1 and store.lookup("b", SETTINGS)["v"] == 2
    store.append({"key": "c", "v": 3}, SETTINGS)
    assert [r["key"] for r in _lines(shard_path(results, 1))] == ["c"]
    assert [r["key"] for r in _lines(results)] == ["a"]  # the merged file is not touched by a rank
    assert store.lookup("c", SETTINGS)["v"] == 3


def test_one_process_run_appends_to_the_merged_file(tmp_path):
    results = tmp_path / "results.jsonl"
    store = ShardedResultStore(results, rank=0, world_size=1)
    store.append({"key": "a", "v": 1}, SETTINGS)
    assert [r["key"] for r in _lines(results)] == ["a"] and shard_paths(results) == []


def test_merge_folds_shards_in_order_keeps_the_last_record_of_a_key_and_removes_shards(tmp_path):
    results = tmp_path / "results.jsonl"
    ResultStore(results).append({"key": "a", "v": 0})
    ResultStore(shard_path(results, 0)).append({"key": "b", "v": 1})
    ResultStore(shard_path(results, 1)).append({"key": "c", "v": 2})
    ResultStore(shard_path(results, 1)).append({"key": "a", "v": 9})  # recomputed by rank 1
    ResultStore(shard_path(results, 10)).append({"key": "d", "v": 3})  # rank 10 sorts after rank 1
    assert [p.name for p in shard_paths(results)] == [
        "results.rank-0.jsonl",
        "results.rank-1.jsonl",
        "results.rank-10.jsonl",
    ]
    assert merge_shards(results) == 4
    assert [(r["key"], r["v"]) for r in _lines(results)] == [("a", 9), ("b", 1), ("c", 2), ("d", 3)]
    assert shard_paths(results) == []
    assert merge_shards(results) == 4  # nothing left to fold: the file is unchanged


def test_resume_at_another_world_size_computes_only_what_is_missing(tmp_path):
    """A run killed at 4 ranks left 3 shards (one rank had written nothing); a 2-rank rerun splits the rest."""
    results = tmp_path / "results.jsonl"
    items = [f"e{i}" for i in range(10)]
    for rank, done in [(0, ["e0", "e4"]), (1, ["e1"]), (3, ["e3", "e7"])]:
        for key in done:
            ResultStore(shard_path(results, rank)).append({"key": key, "rank": rank}, SETTINGS)
    computed = []
    stores = [ShardedResultStore(results, rank, 2) for rank in range(2)]  # every rank reads before any writes
    for rank, store in enumerate(stores):
        pending = [k for k in items if store.lookup(k, SETTINGS) is None]
        for key in pending[rank::2]:
            store.append({"key": key, "rank": 10 + rank}, SETTINGS)
            computed.append(key)
    assert sorted(computed) == ["e2", "e5", "e6", "e8", "e9"]
    merge_shards(results)
    assert sorted(r["key"] for r in _lines(results)) == sorted(items)


def test_rank_zero_takes_the_folder_lock_and_other_ranks_their_own(tmp_path):
    """Rank 0 holds ``.lock`` (the lock a one-process run takes, so a second run is refused); rank r
    ``.lock.rank-<r>``."""
    ranks = Ranks()
    assert ranks.lock(tmp_path).path == tmp_path / ".lock"
    ranks.fabric = type("F", (), {"global_rank": 2, "world_size": 4})()
    assert ranks.lock(tmp_path).path == tmp_path / ".lock.rank-2"


SCRIPT = """
import json, sys
from nemo_train.sharding import DeviceArgs, Ranks, ShardedResultStore, merge_shards

out = sys.argv[1]
ranks = Ranks(DeviceArgs(devices=2, accelerator="cpu"))
with ranks.lock(out):
    store = ShardedResultStore(out + "/results.jsonl", ranks.rank, ranks.world_size)
    ranks.barrier()
    pending = [f"e{i}" for i in range(7) if store.lookup(f"e{i}", {}) is None]
    for key in ranks.shard(pending):
        store.append({"key": key, "rank": ranks.rank, "value": int(key[1:]) ** 2}, {})
        with open(out + "/calls.txt", "a") as f:
            f.write(key + "\\n")
    ranks.barrier()
    if ranks.is_main:
        print("merged", merge_shards(out + "/results.jsonl"))
"""


@pytest.mark.slow  # two processes
def test_two_processes_through_fabric_compute_each_item_once(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "out"
    out.mkdir()
    # the first process forked pre-imported, the second from a pre-imported copy of it (tests/forked_commands.py)
    done = forked_commands.run([sys.executable, str(script), str(out)], dict(os.environ), tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "merged 7" in done.stdout
    calls = (out / "calls.txt").read_text().split()
    assert sorted(calls) == sorted(f"e{i}" for i in range(7))  # once each, across both ranks
    rows = _lines(out / "results.jsonl")
    assert {r["rank"] for r in rows} == {0, 1}
    assert {r["key"]: r["value"] for r in rows} == {f"e{i}": i * i for i in range(7)}
    assert shard_paths(out / "results.jsonl") == []


def _append_records(path, barrier, done, count: int) -> None:
    os.fsync = lambda fd: None  # this forked writer only: a fast disk, where appending is all the time it takes
    store = ShardedResultStore(path, 0, 3)
    barrier.wait()
    for i in range(count):
        store.append({"key": f"r{i}", "text": "x" * (1 << 18)})  # several pages: a reader may see half of one
    done.set()


def _reopen_until_done(path, rank: int, barrier, done) -> None:
    store = ShardedResultStore(path, rank, 3)
    barrier.wait()
    while not done.is_set():
        store = store.reopen()  # as after each target's barrier, while rank 0 has gone on appending


@pytest.mark.slow  # several processes, many records: the full suite's, not the fast lane's
def test_a_rank_reading_a_shard_being_appended_to_never_cuts_it(tmp_path):
    """A rank reopening the store reads the other ranks' shards while they append: a record it sees half-written is
    no torn tail of a killed run, and cutting it would lose a record its writer has stored."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for trial in range(3):
        path = tmp_path / f"run{trial}" / "results.jsonl"
        barrier, done = context.Barrier(3), context.Event()
        workers = [context.Process(target=_append_records, args=(path, barrier, done, 80))]
        workers += [context.Process(target=_reopen_until_done, args=(path, rank, barrier, done)) for rank in (1, 2)]
        for p in workers:
            p.start()
        for p in workers:
            p.join(120)
        assert [p.exitcode for p in workers] == [0, 0, 0], f"trial {trial}"
        kept = sorted(ResultStore(shard_path(path, 0)).records, key=lambda k: int(k[1:]))
        assert kept == [f"r{i}" for i in range(80)], f"trial {trial}: records of rank 0 cut by another rank"
