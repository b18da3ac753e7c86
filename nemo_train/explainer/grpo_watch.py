"""Watching a reinforcement run for a gamed reward: the training reward rising while the held-out scores fall.

:class:`RewardGamingStop` compares, at every validation, the mean training reward since the previous validation
with the held-out reward the validation logged (``val/reward``: the same full scoring, LLM Match, grounding, CEI
and consistency, on errors never trained on). When the training reward rose and the held-out reward fell by more
than ``tolerance`` at ``patience`` validations in a row, it says so in one line and stops the run (the adapter
written at the end of fit is then the last policy before it went further).
"""

from __future__ import annotations

from typing import Any

import lightning as L

from nemo_train.errors import UserInputError


class RewardGamingStop(L.Callback):
    """Stop training when the training reward rises while the held-out reward falls.

    Args:
        train_key: the per-step training reward logged by the module.
        monitor: the held-out reward logged at validation.
        patience: validations in a row that must show it before the run stops.
        tolerance: changes this small are no rise and no fall.
    """

    def __init__(
        self, train_key: str = "train/reward", monitor: str = "val/reward", patience: int = 2, tolerance: float = 0.0
    ) -> None:
        if patience < 1 or tolerance < 0:
            raise UserInputError(f"patience={patience}, tolerance={tolerance}; expected patience >= 1, tolerance >= 0")
        self.train_key, self.monitor, self.patience, self.tolerance = train_key, monitor, patience, tolerance
        self.train_sum, self.train_steps = 0.0, 0
        self.previous: tuple[float, float] | None = None  # (training reward, held-out reward) at the last validation
        self.strikes = 0
        self.stopped_at: int | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        value = trainer.callback_metrics.get(self.train_key)
        if value is not None:
            self.train_sum += float(value)
            self.train_steps += 1

    def observe(self, train: float, held_out: float) -> bool:
        """Record one validation's pair of rewards; ``True`` when the run should stop."""
        if self.previous is not None:
            rose = train > self.previous[0] + self.tolerance
            fell = held_out < self.previous[1] - self.tolerance
            self.strikes = self.strikes + 1 if rose and fell else 0
        self.previous = (train, held_out)
        return self.strikes >= self.patience

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        held_out = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or held_out is None or not self.train_steps:
            return
        train = self.train_sum / self.train_steps
        self.train_sum, self.train_steps = 0.0, 0
        if self.observe(train, float(held_out)):
            trainer.should_stop = True
            self.stopped_at = trainer.global_step
            if trainer.is_global_zero:
                print(
                    f"stopping at step {trainer.global_step}: {self.train_key} rose while {self.monitor} fell at "
                    f"{self.strikes} validations in a row (train {train:.3f}, held-out {float(held_out):.3f})"
                )

    def state_dict(self) -> dict[str, Any]:
        return {"previous": self.previous, "strikes": self.strikes}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        previous = state_dict.get("previous")
        self.previous = tuple(previous) if previous is not None else None
        self.strikes = int(state_dict.get("strikes", 0))
