"""A full disk under one folder, simulated in-process for the fault tests.

Every write into a file under the folder fails with ``OSError(ENOSPC)`` as the kernel raises it: without a file
name. Both ways Python code writes are covered: ``os.write`` on a descriptor (the project's atomic writes and
result store) and a file object opened for writing with ``open`` / ``io.open`` / ``Path.open`` (matplotlib,
``Path.write_text``, ``torch.save``). Files whose names contain one of ``spare`` still take their bytes (the run
floor's ``provenance.json``, so a test reaches the command's own writes). Writers outside Python (SQLite, the
safetensors Rust writer) are not reached by it; their tests fill those up their own way.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from pathlib import Path


def _full() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FullFile:
    """A file object opened for writing on a full disk: every write fails, everything else is the real file's."""

    def __init__(self, real) -> None:
        self._real = real

    def write(self, data) -> int:
        raise _full()

    def writelines(self, lines) -> None:
        raise _full()

    def flush(self) -> None:
        self._real.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._real.close()

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def fill_disk(monkeypatch, folder: Path, spare: tuple[str, ...] = ("provenance",)) -> None:
    """From now on (until ``monkeypatch.undo()``), writes into files under ``folder`` fail as on a full disk."""
    folder = str(Path(folder).resolve())
    real_write, real_open = os.write, builtins.open

    def refused(path: str) -> bool:
        path = os.path.realpath(path)
        return path.startswith(folder) and not any(name in Path(path).name for name in spare)

    def write(fd: int, data) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target and refused(target):
            raise _full()
        return real_write(fd, data)

    def open_(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        writing = any(flag in mode for flag in "wax+")
        if writing and isinstance(file, (str, bytes, os.PathLike)) and refused(os.fsdecode(file)):
            return _FullFile(handle)
        return handle

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)


def scratch_files(folder: Path) -> list[str]:
    """Scratch files (``*.tmp``) left anywhere under ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.name.endswith(".tmp"))
