"""Progress off a terminal (whole lines, never a silent minute) and warnings as one line each."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from nemo_train import quiet
from nemo_train.quiet import LineProgress, progress_bar, set_output, show_warning

ROOT = Path(__file__).resolve().parents[1]


class Log(io.StringIO):
    """A stream that is not a terminal (a log file, CI)."""

    def isatty(self) -> bool:
        return False


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_in_a_log_prints_one_line_per_ten_percent_and_no_carriage_return():
    log = Log()
    for _ in LineProgress(range(50), desc="nemo-eval model_a", unit="sample", file=log, interval=3600):
        pass
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert [line.split(": ")[1].split("%")[0].strip() for line in lines] == [str(p) for p in range(0, 101, 10)]
    assert lines[0].startswith("nemo-eval model_a:   0% 0/50 sample [")
    assert lines[-1].startswith("nemo-eval model_a: 100% 50/50 sample [")


def test_updates_by_hand_and_a_postfix_are_in_the_lines():
    log = Log()
    bar = LineProgress(total=4, desc="teacher model_a", unit="error", file=log, interval=3600)
    bar.set_postfix(loss=0.5, refresh=False)
    bar.update(3)
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "75% 3/4 error" in lines[1] and "loss=0.5" in lines[1]


def test_a_long_step_still_gets_a_line_every_interval():
    """The background thread's check, driven by a fake clock: a line once ``interval`` seconds passed without one,
    none before; a loop of unknown length gets the time lines only."""
    log, clock = Log(), Clock()
    bar = LineProgress(desc="explaining", unit="batch", file=log, interval=60.0, clock=clock)
    bar._stop.set()  # the test drives the checks itself
    assert len(log.getvalue().splitlines()) == 1  # the start line
    clock.now = 59.0
    bar.heartbeat()
    assert len(log.getvalue().splitlines()) == 1
    clock.now = 60.0
    bar.heartbeat()
    bar.update(1)  # no percent steps without a total: no line
    assert log.getvalue().splitlines()[-1].startswith("explaining: 0 batch [")
    assert len(log.getvalue().splitlines()) == 2
    clock.now = 130.0
    bar.update(1)  # an update after the interval writes the line itself
    assert log.getvalue().splitlines()[-1].startswith("explaining: 2 batch [")
    bar.close()


def test_progress_bar_draws_lines_off_a_terminal_and_none_inside_another(monkeypatch):
    log = Log()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(sys, "stdout", Log())
    outer = progress_bar(total=2, desc="outer")
    assert isinstance(outer, LineProgress) and not outer.disable
    inner = progress_bar(total=3, desc="inner")
    assert inner.disable  # one bar at a time
    inner.close()
    outer.update(2)
    outer.close()
    assert progress_bar(total=3, disable=True).disable
    assert [line.split(":")[0] for line in log.getvalue().splitlines()] == ["outer", "outer"]


def test_our_warning_is_one_line_without_a_path_and_a_librarys_is_hidden_unless_verbose(monkeypatch, capsys):
    from nemo_train.metrics import perceptual

    monkeypatch.setattr(os, "environ", dict(os.environ))  # set_output's variables end with the test
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    monkeypatch.setattr(quiet, "_verbose", quiet._verbose)
    set_output(verbose=False)
    assert warnings.showwarning is show_warning
    perceptual._warn_once.__wrapped__("AlexNet weights missing (a test)\n  over two lines")  # the toolkit's own
    library = {"__name__": "somelibrary.module", "warnings": warnings}
    exec("warnings.warn('a library notice (a test)', UserWarning)", library)
    err = capsys.readouterr().err
    assert err == "nemo-train: warning: AlexNet weights missing (a test) over two lines\n"
    shown = []
    monkeypatch.setattr(quiet, "_library_showwarning", lambda message, *args: shown.append(str(message)))
    set_output(verbose=True)
    exec("warnings.warn('a library notice, verbose (a test)', UserWarning)", library)
    assert shown == ["a library notice, verbose (a test)"]  # as the library wrote it


@pytest.mark.slow
def test_a_run_prints_the_lpips_warning_as_one_line(tmp_path):
    """In a process of its own: the LPIPS-missing warning the demo printed with its file path and source line."""
    code = (
        "from nemo_train.quiet import set_output; set_output()\n"
        "from nemo_train.metrics.perceptual import perceptual_distance\n"
        f"print(perceptual_distance({str(tmp_path / 'absent.pth')!r}).name)\n"
        "import warnings; from lightning.pytorch.utilities import rank_zero_warn\n"
        "rank_zero_warn('a library warning')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1-ssim"
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nemo-train: warning: AlexNet weights for LPIPS not found")
    assert ".py" not in done.stderr and "warnings.warn" not in done.stderr
