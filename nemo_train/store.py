"""A resumable result store: one JSON line per finished unit of work, keyed and fingerprinted.

Any run that computes many independent results (one per sample, per method, per target, ...) can
write each one as soon as it is finished and skip it on a rerun:

* **append only, durable**: every record is one line, written with a single ``write`` and then
  ``fsync``'d; nothing is ever rewritten in place.
* **torn tail**: a kill in the middle of a write leaves a last line without its newline; opening the
  store cuts it off with ``truncate()`` (the complete records before it are never touched, so a kill
  during the repair loses nothing either).
* **unreadable lines** (bytes that are not UTF-8, ``null``, JSON that is not an object with a string
  ``key``) are skipped and counted in one warning.
* **settings fingerprint**: a record carries the ``settings`` it was computed with (a flat JSON
  object: the identity of the inputs and every option that changes the result). :meth:`ResultStore.lookup`
  returns a record only when its settings equal the current ones; otherwise the record is recomputed
  and the names of the changed settings are collected in :attr:`ResultStore.changed`.
* **one writer**: :class:`RunLock` is an advisory ``fcntl`` lock on a folder; a second process that
  tries to take it gets a one-line error naming the holder's pid.

When a key was written several times (a recomputed or retried record), the last line wins.

Every write of a run goes through one place that knows a full disk: :func:`write_bytes_atomic` (and
:func:`write_json_atomic`, :func:`save_figure`, :func:`nemo_train.artefacts.save_safetensors`), the store's
appends, and :func:`disk_errors` around a library's own writer (SQLite, transformers). A write the disk refuses is
one line naming the folder (:func:`disk_error`), never a traceback, and leaves no scratch file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nemo_train.errors import UserInputError
from nemo_train.secrets import scrub_secrets

log = logging.getLogger(__name__)


#: ``errno`` values of a write the disk or folder refused (full disk, quota, read-only, no permission, too large).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})


#: SQLite's result codes of a write the disk refused: SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN.
SQLITE_DISK_CODES = frozenset({13, 10, 8, 14})
#: How other writers (Rust's ``std::io`` in safetensors, tokenizers) spell a refused write in their messages.
_OS_ERROR_CODE = re.compile(r"Os \{ code: (\d+)|\(os error (\d+)\)")


def disk_error(err: BaseException, path: str | Path | None = None) -> UserInputError | None:
    """The one-line error of a write the disk refused (``None`` for other errors), naming the folder.

    ``err`` is an ``OSError`` (full disk, quota, read-only folder, ...), a ``sqlite3.OperationalError`` of a full or
    read-only database, or an error of a library that writes by itself and names the OS error in its message
    (safetensors' ``SafetensorError``: ``IoError(Os { code: 28, ...``). The folder is ``path``'s, else the
    error's file's (the destination of a copy or move), else the folder of the run this process opened last (:attr:`RunLock.last_folder`, also after
    the run let its lock go on the way out): a library's own write (matplotlib, W&B) raises a full disk without
    naming its file.
    """
    reason = _refused(err)
    if reason is None:
        return None
    # a copy or a move names the destination second (shutil's copy on a full disk: the source, then the target)
    target = path if path is not None else getattr(err, "filename2", None) or getattr(err, "filename", None)
    if target:
        where = f" in {str(Path(target).parent)!r} (writing {Path(target).name})"
    elif RunLock.last_folder is not None:
        where = f" during the run in {str(RunLock.last_folder)!r}"
    else:
        where = ""
    return UserInputError(
        f"cannot write{where}: {reason}; free space or choose another folder, then rerun (what was written before "
        "is kept)"
    )


def _refused(err: BaseException) -> str | None:
    """Why the disk refused the write ``err`` stands for (the OS's words), or ``None`` when it is another error."""
    if isinstance(err, OSError):
        return (err.strerror or os.strerror(err.errno)) if err.errno in DISK_ERRNOS else None
    if type(err).__name__ == "OperationalError" and type(err).__module__ == "sqlite3":
        code = getattr(err, "sqlite_errorcode", None)
        return str(err) if code is not None and code & 0xFF in SQLITE_DISK_CODES else None
    match = _OS_ERROR_CODE.search(str(err))
    code = int(match.group(1) or match.group(2)) if match else None
    if code in DISK_ERRNOS:
        return os.strerror(code)
    return None


@contextmanager
def disk_errors(path: str | Path) -> Iterator[None]:
    """Turn a write the disk refused inside the block (through any library) into :func:`disk_error`'s one line
    naming ``path``'s folder; other errors pass unchanged."""
    try:
        yield
    except UserInputError:
        raise
    except Exception as err:
        refused = disk_error(err, path)
        if refused is None:
            raise
        raise refused from None


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a scratch file, ``fsync`` and a rename: a reader (or a killed run, or a
    full disk) sees the previous file or the new one, never half of one. A refused write is a one-line error
    naming the folder (:func:`disk_error`); the scratch file is removed.

    The scratch file (``.<name>.<random>.tmp``) is this call's own: processes writing one path at once (two commands
    filling a shared cache file) each rename a whole file of their own, the last one wins."""
    path = Path(path)
    scratch = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(scratch, path)
    except OSError as err:
        scratch.unlink(missing_ok=True)
        refused = disk_error(err, path)
        if refused is None:
            raise
        raise refused from None
    return path


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may take fewer bytes than it was given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def save_figure(figure: Any, path: str | Path, **savefig_kwargs: Any) -> Path:
    """Save a matplotlib ``figure`` to ``path`` through :func:`write_bytes_atomic` (rendered in memory first, in
    the format of ``path``'s suffix): a full disk is one line naming the folder and leaves no half image."""
    import io

    path = Path(path)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.lstrip(".") or "png", **savefig_kwargs)
    return write_bytes_atomic(path, buffer.getvalue())


def write_json_atomic(path: str | Path, value: Any) -> Path:
    """Write ``value`` as JSON to ``path`` atomically (:func:`write_bytes_atomic`), secrets redacted."""
    text = json.dumps(scrub_secrets(value), indent=1, allow_nan=False) + "\n"  # no secret on disk
    return write_bytes_atomic(path, text.encode("utf-8"))


def fingerprint(settings: dict[str, Any]) -> str:
    """A short stable hash of a JSON-ready settings dict (canonical JSON, SHA-256; secrets redacted first, as
    the settings are stored)."""
    canonical = json.dumps(scrub_secrets(settings), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes (a checkpoint's identity: a retrained model at the same path differs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def changed_settings(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Names of the settings whose values differ between two settings dicts (sorted)."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


class ResultStore:
    """Records (JSON objects with a string ``key``) in an append-only JSON-lines file.

    Args:
        path: the ``.jsonl`` file (created with its folder on the first append).
        repair: cut a torn last line off the file (its writer, or the one process reading it once no one writes);
            without it a reader of a file another process is appending to skips a last line without its newline,
            which may be a record still being written, and leaves the file as it is.
    """

    def __init__(self, path: str | Path, repair: bool = True) -> None:
        self.path = Path(path)
        self.repair = repair
        if self.path.is_dir():
            raise UserInputError(f"result file {str(self.path)!r} is a folder; expected a file path")
        self.records: dict[str, dict[str, Any]] = {}
        #: names of changed settings -> how many records :meth:`lookup` found stale because of them
        self.changed: Counter[str] = Counter()
        self.skipped_lines = 0
        if self.path.exists():
            self._load()

    # ----------------------------------------------------------------- reading and repair
    def _load(self) -> None:
        data = self.path.read_bytes()
        complete = data.rfind(b"\n") + 1  # bytes up to and including the last newline
        if complete < len(data) and self.repair:
            self._cut(complete)
            log.warning(
                "%s: cut a torn last line of %d bytes (a run was stopped while writing it)",
                self.path,
                len(data) - complete,
            )
        for raw in data[:complete].splitlines():
            record = self._parse(raw)
            if record is None:
                self.skipped_lines += raw.strip() != b""
            else:
                self.records[record["key"]] = record
        if self.skipped_lines:
            log.warning(
                "%s: skipped %d unreadable line(s) (not UTF-8, not JSON, or no string 'key')",
                self.path,
                self.skipped_lines,
            )

    def _cut(self, size: int) -> None:
        """Drop the bytes after ``size`` in place: ``truncate`` never rewrites the bytes it keeps."""
        with self.path.open("r+b") as f:
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any] | None:
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("key"), str):
            return None
        return record

    # ----------------------------------------------------------------- queries
    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def get(self, key: str) -> dict[str, Any] | None:
        """The last record written under ``key`` (whatever its settings), or ``None``."""
        return self.records.get(key)

    def lookup(self, key: str, settings: dict[str, Any], retry_failed: bool = True) -> dict[str, Any] | None:
        """The record under ``key`` if it was computed with exactly ``settings``; else ``None``.

        A record computed with other settings is stale: the names of the settings that differ are
        counted in :attr:`changed`. With ``retry_failed`` a record marked ``failed`` counts as absent,
        so a rerun tries it again.
        """
        record = self.records.get(key)
        if record is None:
            return None
        if record.get("fingerprint") != fingerprint(settings):
            changed = changed_settings(record.get("settings") or {}, scrub_secrets(settings))
            for name in changed or ["(unrecorded settings)"]:
                self.changed[name] += 1
            return None
        if retry_failed and record.get("failed"):
            return None
        return record

    # ----------------------------------------------------------------- writing
    def append(self, record: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write one record durably (one ``write``, ``flush`` and ``fsync``) and return it.

        With ``settings`` the record gets ``settings`` and their ``fingerprint`` fields.
        """
        if not isinstance(record.get("key"), str):
            raise ValueError(f"a record needs a string 'key'; got {record.get('key')!r}")
        if settings is not None:
            record = {**record, "settings": settings, "fingerprint": fingerprint(settings)}
        record = scrub_secrets(record)  # settings and texts: no secret reaches the file
        line = (json.dumps(record, ensure_ascii=False, allow_nan=True) + "\n").encode("utf-8")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise disk_error(err, self.path) or err from None
        try:
            size = os.fstat(fd).st_size
            try:
                _write_all(fd, line)
                os.fsync(fd)
            except OSError as err:  # a full disk: cut what was written of this record, keep every earlier one
                os.ftruncate(fd, size)
                raise disk_error(err, self.path) or err from None
        finally:
            os.close(fd)
        self.records[record["key"]] = record
        return record


class RunLock:
    """An advisory, exclusive lock on a folder held for the life of a run (``fcntl.flock``).

    The lock file ``<folder>/.lock`` holds the holder's pid. The OS releases the lock when the process
    ends, however it ends, so a killed run never leaves a stale lock. Use as a context manager.
    Within one process the lock is re-entrant (a command's own lock inside the run that opened the folder);
    it is released when its last holder releases it.
    """

    FILE_NAME = ".lock"
    #: the locks this process holds: resolved lock file -> [file descriptor, number of holders]
    _held: dict[str, list[int]] = {}
    #: the folder of the lock this process took last (a write that fails without naming its file is named by it)
    last_folder: Path | None = None

    def __init__(self, folder: str | Path, name: str = FILE_NAME) -> None:
        self.folder = Path(folder)
        self.path = self.folder / name
        self._fd: int | None = None
        self._key: str | None = None

    def acquire(self) -> RunLock:
        """Take the lock or raise :class:`UserInputError` naming the pid of the run that holds it."""
        if self.folder.exists() and not self.folder.is_dir():
            raise UserInputError(f"out_dir {str(self.folder)!r} is a file; expected a folder (or a new path)")
        self.folder.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.path)
        if self._key is None and key in RunLock._held:  # held by this process already
            RunLock._held[key][1] += 1
            self._key = key
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UserInputError(
                f"{str(self.folder)!r} is in use by another run (pid {holder}); wait for it or choose another out_dir"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as err:  # a full disk: not even the pid fits
            os.close(fd)
            raise disk_error(err, self.path) or err from None
        self._fd, self._key = fd, key
        RunLock._held[key] = [fd, 1]
        RunLock.last_folder = self.folder
        return self

    def release(self) -> None:
        """Release the lock (the lock file stays; it is harmless)."""
        if self._key is None:
            return
        held = RunLock._held[self._key]
        held[1] -= 1
        if held[1] == 0:
            fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])
            del RunLock._held[self._key]
        self._fd, self._key = None, None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
