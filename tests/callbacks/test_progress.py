"""``fit`` off a terminal: Lightning's bar replaced by progress lines."""

from __future__ import annotations

import io

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch.demos.boring_classes import BoringModel

from nemo_train import lightning_cli
from nemo_train.callbacks.progress import LineProgressBar


class Log(io.StringIO):
    def isatty(self) -> bool:
        return False


class LoggingModel(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("loss", out["loss"], prog_bar=True)
        return out


def test_a_fit_in_a_log_prints_lines_per_ten_percent_of_each_epoch_and_of_validation(tmp_path):
    log = Log()
    trainer = L.Trainer(
        max_epochs=2,
        limit_train_batches=10,
        limit_val_batches=4,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[LineProgressBar(file=log, interval=3600)],
        default_root_dir=tmp_path,
    )
    trainer.fit(LoggingModel())
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    for epoch in (0, 1):
        ours = [line for line in lines if line.startswith(f"epoch {epoch}:")]
        assert len(ours) == 11, ours  # 0 %, 10 %, ..., 100 %
        assert ours[-1].startswith(f"epoch {epoch}: 100% 10/10 batch [") and "loss=" in ours[-1]
    validation = [line for line in lines if line.startswith("validation:")]
    assert len(validation) == 2 * 5 and validation[-1].startswith("validation: 100% 4/4 batch [")  # no sanity lines


def test_the_cli_replaces_the_bar_off_a_terminal_only(monkeypatch):
    trainer = Namespace(callbacks=None, enable_progress_bar=None)
    monkeypatch.setattr(lightning_cli, "interactive", lambda: False)
    assert [type(c) for c in lightning_cli.line_progress(trainer)] == [LineProgressBar]
    assert lightning_cli.line_progress(Namespace(callbacks=None, enable_progress_bar=False)) == []
    named = Namespace(class_path="lightning.pytorch.callbacks.RichProgressBar", init_args=Namespace())
    assert lightning_cli.line_progress(Namespace(callbacks=[named], enable_progress_bar=None)) == []
    monkeypatch.setattr(lightning_cli, "interactive", lambda: True)
    assert lightning_cli.line_progress(trainer) == []  # Lightning's own bar
