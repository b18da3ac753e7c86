"""Weights & Biases logging: offline unless the user has a key, and never a secret in the config."""

from __future__ import annotations

import netrc
import os
from argparse import Namespace
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger

from nemo_train.secrets import scrub_secrets


def wandb_has_credentials() -> bool:
    """True when a W&B key is available (``WANDB_API_KEY`` or a ``~/.netrc`` entry from ``wandb login``)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0]
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def default_wandb_mode() -> str:
    """``WANDB_MODE`` if set, else ``online`` with credentials and ``offline`` without."""
    return os.environ.get("WANDB_MODE") or ("online" if wandb_has_credentials() else "offline")


class WandbLogger(_LightningWandbLogger):
    """Lightning's ``WandbLogger`` with nemo-train defaults.

    * runs offline by default and online when a key is configured (no code change), and honours
      ``WANDB_MODE`` (``disabled`` in tests);
    * writes the run under ``save_dir`` (``checkpoints/<experiment>/`` in our configs);
    * redacts secret-looking values from every hyper-parameter / config it logs.
    """

    def __init__(
        self,
        name: str | None = None,
        save_dir: str = "checkpoints",
        project: str = "nemo-train",
        mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        mode = mode or default_wandb_mode()
        kwargs.pop("offline", None)
        super().__init__(name=name, save_dir=save_dir, project=project, mode=mode, **kwargs)

    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        if isinstance(params, Namespace):
            params = vars(params)
        super().log_hyperparams(scrub_secrets(dict(params)))
