"""Demo step: fit the embedded tiny explainer on the six-cause pairs and report its explanation accuracy."""

from __future__ import annotations

import time
from typing import Any

#: The tiny explainer's recipe, shared with ``configs/explainer/tiny.yaml`` (a test keeps them equal).
TINY_MODEL_ARGS: dict[str, Any] = {
    "model_name_or_path": "embedded:tiny-qwen2-vl",
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "modules_to_save": ["visual", "lm_head"],
    "lr": 0.002,
    "warmup_steps": 10,
}
TINY_DATA_ARGS: dict[str, Any] = {
    "model_name_or_path": "embedded:tiny-qwen2-vl",
    "per_cause": 100,
    "severity_range": [0.75, 1.0],
    "use_counterfactual": False,
    "max_length": 256,
    "batch_size": 16,
}
TINY_MAX_EPOCHS = 32


def demo_step(ctx) -> None:
    """Fit the tiny explainer (CPU, no download), print its per-cause accuracy, record its adapter.

    Adds ``ctx.artifacts["explainer"]`` (the adapter folder, for ``generate_explanations`` / NEMO),
    ``ctx.artifacts["explainer_pairs"]`` (the held-out pairs JSONL) and ``ctx.results["explainer"]``.
    """
    import lightning as L
    import wandb
    from lightning.pytorch.callbacks import ModelCheckpoint

    from datamodules.explanations import ExplanationDataModule
    from nemo_train.callbacks.explanation_accuracy import ExplanationAccuracyCallback
    from nemo_train.explainer import ExplainerModule
    from nemo_train.explainer.causes import format_accuracy_table
    from nemo_train.loggers import WandbLogger

    run_dir = ctx.out_dir / "explainer_tiny"
    epochs = 2 if ctx.fast else TINY_MAX_EPOCHS
    L.seed_everything(0, verbose=False)
    data_args = {**TINY_DATA_ARGS, "per_cause": 30 if ctx.fast else TINY_DATA_ARGS["per_cause"]}
    datamodule = ExplanationDataModule(data_dir=str(run_dir / "pairs"), **data_args)
    module = ExplainerModule(adapter_dir=str(run_dir / "adapter"), **TINY_MODEL_ARGS)
    accuracy = ExplanationAccuracyCallback(max_new_tokens=24)
    trainer = L.Trainer(
        max_epochs=epochs,
        check_val_every_n_epoch=epochs,
        accelerator="auto",
        devices=1,
        logger=WandbLogger(name="demo_explainer_tiny", save_dir=str(run_dir)),
        callbacks=[accuracy, ModelCheckpoint(dirpath=run_dir, filename="last", enable_version_counter=False)],
        enable_model_summary=False,
        log_every_n_steps=10,
        num_sanity_val_steps=0,
        default_root_dir=str(run_dir),
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule)
    wandb.finish()
    print(
        f"\nTiny explainer, {len(datamodule.val_records)} held-out six-cause pairs, fit in {time.perf_counter() - start:.0f} s"
    )
    print(format_accuracy_table({"fine-tuned": accuracy.last_result}))
    ctx.artifacts["explainer"] = module.default_adapter_dir()
    ctx.artifacts["explainer_pairs"] = run_dir / "pairs" / "val.jsonl"
    ctx.results["explainer"] = dict(accuracy.last_result)
