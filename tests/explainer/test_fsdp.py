"""A real training step under torch FSDP with the FSDP preset's wrapping, activation checkpointing and precision,
on tiny random Qwen2.5-VL and Llama-3.2-Vision checkpoints (CPU, gloo): forward, backward, optimizer step,
adapter gathered, saved and reloaded; and generation on the sharded model with uneven work per rank.

Activation checkpointing that transformers does not manage recomputes each decoder layer; with the language
model's KV cache left on, the recomputation appended the keys a second time and the padded batch failed
with a size mismatch (``use_cache`` must be off in the text config, not only at the top level).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from forked_ranks import start_processes
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from torch.distributed.fsdp import FullyShardedDataParallel

from nemo_train.explainer import ExplainerModule
from nemo_train.explainer.distributed import clean_name, gather_trainable_state
from tests.explainer.fsdp_run import PRESETS, padded_batch, sharded_module


@pytest.fixture
def process_group(tmp_path):
    """A one-process gloo group in this process, from a file store (no port)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _units(wrapped: torch.nn.Module) -> tuple[set[str], int]:
    fsdp = {type(m.module).__name__ for m in wrapped.modules() if isinstance(m, FullyShardedDataParallel)}
    checkpointed = sum(isinstance(m, CheckpointWrapper) for m in wrapped.modules())
    return fsdp, checkpointed


@pytest.mark.parametrize("family", PRESETS)
def test_preset_trains_a_step_under_fsdp_and_the_adapter_reloads(family, tiny_real, process_group, tmp_path):
    module, trainer, plugin = sharded_module(family, tiny_real[family])  # QLoRA, bf16-true, as the presets say
    wrapped = trainer.strategy.model
    units, checkpointed = _units(wrapped)
    assert "ExplainerModule" in units and len(units) >= 3  # the root plus the block classes of the model
    assert checkpointed >= 4  # FSDP's activation checkpointing, the model's own is off
    assert module.hparams.load_in_4bit and not module.hparams.gradient_checkpointing
    batch = plugin.convert_input(padded_batch(tiny_real[family]))
    assert (batch["attention_mask"] == 0).any()  # padding: a doubled KV cache would not match the mask

    optimizer = module.configure_optimizers()["optimizer"]
    before = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
    loss = wrapped(**batch).loss
    loss.backward()
    optimizer.step()
    assert math.isfinite(loss.item())
    moved = [n for n, p in module.named_parameters() if p.requires_grad and not torch.equal(p.detach(), before[n])]
    # B starts at zero, so A waits a step. Mllama's cross-attention layers (and the vision tower behind them)
    # are gated by tanh of gates that start at zero, so only its self-attention layers' B move at first.
    assert moved and all("lora_B" in n for n in moved)
    assert any("language_model.layers.0." in clean_name(n) and "q_proj.lora_B" in n for n in moved)

    module.eval()
    with torch.no_grad():
        trained_loss = float(wrapped(**batch).loss)
    gathered = gather_trainable_state(trainer, module)  # the full state dict of the FSDP model
    assert set(gathered) == set(module.trainable_parameter_names())
    folder = module.save_adapter(tmp_path / "adapter", state_dict=gathered)

    reloaded = ExplainerModule.from_adapter(folder)
    state = reloaded.state_dict()
    for name, value in gathered.items():
        assert torch.equal(state[name].to(value.dtype), value), name
    with torch.no_grad():
        reloaded_loss = float(reloaded(**batch).loss)
    assert reloaded_loss == pytest.approx(trained_loss, abs=0.05)  # bf16 compute on both sides


def _rank(rank: int, world: int, init: str, model_path: str, out: str) -> None:
    """One rank of the QLoRA preset under FSDP: a training step on its own batch, the adapter gathered and
    written by rank 0, then greedy explanations of an uneven share (3 images and 1)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        from nemo_train.explainer.lockstep import explain_in_lockstep

        module, trainer, plugin = sharded_module("qwen2_5_vl", Path(model_path))
        wrapped = trainer.strategy.model
        optimizer = module.configure_optimizers()["optimizer"]
        loss = wrapped(**plugin.convert_input(padded_batch(Path(model_path), seed=rank))).loss
        loss.backward()
        optimizer.step()
        gathered = gather_trainable_state(trainer, module)  # collective; rank 0 gets the whole tensors
        if rank == 0:
            module.save_adapter(Path(out) / "adapter", state_dict=gathered)
        calls, block_forwards = [], []
        wrapped.register_forward_pre_hook(lambda *_: calls.append(1))  # one root forward per generate call
        block = next(m for m in wrapped.modules() if type(getattr(m, "module", None)).__name__.endswith("DecoderLayer"))
        block.register_forward_pre_hook(lambda *_: block_forwards.append(1))  # each gathers the block's shards
        images = [torch.rand(3, 28, 28) for _ in range(3 if rank == 0 else 1)]
        texts = explain_in_lockstep(trainer, module, images, ["Why?"] * len(images), max_new_tokens=3, batch_size=1)
        assert "generate" not in module.model.__dict__  # the routing through the root unit is undone
        local = sum(p.numel() for p in wrapped.parameters())
        result = {"texts": texts, "calls": len(calls), "block_forwards": len(block_forwards), "loss": loss.item()}
        torch.save({**result, "local_numel": local, "gathered": gathered}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_train_save_and_generate_in_lockstep_with_uneven_shares(tiny_real, tmp_path):
    start_processes(_rank, (2, f"file://{tmp_path / 'store'}", str(tiny_real["qwen2_5_vl"]), str(tmp_path)), 2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert all(math.isfinite(r["loss"]) for r in ranks)
    assert [len(r["texts"]) for r in ranks] == [3, 1]  # each rank keeps its own answers; the padding is dropped
    assert [r["calls"] for r in ranks] == [3, 3]  # the same number of sharded generate calls
    forwards = [r["block_forwards"] for r in ranks]
    assert forwards[0] == forwards[1] >= 3  # and the same sharded forwards of a decoder block
    # FULL_SHARD: each rank holds a part of the flat parameters; rank 0 gathered the whole trained weights
    reloaded = ExplainerModule.from_adapter(tmp_path / "adapter")
    state, gathered = reloaded.state_dict(), ranks[0]["gathered"]
    assert ranks[1]["gathered"] == {} and set(gathered) == set(reloaded.trainable_parameter_names())
    total = sum(v.numel() for v in state.values())
    assert max(r["local_numel"] for r in ranks) < total
    for name, value in gathered.items():
        assert torch.equal(state[name].to(value.dtype), value), name
    assert any(v.abs().sum() > 0 for k, v in gathered.items() if "lora_B" in k)  # the step moved LoRA B
