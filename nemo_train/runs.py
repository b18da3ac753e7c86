"""The run floor: how every pipeline command opens a run, the same way.

Every pipeline command (``nemo-eval``, ``distill-teacher``, ``distill-eval``, ``differences``,
``counterfactuals``, ``lbee``, ``explain``, ``demo``) takes the same run arguments as top-level options,
spelled and documented once here (:data:`RUN_ARGS_HELP`, the aliases :data:`OutDir`, :data:`Seed`,
:data:`Device`), and is wrapped by :func:`run_command`, which opens the run before the command does any
work:

1. ``out_dir`` is checked (a file, or a folder that cannot be written: one-line error naming it) and the
   device resolved (``auto`` -> ``cuda`` when a GPU is visible; ``cuda`` without one: one-line error);
2. ONE writer lock (:class:`~nemo_train.store.RunLock`) is taken on ``out_dir`` for the whole run: a second
   run on the same folder exits with one line naming the holder;
3. the global generators (Python, NumPy, torch) are seeded with ``seed``;
4. ``<out_dir>/provenance.json`` is written atomically (:func:`nemo_train.provenance.provenance`): commit,
   package versions, the command's settings (secrets redacted), the files and model ids it names with their
   digests, and the stand-ins it uses; no command line is recorded;
5. with ``wandb``, a W&B run is started under ``<out_dir>/wandb`` (quiet, no argv / git / code capture) with
   the provenance as its config, and everything logged to it is redacted.

When the command returns, the provenance records when it ``finished`` (a run killed before has ``null`` there, and
its report says it is partial), and a command with results (:data:`REPORTED_COMMANDS`) writes its report page
through one hook (:data:`REPORT_WRITER`), which also logs the stored results and the page to the W&B run.

A run refused before it wrote anything of its own (bad input, a missing checkpoint) leaves the folder as it
found it: the lock file, ``provenance.json`` and W&B folder it created are removed again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

from jsonargparse.typing import restricted_number_type

from nemo_train.errors import UserInputError
from nemo_train.provenance import provenance
from nemo_train.quiet import warn_once
from nemo_train.sharding import DeviceArgs, Ranks, running_on
from nemo_train.store import RunLock, write_bytes_atomic, write_json_atomic

#: The folder a run writes every output to.
OutDir = str
#: A seed of the global generators: 0 to 2**32 - 1.
Seed = restricted_number_type("Seed", int, [(">=", 0), ("<=", 2**32 - 1)])
#: Where the command's models run.
Device = Literal["auto", "cpu", "cuda"]

#: The help of the run arguments, the same in every command's ``--help`` (filled into each docstring).
RUN_ARGS_HELP = {
    "out_dir": (
        "the run's folder: every output of the command, its reply cache and ``provenance.json`` (commit, package "
        "versions, settings with secrets redacted, model ids, file digests, stand-ins). One run at a time (a "
        "second run on it exits with one line); a rerun resumes here."
    ),
    "wandb": (
        "also log to Weights & Biases under ``<out_dir>/wandb`` (offline without a key), with the provenance as "
        "the run's config; the command line is never recorded."
    ),
    "seed": "seed of Python's, NumPy's and torch's global generators, set when the run opens.",
    "device": "where the command's models run: ``auto`` (a GPU when one is visible), ``cpu`` or ``cuda``.",
}
RUN_ARG_NAMES = tuple(RUN_ARGS_HELP)
#: The help of the launch arguments of the commands that split their work over processes (Lightning Fabric;
#: ``device`` above is the accelerator).
LAUNCH_ARGS_HELP = {
    "devices": "processes per machine, one per GPU (on CPU: worker processes); the pending items are split among them.",
    "num_nodes": "machines (under SLURM or torchrun, as the cluster assigned them).",
    "strategy": "how the processes are launched: ``auto`` (``ddp`` for more than one), ``ddp`` or ``ddp_spawn``.",
}
PROVENANCE_FILE = "provenance.json"
#: The commands with results: each run of one ends by writing its report page ``<out_dir>/report/index.html``.
REPORTED_COMMANDS = frozenset(
    {"nemo-eval", "distill-eval", "distill-teacher", "differences", "lbee", "counterfactuals", "explain"}
)
#: What writes a run's report page (``module:function``, called with the run folder and its W&B run or ``None``,
#: returning the page's path); imported when a run ends, as the report renderer sits above the capabilities.
REPORT_WRITER = "nemo_train.reports.build:close_run"
#: What the run floor itself writes into an out_dir.
RUN_FLOOR_FILES = frozenset({RunLock.FILE_NAME, PROVENANCE_FILE, "wandb"})
#: The name of the file every rank creates and removes to learn that a folder can be written.
WRITE_PROBE = ".write-probe-"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class RunArgs:
    """The run arguments every pipeline command takes (see :data:`RUN_ARGS_HELP`)."""

    out_dir: OutDir
    wandb: bool = False
    seed: int = 0
    device: Device = "auto"

    def __post_init__(self) -> None:
        if not 0 <= int(self.seed) <= 2**32 - 1:
            raise UserInputError(f"seed={self.seed} is out of range; expected 0 to {2**32 - 1}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise UserInputError(f"device={self.device!r}; expected 'auto', 'cpu' or 'cuda'")


@dataclass
class Run:
    """An open run: its arguments, folder, resolved device, provenance and W&B run (or ``None``)."""

    command: str
    args: RunArgs
    out_dir: Path
    device: str
    provenance: dict[str, Any]
    wandb_run: Any = None


def check_out_dir(out_dir: str | Path) -> Path:
    """``out_dir`` as a path, or a one-line error when it is a file or cannot be written (nothing is created)."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise UserInputError(f"out_dir {str(path)!r} is a file; expected a folder (or a new path)")
    existing = path
    while not existing.exists():
        parent = existing.parent
        if parent == existing:
            break
        existing = parent
    if not existing.is_dir():
        raise UserInputError(f"out_dir {str(path)!r} is under {str(existing)!r}, which is a file; expected a folder")
    try:  # a real write: os.access says yes to root on read-only file systems
        fd, probe = tempfile.mkstemp(dir=existing, prefix=WRITE_PROBE)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise UserInputError(
            f"out_dir {str(path)!r} cannot be written ({err.strerror}); choose another out_dir"
        ) from None
    return path


def resolve_device(device: str) -> str:
    """``cpu`` or ``cuda``: ``auto`` is a GPU when one is visible; ``cuda`` without one is a one-line error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserInputError("device='cuda' but no CUDA device is visible; use --device cpu or auto")
    return device


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (Lightning's helper, as the commands use)."""
    from lightning.fabric.utilities.seed import seed_everything as _seed

    _seed(int(seed), verbose=False)


@contextmanager
def open_run(
    command: str,
    args: RunArgs,
    settings: dict[str, Any] | None = None,
    stand_ins: list[str] | None = None,
    ranks: Ranks | None = None,
) -> Iterator[Run]:
    """Open a run of ``command`` (check, lock, seed, provenance, W&B; see the module) for a ``with`` block.

    With several ``ranks`` each takes its own lock (:meth:`~nemo_train.sharding.Ranks.lock`) and only rank 0
    writes the provenance and logs to W&B.
    """
    ranks = ranks or Ranks()
    out = check_out_dir(args.out_dir)
    device = ranks.device(resolve_device(args.device))
    created = _missing_folders(out)
    lock_existed = (out / RunLock.FILE_NAME).exists()
    before = _entries(out)
    old_provenance = (out / PROVENANCE_FILE).read_bytes() if (out / PROVENANCE_FILE).is_file() else None
    lock = ranks.lock(out).acquire()
    run = None
    try:
        seed_everything(args.seed)
        record = provenance(command, args, device, settings or {}, stand_ins or [])
        record["world_size"] = ranks.world_size
        record["finished"] = None  # set when the run ends normally: a report of a killed run says it is partial
        if ranks.is_main:
            write_json_atomic(out / PROVENANCE_FILE, record)
        run = Run(command, args, out, device, record)
        if args.wandb and ranks.is_main:
            run.wandb_run = _start_wandb(run)
        yield run
    except BaseException:
        _finish_wandb(run)
        if ranks.is_main and _entries(out, skip=("wandb",)) == {k: v for k, v in before.items() if k != "wandb"}:
            _undo(out, created, old_provenance, wandb_existed="wandb" in before, lock=lock, lock_existed=lock_existed)
        raise
    else:
        try:
            if ranks.is_main:
                _close(run)
        finally:
            _finish_wandb(run)
    finally:
        lock.release()


def run_command(command: str, stand_ins: Callable[[dict[str, Any]], list[str]] | None = None) -> Callable[[F], F]:
    """Decorate a pipeline entry function so that each call opens a run (:func:`open_run`) around it.

    The function takes the run arguments it needs as top-level parameters (``out_dir`` always; ``wandb``,
    ``seed``, ``device`` where they apply) and documents none of them: their help (:data:`RUN_ARGS_HELP`) is
    added to its docstring, so every command's ``--help`` says the same. ``device`` reaches the function
    resolved (``cpu`` or ``cuda``). ``stand_ins`` names the non-model parts in use from the call's arguments.
    """

    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        if "out_dir" not in signature.parameters:
            raise TypeError(f"{func.__qualname__} needs an out_dir parameter to be a pipeline command")
        names = [name for name in RUN_ARG_NAMES if name in signature.parameters]
        launch = [name for name in LAUNCH_ARGS_HELP if name in signature.parameters]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = bound.arguments
            check_no_empty_choice(signature, values)
            run_args = RunArgs(**{name: values[name] for name in names})
            settings = {k: v for k, v in values.items() if k not in RUN_ARG_NAMES and k not in launch}
            named = stand_ins(values) if stand_ins is not None else []
            ranks = _launch(run_args, values) if launch else Ranks()
            quiet = contextlib.nullcontext() if ranks.is_main else contextlib.redirect_stdout(io.StringIO())
            with open_run(command, run_args, settings, named, ranks) as run, running_on(ranks), quiet:
                if "device" in values:
                    values["device"] = run.device
                return func(*bound.args, **bound.kwargs)

        wrapper.__doc__ = with_run_args_help(func.__doc__ or "", names + launch)
        wrapper.run_command = command  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def check_no_empty_choice(signature: inspect.Signature, values: dict[str, Any]) -> None:
    """A one-line error for an empty list given to an option whose default (``None``) means "the default list":
    ``--methods []`` used to run every default method silently."""
    for name, value in values.items():
        if isinstance(value, (list, tuple)) and not value and signature.parameters[name].default is None:
            raise UserInputError(f"{name}=[] names nothing; name at least one, or leave {name} out for the default")


def _launch(run_args: RunArgs, values: dict[str, Any]) -> Ranks:
    """Start the command's processes (Lightning Fabric) after the checks that need no process of their own."""
    check_out_dir(run_args.out_dir)
    accelerator = resolve_device(run_args.device)
    return Ranks(
        DeviceArgs(
            devices=values.get("devices", 1),
            num_nodes=values.get("num_nodes", 1),
            accelerator=accelerator,
            strategy=values.get("strategy", "auto"),
        )
    )


def with_run_args_help(doc: str, names: list[str] | tuple[str, ...] = RUN_ARG_NAMES) -> str:
    """``doc`` (Google style) with the shared help of ``names`` appended to its ``Args:`` section."""
    lines = doc.splitlines()
    documented = [n for n in names if any(line.strip().startswith(f"{n}:") for line in lines)]
    if documented:
        raise TypeError(f"run arguments {documented} are documented once, in nemo_train.runs.RUN_ARGS_HELP")
    header = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if header is None:
        indent = "    "
        lines += ["", f"{indent}Args:"]
        header, end = len(lines) - 1, len(lines)
    else:
        indent = lines[header][: len(lines[header]) - len(lines[header].lstrip())]
        end = next(
            (i for i in range(header + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(indent + " ")),
            len(lines),
        )
        while end > header + 1 and not lines[end - 1].strip():
            end -= 1
    help_of = {**RUN_ARGS_HELP, **LAUNCH_ARGS_HELP}
    added = [f"{indent}    {name}: {help_of[name]}" for name in names]
    return "\n".join(lines[:end] + added + lines[end:]) + ("\n" if doc.endswith("\n") else "")


# ---------------------------------------------------------------------------------------------- W&B


def _start_wandb(run: Run) -> Any:
    from nemo_train.loggers import init_run, redact_logging

    wandb_run = init_run(
        run.out_dir, project="nemo-train", job_type=run.command, name=run.out_dir.name, config=run.provenance
    )
    redact_logging(wandb_run)
    return wandb_run


def _finish_wandb(run: Run | None) -> None:
    if run is None or run.wandb_run is None:
        return
    import wandb

    if wandb.run is run.wandb_run:
        run.wandb_run.finish()
    run.wandb_run = None


# ---------------------------------------------------------------------------------------------- the end


def _close(run: Run) -> None:
    """The end of a run that returned: its provenance says when it finished, and a command with results
    (:data:`REPORTED_COMMANDS`) writes its report page (:data:`REPORT_WRITER`), printed and attached to its W&B
    run. A report that cannot be written is one warning line; the run's results stand."""
    run.provenance["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(run.out_dir / PROVENANCE_FILE, run.provenance)
    if run.command not in REPORTED_COMMANDS:
        return
    module, name = REPORT_WRITER.split(":")
    try:
        page = getattr(importlib.import_module(module), name)(run.out_dir, run.wandb_run)
    except Exception as err:  # noqa: BLE001 - the page is a view of the results; never lose a run over it
        warn_once(f"the report page of {str(run.out_dir)!r} could not be written ({type(err).__name__}: {err})")
        return
    print(f"report: {page}")


# ---------------------------------------------------------------------------------------------- undo


def _missing_folders(path: Path) -> list[Path]:
    """The folders that creating ``path`` will create, deepest first."""
    missing = []
    while not path.exists() and path.parent != path:
        missing.append(path)
        path = path.parent
    return missing


def _entries(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """Top-level entries of ``folder`` (name -> mtime, size) other than the run floor's own files."""
    if not folder.is_dir():
        return {}
    own = {RunLock.FILE_NAME, PROVENANCE_FILE, *skip}
    out = {}
    for entry in os.scandir(folder):
        if entry.name in own or _floor_file(entry.name):
            continue
        try:
            stat = entry.stat(follow_symlinks=False)
        except FileNotFoundError:  # removed since it was listed (another process's scratch file)
            continue
        out[entry.name] = (stat.st_mtime_ns, stat.st_size if entry.is_file() else 0)
    return out


def _floor_file(name: str) -> bool:
    """Whether ``name`` is a file the run floor of some rank writes: the provenance's scratch file
    (:func:`~nemo_train.store.write_bytes_atomic`), a write probe (:func:`check_out_dir`) or another rank's lock."""
    scratch = name.startswith(f".{PROVENANCE_FILE}.") and name.endswith(".tmp")
    return scratch or name.startswith((WRITE_PROBE, f"{RunLock.FILE_NAME}.rank-"))


def _undo(
    out: Path, created: list[Path], old_provenance: bytes | None, wandb_existed: bool, lock: RunLock, lock_existed: bool
) -> None:
    """Put back the folder as the run found it (the run failed before writing anything of its own)."""
    lock.release()
    if old_provenance is not None:
        write_bytes_atomic(out / PROVENANCE_FILE, old_provenance)
    else:
        (out / PROVENANCE_FILE).unlink(missing_ok=True)
    if not wandb_existed:
        shutil.rmtree(out / "wandb", ignore_errors=True)
    if not lock_existed:
        (out / RunLock.FILE_NAME).unlink(missing_ok=True)
    if created:
        for folder in created:
            try:
                folder.rmdir()
            except OSError:
                break
