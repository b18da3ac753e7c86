"""Progress bars: a redrawn bar only when stdout and stderr are terminals (whole lines elsewhere), and never one
inside another."""

import io
import sys

import pytest

from nemo_train import quiet
from nemo_train.quiet import LineProgress, interactive, open_bars, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """Call it first in a test (pytest's capture sets sys.stdout / sys.stderr again once fixtures have run):
    stdout and stderr become terminals, quiet mode, no TQDM_DISABLE; returns the stream bars draw into."""

    def make() -> _Terminal:
        monkeypatch.setattr(sys, "stdout", _Terminal())
        monkeypatch.setattr(sys, "stderr", _Terminal())
        monkeypatch.delenv("TQDM_DISABLE", raising=False)
        monkeypatch.setattr(quiet, "_verbose", False)
        return sys.stderr

    return make


def test_bars_are_drawn_on_a_terminal(terminal):
    out = terminal()
    assert interactive()
    bar = progress_bar(total=3, file=out)
    assert not bar.disable and open_bars() == 1
    bar.close()
    assert open_bars() == 0


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_off_a_terminal_a_bar_is_whole_lines(terminal, monkeypatch, stream):
    terminal()
    monkeypatch.setattr(sys, stream, io.StringIO())  # redirected to a file or a pipe
    assert not interactive()
    log = io.StringIO()
    with progress_bar(total=3, desc="items", file=log) as bar:
        assert isinstance(bar, LineProgress) and not bar.disable
        bar.update(3)
    assert open_bars() == 0
    assert "\r" not in log.getvalue() and "items: 100%" in log.getvalue()


def test_verbose_mode_draws_bars_off_a_terminal(terminal, monkeypatch):
    out = terminal()
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(quiet, "_verbose", True)
    with progress_bar(total=1, file=out) as bar:
        assert not bar.disable


def test_a_bar_opened_inside_another_is_not_drawn(terminal):
    out = terminal()
    inner_states = []
    for _ in progress_bar(range(2), desc="methods", file=out):
        for _ in (inner := progress_bar(range(3), desc="errors", file=out)):
            pass
        inner_states.append(inner.disable)
        assert open_bars() == 1  # the outer bar only
    assert inner_states == [True, True]
    assert open_bars() == 0  # the outer bar closed itself at the end of its loop
    after = progress_bar(total=1, file=out)
    assert not after.disable  # once nothing is open, the next bar is drawn again
    after.close()
    assert open_bars() == 0


def test_no_bar_inside_lightnings_bar(terminal):
    """A callback's loop (an evaluation during validation) draws nothing under Lightning's own bar."""
    from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

    out = terminal()
    lightning_bar = Tqdm(total=10, desc="Validation", file=out)
    inner = progress_bar(total=3, file=out)
    assert inner.disable
    inner.close()
    lightning_bar.close()
    after = progress_bar(total=1, file=out)
    assert not after.disable
    after.close()


def test_the_caller_can_disable_a_bar_and_it_does_not_hide_the_next(terminal):
    out = terminal()
    hidden = progress_bar(total=1, disable=True, file=out)
    assert hidden.disable and open_bars() == 0
    shown = progress_bar(total=1, file=out)
    assert not shown.disable
    shown.close()
    hidden.close()
