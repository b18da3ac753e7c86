"""Sharded training support for the explainer: clean parameter names, FSDP wrap policy from the model's
``_no_split_modules``, gathering the trainable weights, and generation under FSDP / DeepSpeed ZeRO-3.

FSDP and DeepSpeed need accelerators; the parts that do not (names, the wrap policy's decisions, the
adapter written from a gathered state dict) are tested on CPU. ``deepspeed`` is an optional dependency,
imported only where its strategy is in use.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy
from peft import get_peft_model_state_dict
from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

#: Prefixes that wrappers put into parameter names (FSDP, activation checkpointing, ``torch.compile``).
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(name: str) -> str:
    """``name`` without the wrapper segments of :data:`WRAPPER_PREFIXES` (anywhere in the dotted path)."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def trainable_names(module: torch.nn.Module, prefix: str = "") -> set[str]:
    """Clean names of the parameters of ``module`` that require gradients."""
    return {prefix + clean_name(n) for n, p in module.named_parameters() if p.requires_grad}


def adapter_state_dict(peft_model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter file's tensors (peft's keys, clean) from ``state``: the trainable weights of ``peft_model``
    by clean name. Works when ``peft_model`` is wrapped (FSDP units, activation checkpointing), where
    peft's own lookup would miss the weights of wrapped ``modules_to_save``."""
    aliases = dict(state)
    wrapped = [(name, clean_name(name)) for name, _ in peft_model.named_modules() if clean_name(name) != name]
    for name, clean in wrapped:
        for key, value in state.items():
            if key.startswith(clean + "."):
                aliases[name + key[len(clean) :]] = value
    adapter = get_peft_model_state_dict(peft_model, state_dict=aliases)
    return {clean_name(k): v.detach().cpu().contiguous() for k, v in adapter.items()}


def is_fsdp(trainer: L.Trainer | None) -> bool:
    return isinstance(getattr(trainer, "strategy", None), FSDPStrategy)


def zero_stage(trainer: L.Trainer | None) -> int:
    """The DeepSpeed ZeRO stage of ``trainer`` (0 when it does not run DeepSpeed)."""
    if not isinstance(getattr(trainer, "strategy", None), DeepSpeedStrategy):
        return 0
    return int(trainer.strategy.config.get("zero_optimization", {}).get("stage", 0))


class NoSplitModulesPolicy:
    """FSDP wrap (and activation-checkpointing) policy: one unit per block class that the model lists in
    ``_no_split_modules`` (``Qwen2_5_VLDecoderLayer`` / ``Qwen2_5_VLVisionBlock``, Mllama's decoder,
    cross-attention and vision layers, ...).

    The classes are read from the first module the policy sees (FSDP calls it on the root first), so a
    preset needs no per-model class list. ``extra`` adds class names.
    """

    def __init__(self, extra: list[str] | None = None) -> None:
        self.extra = list(extra or [])
        self.names: set[str] | None = None

    def resolve(self, root: torch.nn.Module) -> set[str]:
        names = set(self.extra)
        for module in root.modules():
            names.update(getattr(module, "_no_split_modules", None) or [])
        return names

    def __call__(self, module: torch.nn.Module, recurse: bool, nonwrapped_numel: int = 0) -> bool:
        if self.names is None:
            self.names = self.resolve(module)
        return True if recurse else type(module).__name__ in self.names


def gather_trainable_state(trainer: L.Trainer | None, pl_module: L.LightningModule) -> dict[str, torch.Tensor]:
    """The trainable weights of ``pl_module`` by clean ``state_dict`` name, whole (never shards).

    Collective under FSDP (a full state dict whatever the strategy's ``state_dict_type``; rank 0 gets
    the tensors, on CPU) and DeepSpeed ZeRO-3 (parameters gathered): call it on every rank. On one
    device (and DDP) it is a plain read.
    """
    wanted = trainable_names(pl_module)
    if is_fsdp(trainer):
        model = trainer.strategy.model
        full = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT, full):
            state = model.state_dict()
        return {clean_name(k): v for k, v in state.items() if clean_name(k) in wanted}
    named = [(clean_name(n), p) for n, p in pl_module.named_parameters() if p.requires_grad]
    if zero_stage(trainer) == 3:
        import deepspeed  # optional dependency, present whenever this strategy runs

        with deepspeed.zero.GatheredParameters([p for _, p in named], modifier_rank=None):
            return {n: p.detach().cpu().clone() for n, p in named}
    return {n: p.detach() for n, p in named}


@contextmanager
def generation_context(trainer: L.Trainer | None) -> Iterator[dict[str, Any]]:
    """Context for ``generate`` inside a training run; yields extra ``generate`` kwargs.

    FSDP: the whole model's parameters are gathered (``summon_full_params``) for the generation.
    DeepSpeed ZeRO-3: ``synced_gpus=True`` keeps every rank stepping until all have finished.
    """
    if is_fsdp(trainer):
        with FullyShardedDataParallel.summon_full_params(trainer.strategy.model, writeback=False):
            yield {}
    elif zero_stage(trainer) == 3:
        with nullcontext():
            yield {"synced_gpus": True}
    else:
        yield {}
