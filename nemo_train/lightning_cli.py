"""LightningCLI for nemo-train: any LightningModule / DataModule by ``class_path``, configs saved without secrets.

Every output of a run lives under ``trainer.default_root_dir`` (the one path a preset names):
``config.yaml``, ``checkpoints/`` (a ``ModelCheckpoint`` without ``dirpath``) and ``wandb/`` (a
``WandbLogger`` without ``save_dir``) as sibling folders, so ``--trainer.default_root_dir`` moves them all.
"""

from __future__ import annotations

import os
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from nemo_train.callbacks.progress import progress_callbacks
from nemo_train.callbacks.resume import LastCheckpoint, RandomStates
from nemo_train.errors import UserInputError
from nemo_train.provenance import provenance_record
from nemo_train.quiet import interactive, is_verbose, set_output
from nemo_train.runs import check_out_dir
from nemo_train.secrets import scrub_secrets
from nemo_train.sharding import default_rendezvous_timeout, keep_collective_timeout, rendezvous_line
from nemo_train.store import RunLock, write_bytes_atomic, write_json_atomic

#: Sub-folders of ``trainer.default_root_dir``.
CHECKPOINT_DIR = "checkpoints"


def _namespaces(value: Any) -> list[Any]:
    """The ``class_path`` / ``init_args`` entries of a trainer option (one, a list, or none)."""
    items = value if isinstance(value, list) else [value]
    return [item for item in items if hasattr(item, "class_path") and hasattr(item, "init_args")]


def derive_output_paths(trainer: Any) -> None:
    """Fill what a preset leaves empty from ``default_root_dir``: checkpoint ``dirpath``, logger ``save_dir``
    (``<root>/checkpoints``, ``<root>/wandb``) and the W&B run name (the folder's name)."""
    root = Path(trainer.default_root_dir or ".")
    for logger in _namespaces(trainer.get("logger")):
        if "save_dir" in logger.init_args and logger.init_args.save_dir is None:
            logger.init_args.save_dir = str(root)  # W&B writes into <save_dir>/wandb
        if logger.class_path.endswith("WandbLogger") and logger.init_args.get("name") is None:
            logger.init_args.name = root.resolve().name
    for callback in _namespaces(trainer.get("callbacks")):
        if callback.class_path.endswith("ModelCheckpoint") and callback.init_args.get("dirpath") is None:
            callback.init_args.dirpath = str(root / CHECKPOINT_DIR)


class ScrubbedSaveConfigCallback(SaveConfigCallback):
    """Saves the run's config next to its checkpoints and into the logger, with secrets redacted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["save_to_log_dir"] = False  # we write the scrubbed copy ourselves
        super().__init__(*args, **kwargs)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """The redacted config (``config.yaml``) and the run's provenance (``provenance.json``: commit, package
        versions, the files the config names with their digests, model ids) beside the checkpoints; both go to
        the loggers too (W&B's config)."""
        config = scrub_secrets(yaml.safe_load(self.parser.dump(self.config, skip_none=False, skip_check=True)))
        log_dir = Path(trainer.default_root_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(log_dir / self.config_filename, yaml.safe_dump(config, sort_keys=False).encode("utf-8"))
        record = provenance_record(stage, config)
        write_json_atomic(log_dir / "provenance.json", record)
        for logger in trainer.loggers:
            logger.log_hyperparams(
                {"config": config, "provenance": {k: v for k, v in record.items() if k != "settings"}}
            )


def processor_loader(model_name_or_path: str) -> Callable[[str], Any]:
    """The loader of the explainer's processor: :func:`nemo_train.models.vlm.load_processor` takes any id the
    explainer itself loads (hub id, local folder, ``embedded:tiny-qwen2-vl``)."""
    from nemo_train.models.vlm import load_processor  # transformers: imported only when an explainer is configured

    return load_processor


def link_shared_arguments(parser: Any) -> None:
    """Values model and data must agree on, given once: the explainer's model id (set on the model; the data
    renders with the same id's processor) and the number of classes (the datamodule's ``num_classes``
    attribute becomes the classifier's). A link whose source or target a preset's classes lack is skipped."""
    parser.link_arguments("model.init_args.model_name_or_path", "data.init_args.model_name_or_path", apply_on="parse")
    parser.link_arguments(
        "model.init_args.model_name_or_path",
        "data.init_args.processor_loader",
        compute_fn=processor_loader,
        apply_on="parse",
    )
    parser.link_arguments("data.num_classes", "model.init_args.num_classes", apply_on="instantiate")


class NemoLightningCLI(LightningCLI):
    """``nemo-train fit|validate|test|predict``: model and data chosen by ``class_path`` in YAML."""

    def __init__(self, args: list[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("save_config_callback", ScrubbedSaveConfigCallback)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        # the nemo-train CLI prints one line; options are matched exactly (``--n`` is no ``--num_nodes``)
        kwargs.setdefault("parser_kwargs", {"exit_on_error": False, "allow_abbrev": False})
        # Lightning's bar on a terminal, log lines elsewhere (progress_callbacks); the model summary with --verbose
        kwargs.setdefault("trainer_defaults", {"enable_model_summary": is_verbose()})
        set_output(verbose=is_verbose())  # again: importing lightning reset its loggers to INFO
        with warnings.catch_warnings():
            # nemo-train passes its own arguments on (sys.argv holds the command name and the demo's options)
            warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python.*")
            super().__init__(
                L.LightningModule,
                L.LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                args=args,
                **kwargs,
            )

    def add_arguments_to_parser(self, parser: Any) -> None:
        link_shared_arguments(parser)
        parser.add_argument(
            "--rendezvous_timeout",
            type=float,
            default=default_rendezvous_timeout(),
            help="seconds the processes of a multi-device or multi-node run wait for each other at the start; "
            "then one line naming what they waited for (the strategy's own timeout still bounds later collectives)",
        )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        derive_output_paths(config.trainer)
        defaults = self.trainer_defaults.get("callbacks") or []
        defaults = list(defaults) if isinstance(defaults, list) else [defaults]
        added = resume_callbacks(config.trainer) + line_progress(config.trainer)
        self.trainer_defaults = {**self.trainer_defaults, "callbacks": defaults + added}

    def _parse_ckpt_path(self) -> None:  # Lightning reads the checkpoint's hyper-parameters here: check it first
        if self.config.get("subcommand"):
            config = self.config[self.config.subcommand]
            check_ckpt_path(config.get("ckpt_path"), config.trainer.default_root_dir)
        super()._parse_ckpt_path()

    def _run_subcommand(self, subcommand: str) -> None:
        """Run ``subcommand`` holding the writer lock of ``trainer.default_root_dir`` (checked first): a second
        run on the folder exits with one line instead of mixing its config.yaml with the first one's checkpoints."""
        seconds = self.config[subcommand].get("rendezvous_timeout") or default_rendezvous_timeout()
        with default_root_dir_lock(self.trainer.default_root_dir), bounded_start(self.trainer, seconds):
            super()._run_subcommand(subcommand)


class CollectiveTimeout(L.Callback):
    """Gives the process group the strategy's own collective timeout back once it is up (the start was bounded
    by the shorter rendezvous timeout), and notes that the processes met."""

    def __init__(self, timeout: timedelta) -> None:
        self.timeout = timeout
        self.started = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.started = True  # Lightning sets up callbacks after the strategy's process group
        keep_collective_timeout(self.timeout)


@contextmanager
def bounded_start(trainer: L.Trainer, seconds: float) -> Iterator[None]:
    """Run a Lightning stage whose processes wait at most ``seconds`` for each other at the start (the strategy's
    process-group timeout while it starts: DDP, FSDP, DeepSpeed); a start that times out is one line
    (:func:`nemo_train.sharding.rendezvous_line`). A one-process run is left as it is."""
    strategy = trainer.strategy
    timeout = getattr(strategy, "_timeout", None)  # the parallel strategies' process-group timeout
    world_size = getattr(strategy, "num_nodes", 1) * getattr(strategy, "num_processes", 1)
    if world_size < 2 or not isinstance(timeout, timedelta):
        yield
        return
    started = CollectiveTimeout(timeout)
    strategy._timeout = min(timeout, timedelta(seconds=seconds))
    trainer.callbacks.append(started)
    try:
        yield
    except torch.distributed.DistError as err:
        if started.started:  # a collective of the running stage failed, not the start: its own error
            raise
        raise UserInputError(rendezvous_line(world_size, seconds)) from err
    finally:
        strategy._timeout = timeout
        trainer.callbacks.remove(started)


def check_strategy_packages(args: list[str]) -> None:
    """A one-line error naming the extra to install when the run's ``trainer.strategy`` (in a ``--config`` file or
    ``--trainer.strategy``) is DeepSpeed and ``deepspeed`` is not installed (the parser's own message is a dump)."""
    import importlib.util

    named = [value for flag, value in zip(args, args[1:]) if flag == "--trainer.strategy"]
    for flag, value in zip(args, args[1:]):
        if flag == "--config" and Path(value).is_file():
            config = yaml.safe_load(Path(value).read_text(encoding="utf-8")) or {}
            trainer = config.get("trainer") if isinstance(config, dict) else None
            strategy = trainer.get("strategy") if isinstance(trainer, dict) else None
            named.append(strategy.get("class_path", "") if isinstance(strategy, dict) else str(strategy or ""))
    if any("deepspeed" in name.lower() for name in named) and importlib.util.find_spec("deepspeed") is None:
        raise UserInputError(
            "the DeepSpeed strategy needs the deepspeed package, which is not installed: "
            "pip install -e '.[deepspeed]' (or use DDP / FSDP: configs/explainer/strategies/)"
        )


def resume_callbacks(trainer: Any) -> list[L.Callback]:
    """What makes ``fit --ckpt_path last`` exact (:mod:`nemo_train.callbacks.resume`): the epoch seeds, and a
    ``last.ckpt`` written after every epoch (unless checkpointing is off)."""
    callbacks: list[L.Callback] = [RandomStates()]
    if trainer.get("enable_checkpointing") is not False:
        callbacks.append(LastCheckpoint())
    return callbacks


def line_progress(trainer: Any) -> list[L.Callback]:
    """Off a terminal, progress as log lines (:class:`~nemo_train.callbacks.progress.LineProgressBar`) in place of
    Lightning's bar, unless the run turns progress off or names a progress bar of its own."""
    named = [c.class_path for c in _namespaces(trainer.get("callbacks"))]
    if trainer.get("enable_progress_bar") is False or any("ProgressBar" in path for path in named):
        return []
    return progress_callbacks(terminal=interactive())


def process_lock_name() -> str:
    """The lock file of this process: ``.lock`` for a run's first process (so a second run is refused), and one of
    its own for each process a launcher started beside it (Lightning's ``LOCAL_RANK`` / ``NODE_RANK``, torchrun's
    ``RANK``), which run in the same folder by design."""
    ranks = (
        [os.environ["RANK"]] if "RANK" in os.environ else [os.environ.get(k, "0") for k in ("NODE_RANK", "LOCAL_RANK")]
    )
    return RunLock.FILE_NAME if all(r == "0" for r in ranks) else f"{RunLock.FILE_NAME}.rank-{'-'.join(ranks)}"


@contextmanager
def default_root_dir_lock(root: str | Path) -> Iterator[RunLock]:
    """Hold the writer lock of a run's ``default_root_dir``; a file, a folder that cannot be written or a folder
    in use by another run is a one-line error naming it."""
    try:
        check_out_dir(root)
        lock = RunLock(root, name=process_lock_name()).acquire()
    except UserInputError as err:
        raise UserInputError(f"trainer.default_root_dir: {err}".replace("another out_dir", "another folder")) from None
    try:
        yield lock
    finally:
        lock.release()


def check_ckpt_path(ckpt_path: str | None, root: str | None) -> None:
    """A one-line error, before anything runs, when ``--ckpt_path`` (a file, or ``last``: the
    ``<root>/checkpoints/last.ckpt`` a run writes) is a damaged checkpoint: a zip archive cut short or failing
    its checksums (every ``torch.save`` file is one), or a folder. Missing files are left to Lightning's own message."""
    if not ckpt_path or ckpt_path in ("best", "hpc", "registry"):
        return
    path = Path(root or ".") / CHECKPOINT_DIR / "last.ckpt" if ckpt_path == "last" else Path(ckpt_path)
    if path.is_dir():
        found = sorted(str(p) for p in path.rglob("*.ckpt"))[:3]
        hint = f"; e.g. {', '.join(found)}" if found else f" (none under {str(path)!r})"
        raise UserInputError(f"ckpt_path {str(path)!r} is a folder; expected a checkpoint file (.ckpt){hint}")
    if not path.is_file():
        return
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
        problem = None if bad is None else f"member {bad} fails its checksum"
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        problem = f"{type(err).__name__}: {str(err).splitlines()[0][:100] if str(err) else 'damaged'}"
    if problem is not None:
        raise UserInputError(
            f"checkpoint {str(path)!r} is damaged ({problem}); delete it and resume from another checkpoint "
            "(or train from the start without --ckpt_path)"
        )
