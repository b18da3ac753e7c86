"""Lightning's progress off a terminal: whole log lines instead of a redrawn bar.

``nemo-train fit`` (and ``validate`` / ``test`` / ``predict``) uses Lightning's own bar on a terminal and
:class:`LineProgressBar` anywhere else (a log file, CI, a batch job), so a long run there is never silent: a line
per :data:`~nemo_train.quiet.LINE_PERCENT_STEP` % of each epoch's batches and at least one every
:data:`~nemo_train.quiet.LINE_INTERVAL_S` seconds, with the logged metrics of the progress bar (``loss``, ...).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import lightning as L
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

from nemo_train.quiet import LINE_INTERVAL_S, LINE_PERCENT_STEP, LineProgress


class LineProgressBar(ProgressBar):
    """Progress of training, validation, testing and prediction as lines on ``file`` (stderr by default, as the
    pipelines' progress: a run's results stay alone on stdout, and a caller capturing stdout still shows it),
    e.g. ``epoch 2: 40% 8/20 batch [00:03<00:05, 2.6 batch/s, loss=0.412]``.

    The sanity check gets no lines. A validation inside a training epoch prints its own lines.

    Args:
        percent_step: a line each time this many percent of the stage's batches are done.
        interval: and at least one every this many seconds (a single long batch included).
        file: where the lines go (default: stderr).
    """

    def __init__(
        self, percent_step: float = LINE_PERCENT_STEP, interval: float = LINE_INTERVAL_S, file: TextIO | None = None
    ) -> None:
        super().__init__()
        self.percent_step, self.interval, self.file = percent_step, interval, file
        self._enabled = True
        self._bars: dict[str, LineProgress] = {}

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        print(*args, sep=sep, file=self.file or sys.stdout, flush=True)

    # ------------------------------------------------------------------------------------------ the lines

    def _open(self, stage: str, description: str, total: float) -> None:
        self._close(stage)
        if not self._enabled:
            return
        self._bars[stage] = LineProgress(
            total=int(total) if total not in (None, float("inf")) else None,
            desc=description,
            unit="batch",
            file=self.file or sys.stderr,
            percent_step=self.percent_step,
            interval=self.interval,
        )

    def _advance(self, stage: str, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        bar = self._bars.get(stage)
        if bar is None:
            return
        if stage == "train":
            metrics = self.get_metrics(trainer, pl_module)
            bar.set_postfix({k: v for k, v in metrics.items() if k != "v_num"}, refresh=False)
        bar.update(1)

    def _close(self, stage: str) -> None:
        bar = self._bars.pop(stage, None)
        if bar is not None:
            bar.close()

    # ------------------------------------------------------------------------------------------ Lightning hooks

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._open("train", f"epoch {trainer.current_epoch}", self.total_train_batches)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        self._advance("train", trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close("train")

    def on_validation_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking and self.has_dataloader_changed(dataloader_idx):
            self._open("validate", "validation", self.total_val_batches_current_dataloader)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        if not trainer.sanity_checking:
            self._advance("validate", trainer, pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close("validate")
        self.reset_dataloader_idx_tracker()

    def on_test_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            self._open("test", "test", self.total_test_batches_current_dataloader)

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        self._advance("test", trainer, pl_module)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close("test")
        self.reset_dataloader_idx_tracker()

    def on_predict_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            self._open("predict", "predict", self.total_predict_batches_current_dataloader)

    def on_predict_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        self._advance("predict", trainer, pl_module)

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close("predict")
        self.reset_dataloader_idx_tracker()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for name in list(self._bars):  # a run stopped by an exception: no thread left behind
            self._close(name)


def progress_callbacks(terminal: bool) -> list[L.Callback]:
    """The progress callback of a Lightning run: none on a terminal (Lightning's own bar), else the lines."""
    return [] if terminal else [LineProgressBar()]
