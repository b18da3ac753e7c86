"""Identity of inputs and provenance of saved artefacts: what a result was computed from.

A resumed or cached result is reused only when what produced it is unchanged, not merely its path:

* :func:`path_digest` is the SHA-256 of a file, or of the files of a folder that define a model (a CLIP or
  Hugging Face folder, a PEFT adapter folder): every regular file under it except hidden ones, caches,
  logs and our own ``*.fingerprint.json`` files. A file of at least :data:`CACHE_MIN_BYTES` is hashed once
  per process for its (path, inode, size, modification time); a replaced file has another of these.
* :func:`source_identity` names a model given as a hub id or a local path (local: resolved path + digest).
* An artefact saved inside an ``out_dir`` and reused on a rerun (a trained model, an estimator, a cache)
  carries its producing settings in ``<artefact>.fingerprint.json``, written atomically *after* the artefact
  (:func:`record_artefact`). :func:`reuse_artefact` says whether it may be reused; when its settings differ
  (or its fingerprint is missing: a kill between the two writes, or an older run) the fingerprint and the
  artefact are removed, in that order, so the artefact is recomputed and no kill leaves a stale pair.
* :func:`save_safetensors` writes tensors through :func:`~nemo_train.store.write_bytes_atomic` (serialized in
  memory first): a full disk is one line naming the folder, and a reader never finds half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from nemo_train.store import changed_settings, fingerprint, write_bytes_atomic, write_json_atomic

log = logging.getLogger(__name__)

#: files at least this large are hashed once per process (smaller ones are cheaper to hash than to doubt)
CACHE_MIN_BYTES = 16 << 20
#: folders inside a model folder that never define its weights
SKIPPED_FOLDERS = frozenset({"wandb", "llm_cache", "__pycache__", "lightning_logs"})
#: file name endings that never define a model's weights or configuration
SKIPPED_SUFFIXES = (".fingerprint.json", ".lock", ".tmp", ".log")

_digests: dict[tuple[str, int, int, int], str] = {}


def _file_digest(path: Path, chunk: int = 1 << 20) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _digests:
        return _digests[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    if stat.st_size >= CACHE_MIN_BYTES:
        _digests[key] = digest.hexdigest()
    return digest.hexdigest()


def _defining_files(folder: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS)
        found += [
            Path(root) / name
            for name in sorted(files)
            if not name.startswith(".") and not name.endswith(SKIPPED_SUFFIXES) and (Path(root) / name).is_file()
        ]
    return found


def path_digest(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, or of a folder's defining files (relative names and bytes)."""
    path = Path(path)
    if not path.is_dir():
        return _file_digest(path)
    digest = hashlib.sha256()
    for file in _defining_files(path):
        digest.update(f"{file.relative_to(path).as_posix()}\0{_file_digest(file)}\n".encode())
    return digest.hexdigest()


def source_identity(name: str | Path) -> dict[str, str]:
    """``{"path", "sha256"}`` for an existing local file or folder, else ``{"id": name}`` (a hub id)."""
    path = Path(name).expanduser()
    if path.exists():
        return {"path": str(path.resolve()), "sha256": path_digest(path)}
    return {"id": str(name)}


def as_json(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` as they read back from JSON (tuples as lists, other objects as their ``str``)."""
    return json.loads(json.dumps(settings, default=str))


def recorded_settings(artefact: str | Path) -> dict[str, Any] | None:
    """The settings recorded beside ``artefact``, or ``None`` (no record, or an unreadable one)."""
    recorded = _recorded(Path(artefact))
    return recorded.get("settings") if recorded is not None else None


def fingerprint_file(artefact: str | Path) -> Path:
    """Where the producing settings of ``artefact`` are kept: ``<artefact>.fingerprint.json`` beside it."""
    artefact = Path(artefact)
    return artefact.with_name(artefact.name + ".fingerprint.json")


def _recorded(artefact: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(fingerprint_file(artefact).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def record_artefact(artefact: str | Path, settings: dict[str, Any]) -> Path:
    """Record that ``artefact`` (already written) was produced with ``settings`` (an atomic write)."""
    settings = as_json(settings)
    return write_json_atomic(fingerprint_file(artefact), {"settings": settings, "fingerprint": fingerprint(settings)})


def forget_artefact(artefact: str | Path, *companions: str | Path) -> None:
    """Remove the fingerprint of ``artefact``, then the artefact and its ``companions`` (files or folders)."""
    fingerprint_file(artefact).unlink(missing_ok=True)
    for path in (Path(artefact), *map(Path, companions)):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def reuse_artefact(artefact: str | Path, settings: dict[str, Any], what: str, *companions: str | Path) -> bool:
    """True when ``artefact`` exists and was produced with exactly ``settings``.

    Otherwise the artefact (with its ``companions``, files that belong to it) is removed so that the caller
    recomputes it, and the changed settings are named in one warning. Call :func:`record_artefact` after
    writing the new one.
    """
    artefact = Path(artefact)
    if not artefact.exists():
        fingerprint_file(artefact).unlink(missing_ok=True)
        return False
    recorded = _recorded(artefact)
    if recorded is not None and recorded.get("fingerprint") == fingerprint(settings):
        return True
    if recorded is None:
        reason = "no record of the settings that produced it"
    else:
        changed = changed_settings(recorded.get("settings") or {}, as_json(settings))
        reason = "changed: " + ", ".join(changed or ["settings"])
    log.warning("%s %s was produced with other settings (%s); recomputing it", what, artefact, reason)
    forget_artefact(artefact, *companions)
    return False


def save_safetensors(tensors: dict[str, Any], path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Write ``tensors`` (name -> tensor) as a safetensors file at ``path`` atomically (see the module)."""
    from safetensors.torch import save

    plain = {name: tensor.detach().cpu().contiguous() for name, tensor in tensors.items()}
    return write_bytes_atomic(path, save(plain, metadata=metadata))
