"""Watching a reinforcement run for a gamed reward: the training reward rising while the held-out scores fall.

:class:`RewardGamingStop` compares, at every validation, the mean training reward since the previous validation
with the held-out reward the validation logged (``val/reward``: the same full scoring, LLM Match, grounding, CEI
and consistency, on errors never trained on). A validation is a strike when the training reward is above its level
at the best held-out validation so far while the held-out reward is below that best and not recovering (not above
the previous validation's), each by more than ``tolerance``. So a held-out reward that falls and then stays flat
(a policy whose greedy answers stopped being readable scores 0 at every validation) keeps striking, while one that
climbs back resets the count. At ``patience`` strikes in a row the watch says so in one line and stops the run
(the adapter written at the end of fit is then the last policy before it went further).

With ``num_sanity_val_steps: -1`` the trainer's sanity check scores the whole held-out set before the first step:
the watch takes it as the starting policy's held-out reward (the first best), and the first interval's mean
training reward as the training level there. Without that baseline a policy whose held-out reward is already 0 at
the first validation never shows a fall.
"""

from __future__ import annotations

import math
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
        self.best: tuple[float, float] | None = None  # the same at the validation with the best held-out reward
        self.strikes = 0
        self.stopped_at: int | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        value = trainer.callback_metrics.get(self.train_key)
        if value is not None:
            self.train_sum += float(value)
            self.train_steps += 1

    def observe(self, train: float, held_out: float) -> bool:
        """Record one validation's pair of rewards; ``True`` when the run should stop."""
        if self.best is not None and math.isnan(self.best[0]):  # the baseline: the training level is the first one
            self.best = (train, self.best[1])
        if self.best is not None and self.previous is not None:
            rose = train > self.best[0] + self.tolerance
            below = held_out < self.best[1] - self.tolerance
            recovering = held_out > self.previous[1] + self.tolerance
            self.strikes = self.strikes + 1 if rose and below and not recovering else 0
        if self.best is None or held_out > self.best[1]:
            self.best = (train, held_out)
        self.previous = (train, held_out)
        return self.strikes >= self.patience

    def baseline(self, held_out: float) -> None:
        """Record the starting policy's held-out reward (scored before training)."""
        self.best = self.previous = (math.nan, held_out)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        held_out = trainer.callback_metrics.get(self.monitor)
        if held_out is None:
            return
        if trainer.sanity_checking:
            if math.isinf(trainer.num_sanity_val_steps) and self.best is None:  # the whole held-out set: a baseline
                self.baseline(float(held_out))
            return
        if not self.train_steps:
            return
        train = self.train_sum / self.train_steps
        self.train_sum, self.train_steps = 0.0, 0
        if self.observe(train, float(held_out)):
            trainer.should_stop = True
            self.stopped_at = trainer.global_step
            if trainer.is_global_zero:
                print(
                    f"stopping at step {trainer.global_step}: {self.train_key} rose while {self.monitor} stayed under its "
                    f"best ({self.best[1]:.3f}) at {self.strikes} validations in a row (train {train:.3f}, held-out "
                    f"{float(held_out):.3f})"
                )

    def state_dict(self) -> dict[str, Any]:
        return {"previous": self.previous, "best": self.best, "strikes": self.strikes}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        previous = state_dict.get("previous")
        self.previous = tuple(previous) if previous is not None else None
        best = state_dict.get("best", previous)  # a state saved before ``best`` was kept: the last validation
        self.best = tuple(best) if best is not None else None
        self.strikes = int(state_dict.get("strikes", 0))
