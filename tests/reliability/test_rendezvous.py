"""A start whose processes cannot all meet stops after its rendezvous timeout with one line naming what it waited
for, instead of waiting for the other machines forever.

Each test starts, in this process, a run that expects two machines (``num_nodes=2``, one process each) where
only this one comes: the launcher variables say node 0 at a local address and port that no other process will
reach. The 3-second timeout is the only wait; nothing is asserted about how long anything took.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel
from torch.distributed.constants import default_pg_timeout

from nemo_train.errors import UserInputError
from nemo_train.lightning_cli import bounded_start
from nemo_train.sharding import LAUNCHER_VARIABLES, DeviceArgs, Ranks, keep_collective_timeout

SECONDS = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def node_zero_of_two():
    """The environment of node 0 of a two-machine run started by hand (the whole environment is put back)."""
    port = _free_port()
    kept = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    with mock.patch.dict(os.environ, {**kept, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, clear=True):
        os.environ["NODE_RANK"] = "0"
        yield f"127.0.0.1:{port}"
    assert not dist.is_initialized()


def _check_line(message: str, address: str, option: str) -> None:
    assert "\n" not in message
    assert f"did not all start within {SECONDS:g} s: waited for 2 processes at {address}" in message
    assert "launcher variables: MASTER_ADDR=127.0.0.1" in message and "NODE_RANK=0" in message
    assert f"allow longer with {option}" in message


def test_an_evaluation_start_without_its_second_node_is_one_line(node_zero_of_two):
    with pytest.raises(UserInputError) as err:
        Ranks(DeviceArgs(devices=1, num_nodes=2, accelerator="cpu", rendezvous_timeout=SECONDS))
    _check_line(str(err.value), node_zero_of_two, "NEMO_TRAIN_RENDEZVOUS_TIMEOUT=<seconds>")


def test_a_fit_start_without_its_second_node_is_one_line(node_zero_of_two, tmp_path):
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        num_nodes=2,
        strategy="ddp",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    collective = trainer.strategy._timeout
    with pytest.raises(UserInputError) as err, bounded_start(trainer, SECONDS):
        trainer.fit(BoringModel())
    _check_line(str(err.value), node_zero_of_two, "--rendezvous_timeout")
    assert trainer.strategy._timeout == collective  # the strategy's own collective timeout is back


def test_the_rendezvous_timeout_is_checked_and_read_from_the_environment():
    with pytest.raises(UserInputError, match="rendezvous_timeout=0; expected a positive number of seconds"):
        DeviceArgs(rendezvous_timeout=0)
    with mock.patch.dict(os.environ, {"NEMO_TRAIN_RENDEZVOUS_TIMEOUT": "7"}):
        assert DeviceArgs().rendezvous_timeout == 7.0
    with mock.patch.dict(os.environ, {"NEMO_TRAIN_RENDEZVOUS_TIMEOUT": "soon"}):
        with pytest.raises(UserInputError, match="NEMO_TRAIN_RENDEZVOUS_TIMEOUT='soon'; expected a number of seconds"):
            DeviceArgs()


def test_after_the_start_the_collectives_get_their_own_timeout_back(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, timeout=timedelta(seconds=SECONDS)
    )
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        assert backend.options._timeout == timedelta(seconds=SECONDS)  # the start's bound
        keep_collective_timeout()
        assert backend.options._timeout == default_pg_timeout  # a rank may wait long at a barrier after the start
    finally:
        dist.destroy_process_group()
