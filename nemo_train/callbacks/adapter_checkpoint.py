"""Writes the explainer's peft adapter (safetensors, with its processor) at checkpoints and at the end of fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L

from nemo_train.explainer.distributed import gather_trainable_state


class AdapterCheckpoint(L.Callback):
    """Saves ``ExplainerModule``'s adapter to ``dirpath`` (default ``<trainer.default_root_dir>/adapter``).

    The weights come whole, never as shards (:func:`nemo_train.explainer.distributed.gather_trainable_state`:
    a full state dict under FSDP, gathered partitions under DeepSpeed ZeRO-3, the live parameters
    otherwise); every rank takes part in the gathering, only rank 0 writes. Writing calls nothing collective:
    the file's keys were read before the model was wrapped (:func:`nemo_train.explainer.distributed.adapter_keys`;
    read at save time, peft's lookup of a ``modules_to_save`` copy was an FSDP collective on rank 0 alone, and
    the run hung at its first checkpoint).

    Args:
        dirpath: the adapter folder.
        on_checkpoint: also write it whenever a Lightning checkpoint is saved (else at the end of fit only).
    """

    def __init__(self, dirpath: str | None = None, on_checkpoint: bool = True) -> None:
        self.dirpath = dirpath
        self.on_checkpoint = on_checkpoint
        self.last_path: Path | None = None

    def adapter_dir(self, trainer: L.Trainer) -> Path:
        return Path(self.dirpath) if self.dirpath else Path(trainer.default_root_dir) / "adapter"

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, state: dict[str, Any]) -> None:
        if trainer.is_global_zero:
            self.last_path = pl_module.save_adapter(self.adapter_dir(trainer), state_dict=state)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if not self.on_checkpoint:
            return
        self._write(trainer, pl_module, gather_trainable_state(trainer, pl_module))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, pl_module, gather_trainable_state(trainer, pl_module))
