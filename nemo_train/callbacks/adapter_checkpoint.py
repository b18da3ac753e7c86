"""Writes the explainer's peft adapter (safetensors, with its processor) at checkpoints and at the end of fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

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

    With ``monitor`` the adapter written at the end of fit is the one of the validation with the best value of
    that metric (kept in CPU memory meanwhile), not the last: the best of the run by a held-out check, e.g.
    ``val/answer_acc`` (:class:`~nemo_train.explainer.accuracy.AnswerAccuracyCallback`). A validation that did not
    log the metric is skipped; when none did, the last weights are written.

    Args:
        dirpath: the adapter folder.
        on_checkpoint: also write it whenever a Lightning checkpoint is saved (else at the end of fit only).
        monitor: a logged validation metric choosing the adapter written at the end of fit (``None``: the last).
        mode: whether the metric is best at its largest (``max``) or smallest (``min``).
    """

    def __init__(
        self,
        dirpath: str | None = None,
        on_checkpoint: bool = True,
        monitor: str | None = None,
        mode: Literal["max", "min"] = "max",
    ) -> None:
        self.dirpath = dirpath
        self.on_checkpoint = on_checkpoint
        self.monitor, self.mode = monitor, mode
        self.last_path: Path | None = None
        self.best_value: float | None = None
        self.best_step: int | None = None
        self._best_state: dict[str, Any] | None = None

    def adapter_dir(self, trainer: L.Trainer) -> Path:
        return Path(self.dirpath) if self.dirpath else Path(trainer.default_root_dir) / "adapter"

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, state: dict[str, Any]) -> None:
        if trainer.is_global_zero:
            self.last_path = pl_module.save_adapter(self.adapter_dir(trainer), state_dict=state)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if not self.on_checkpoint:
            return
        self._write(trainer, pl_module, gather_trainable_state(trainer, pl_module))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.monitor is None or trainer.sanity_checking or self.monitor not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.monitor])  # the same on every rank (synced by its metric)
        better = self.best_value is None or (value > self.best_value if self.mode == "max" else value < self.best_value)
        if better:
            state = gather_trainable_state(trainer, pl_module)  # every rank takes part; rank 0 keeps a copy
            if trainer.is_global_zero:
                self._best_state = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
            self.best_value, self.best_step = value, trainer.global_step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.best_step is not None:
            self._write(trainer, pl_module, self._best_state or {})
            return
        self._write(trainer, pl_module, gather_trainable_state(trainer, pl_module))
