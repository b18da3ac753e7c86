"""Test helper: start the processes of a multi-process test (``torch.multiprocessing``) forked from a fork server
that has imported torch, Lightning and the explainer's stack (transformers, peft) once, instead of one fresh
interpreter per process: each would import them again, most of a spawned process's time on a small machine.
The server only imports (it runs no work and starts no threads to fork); each process still imports the test's
own module and runs in a process of its own."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable

import torch.multiprocessing as mp

#: imported by the server; names on the interpreter's own path (Python 3.11's server does not take the parent's
#: ``sys.path``, so a test module next to the tests cannot be named here: an import that fails is skipped). The
#: commands' modules are for ``tests/forked_commands.py``, whose commands are forked from the same server.
PRELOAD = [
    "torch",
    "lightning",
    "nemo_train.explainer",
    "nemo_train.cli",
    "nemo_train.lightning_cli",
    "nemo_train.lbee.pipeline",
    "nemo_train.differences.pipeline",
    "nemo_train.nemo.run",
    "nemo_train.nemo.distill.labelling",
    "nemo_train.nemo.distill.student_eval",
    "nemo_train.competency.pipeline",
    "nemo_train.explainer.explain_command",
]


def start_processes(fn: Callable, args: tuple, nprocs: int) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs)`` (``fn(rank, *args)`` in each, joined, a failure raised
    here), with the processes forked from the server (the first call starts it; it lasts the session)."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")
