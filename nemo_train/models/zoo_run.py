"""``nemo-train zoo``: train a zoo of biased shifts classifiers in one process and write each as a ``fit`` run.

The gap assignments are drawn from the command's ``seed`` (:func:`datamodules.shifts_zoo.draw_zoo`): a training zoo and a
held-out zoo whose assignments never occur in training. All members train together
(:class:`~nemo_train.models.zoo.StackedClassifiers`). Each member is then written as the folder an ordinary
``nemo-train fit`` of it would leave, ``<out_dir>/<split>/<name>/``:

* ``checkpoints/best.ckpt``: a ``ClassifierModule`` checkpoint (its weights at its best validation accuracy),
  read by :func:`~nemo_train.models.loading.load_classifier` and ``FitCheckpoint`` like any other;
* ``config.yaml``: the ``fit`` preset that trains this member alone (``nemo-train fit --config ...``);
* ``provenance.json``: the run's record with the member's gap spec under ``settings.data.init_args.gaps`` (as a
  ``fit`` records it) and its place in the zoo under ``settings.zoo``.

``<out_dir>/zoo.json`` lists the members (split, gaps, checkpoint, validation and test accuracy).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml

from datamodules.shifts import ShiftsDataModule, TestShift
from datamodules.shifts_zoo import GapDraw, ShiftsZooDataModule, ZooMember, draw_zoo
from nemo_train.console import print_table
from nemo_train.models.classifier import ClassifierModule
from nemo_train.models.trainer import quiet_lightning, quiet_trainer
from nemo_train.models.zoo import Execution, StackedClassifiers, member_module
from nemo_train.provenance import provenance_record
from nemo_train.quiet import interactive
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.store import write_bytes_atomic, write_json_atomic

__all__ = ["accuracy", "member_folder", "write_member", "zoo"]

#: The checkpoint of a member inside its folder, as ``fit`` names it.
CHECKPOINT = "checkpoints/best.ckpt"


def member_folder(out_dir: str | Path, member: ZooMember) -> Path:
    """``<out_dir>/<split>/<name>``: the ``default_root_dir`` a ``fit`` of the member would have."""
    return Path(out_dir) / member.split / member.name


@torch.no_grad()
def accuracy(module: ClassifierModule, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512) -> float:
    """Top-1 accuracy of ``module`` on uint8 ``images``."""
    right = 0
    for start in range(0, len(labels), batch_size):
        batch = images[start : start + batch_size].float() / 255.0
        right += int((module(batch).argmax(-1) == labels[start : start + batch_size]).sum())
    return right / max(len(labels), 1)


def fit_config(
    member: ZooMember, folder: Path, seed: int, max_epochs: int, model: dict[str, Any], data: dict[str, Any]
) -> dict[str, Any]:
    """The ``nemo-train fit`` preset that trains ``member`` alone into ``folder``."""
    return {
        "seed_everything": seed,
        "trainer": {
            "accelerator": "auto",
            "devices": 1,
            "max_epochs": max_epochs,
            "default_root_dir": str(folder),
            "logger": False,
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {"filename": "best", "monitor": "val/acc", "mode": "max", "save_last": True},
                }
            ],
        },
        "model": {"class_path": f"{ClassifierModule.__module__}.ClassifierModule", "init_args": model},
        "data": {"class_path": f"{ShiftsDataModule.__module__}.ShiftsDataModule", "init_args": data},
    }


def write_member(
    folder: Path,
    state: dict[str, torch.Tensor],
    config: dict[str, Any],
    zoo_record: dict[str, Any],
    epoch: int,
    global_step: int,
) -> Path:
    """Write a member's ``checkpoints/best.ckpt``, ``config.yaml`` and ``provenance.json``; returns the checkpoint."""
    path = folder / CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "state_dict": state,
        "hyper_parameters": dict(config["model"]["init_args"]),
        "datamodule_hyper_parameters": dict(config["data"]["init_args"]),
        "pytorch-lightning_version": L.__version__,
        "epoch": epoch,
        "global_step": global_step,
        "zoo": zoo_record,
    }
    torch.save(checkpoint, str(path) + ".tmp")
    Path(str(path) + ".tmp").replace(path)
    write_bytes_atomic(folder / "config.yaml", yaml.safe_dump(config, sort_keys=False).encode("utf-8"))
    write_json_atomic(folder / "provenance.json", provenance_record("zoo", {**config, "zoo": zoo_record}))
    return path


@run_command("zoo")
def zoo(
    out_dir: OutDir = "checkpoints/zoo_shifts",
    train_members: int = 8,
    heldout_members: int = 8,
    prefix: str = "shifts_zoo",
    gap_draw: GapDraw = "gaps_a",
    execution: Execution = "loop",
    max_epochs: int = 1,
    backbone: str = "bias_cnn",
    lr: float = 0.003,
    weight_decay: float = 1e-4,
    data_dir: str | None = None,
    train_size: int = 15000,
    test_size: int = 4000,
    typical_share: float = 0.2,
    test_shift: TestShift = "multi",
    batch_size: int = 64,
    wandb: bool = False,
    seed: Seed = 0,
    device: Device = "auto",
) -> dict[str, Any]:
    """Train a zoo of shifts classifiers with drawn gap assignments together, and write each as a ``fit`` run.

    One seed draws the whole zoo: the gap assignments (the same seed draws the same zoo), the rendered data, and
    member ``k``'s starting weights, those of a separate ``fit`` with ``seed_everything: seed + k`` (the seed its
    ``config.yaml`` names).

    Args:
        train_members, heldout_members: classifiers in the training zoo and in the held-out zoo (whose
            assignments never occur in the training zoo).
        prefix: member names are ``<prefix>_train_00``, ..., ``<prefix>_heldout_00``, ...
        gap_draw: how the gap assignments are drawn (:data:`datamodules.shifts_zoo.GapDraw`): ``gaps_a`` (the
            default: ``gaps_a``'s gap digits per factor, each member drawn independently) or ``balanced`` (every
            factor a gap of 4 digits, every digit of 2 factors, in blocks whose members rotate each digit's gap
            factors, so that a digit's gap factor does not carry over from one member to another).
        execution: ``loop`` (members one after another inside each step: fastest on a few CPU cores) or
            ``vmap`` (one batched call per layer: for a GPU).
        max_epochs: passes over each member's training images.
        backbone, lr, weight_decay: each member's ``ClassifierModule`` settings.
        data_dir, train_size, test_size, typical_share, test_shift, batch_size: each member's
            ``ShiftsDataModule`` settings (only the gaps differ between members).
    """
    started = time.perf_counter()
    seed = int(seed)  # the command line's Seed is an int subclass, which the members' config.yaml cannot hold
    members = draw_zoo(seed, train_members, heldout_members, prefix=prefix, gap_draw=gap_draw)
    datamodule = ShiftsZooDataModule(
        [m.gaps.gaps for m in members],
        data_dir=data_dir,
        train_size=train_size,
        test_size=test_size,
        typical_share=typical_share,
        test_shift=test_shift,
        batch_size=batch_size,
        seed=seed,
    )
    stacked = StackedClassifiers(
        len(members), backbone=backbone, lr=lr, weight_decay=weight_decay, member_seed=seed, execution=execution
    )
    with quiet_lightning():
        accelerator = "gpu" if device == "cuda" else "cpu"
        trainer = quiet_trainer(max_epochs, accelerator, enable_progress_bar=interactive())  # a bar on a terminal
        trainer.fit(stacked, datamodule=datamodule)
    rows, records = [], []
    for k, member in enumerate(members):
        folder = member_folder(out_dir, member)
        config = fit_config(
            member, folder, seed + k, max_epochs, stacked.member_hparams(), datamodule.member_hparams(k)
        )
        zoo_record = {"name": member.name, "split": member.split, "index": k, "seed": seed, "members": len(members)}
        path = write_member(
            folder, stacked.best_states[k], config, zoo_record, trainer.current_epoch, trainer.global_step
        )
        test = datamodule.members[k].test_set
        test_acc = accuracy(member_module(stacked, k, stacked.best_states[k]), test.images, test.labels)
        gaps = member.gap_lists()
        records.append(
            {**zoo_record, "gaps": gaps, "checkpoint": str(path), "val_acc": stacked.best_acc[k], "test_acc": test_acc}
        )
        shown = ", ".join(f"{f} {''.join(map(str, d))}" for f, d in gaps.items())
        rows.append((member.name, member.split, shown, stacked.best_acc[k], test_acc))
    summary = {
        "seed": seed,
        "gap_draw": gap_draw,
        "execution": execution,
        "test_shift": test_shift,
        "seconds": time.perf_counter() - started,
        "members": records,
    }
    write_json_atomic(Path(out_dir) / "zoo.json", summary)
    print_table(
        ["member", "zoo", "gaps (factor: digits)", "val acc", "test acc"],
        rows,
        title=f"Zoo of {len(members)} shifts classifiers (seed {seed}), trained together ({execution})",
        caption=f"test: the {test_shift}-factor shift split; checkpoints under {out_dir}/<zoo>/<member>/",
        digits=3,
    )
    return summary
