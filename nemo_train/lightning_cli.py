"""LightningCLI for nemo-train: any LightningModule / DataModule by ``class_path``, configs saved without secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from nemo_train.secrets import scrub_secrets


class ScrubbedSaveConfigCallback(SaveConfigCallback):
    """Saves the run's config next to its checkpoints and into the logger, with secrets redacted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["save_to_log_dir"] = False  # we write the scrubbed copy ourselves
        super().__init__(*args, **kwargs)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = scrub_secrets(yaml.safe_load(self.parser.dump(self.config, skip_none=False, skip_check=True)))
        # only rank 0 gets here, so no ``trainer.log_dir`` (it broadcasts and would wait for the other ranks)
        logger = trainer.loggers[0] if trainer.loggers else None
        log_dir = (getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None)) if logger else None
        log_dir = log_dir or trainer.default_root_dir
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        (Path(log_dir) / self.config_filename).write_text(yaml.safe_dump(config, sort_keys=False))
        for logger in trainer.loggers:
            logger.log_hyperparams({"config": config})


class NemoLightningCLI(LightningCLI):
    """``nemo-train fit|validate|test|predict``: model and data chosen by ``class_path`` in YAML."""

    def __init__(self, args: list[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("save_config_callback", ScrubbedSaveConfigCallback)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("parser_kwargs", {"exit_on_error": False})  # the nemo-train CLI prints one line
        super().__init__(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            args=args,
            **kwargs,
        )
