"""On-disk cache of language-model replies, so that no request is paid for twice."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from filelock import FileLock

from nemo_train.errors import UserInputError
from nemo_train.store import disk_error, disk_errors

log = logging.getLogger(__name__)

_SCHEMA = "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, model TEXT, value TEXT NOT NULL)"


def _hash_images(value: Any) -> Any:
    """Replace every base64 data URL by the SHA-256 of its decoded bytes (short keys, same identity)."""
    if isinstance(value, str) and value.startswith("data:") and ";base64," in value:
        head, payload = value.split(";base64,", 1)
        digest = hashlib.sha256(base64.b64decode(payload)).hexdigest()
        return f"{head};sha256,{digest}"
    if isinstance(value, dict):
        return {k: _hash_images(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hash_images(v) for v in value]
    return value


def cache_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    """SHA-256 of (model, messages with image bytes hashed, params) in canonical JSON.

    ``messages`` must be JSON-ready (see ``to_openai_messages``). Never pass secrets in ``params``:
    the key is derived from what is passed, nothing else.
    """
    payload = {"model": model, "messages": _hash_images(messages), "params": params}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _busy(err: sqlite3.DatabaseError) -> bool:
    """Whether ``err`` says the database is in use by another connection (not that it is damaged)."""
    return getattr(err, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(
        err
    )


class ResponseCache:
    """A SQLite file mapping request keys to lists of reply strings.

    SQLite makes each write a transaction: a process killed mid-write leaves the previous state, and
    several processes or threads may write at once (WAL journal, a busy timeout). Each thread gets its
    own connection. Only replies are stored: no headers, no keys. A damaged file (not a database, or
    failing SQLite's quick check) is moved aside to ``<name>.corrupt-<time>`` with one warning and a
    new, empty cache is started: the run pays again for those replies but never stops.

    ``path`` is the SQLite file, or a folder (an existing one, or a path without a suffix) that gets
    :attr:`FILE_NAME` inside it; several backends may share one file (the model is in every key).
    """

    FILE_NAME = "llm_replies.sqlite"

    def __init__(self, path: str | Path, timeout: float = 60.0) -> None:
        path = Path(path)
        # a folder unless it is a file or a new name with a suffix; no "exists, then is a folder" pair of checks,
        # which another rank creating the folder between the two would split
        if not (path.is_file() or (path.suffix and not path.is_dir())):
            path = path / self.FILE_NAME
        self.path = path
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise UserInputError(
                f"cache folder {str(self.path.parent)!r} is a file; expected a folder or a .sqlite path"
            ) from None
        self.timeout = timeout
        self._local = threading.local()
        self._warned_rows = False
        # Several processes (the ranks of one run) may open a new cache at once: creating the file, switching it to
        # WAL and checking it are done one process at a time, so that none sees the others' half-made file as
        # "locked" or damaged (and moves it aside under them).
        with FileLock(f"{self.path}.lock", timeout=timeout):
            try:
                self._open()
            except sqlite3.DatabaseError as err:  # "file is not a database", a damaged page, ...
                self.close()
                if disk_error(err, self.path) is not None:  # a full or read-only disk is no damage: one line
                    raise disk_error(err, self.path) from None
                if _busy(err):  # another program holds the file past the timeout: no damage either
                    raise UserInputError(f"reply cache {str(self.path)!r} stayed locked for {timeout:g} s") from None
                aside = self._move_aside()
                log.warning(
                    "reply cache %s is damaged (%s); moved it to %s and started a new one", self.path, err, aside
                )
                self._open()

    def _open(self) -> None:
        conn = self._connection()
        conn.execute(_SCHEMA)
        (verdict,) = conn.execute("PRAGMA quick_check").fetchone()
        if verdict != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {verdict}")

    def _move_aside(self) -> Path:
        """Rename the damaged file (and its WAL side files) to ``<name>.corrupt-<time>``; returns the new path."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            side = Path(f"{self.path}{suffix}")
            if side.exists():
                side.replace(f"{aside}{suffix}")
        return aside

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> list[str] | None:
        """The stored replies for ``key``, or ``None``: also for a row that is not a JSON list of strings (written
        by hand or by another program), which counts as missing (asked again and replaced) with one warning."""
        row = self._connection().execute("SELECT value FROM replies WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except (TypeError, ValueError):
            value = None
        if isinstance(value, list) and all(isinstance(reply, str) for reply in value):
            return value
        if not self._warned_rows:
            self._warned_rows = True
            log.warning("reply cache %s holds rows that are not JSON lists of replies; asking those again", self.path)
        return None

    def put(self, key: str, replies: list[str], model: str = "") -> None:
        """Store ``replies`` under ``key`` (the last writer wins; equal requests give equal keys). A full disk is a
        one-line error naming the folder (:func:`~nemo_train.store.disk_error`); the replies stored before stay."""
        with disk_errors(self.path):
            self._connection().execute(
                "INSERT OR REPLACE INTO replies (key, model, value) VALUES (?, ?, ?)",
                (key, model, json.dumps(list(replies), ensure_ascii=False)),
            )

    def discard(self, key: str) -> None:
        """Remove the replies stored under ``key`` (nothing happens when there are none)."""
        with disk_errors(self.path):
            self._connection().execute("DELETE FROM replies WHERE key = ?", (key,))

    def __len__(self) -> int:
        return self._connection().execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"
