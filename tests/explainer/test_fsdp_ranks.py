"""Two processes fine-tune the explainer under Lightning's FSDP strategy on CPU (gloo): the adapter is written at
every checkpoint and at the end of fit by the real ``AdapterCheckpoint``, reloads equal to a one-process read of
the same weights, and ``fit`` resumes from ``last.ckpt`` under FSDP, with and without ``modules_to_save``.

The settings are those of ``configs/explainer/tiny.yaml`` (LoRA on the language layers, vision tower and
``lm_head`` trained in full) with ``configs/explainer/strategies/fsdp_qlora.yaml`` (FULL_SHARD, one unit and one
checkpointed block per ``_no_split_modules`` class, ``bf16-true``), on a tiny random Qwen2.5-VL. Before the
adapter's file keys were read ahead of wrapping, rank 0 alone asked peft for them at the first checkpoint, which
called ``state_dict()`` on the FSDP-wrapped copy of the vision tower (a collective), and the run hung there.

Lightning refuses FSDP on a CPU accelerator: its accelerator connector rejects the ``FSDPStrategy`` type itself,
and torch's FSDP, given no device, refuses a machine without an accelerator. :class:`CPUFSDPStrategy` is a
subclass that passes the check by being another type, wraps the model as Lightning does with ``device_id`` set
to the CPU, and gathers the checkpoint's weights without ``offload_to_cpu`` (a GPU-to-host copy that on the CPU
frees memory still in use); the rest (activation checkpointing, optimizer state, checkpoint loading) is
Lightning's own. The processes are started by ``torch.multiprocessing``, forked from a server that imported
this module once (``tests/forked_ranks.py``), and meet through a file store (no port); their process group has
a 5-minute collective timeout, so a collective that one rank never joins fails the test instead of hanging it.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.distributed as dist
from forked_ranks import start_processes
from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

from nemo_train.callbacks.adapter_checkpoint import AdapterCheckpoint
from nemo_train.callbacks.resume import LastCheckpoint, RandomStates
from nemo_train.explainer import ExplainerModule
from nemo_train.explainer.distributed import gather_trainable_state
from tests.explainer.fsdp_run import CONFIGS, STRATEGY, build_strategy, padded_batch, preset_config

WORLD = 2
BATCHES = 2  # per rank and epoch


class CPUFSDPStrategy(FSDPStrategy):
    """Lightning's ``FSDPStrategy`` on CPU: another type (Lightning's accelerator check tests for that exact type),
    torch's ``FullyShardedDataParallel`` told ``device_id=cpu`` (Lightning passes the GPU's index, ``None`` on
    CPU, which torch refuses), and the checkpoint's full state dict gathered without offloading to the CPU it is
    already on. The wrap is Lightning's own call with the strategy's settings; Lightning then finds the model
    wrapped and goes on as usual (activation checkpointing, optimizer state, checkpoint loading)."""

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        kwargs = dict(self.kwargs)
        self.kwargs.pop("auto_wrap_policy", None)  # used here; Lightning would drop it with a warning
        wrapped = FullyShardedDataParallel(
            module=model,
            cpu_offload=self.cpu_offload,
            mixed_precision=self.mixed_precision_config,
            sharding_strategy=self.sharding_strategy,
            device_id=torch.device("cpu"),
            **kwargs,
        )
        return super()._setup_model(wrapped)

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """Lightning's full state dict for a checkpoint, gathered without ``offload_to_cpu``: on weights that
        already live on the CPU, torch frees the gathered storage that the returned tensors still point into
        (a crash while writing ``last.ckpt``); on a GPU the offload is a copy."""
        config = FullStateDictConfig(offload_to_cpu=False, rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(self.model, StateDictType.FULL_STATE_DICT, config):
            return self.model.state_dict()


class Probe(L.Callback):
    """Records, on every rank, the step and the whole trainable weights (gathered: a collective) when training
    starts (after a resume has restored the checkpoint) and when it ends."""

    def __init__(self, folder: Path, phase: str) -> None:
        self.folder, self.phase = folder, phase

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule, when: str) -> None:
        state = gather_trainable_state(trainer, pl_module)
        record = {"step": trainer.global_step, "state": {k: v.clone() for k, v in state.items()}}
        torch.save(record, self.folder / f"{self.phase}-{when}-rank{trainer.global_rank}.pt")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module, "start")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module, "end")


def _settings(model_path: Path, modules_to_save: list[str]) -> tuple[dict, str, dict]:
    strategy, precision, init_args = preset_config(CONFIGS / "tiny.yaml", STRATEGY)
    strategy = {**strategy, "class_path": f"{__name__}.CPUFSDPStrategy"}
    init_args = {**init_args, "model_name_or_path": str(model_path), "modules_to_save": modules_to_save}
    return strategy, precision, init_args


def _rank(rank: int, root: str, model_path: str, modules_to_save: list[str], phase: str, epochs: int) -> None:
    """One process of a two-process ``fit`` (``phase`` ``first``, or ``resumed`` from ``last.ckpt``)."""
    torch.set_num_threads(1)
    root_dir = Path(root)
    # Lightning's own environment reads the ranks here; the process group already exists, so it opens no port
    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1")
    store = root_dir / f"store-{phase}"
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD, timeout=timedelta(minutes=5)
    )
    try:
        strategy, precision, init_args = _settings(Path(model_path), modules_to_save)
        batches = [padded_batch(Path(model_path), seed=100 * rank + i) for i in range(BATCHES)]
        trainer = L.Trainer(
            accelerator="cpu",
            devices=WORLD,
            strategy=build_strategy(strategy),
            precision=precision,
            max_epochs=epochs,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            use_distributed_sampler=False,  # each rank trains on its own batches
            default_root_dir=root,
            callbacks=[LastCheckpoint(dirpath=str(root_dir / "checkpoints")), RandomStates(), AdapterCheckpoint()]
            + [Probe(root_dir, phase)],
        )
        last = str(root_dir / "checkpoints" / "last.ckpt") if phase == "resumed" else None
        loader = torch.utils.data.DataLoader(batches, batch_size=None)
        trainer.fit(ExplainerModule(**init_args), train_dataloaders=loader, ckpt_path=last)
    finally:
        dist.destroy_process_group()


def _load(folder: Path, phase: str, when: str) -> list[dict]:
    return [torch.load(folder / f"{phase}-{when}-rank{r}.pt", weights_only=True) for r in range(WORLD)]


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k].to(b[k].dtype), b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("modules_to_save", [["visual", "lm_head"], []], ids=["modules_to_save", "lora_only"])
def test_two_fsdp_ranks_save_the_adapter_reload_it_and_resume(tiny_real, tmp_path, modules_to_save):
    model_path = tiny_real["qwen2_5_vl"]
    args = (str(tmp_path), str(model_path), modules_to_save)
    start_processes(_rank, (*args, "first", 1), WORLD)

    start, end = _load(tmp_path, "first", "start"), _load(tmp_path, "first", "end")
    assert [r["step"] for r in end] == [BATCHES] * WORLD
    assert [r["state"] == {} for r in end] == [False, True]  # rank 0 holds the gathered weights
    trained = end[0]["state"]
    assert not _equal(trained, start[0]["state"])  # the steps moved the weights
    if modules_to_save:  # the vision tower and the output head are trained in full and stored in the adapter
        assert any(".visual.modules_to_save." in k for k in trained)
        assert any("lm_head.modules_to_save." in k for k in trained)
    else:
        assert all(".lora_" in k for k in trained)

    # the adapter written by AdapterCheckpoint on two ranks reloads to the trained weights
    reloaded = ExplainerModule.from_adapter(tmp_path / "adapter")
    state = reloaded.state_dict()
    assert _equal({k: state[k] for k in trained}, trained)
    # ... which are what one process reads after loading last.ckpt (written through Lightning's FSDP state dict)
    single = ExplainerModule(**_settings(model_path, modules_to_save)[2])
    single.configure_model()
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    single.load_state_dict(checkpoint["state_dict"], strict=False)
    assert _equal(gather_trainable_state(None, single), trained)

    # resume from last.ckpt under FSDP for one more epoch: it starts from the saved step and weights, and trains on
    start_processes(_rank, (*args, "resumed", 2), WORLD)
    start, end = _load(tmp_path, "resumed", "start"), _load(tmp_path, "resumed", "end")
    assert [r["step"] for r in start] == [BATCHES] * WORLD and _equal(start[0]["state"], trained)
    assert [r["step"] for r in end] == [2 * BATCHES] * WORLD and not _equal(end[0]["state"], trained)
    reloaded = ExplainerModule.from_adapter(tmp_path / "adapter").state_dict()
    assert _equal({k: reloaded[k] for k in trained}, end[0]["state"])
