"""Quiet output: results and one progress bar (whole lines off a terminal), no library banners or warnings, the
toolkit's own warnings as one line each; ``--verbose`` brings the libraries' output back.

A leaf module (imports nothing from the toolkit), used by the CLI, the demo and the loggers.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import warnings
import weakref

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
    off, Lightning's INFO lines are hidden, the libraries' warnings are hidden, the toolkit's own are one line each
    (:func:`show_warning`), and the libraries' progress bars are drawn only on a terminal (``TQDM_DISABLE``
    otherwise; the toolkit's own print lines there, :func:`progress_bar`).
    Verbose: the libraries' defaults; the toolkit's warnings stay one line each.
    """
    global _verbose
    _verbose = verbose
    warnings.showwarning = show_warning
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


#: The packages whose warnings are the toolkit's own (shown as one line each, quiet or not).
OWN_PACKAGES = ("nemo_train", "datamodules")
_library_showwarning = warnings.showwarning


def warned_by_us() -> bool:
    """True when the ``warnings.warn`` being shown was called from the toolkit's own code (read from the call
    stack, so a ``stacklevel`` pointing at a caller elsewhere does not change whose warning it is)."""
    frame = sys._getframe(2)  # past this function and show_warning
    while frame is not None and frame.f_globals.get("__name__") in ("warnings", "_py_warnings"):
        frame = frame.f_back  # past the warnings module's own frames to the code that called warn()
    return frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in OWN_PACKAGES


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` while a command runs: the toolkit's own warnings as one line
    ``nemo-train: warning: ...`` (no file path, no source line); a library's only with ``--verbose`` (as the
    library wrote it)."""
    if warned_by_us():
        text = " ".join(str(message).split())
        print(f"nemo-train: warning: {text}", file=file or sys.stderr, flush=True)
    elif _verbose:
        _library_showwarning(message, category, filename, lineno, file, line)


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
    """A progress bar for the toolkit's loops (``disable`` is the caller's own condition, e.g. not the main rank).

    On a terminal a tqdm bar; anywhere else (a log file, CI, a batch job) a :class:`LineProgress`: one line per
    :data:`LINE_PERCENT_STEP` % and at least one every :data:`LINE_INTERVAL_S` seconds. Never one inside
    another: while a bar is drawn (an outer loop over methods, Lightning's bar during a validation callback), a
    bar started inside it (the inner loop over errors, batches or steps) is not.

    tqdm reads ``TQDM_DISABLE`` (set off a terminal, for the libraries' bars) only where a caller leaves
    ``disable`` unset, so every bar of the toolkit goes through here.
    """
    disable = disable or open_bars() > 0
    if interactive():
        return tqdm(*args, disable=disable, **kwargs)
    return LineProgress(*args, disable=disable, **kwargs)


#: A non-terminal progress line at each step of this many percent ...
LINE_PERCENT_STEP = 10
#: ... and at least every this many seconds while the loop runs (a long step included): never a silent minute.
LINE_INTERVAL_S = 30.0


class LineProgress(tqdm):
    """tqdm for a log: whole lines instead of a redrawn bar (no carriage returns, no bar characters).

    A line when the loop starts, each time its share done crosses a step of ``percent_step`` %, whenever
    ``interval`` seconds passed without a line (a background thread checks, so a single long step still gets
    a line) and when it ends, e.g. ``nemo-eval model_a: 40% 12/30 sample [00:08<00:12, 1.5 sample/s]``.
    A loop of unknown length gets the time lines only. ``clock`` (seconds) is the time source.
    """

    def __init__(
        self,
        *args,
        percent_step: float = LINE_PERCENT_STEP,
        interval: float = LINE_INTERVAL_S,
        clock=time.monotonic,
        **kwargs,
    ) -> None:
        self.percent_step, self.interval, self.clock = percent_step, interval, clock
        self._last_line, self._last_step, self._last_n = clock(), None, None
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        kwargs.setdefault("file", sys.stderr)
        kwargs.setdefault("mininterval", 0.0)  # tqdm asks at every update (below); we decide when a line is due
        kwargs.setdefault("miniters", 1)
        super().__init__(*args, **kwargs)
        if not self.disable and interval > 0:  # a weak reference: a bar its loop dropped unclosed is still collected
            beat = threading.Thread(target=_beat, args=(weakref.ref(self), self._stop), name="progress-lines")
            beat.daemon = True
            beat.start()

    def line(self) -> str:
        """The loop's state as one line."""
        d = self.format_dict
        unit, n, total, elapsed = d["unit"], d["n"], d["total"], d["elapsed"]
        rate = d["rate"] or ((n - d["initial"]) / elapsed if elapsed else None)
        speed = f", {rate:.3g} {unit}/s" if rate else ""
        head = f"{self.desc}: " if self.desc else ""
        postfix = f", {d['postfix']}" if d["postfix"] else ""
        if total:
            left = f"<{self.format_interval((total - n) / rate)}" if rate else ""
            done = f"{100 * n / total:3.0f}% {n}/{total} {unit}"
            return f"{head}{done} [{self.format_interval(elapsed)}{left}{speed}{postfix}]"
        return f"{head}{n} {unit} [{self.format_interval(elapsed)}{speed}{postfix}]"

    def _step(self) -> int | None:
        return int(100 * self.n / self.total // self.percent_step) if self.total else None

    def _write(self) -> None:
        with self._write_lock:
            self.fp.write(self.line() + "\n")
            self.fp.flush()
            self._last_line, self._last_step, self._last_n = self.clock(), self._step(), self.n

    def display(self, msg=None, pos=None) -> bool:
        """Called by tqdm at each update: a line when a percent step was crossed or the interval passed."""
        if msg == "" or self.disable:  # tqdm's "clear the bar"
            return True
        if self._last_n is None or self._step() != self._last_step or self.clock() - self._last_line >= self.interval:
            self._write()
        return True

    def heartbeat(self) -> None:
        """A line when ``interval`` seconds passed without one (what the background thread calls)."""
        if not self.disable and self.clock() - self._last_line >= self.interval:
            self._write()

    def close(self) -> None:
        """The last line (when the count moved since the previous one); nothing else is written."""
        if self.disable:
            return
        self._stop.set()
        if self.n != self._last_n:
            self._write()
        self.sp = None  # tqdm's own close then writes nothing (no newline, no carriage return)
        super().close()


def _beat(ref: weakref.ref, stop: threading.Event) -> None:
    """The background check of a :class:`LineProgress`: a line each ``interval`` seconds without one, until the bar
    is closed or collected."""
    while True:
        bar = ref()
        if bar is None:
            return
        wait = max(0.05, bar._last_line + bar.interval - bar.clock())
        del bar
        if stop.wait(timeout=wait):
            return
        bar = ref()
        if bar is None:
            return
        bar.heartbeat()
        del bar
