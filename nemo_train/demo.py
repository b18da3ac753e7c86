"""``nemo-train demo``: the whole toolkit once, end to end, on the embedded default data and models."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from nemo_train.errors import UserInputError


@dataclass
class DemoContext:
    """What the demo steps share: the output folder, trained checkpoints and other artifacts."""

    out_dir: Path
    fast: bool = False
    epochs: int = 3
    checkpoints: dict[str, Path] = field(default_factory=dict)
    artifacts: dict[str, Path] = field(default_factory=dict)
    results: dict[str, dict] = field(default_factory=dict)


def train_cmnist_pair(ctx: DemoContext) -> None:
    """Train Model A and Model B on biased CMNIST and print their aligned / conflicting accuracy."""
    from datamodules.cmnist import CMNISTDataModule
    from nemo_train.loggers import WandbLogger
    from nemo_train.models import ClassifierModule

    rows = []
    for name, bias in (("cmnist_model_a", "model_a"), ("cmnist_model_b", "model_b")):
        L.seed_everything(0, verbose=False)
        run_dir = ctx.out_dir / name
        datamodule = CMNISTDataModule(bias=bias, train_size=4000 if ctx.fast else 6000)
        module = ClassifierModule(backbone="bias_cnn", num_classes=10, lr=3e-3)
        checkpoint = ModelCheckpoint(
            dirpath=run_dir,
            filename="best",
            monitor="val/acc",
            mode="max",
            save_last=True,
            enable_version_counter=False,
        )
        trainer = L.Trainer(
            max_epochs=ctx.epochs,
            accelerator="auto",
            devices=1,
            logger=WandbLogger(name=f"demo_{name}", save_dir=str(run_dir)),
            callbacks=[checkpoint],
            enable_model_summary=False,
            log_every_n_steps=20,
        )
        trainer.fit(module, datamodule)
        (metrics,) = trainer.test(module, datamodule, ckpt_path=checkpoint.best_model_path, verbose=False)
        ctx.checkpoints[name] = Path(checkpoint.best_model_path)
        ctx.results[name] = metrics
        rows.append((name, bias, metrics["test/acc"], metrics["test/acc_aligned"], metrics["test/acc_conflicting"]))
        import wandb

        wandb.finish()

    print("\nCMNIST model pair (test grid: 10 digits x 10 colours x 13 angles)")
    print(f"{'model':<16} {'bias':<9} {'acc':>6} {'aligned':>8} {'conflicting':>12}")
    for name, bias, acc, aligned, conflicting in rows:
        print(f"{name:<16} {bias:<9} {acc:>6.3f} {aligned:>8.3f} {conflicting:>12.3f}")


#: The demo's steps in order: name -> "module:function" taking a DemoContext.
DEMO_STEPS: dict[str, str] = {
    "cmnist_pair": "nemo_train.demo:train_cmnist_pair",
    "counterfactuals": "nemo_train.competency.pipeline:demo_step",
    "explainer": "nemo_train.explainer.demo:demo_step",
    "nemo_eval": "nemo_train.nemo.run:demo_step",
}


def demo(
    out_dir: str = "checkpoints/demo", epochs: int = 3, fast: bool = False, steps: list[str] | None = None
) -> DemoContext:
    """Run the toolkit end to end on the embedded default (CMNIST pair, then every later capability).

    Args:
        out_dir: where checkpoints, W&B offline runs and step outputs go.
        epochs: training epochs of the CMNIST classifiers.
        fast: smaller data everywhere (used by the tests).
        steps: names of the steps to run (default: all), e.g. ``[cmnist_pair]``.
    """
    ctx = DemoContext(out_dir=Path(out_dir), fast=fast, epochs=epochs)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    chosen = steps or list(DEMO_STEPS)
    unknown = [s for s in chosen if s not in DEMO_STEPS]
    if unknown:
        raise UserInputError(f"unknown demo step(s) {unknown}; known steps: {list(DEMO_STEPS)}")
    for name in chosen:
        module_name, func_name = DEMO_STEPS[name].split(":")
        start = time.perf_counter()
        print(f"\n=== demo step: {name}")
        getattr(importlib.import_module(module_name), func_name)(ctx)
        print(f"=== {name} done in {time.perf_counter() - start:.0f} s")
    return ctx
