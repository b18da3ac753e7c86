"""Weights & Biases logging: offline unless the user has a key, quiet, and never a secret in what it sends.

* offline by default, online when a key is configured (no code change); ``WANDB_MODE`` wins (``disabled``
  in tests);
* online mode first checks that the server accepts a connection within ``connect_timeout`` seconds, and
  gives ``wandb.init`` at most ``init_timeout`` seconds; if either fails (no network, a proxy that answers
  for an absent server, a rejected key), the run is logged offline with one warning (upload it later with
  ``wandb sync``), so a run is never lost;
* W&B prints nothing and does not record the command line, environment, git state or code;
* every init argument (``notes``, ``tags``, ``config``, ...) and every logged hyper-parameter is redacted
  with :func:`nemo_train.secrets.scrub_secrets`.

:class:`WandbLogger` is for Lightning's Trainer; :func:`init_run` for pipelines that log without one.
"""

from __future__ import annotations

import base64
import functools
import mimetypes
import netrc
import os
import re
import socket
from argparse import Namespace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import wandb
from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment

from nemo_train.quiet import is_verbose, warn_once
from nemo_train.secrets import REDACTED, is_secret_key, scrub_secrets, scrub_text

DEFAULT_BASE_URL = "https://api.wandb.ai"
WandbMode = Literal["online", "offline", "disabled"]


def wandb_has_credentials() -> bool:
    """True when a W&B key is available (``WANDB_API_KEY`` or a ``~/.netrc`` entry from ``wandb login``)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(urlsplit(base_url()).hostname or "") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def base_url() -> str:
    """The W&B server (``WANDB_BASE_URL`` or the public one)."""
    return os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL


def default_wandb_mode() -> str:
    """``WANDB_MODE`` if set, else ``online`` with credentials and ``offline`` without."""
    return os.environ.get("WANDB_MODE") or ("online" if wandb_has_credentials() else "offline")


def server_reachable(url: str, timeout: float) -> bool:
    """True when a TCP connection to ``url``'s host and port opens within ``timeout`` seconds."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_mode(mode: str | None, connect_timeout: float) -> str:
    """The mode to run in: ``online`` falls back to ``offline`` (one warning) when the server does not answer."""
    mode = mode or default_wandb_mode()
    if mode == "online" and not server_reachable(base_url(), connect_timeout):
        warn_once(
            f"W&B server {base_url()} did not answer within {connect_timeout:g} s; logging offline "
            "(upload later with `wandb sync <run folder>`)"
        )
        return "offline"
    return mode


def quiet_settings(settings: wandb.Settings | dict | None = None) -> wandb.Settings:
    """W&B settings: silent unless ``--verbose``; no console capture, command line, environment, git or code."""
    quiet = {
        "quiet": not is_verbose(),
        "silent": not is_verbose(),
        "console": "off",
        "x_disable_meta": True,  # program, arguments, executable, host, user, environment
        "disable_git": True,
        "disable_code": True,
        "save_code": False,
    }
    if isinstance(settings, wandb.Settings):
        return settings.model_copy(update=quiet)
    return wandb.Settings(**{**(settings or {}), **quiet})


#: W&B's folders outside the run's own (artifact staging, file cache), kept under ``<save_dir>/wandb`` unless the
#: user set them: a logged table's images and the report artifact then stay in the run folder until ``wandb sync``.
STAGING_ENV = {"WANDB_DATA_DIR": "data", "WANDB_CACHE_DIR": "cache"}
_staged_by_us: dict[str, str] = {}


def stage_under(save_dir: str | Path) -> None:
    """Point W&B's staging and cache folders (:data:`STAGING_ENV`) into ``<save_dir>/wandb``; a folder the user set
    in the environment is left as set."""
    for name, sub in STAGING_ENV.items():
        if name not in os.environ or _staged_by_us.get(name) == os.environ[name]:
            os.environ[name] = _staged_by_us[name] = str((Path(save_dir) / "wandb" / sub).resolve())


def init_with_fallback(init_args: dict[str, Any]):
    """``wandb.init(**init_args)``; an online run that cannot start is started offline instead (one warning)."""
    try:
        return wandb.init(**init_args)
    except wandb.errors.Error as err:
        if init_args.get("mode") != "online":
            raise
        reason = " ".join(str(err).split())[:200]
        warn_once(f"W&B could not start an online run ({reason}); logging offline (upload later with `wandb sync`)")
        init_args["mode"] = "offline"
        return wandb.init(**init_args)


def init_run(
    save_dir: str | Path,
    mode: str | None = None,
    connect_timeout: float = 5.0,
    init_timeout: float = 20.0,
    **kwargs: Any,
):
    """``wandb.init`` for pipelines (no Trainer): quiet settings, redacted arguments, offline fallback."""
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    stage_under(save_dir)
    kwargs = scrub_secrets(kwargs)
    settings = quiet_settings(kwargs.pop("settings", None)).model_copy(update={"init_timeout": init_timeout})
    mode = resolve_mode(mode, connect_timeout)
    return init_with_fallback({"dir": str(save_dir), "mode": mode, "settings": settings, **kwargs})


class WandbLogger(_LightningWandbLogger):
    """Lightning's ``WandbLogger`` with the defaults above.

    ``save_dir`` is left empty in the presets: the CLI fills in ``trainer.default_root_dir``, so W&B writes
    ``<root>/wandb/``, a sibling of ``<root>/checkpoints/`` (the working directory when used on its own).
    """

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | None = None,
        project: str = "nemo-train",
        mode: WandbMode | None = None,
        connect_timeout: float = 5.0,
        init_timeout: float = 20.0,
        notes: str | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.update(notes=notes, tags=tags)
        save_dir = save_dir or "."
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        stage_under(save_dir)
        kwargs.pop("offline", None)
        kwargs = scrub_secrets(kwargs)
        settings = quiet_settings(kwargs.pop("settings", None)).model_copy(update={"init_timeout": init_timeout})
        super().__init__(
            name=scrub_secrets(name),
            save_dir=save_dir,
            project=project,
            mode=resolve_mode(mode, connect_timeout),
            settings=settings,
            **kwargs,
        )
        self._wandb_init.pop("anonymous", None)  # Lightning always passes it; W&B warns that it has no effect

    @property
    @rank_zero_experiment
    def experiment(self):
        """The W&B run, started on first use (offline instead when an online run cannot start)."""
        if self._experiment is None and wandb.run is None:
            self._experiment = init_with_fallback(self._wandb_init)
            self._experiment.define_metric("trainer/global_step")
            self._experiment.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        return super().experiment

    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        if isinstance(params, Namespace):
            params = vars(params)
        super().log_hyperparams(scrub_secrets(dict(params)))


def wandb_image(image: Any, caption: str | None = None) -> wandb.Image | None:
    """A W&B image of a ``float[3, H, W]`` tensor in ``[0, 1]`` (or a PIL image / path), as 8-bit RGB; ``None``
    stays ``None``. W&B reads a float array as 0-255 values, so a [0, 1] image handed to it as is logs black."""
    if image is None:
        return None
    from datamodules.explanations.images import to_pil

    return wandb.Image(to_pil(image), caption=caption)


def redact_logging(wandb_run: Any) -> None:
    """Everything logged to ``wandb_run`` (tables' cells, texts, numbers) passes the redaction."""
    log = wandb_run.log

    @functools.wraps(log)
    def redacted_log(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return log(scrub_payload(data), *args, **kwargs)

    wandb_run.log = redacted_log


def scrub_payload(data: Any) -> Any:
    """``data`` with secrets redacted: strings, mappings and lists through the redaction pass, and the cells
    of every ``wandb.Table``; images, plots and numbers as they are."""
    if isinstance(data, wandb.Table):
        data.data = [[scrub_payload(cell) for cell in row] for row in data.data]
        return data
    if isinstance(data, dict):
        return {
            key: REDACTED if is_secret_key(key) and isinstance(value, str) else scrub_payload(value)
            for key, value in data.items()
        }
    if isinstance(data, (list, tuple)):
        return type(data)(scrub_payload(value) for value in data)
    if isinstance(data, str):
        return scrub_text(data)
    return data


def inline_images(page: str, folder: Path) -> str:
    """The HTML ``page`` with each ``<img src>`` of a file under ``folder`` inlined as a ``data:`` URI (one file to
    show where the files beside the page are not: a W&B HTML panel)."""

    def inline(match: re.Match) -> str:
        source = (folder / match.group(2)).resolve()
        if not source.is_file() or not source.is_relative_to(folder.resolve()):
            return match.group(0)
        kind = mimetypes.guess_type(source.name)[0] or "application/octet-stream"
        return f'{match.group(1)}data:{kind};base64,{base64.b64encode(source.read_bytes()).decode()}"'

    return re.sub(r'(<img src=")([^"]+)"', inline, page)


def log_report(wandb_run: Any, page: str | Path) -> None:
    """Attach a run's report page to its W&B run: ``report`` as an HTML panel (images inlined) and the page's
    folder as an artifact of type ``report`` (the page and its image files, as written)."""
    page = Path(page)
    html = inline_images(page.read_text(encoding="utf-8"), page.parent)
    wandb_run.log({"report": wandb.Html(html, inject=False)})
    artifact = wandb.Artifact(f"report-{wandb_run.id}", type="report", description="the run's report page")
    artifact.add_dir(str(page.parent))
    wandb_run.log_artifact(artifact)


def log_summary(wandb_run: Any, prefix: str, rows: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    """Scalar summaries of a run with their intervals: for each row (``{"name": ..., <key>, <key>_ci_low,
    <key>_ci_high}``) ``<prefix>/<name>/<key>`` and its bounds ``.../<key>_ci_low`` / ``_ci_high`` in the run's
    summary (W&B's run table and its comparisons read them)."""
    for row in rows:
        for key in keys:
            for suffix in ("", "_ci_low", "_ci_high"):
                value = row.get(f"{key}{suffix}")
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    wandb_run.summary[f"{prefix}/{row['name']}/{key}{suffix}"] = float(value)
