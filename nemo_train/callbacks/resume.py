"""Exact resume: a ``last.ckpt`` written at the end of every training epoch, and the random states saved with it, so ``fit --ckpt_path last`` ends with the same weights as a run that was never stopped.

Lightning's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only when it also writes a top-k
checkpoint, so a killed run resumed from ``last`` restarts from the last *improving* epoch.
:class:`LastCheckpoint` writes it after every epoch (through a scratch file and a rename: a kill or a full
disk leaves the previous one readable). A resumed run would also draw other random numbers than an
uninterrupted one (the global generators are seeded once, when the run starts, and an epoch's data order is
drawn from them); :class:`RandomStates` saves their states in the checkpoint and puts them back on resume.
"""

from __future__ import annotations

import os
import random
from typing import Any
from weakref import proxy

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

LAST_NAME = ModelCheckpoint.CHECKPOINT_NAME_LAST


class LastCheckpoint(ModelCheckpoint):
    """Writes ``<dirpath>/last.ckpt`` at the end of every training epoch, atomically.

    ``dirpath`` defaults to the folder of the trainer's other ``ModelCheckpoint`` (``<root>/checkpoints``),
    whose own ``save_last`` it takes over (so ``last.ckpt`` has one writer). It is a ``ModelCheckpoint``
    without top-k files, so ``--ckpt_path last`` finds what it writes; it saves after the LightningModule's
    and the other checkpoints' epoch-end hooks, so the file holds their updated state.
    """

    def __init__(self, dirpath: str | None = None) -> None:
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, enable_version_counter=False)
        self._own_dirpath = dirpath is not None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(last_every_epoch=True)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        others = [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb is not self]
        for other in others:
            other.save_last = None  # this callback writes last.ckpt
        if not self._own_dirpath and others and others[0].dirpath is not None:
            self.dirpath = others[0].dirpath
        super().setup(trainer, pl_module, stage)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Nothing: the epoch is not over yet (see :meth:`on_train_epoch_end`)."""

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: only whole epochs are saved."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._should_skip_saving_checkpoint(trainer):
            return
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        scratch = f"{filepath}.partial"
        try:
            trainer.save_checkpoint(scratch, self.save_weights_only)
            if trainer.is_global_zero:
                os.replace(scratch, filepath)
        except BaseException:
            if trainer.is_global_zero and os.path.exists(scratch):
                os.unlink(scratch)
            raise
        trainer.strategy.barrier("LastCheckpoint")
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))


def random_states() -> dict[str, Any]:
    """The global generators' states (Python, NumPy, torch, every CUDA device) as tensors, ints and tuples, so a
    checkpoint holding them still loads with ``weights_only=True``."""
    version, keys, gauss = random.getstate()
    kind, mt, pos, has_gauss, cached = np.random.get_state()
    states = {
        "python": (version, torch.tensor(keys, dtype=torch.int64), gauss),
        "numpy": (kind, torch.from_numpy(mt.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_random_states(states: dict[str, Any]) -> None:
    """Put back what :func:`random_states` saved."""
    version, keys, gauss = states["python"]
    random.setstate((version, tuple(int(k) for k in keys.tolist()), gauss))
    kind, mt, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, mt.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _flatten(loaders: Any) -> list[Any]:
    if isinstance(loaders, dict):
        return [dl for value in loaders.values() for dl in _flatten(value)]
    if isinstance(loaders, (list, tuple)):
        return [dl for value in loaders for dl in _flatten(value)]
    return [] if loaders is None else [loaders]


class RandomStates(L.Callback):
    """Saves the global generators' states in every checkpoint and puts them back when a run resumes from one.

    A checkpoint written at the end of epoch ``e`` holds the states an uninterrupted run starts epoch ``e + 1``
    with; a run resumed from it restores them at the start of that epoch and draws the epoch's data order again
    from them (Lightning made the first epoch's data iterator before the restore), so it draws what the
    uninterrupted run draws: the same data order, dropout and augmentation. A batch sampler with ``set_epoch``
    (which Lightning calls only on samplers) is told the epoch. A run that does not resume is left as it is:
    its random streams, and so its numbers, are those of a run without this callback.
    """

    def __init__(self) -> None:
        self._resumed: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return random_states()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "torch" in state_dict:
            self._resumed = state_dict

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for loader in _flatten(trainer.train_dataloader):
            batch_sampler = getattr(loader, "batch_sampler", None)
            if callable(getattr(batch_sampler, "set_epoch", None)):
                batch_sampler.set_epoch(trainer.current_epoch)
        if self._resumed is None:
            return
        set_random_states(self._resumed)
        self._resumed = None
        fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
        if fetcher is not None:  # the resumed epoch's data order, drawn again from the restored states
            iter(fetcher)
