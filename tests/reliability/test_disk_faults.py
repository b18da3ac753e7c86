"""A full disk (an injected ``OSError(ENOSPC)`` on the store's write path) or a read-only folder: the previous
state stays readable (atomic writes, no torn line) and the command ends in one line naming the folder."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from cli_errors import one_line_error
from explain_runs import explain_argv

from nemo_train.errors import UserInputError
from nemo_train.store import ResultStore, write_json_atomic

pytestmark = pytest.mark.fault


def full_disk_after(monkeypatch, folder: Path, allowed_bytes: int = 0) -> None:
    """``os.write`` into a file under ``folder`` takes ``allowed_bytes`` more bytes (a short write), then fails
    with ENOSPC, as on a full disk."""
    real_write, budget = os.write, [allowed_bytes]

    def write(fd: int, data) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(str(folder)):
            return real_write(fd, data)
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken = real_write(fd, bytes(data[: budget[0]]))
        budget[0] -= taken
        return taken

    monkeypatch.setattr(os, "write", write)


def test_a_full_disk_during_an_append_keeps_every_earlier_record_and_leaves_no_torn_line(tmp_path, monkeypatch):
    store = ResultStore(tmp_path / "results.jsonl")
    for i in range(3):
        store.append({"key": f"k{i}", "value": i})
    before = (tmp_path / "results.jsonl").read_bytes()
    full_disk_after(monkeypatch, tmp_path, allowed_bytes=7)  # part of the record fits, then the disk is full
    with pytest.raises(UserInputError, match=rf"cannot write in '{tmp_path}' \(writing results.jsonl\): No space"):
        store.append({"key": "k3", "value": 3})
    monkeypatch.undo()
    assert (tmp_path / "results.jsonl").read_bytes() == before
    assert sorted(ResultStore(tmp_path / "results.jsonl").records) == ["k0", "k1", "k2"]


def test_a_full_disk_during_an_atomic_write_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    write_json_atomic(target, {"table": 1})
    full_disk_after(monkeypatch, tmp_path, allowed_bytes=5)
    with pytest.raises(UserInputError, match=rf"cannot write in '{tmp_path}' \(writing results.json\)"):
        write_json_atomic(target, {"table": 2, "more": "x" * 1000})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"table": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no scratch file left


def test_explain_on_a_full_disk_is_one_line_and_the_rerun_completes(tmp_path, monkeypatch, capsys, adapter):
    argv, results = explain_argv(tmp_path, adapter)
    out = results.parent
    full_disk_after(monkeypatch, results, allowed_bytes=0)
    from nemo_train.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    monkeypatch.undo()
    stderr = capsys.readouterr().err  # (the model loader may draw a bar on stderr before the error)
    errors = [line for line in stderr.splitlines() if line.startswith("nemo-train: error:")]
    assert exit_info.value.code == 2 and "Traceback" not in stderr and len(errors) == 1, stderr
    assert f"cannot write in '{out}' (writing explanations.jsonl): No space left on device" in errors[0]
    assert not results.exists() or results.read_bytes().endswith(b"\n") or results.read_bytes() == b""
    main(argv)  # the rerun: no torn line stops it
    lines = results.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["explanations"] for line in lines)


@pytest.mark.parametrize(
    "command",
    [
        "counterfactuals",
        "distill-teacher",
        "demo",
        "lbee",
        "nemo-eval",
        "explain",
        "differences",
        "distill-eval",
        "export",
    ],
)
def test_a_read_only_out_dir_is_one_line_for_every_command(tmp_path, capsys, command):
    read_only = Path("/proc/nemo-train-read-only")  # cannot be created, even by root
    extra = {
        "distill-teacher": ["--classifier", "missing.ckpt"],
        "lbee": ["--data", "datamodules.nico.NICODataModule"],
        "explain": ["--model", "missing"],
        "differences": ["--config", str(Path(__file__).parents[2] / "configs" / "differences" / "cmnist.yaml")],
        "distill-eval": ["--student", "missing", "--targets", "[missing.ckpt]"],
        "export": ["--adapter", "missing"],
    }.get(command, [])
    err = one_line_error(capsys, [command, *extra, "--out_dir", str(read_only)])
    assert "cannot be written" in err and str(read_only) in err
