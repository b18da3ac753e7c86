"""One ``fit`` / ``validate`` / ``test`` / ``predict`` at a time on a ``trainer.default_root_dir``: the second
exits with one line, before it writes anything (no ``config.yaml`` of one run beside another's checkpoints)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from cli_errors import one_line_error
from test_exact_resume import tiny_fit_config

from nemo_train.store import RunLock

pytestmark = pytest.mark.fault


def hold_lock(folder: Path, pid: str = "4242") -> int:
    """Take ``folder``'s writer lock as another process would (its own open file)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / RunLock.FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, pid.encode(), 0)
    return fd


@pytest.mark.parametrize("subcommand", ["fit", "validate", "test", "predict"])
def test_a_second_run_on_one_default_root_dir_exits_with_one_line(tmp_path, capsys, subcommand):
    root = tmp_path / "run"
    fd = hold_lock(root)
    try:
        err = one_line_error(capsys, [subcommand, "--config", str(tiny_fit_config(tmp_path, "c", root))])
    finally:
        os.close(fd)
    assert "trainer.default_root_dir" in err and str(root) in err and "pid 4242" in err
    assert sorted(p.name for p in root.iterdir()) == [RunLock.FILE_NAME]  # no config.yaml, no checkpoints


def test_the_lock_is_released_when_the_run_ends(tmp_path):
    from nemo_train.cli import main

    root = tmp_path / "run"
    config = tiny_fit_config(tmp_path, "c", root, max_epochs=1)
    main(["fit", "--config", str(config)])
    fd = hold_lock(root)  # free again: another process can take it
    os.close(fd)


@pytest.mark.parametrize("where", ["a_file", "below_a_file", "read_only"])
def test_a_default_root_dir_that_cannot_be_written_is_one_line(tmp_path, capsys, where):
    (tmp_path / "file").write_text("x")
    root = {
        "a_file": tmp_path / "file",
        "below_a_file": tmp_path / "file" / "run",
        "read_only": Path("/sys/kernel/nemo-train-run"),
    }[where]
    err = one_line_error(capsys, ["fit", "--config", str(tiny_fit_config(tmp_path, "c", root))])
    assert err.startswith("nemo-train: error: trainer.default_root_dir: ") and str(root) in err
    assert (tmp_path / "file").read_text() == "x" and not Path("/sys/kernel/nemo-train-run").exists()
