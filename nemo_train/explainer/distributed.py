"""Sharded training support for the explainer: clean parameter names, FSDP wrap policy from the model's
``_no_split_modules``, gathering the trainable weights, and generation under FSDP / DeepSpeed ZeRO-3.

Lightning runs FSDP only on accelerators; the tests run torch FSDP on CPU (gloo) the way Lightning sets it up
(tests/explainer/fsdp_run.py), and Lightning's own FSDP ``fit`` on two CPU processes through a strategy subclass
that only passes Lightning's accelerator check (tests/explainer/test_fsdp_ranks.py). DeepSpeed is not tested
here; ``deepspeed`` is an optional dependency, imported only where its strategy is in use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy
from peft import get_peft_model_state_dict
from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, ShardingStrategy, StateDictType

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


#: Attribute of a peft model that holds its :func:`adapter_keys` (read once, before any wrapping).
_ADAPTER_KEYS = "_nemo_adapter_keys"


def adapter_keys(peft_model: torch.nn.Module) -> dict[str, str]:
    """Where each weight of ``peft_model``'s adapter goes in the adapter file: ``{state_dict name: file key}``
    (peft's own selection and renaming, ``get_peft_model_state_dict``), read once and kept on the model.

    Read it before FSDP wraps the model (``ExplainerModule.configure_model`` does): peft finds the keys of a
    ``modules_to_save`` copy by calling its ``state_dict()``, which under FSDP is a collective (the copy of the
    vision tower holds FSDP units), so computing them on rank 0 alone, at save time, left the other ranks waiting
    forever. From the kept map, writing the adapter calls nothing on the model.
    """
    known = peft_model.__dict__.get(_ADAPTER_KEYS)
    if known is not None:
        return known
    if any(isinstance(m, FullyShardedDataParallel) for m in peft_model.modules()):
        raise RuntimeError(
            "the adapter's file keys must be read before FSDP wraps the model (adapter_keys in configure_model): "
            "reading them from the wrapped model is a collective"
        )
    # one distinct stand-in per entry; peft only selects and renames them (the frozen embeddings it might add
    # are never in a trainable state, so they are not asked for)
    markers = {clean_name(name): torch.empty(0) for name in peft_model.state_dict(keep_vars=True)}
    name_of = {id(marker): name for name, marker in markers.items()}
    aliases = dict(markers)  # a wrapped module's entries under its wrapped name too, where peft looks for them
    wrapped = [(name, clean_name(name)) for name, _ in peft_model.named_modules() if clean_name(name) != name]
    for name, clean in wrapped:
        for key, marker in markers.items():
            if key.startswith(clean + "."):
                aliases[name + key[len(clean) :]] = marker
    picked = get_peft_model_state_dict(peft_model, state_dict=aliases, save_embedding_layers=False)
    keys = {name_of[id(marker)]: clean_name(key) for key, marker in picked.items()}
    peft_model.__dict__[_ADAPTER_KEYS] = keys
    return keys


def adapter_state_dict(peft_model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter file's tensors (peft's keys, clean) from ``state``: the trainable weights of ``peft_model``
    by clean name, e.g. gathered from FSDP shards. Calls nothing on the model (:func:`adapter_keys`), so rank 0
    can write while the other ranks go on; a trainable weight the file would not hold is an error."""
    keys = adapter_keys(peft_model)
    unsaved = sorted(set(state) - set(keys))
    if unsaved:
        raise ValueError(f"{len(unsaved)} trained weights have no place in the adapter file, e.g. {unsaved[0]!r}")
    return {keys[k]: v.detach().cpu().contiguous() for k, v in state.items()}


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
    # one FSDP rank (NO_SHARD) holds whole weights: read them. (After a backward torch leaves the frozen
    # parameters of the root unit unregistered there, and a full state dict fails.)
    if is_fsdp(trainer) and trainer.strategy.model.sharding_strategy != ShardingStrategy.NO_SHARD:
        model = trainer.strategy.model
        # offloading copies gathered GPU tensors to the host; on a CPU-only group (gloo) it frees memory in use
        full = FullStateDictConfig(offload_to_cpu=model.compute_device.type != "cpu", rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT, full):
            state = model.state_dict()
        return {clean_name(k): v for k, v in state.items() if clean_name(k) in wanted}
    named = [(clean_name(n), p) for n, p in pl_module.named_parameters() if p.requires_grad]
    if zero_stage(trainer) == 3:
        import deepspeed  # optional dependency, present whenever this strategy runs

        with deepspeed.zero.GatheredParameters([p for _, p in named], modifier_rank=None):
            return {n: p.detach().cpu().clone() for n, p in named}
    return {n: p.detach() for n, p in named}


def lockstep(trainer: L.Trainer | None) -> bool:
    """Whether generation shares collectives across ranks (FSDP, DeepSpeed ZeRO-3): every rank must then make
    the same number of ``generate`` calls, each stepping until all ranks have finished (``synced_gpus``)."""
    return is_fsdp(trainer) or zero_stage(trainer) == 3


@contextmanager
def generation_context(
    trainer: L.Trainer | None, pl_module: L.LightningModule | None = None
) -> Iterator[dict[str, Any]]:
    """Context for ``generate`` inside a training run; yields extra ``generate`` kwargs.

    FSDP: generation runs on the sharded model. ``pl_module.model.generate`` is routed through the root
    FSDP unit's ``forward`` (the way Lightning routes ``training_step``), so the root's parameters are
    gathered for the call and each block unit gathers its own in every forward; ``synced_gpus=True`` keeps
    every rank stepping until all have finished. DeepSpeed ZeRO-3: ``synced_gpus=True`` (its hooks gather
    the parameters). Under both, every rank must make the same number of ``generate`` calls
    (:func:`nemo_train.explainer.lockstep.explain_in_lockstep` pads the shorter shares).
    """
    if is_fsdp(trainer):
        if pl_module is None:
            raise ValueError("generation under FSDP needs the LightningModule whose model generates")
        inner = pl_module.model
        inner.generate = _through_root(trainer.strategy.model, pl_module, inner.generate)
        try:
            yield {"synced_gpus": True}
        finally:
            del inner.generate  # the instance attribute set above; the class method shows again
    elif zero_stage(trainer) == 3:
        with nullcontext():
            yield {"synced_gpus": True}
    else:
        yield {}


def _through_root(root: torch.nn.Module, pl_module: L.LightningModule, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` run inside ``root.forward`` (root wraps ``pl_module``): FSDP gathers the root unit's parameters
    around it. Lightning's forward redirection, for a callable that is not a method of the module."""

    def run(*args: Any, **kwargs: Any) -> Any:
        def forward(*inner_args: Any, **inner_kwargs: Any) -> Any:
            pl_module.__dict__.pop("forward", None)  # the real forward again, for anything called inside
            return call(*inner_args, **inner_kwargs)

        pl_module.forward = forward
        try:
            return root(*args, **kwargs)
        finally:
            pl_module.__dict__.pop("forward", None)

    return run
