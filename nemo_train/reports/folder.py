"""What a report reads: a run folder's stored files, read only (a torn or unreadable line is skipped, never cut).

:class:`RunFolder` names the run folder and the report folder under it, reads the run's JSON files and result
records, copies the images a page shows next to it and saves the page's plots there.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_train.sharding import shard_paths
from nemo_train.store import RunLock

#: The report's folder under the run folder, and its page.
REPORT_DIR = "report"
PAGE = "index.html"


def read_json(path: Path) -> Any | None:
    """The JSON value in ``path`` (``None`` when the file is missing or not JSON)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of a ``results.jsonl`` and of the per-process shards beside it (a killed several-process run
    leaves them), the last line of a key winning as in the store; returns them and the number of lines skipped
    (torn, not JSON, or without a string ``key``). Nothing is written."""
    records: dict[str, dict[str, Any]] = {}
    skipped = 0
    for file in [path, *shard_paths(path)]:
        try:
            data = file.read_bytes()
        except OSError:
            continue
        for raw in data.splitlines():
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                skipped += bool(raw.strip())
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                records[record["key"]] = record
            else:
                skipped += 1
    return list(records.values()), skipped


def run_state(path: Path, provenance: dict[str, Any] | None) -> str:
    """Where the run of a folder stands: ``finished`` (its provenance says when), ``running here`` (this process
    holds its lock: the command writing its own page at its end), ``running`` (another process holds the lock),
    ``stopped`` (it did not finish and nobody holds it: killed, or failed) or ``unknown`` (no run floor
    provenance, e.g. a Lightning run or a run from before the end was recorded)."""
    if not isinstance(provenance, dict) or "finished" not in provenance:
        return "unknown"
    if provenance["finished"]:
        return "finished"
    lock = path / RunLock.FILE_NAME
    if os.path.realpath(lock) in RunLock._held:
        return "running here"
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return "stopped"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released when the descriptor is closed
        return "stopped"
    except BlockingIOError:
        return "running"
    finally:
        os.close(fd)


@dataclass
class RunFolder:
    """A run folder (``path``) and the report written under it (``out``)."""

    path: Path
    out: Path = field(init=False)
    provenance: dict[str, Any] | None = field(init=False)
    copied: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.out = self.path / REPORT_DIR
        found = read_json(self.path / "provenance.json")
        self.provenance = found if isinstance(found, dict) else None

    @property
    def command(self) -> str | None:
        """The command that wrote the folder (from its provenance), or ``None``."""
        return (self.provenance or {}).get("command")

    @property
    def state(self) -> str:
        """Where its run stands (:func:`run_state`)."""
        return run_state(self.path, self.provenance)

    def json(self, name: str) -> Any | None:
        """The JSON file ``name`` of the run folder (``None`` when missing or unreadable)."""
        return read_json(self.path / name)

    def image(self, relative: str | None) -> str | None:
        """Copy the run folder's image ``relative`` next to the page (same relative path) and return the path the
        page uses; ``None`` when there is no such file (the page then shows none rather than a broken image)."""
        if not relative or Path(relative).is_absolute() or ".." in Path(relative).parts:  # only files of the run
            return None
        source = self.path / relative
        if source.resolve().is_relative_to(self.out.resolve()) or not source.is_file():
            return None
        if relative not in self.copied:
            target = self.out / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            self.copied.add(relative)
        return Path(relative).as_posix()

    def save_figure(self, figure: Any, name: str) -> str:
        """Save a matplotlib ``Figure`` as the PNG ``name`` next to the page and return its page path."""
        self.out.mkdir(parents=True, exist_ok=True)
        figure.savefig(self.out / name, dpi=100, bbox_inches="tight")
        return name
