"""Evaluation across processes, devices and nodes: one launcher, a deterministic shard, a result shard per rank.

An evaluation-shaped command (many independent items, each scored once and stored) runs on several
processes like this:

1. :class:`Ranks` starts the processes through Lightning Fabric (``devices``, ``num_nodes``, ``accelerator``,
   ``strategy``): on one machine Fabric re-runs the same command line once per extra device; under
   ``torchrun`` or SLURM it reads the ranks the cluster assigned. Nothing here opens a socket or a pool.
2. Every rank opens a :class:`ShardedResultStore`: the merged ``results.jsonl`` plus every per-rank shard
   left by an earlier (possibly killed, possibly wider) run, read *before* a barrier, so all ranks see the
   same finished items.
3. The items still pending are split by :meth:`Ranks.shard` (``pending[rank::world_size]``): each item is
   computed by exactly one rank, which appends it to its own ``results.rank-<r>.jsonl`` (no two writers
   on one file).
4. After a barrier, rank 0 folds the shards into ``results.jsonl`` (:func:`merge_shards`: one atomic
   rewrite, then the shards are removed) and writes the tables a one-process run writes.

A run killed at any world size resumes at any other: the shards it left are read as finished work.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from torch.distributed.constants import default_pg_timeout

from nemo_train.errors import UserInputError
from nemo_train.store import ResultStore, RunLock

T = TypeVar("T")

Accelerator = Literal["auto", "cpu", "cuda", "gpu", "mps"]
Strategy = Literal["auto", "ddp", "ddp_spawn"]


#: Seconds the processes of a run wait for each other to start (``fit --rendezvous_timeout``; for the evaluation
#: commands the environment variable ``NEMO_TRAIN_RENDEZVOUS_TIMEOUT`` sets it).
DEFAULT_RENDEZVOUS_TIMEOUT = 300.0
RENDEZVOUS_TIMEOUT_VARIABLE = "NEMO_TRAIN_RENDEZVOUS_TIMEOUT"


def default_rendezvous_timeout() -> float:
    """``NEMO_TRAIN_RENDEZVOUS_TIMEOUT`` in seconds when set, else :data:`DEFAULT_RENDEZVOUS_TIMEOUT`."""
    value = os.environ.get(RENDEZVOUS_TIMEOUT_VARIABLE, "")
    try:
        return float(value) if value.strip() else DEFAULT_RENDEZVOUS_TIMEOUT
    except ValueError:
        raise UserInputError(f"{RENDEZVOUS_TIMEOUT_VARIABLE}={value!r}; expected a number of seconds") from None


@dataclass
class DeviceArgs:
    """Where an evaluation runs: Lightning's ``devices`` / ``num_nodes`` / ``accelerator`` / ``strategy``.

    Args:
        devices: processes per node (one per GPU; on CPU, worker processes).
        num_nodes: machines (set by the cluster under SLURM / torchrun).
        accelerator: ``cpu``, ``cuda`` / ``gpu``, ``mps`` or ``auto``.
        strategy: ``auto`` (``ddp`` when more than one process) or an explicit launcher.
        rendezvous_timeout: seconds the processes wait for each other at the start (every process of every node
            must reach the launcher's address by then); past it the run stops with one line naming what it
            waited for. Collectives after the start keep torch's own timeout.
    """

    devices: int = 1
    num_nodes: int = 1
    accelerator: Accelerator = "auto"
    strategy: Strategy = "auto"
    rendezvous_timeout: float = field(default_factory=default_rendezvous_timeout)

    def __post_init__(self) -> None:
        if self.devices < 1 or self.num_nodes < 1:
            raise UserInputError(
                f"devices={self.devices}, num_nodes={self.num_nodes}; expected at least one device on one node"
            )
        if not self.rendezvous_timeout > 0:
            raise UserInputError(f"rendezvous_timeout={self.rendezvous_timeout}; expected a positive number of seconds")

    @property
    def distributed(self) -> bool:
        return self.devices * self.num_nodes > 1


#: What a cluster launcher sets for every process of a several-machine run (torchrun, SLURM, or by hand).
NODE_LAUNCHER_VARIABLES = (("MASTER_ADDR", "NODE_RANK"), ("SLURM_NTASKS", "SLURM_PROCID"), ("WORLD_SIZE", "RANK"))


def check_node_launcher(num_nodes: int) -> None:
    """A one-line error when ``num_nodes`` > 1 and no launcher set where this process stands: it would wait for the
    other machines forever, printing nothing (a mistyped option once became ``--num_nodes 16`` that way)."""
    if num_nodes > 1 and not any(all(v in os.environ for v in pair) for pair in NODE_LAUNCHER_VARIABLES):
        wanted = " or ".join("+".join(pair) for pair in NODE_LAUNCHER_VARIABLES)
        raise UserInputError(
            f"num_nodes={num_nodes} needs a launcher that starts every machine's processes (torchrun or SLURM); "
            f"none is set here ({wanted} missing), so the run would wait for the other machines forever"
        )


#: The variables a launcher (torchrun, SLURM, Lightning, or a user by hand) sets that say where and who a process is.
LAUNCHER_VARIABLES = tuple(
    "MASTER_ADDR MASTER_PORT WORLD_SIZE RANK NODE_RANK LOCAL_RANK SLURM_NTASKS SLURM_PROCID".split()
)


def rendezvous_line(world_size: int, seconds: float, option: str = "--rendezvous_timeout") -> str:
    """One line for a start whose processes did not all meet: the world size, the address they met at and the
    launcher variables this process saw."""
    address = f"{os.environ.get('MASTER_ADDR', '<MASTER_ADDR unset>')}:{os.environ.get('MASTER_PORT', '<unset>')}"
    seen = " ".join(f"{name}={os.environ[name]}" for name in LAUNCHER_VARIABLES if name in os.environ) or "none"
    return (
        f"the run's processes did not all start within {seconds:g} s: waited for {world_size} processes at {address} "
        f"(launcher variables: {seen}); start every node's processes with the same MASTER_ADDR and MASTER_PORT "
        f"(torchrun, SLURM), or allow longer with {option}"
    )


@contextmanager
def bounded_rendezvous(world_size: int, seconds: float, option: str = "--rendezvous_timeout") -> Iterator[None]:
    """Turn torch's rendezvous failure inside the block (the store's timeout: the first process waits for the
    others, a later one for the first) into the one line of :func:`rendezvous_line`."""
    try:
        yield
    except torch.distributed.DistError as err:
        raise UserInputError(rendezvous_line(world_size, seconds, option)) from err


def keep_collective_timeout(timeout: timedelta = default_pg_timeout) -> None:
    """Give the process group's collectives ``timeout`` again after a start bounded by a shorter one (a rank that
    finishes its share first may wait long at the next barrier). Left as it is where torch lacks the setter."""
    setter = getattr(torch.distributed.distributed_c10d, "_set_pg_timeout", None)
    if setter is not None and torch.distributed.is_initialized():
        setter(timeout)


class Ranks:
    """The processes of one run, started by Lightning Fabric (a one-process run starts nothing).

    Args:
        args: devices / nodes / accelerator / strategy.
    """

    def __init__(self, args: DeviceArgs | None = None) -> None:
        self.args = args or DeviceArgs()
        self.fabric = None
        if self.args.distributed:
            from lightning.fabric import Fabric
            from lightning.fabric.strategies import DDPStrategy

            check_node_launcher(self.args.num_nodes)

            for name in ("lightning.fabric", "lightning.pytorch"):  # quiet: no "Initializing distributed" lines
                logging.getLogger(name).setLevel(logging.WARNING)
            seconds = self.args.rendezvous_timeout
            start = "spawn" if self.args.strategy == "ddp_spawn" else "popen"
            self.fabric = Fabric(
                accelerator=self.args.accelerator,
                devices=self.args.devices,
                num_nodes=self.args.num_nodes,
                strategy=DDPStrategy(timeout=timedelta(seconds=seconds), start_method=start),
            )
            with bounded_rendezvous(
                self.args.devices * self.args.num_nodes, seconds, f"{RENDEZVOUS_TIMEOUT_VARIABLE}=<seconds>"
            ):
                self.fabric.launch()
            keep_collective_timeout()

    @property
    def rank(self) -> int:
        return 0 if self.fabric is None else self.fabric.global_rank

    @property
    def world_size(self) -> int:
        return 1 if self.fabric is None else self.fabric.world_size

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self, resolved: str) -> str:
        """This rank's device: ``cuda:<local rank>`` when several processes share a machine's GPUs."""
        return str(self.fabric.device) if self.fabric is not None and resolved == "cuda" else resolved

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of ``items``: every ``world_size``-th item from its rank (the same order on every rank)."""
        return list(items[self.rank :: self.world_size])

    def barrier(self) -> None:
        if self.fabric is not None:
            self.fabric.barrier()

    def on_main(self, compute: Callable[[], T]) -> T:
        """Run ``compute`` on rank 0 only and give its value to every rank (one language-model call, not one
        per rank)."""
        value = compute() if self.is_main else None
        return value if self.fabric is None else self.fabric.broadcast(value, src=0)

    def total(self, count: int) -> int:
        """The sum of ``count`` over all ranks (items computed, failed)."""
        if self.fabric is None:
            return count
        return int(self.fabric.all_reduce(torch.tensor(float(count)), reduce_op="sum").item())

    def gather(self, value: T) -> list[T] | None:
        """Every rank's ``value`` (any picklable object), in rank order, on rank 0; ``None`` on the others
        (``[value]`` in a one-process run)."""
        if self.fabric is None:
            return [value]
        import torch.distributed as dist

        found: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(value, found, dst=0)
        return found

    def all_gather(self, value: T) -> list[T]:
        """Every rank's ``value`` (any picklable object), in rank order, on every rank (``[value]`` in a
        one-process run)."""
        if self.fabric is None:
            return [value]
        import torch.distributed as dist

        found: list[Any] = [None] * self.world_size
        dist.all_gather_object(found, value)
        return found

    def lock(self, folder: str | Path) -> RunLock:
        """The writer lock of this rank: rank 0 takes the folder's lock (so a second run is refused), rank r
        its own ``.lock.rank-<r>``."""
        return RunLock(folder) if self.is_main else RunLock(folder, name=f".lock.rank-{self.rank}")


_CURRENT: ContextVar[Ranks | None] = ContextVar("nemo_train_ranks", default=None)


def current_ranks() -> Ranks:
    """The ranks of the command being run (set by :func:`nemo_train.runs.run_command`); one process otherwise."""
    return _CURRENT.get() or Ranks()


@contextmanager
def running_on(ranks: Ranks) -> Iterator[Ranks]:
    """Make ``ranks`` the :func:`current_ranks` of a ``with`` block."""
    token = _CURRENT.set(ranks)
    try:
        yield ranks
    finally:
        _CURRENT.reset(token)


def shard_paths(path: str | Path) -> list[Path]:
    """The per-rank shards of ``results.jsonl`` present on disk (any world size), in rank order."""
    path = Path(path)
    found = path.parent.glob(f"{path.stem}.rank-*{path.suffix}")
    return sorted(found, key=lambda p: int(p.name[len(path.stem) + 6 : -len(path.suffix) or None]))


def shard_path(path: str | Path, rank: int) -> Path:
    path = Path(path)
    return path.with_name(f"{path.stem}.rank-{rank}{path.suffix}")


class ShardedResultStore:
    """What one rank reads and writes: lookups see the merged file and every shard on disk; appends go to
    this rank's shard only.

    Args:
        path: the merged ``results.jsonl``.
        rank: this process's rank.
        world_size: number of ranks; a one-process run appends to ``path`` itself (and still reads the shards
            a killed wider run left).
    """

    def __init__(self, path: str | Path, rank: int = 0, world_size: int = 1) -> None:
        self.path, self.rank, self.world_size = Path(path), rank, world_size
        self.own = ResultStore(self.path if world_size == 1 else shard_path(self.path, rank))
        others = [self.path, *shard_paths(self.path)]
        # other ranks may be appending to theirs: read them as they are, never cut a record being written as torn
        readers = [ResultStore(p, repair=False) for p in others if p != self.own.path]
        self.records: dict[str, dict[str, Any]] = {}
        for store in [*readers, self.own]:  # this rank's own records win, as in a one-file store
            self.records.update(store.records)
        self.own.records = dict(self.records)  # lookups and appends through one view
        self.changed = self.own.changed

    def reopen(self) -> ShardedResultStore:
        """A fresh view after a barrier: what every rank has written so far."""
        fresh = ShardedResultStore(self.path, self.rank, self.world_size)
        fresh.own.changed.update(self.changed)
        return fresh

    def __contains__(self, key: str) -> bool:
        return key in self.own.records

    def __len__(self) -> int:
        return len(self.own.records)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.own.get(key)

    def lookup(self, key: str, settings: dict[str, Any], retry_failed: bool = True) -> dict[str, Any] | None:
        return self.own.lookup(key, settings, retry_failed)

    def append(self, record: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.own.append(record, settings)


def merge_shards(path: str | Path) -> int:
    """Fold every shard into ``path`` (rank 0, after the barrier) and remove the shards; returns the number of
    records in the merged file.

    The merged file is written next to ``path`` and renamed over it, so a kill leaves either the old file
    with its shards (read again on the next run) or the new one; the shards are removed only after the rename.
    Records keep the order of their first appearance (the old file's, then shard by shard); a key written
    again keeps its last record, as :class:`ResultStore` reads it.
    """
    path = Path(path)
    shards = shard_paths(path)
    if not shards:
        return len(ResultStore(path)) if path.exists() else 0
    merged: dict[str, dict[str, Any]] = {}
    for source in [path, *shards]:
        if source.exists():
            merged.update(ResultStore(source).records)
    scratch = path.with_name(f".{path.name}.merge")
    with open(scratch, "w", encoding="utf-8") as f:
        for record in merged.values():
            f.write(json.dumps(record, ensure_ascii=False, allow_nan=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(scratch, path)
    for shard in shards:
        shard.unlink(missing_ok=True)
    return len(merged)
