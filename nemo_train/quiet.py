"""Quiet output: results and one progress bar, no library banners; ``--verbose`` brings them back.

A leaf module (imports nothing from the toolkit), used by the CLI, the demo and the loggers.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from tqdm.auto import tqdm

#: Loggers whose INFO lines (tips, "GPU available", model summary, "Seed set to", "`Trainer.fit` stopped")
#: are hidden in quiet mode. Warnings and errors still show.
CHATTY_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "wandb")

#: Loggers whose warnings announce optional accelerations that are absent (bitsandbytes' CPU kernels).
NOISY_FALLBACK_LOGGERS = ("bitsandbytes",)

_verbose = False


def is_verbose() -> bool:
    """True after ``set_output(verbose=True)`` (``nemo-train --verbose``)."""
    return _verbose


def interactive() -> bool:
    """True when both stdout and stderr are terminals: only then are progress bars drawn (ours write to stderr,
    Lightning's to stdout; a run whose output goes to a file or a pipe gets none)."""
    return all(hasattr(stream, "isatty") and stream.isatty() for stream in (sys.stdout, sys.stderr))


def set_output(verbose: bool = False) -> None:
    """Quiet (default) or verbose output for this process and the W&B service it starts.

    Quiet: W&B prints nothing (``WANDB_SILENT``, console capture off), Hugging Face's own progress bars are
    off, Lightning's INFO lines are hidden, deprecation notices are hidden, each other warning is shown once,
    and progress bars are drawn only on a terminal (``TQDM_DISABLE`` otherwise).
    Verbose: the libraries' defaults.
    """
    global _verbose
    _verbose = verbose
    if verbose:
        for name in ("WANDB_SILENT", "WANDB_CONSOLE", "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
            os.environ.pop(name, None)
        for name in CHATTY_LOGGERS:  # Lightning's own default: its INFO lines (restoring, tips) are shown
            logging.getLogger(name).setLevel(logging.INFO)
        for name in NOISY_FALLBACK_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        return
    os.environ["WANDB_SILENT"] = "true"
    os.environ["WANDB_CONSOLE"] = "off"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers' "Loading weights" and hub download bars
    if not interactive():
        os.environ["TQDM_DISABLE"] = "1"
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in NOISY_FALLBACK_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for category in (DeprecationWarning, FutureWarning):  # addressed to the libraries' developers, not users
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("once", append=True)  # after the filters libraries set: each warning text once


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """One line ``nemo-train: warning: ...`` on stderr, the first time ``message`` is given in this process."""
    if message not in _warned:
        _warned.add(message)
        print(f"nemo-train: warning: {message}", file=sys.stderr, flush=True)


def open_bars() -> int:
    """How many tqdm bars are drawn now: ours, Lightning's (its progress bar subclasses tqdm) or a library's.

    Read from tqdm's own registry of open bars (the one it places nested bars with); a disabled or closed
    bar is not in it.
    """
    return len(tqdm._instances)


def progress_bar(*args, disable: bool = False, **kwargs):
    """A tqdm bar, drawn only on a terminal in quiet mode (``disable`` adds the caller's own condition) and
    never inside another one: while a bar is drawn (an outer loop over methods, Lightning's bar during a
    validation callback), a bar started inside it (the inner loop over errors, batches or steps) is not.

    tqdm reads ``TQDM_DISABLE`` only where a caller leaves ``disable`` unset, so every bar of the toolkit
    goes through here.
    """
    hidden = os.environ.get("TQDM_DISABLE") == "1" or not (_verbose or interactive())
    return tqdm(*args, disable=disable or hidden or open_bars() > 0, **kwargs)
