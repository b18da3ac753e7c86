"""What a run was: the record :mod:`nemo_train.runs` writes to ``<out_dir>/provenance.json`` (and W&B's config).

* ``git``: the commit of the source tree and whether it had uncommitted changes (``null`` outside a git
  checkout or without ``git``);
* ``packages``: versions of the libraries a number depends on (torch, lightning, transformers, ...);
* ``settings``: the command's arguments as JSON (objects as ``class_path`` / ``init_args``), secrets redacted;
* ``files``: every local file a setting names, with its SHA-256, and every model folder (a ``config.json``,
  an adapter or weight files at its top level) with the digest of each of those files; data folders are named,
  not hashed;
* ``model_ids``: hub ids and other model names a setting gives that are not local paths;
* ``stand_ins``: the non-model parts standing in for models (a keyword judge, a rule-based parser, ...).

No command line, environment or host is recorded.

**One entry per command.** Several commands may write into one ``out_dir`` (``nemo-eval``, then ``distill-teacher``
on the same folder, then ``nemo-eval`` again), and each of their outputs needs its provenance. The file's top level
is the record of the command that ran last (as a reader of one command's folder expects), and ``other_commands``
maps every other command that wrote into the folder to its own last record: :func:`provenance` carries them over
from the file it replaces, so no command's provenance is lost when another runs; a rerun of the same command
replaces its own entry. :func:`command_record` reads one command's record back. (Refusing a second command on a
folder was the other choice; it would break the folders commands share by design, such as a distillation run's.)
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import json
import math
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from nemo_train.secrets import scrub_secrets

#: Distributions whose versions are recorded (those not installed are left out).
PACKAGES = (
    "nemo-train",
    "torch",
    "torchvision",
    "lightning",
    "torchmetrics",
    "transformers",
    "peft",
    "accelerate",
    "bitsandbytes",
    "diffusers",
    "timm",
    "open_clip_torch",
    "scikit-learn",
    "numpy",
    "safetensors",
    "jsonargparse",
    "wandb",
)
#: Setting names whose values name models (hub ids, checkpoint paths, adapters).
MODEL_KEY = re.compile(r"model|checkpoint|classifier|student|target|adapter|weights|pretrained|clip|name_or_path", re.I)
#: Files at the top of a folder that make it a model folder (hashed one by one).
MODEL_FILE = re.compile(r"(\.safetensors|\.bin|\.ckpt|\.pt|\.pth|\.pkl|\.gguf|config\.json|\.model)$")
MAX_DEPTH = 6

_digests: dict[tuple[str, int, int], str] = {}


#: The run's record in its ``out_dir``.
FILE_NAME = "provenance.json"
#: The key of the other commands' records (see the module).
OTHER_COMMANDS = "other_commands"


def provenance(command: str, args: Any, device: str, settings: dict[str, Any], stand_ins: list[str]) -> dict[str, Any]:
    """The provenance record of a run of ``command`` with run arguments ``args`` and ``settings``, with the records
    of the other commands that wrote into ``args.out_dir`` before (see the module)."""
    run = {
        "out_dir": str(args.out_dir),
        "wandb": bool(args.wandb),
        "seed": int(args.seed),
        "device": args.device,
        "device_used": device,
    }
    return with_other_commands(provenance_record(command, settings, stand_ins, run), Path(args.out_dir) / FILE_NAME)


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def with_other_commands(record: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """``record`` with ``other_commands``: the last record of every other command in the provenance file at
    ``path`` (its top-level record and those it carried over); an unreadable file carries nothing over."""
    old = _read_record(Path(path))
    if old is None:
        return record
    others = old.get(OTHER_COMMANDS) if isinstance(old.get(OTHER_COMMANDS), dict) else {}
    others = {name: entry for name, entry in others.items() if isinstance(entry, dict)}
    if isinstance(old.get("command"), str):
        others[old["command"]] = {k: v for k, v in old.items() if k != OTHER_COMMANDS}
    others.pop(record["command"], None)  # a rerun of this command replaces its own entry
    return {**record, OTHER_COMMANDS: others} if others else record


def command_record(path: str | Path, command: str) -> dict[str, Any] | None:
    """The last record of ``command`` in a provenance file (or the folder holding one), or ``None``."""
    path = Path(path)
    found = _read_record(path / FILE_NAME if path.is_dir() else path)
    if found is None:
        return None
    if found.get("command") == command:
        return {k: v for k, v in found.items() if k != OTHER_COMMANDS}
    entry = (found.get(OTHER_COMMANDS) or {}).get(command)
    return entry if isinstance(entry, dict) else None


def provenance_record(
    command: str, settings: dict[str, Any], stand_ins: list[str] | None = None, run: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The provenance record of ``command`` with ``settings``; a LightningCLI run (``fit``, ``validate``, ...) has
    no ``run`` arguments (its trainer's settings are in ``settings``)."""
    plain = scrub_secrets(to_jsonable(settings))
    record = {
        "command": command,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
        "python": platform.python_version(),
        "packages": package_versions(),
    }
    if run is not None:
        record["run"] = run
    return record | {
        "settings": plain,
        "files": named_files(plain),
        "model_ids": model_ids(plain),
        "stand_ins": list(stand_ins or []),
    }


def git_state(root: Path | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the checkout holding the package, or ``None`` when there is none."""
    root = root or Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def package_versions() -> dict[str, str]:
    """Installed versions of :data:`PACKAGES`."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def to_jsonable(obj: Any, depth: int = 0) -> Any:
    """``obj`` as plain JSON: dataclasses and objects as ``{"class_path", "init_args"}``, tensors by shape."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value, depth)
    if isinstance(obj, Path):
        return str(obj)
    if depth >= MAX_DEPTH:
        return _class_path(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v, depth + 1) for v in obj]
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):  # tensors and arrays
        return {"array": [int(s) for s in obj.shape], "dtype": str(obj.dtype)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return {"class_path": _class_path(obj), "init_args": to_jsonable(fields, depth + 1)}
    if isinstance(obj, type) or inspect.isroutine(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    hparams = getattr(obj, "hparams", None)
    if isinstance(hparams, dict):  # Lightning modules and datamodules
        return {"class_path": _class_path(obj), "init_args": to_jsonable(dict(hparams), depth + 1)}
    if _is_torch_module(obj):  # weights are not settings: a model object is named by its class
        return {"class_path": _class_path(obj)}
    public = (
        {k: v for k, v in vars(obj).items() if not k.startswith("_") and _plain(v)} if hasattr(obj, "__dict__") else {}
    )
    return {"class_path": _class_path(obj), "init_args": to_jsonable(public, depth + 1)}


def _plain(value: Any) -> bool:
    """Worth recording as an option: not a function, a lock, a thread, a connection or a cache."""
    if inspect.isroutine(value):
        return False
    return not any(name in type(value).__name__ for name in ("Lock", "Thread", "Connection", "Cache", "Session"))


def _is_torch_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def _class_path(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _leaves(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted setting name, value)`` of every leaf (``init_args`` left out of the names)."""
    if isinstance(obj, dict):
        out = []
        for key, value in obj.items():
            name = prefix if key == "init_args" else f"{prefix}.{key}" if prefix else str(key)
            out += _leaves(value, name)
        return out
    if isinstance(obj, list):
        return [leaf for i, value in enumerate(obj) for leaf in _leaves(value, f"{prefix}.{i}")]
    return [(prefix, obj)]


def _local_path(value: Any) -> Path | None:
    if not isinstance(value, str) or not value or len(value) > 1024 or "\n" in value:
        return None
    try:
        path = Path(value).expanduser()
        return path if path.exists() else None
    except (OSError, ValueError):
        return None


def named_files(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The local files and folders ``settings`` names, with the digests described in the module."""
    found = []
    for name, value in _leaves(settings):
        path = _local_path(value)
        if path is None:
            continue
        if path.is_file():
            found.append(
                {"setting": name, "path": str(path), "sha256": file_sha256(path), "bytes": path.stat().st_size}
            )
            continue
        parts = sorted(p for p in path.iterdir() if p.is_file() and MODEL_FILE.search(p.name))
        entry: dict[str, Any] = {"setting": name, "path": str(path)}
        if parts:
            entry["sha256"] = {p.name: file_sha256(p) for p in parts}
        else:
            entry["folder"] = "data or other folder (named, not hashed)"
        found.append(entry)
    return found


def model_ids(settings: dict[str, Any]) -> list[dict[str, str]]:
    """``{"setting", "id"}`` for every value under a model-like name that is not a local path."""
    ids = []
    for name, value in _leaves(settings):
        last = [part for part in name.split(".") if not part.isdigit()][-1:] or [""]
        if name.endswith("class_path") or not MODEL_KEY.search(last[0]):
            continue
        if isinstance(value, str) and value and len(value) <= 200 and value.split() == [value]:
            if _local_path(value) is None:
                ids.append({"setting": name, "id": value})
    return ids


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file, computed once per (path, size, modification time) in a process."""
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _digests:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(chunk):
                digest.update(block)
        _digests[key] = digest.hexdigest()
    return _digests[key]
