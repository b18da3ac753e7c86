"""Benchmark: explainer fine-tuning step time, our Lightning path vs TRL's SFTTrainer, and peak memory.

Both paths train the same model (the embedded tiny Qwen2-VL, or any ``--model``) with the same LoRA,
optimizer (AdamW, same lr), the same encoded pairs and the same collator, so the table compares the
training loops. Each configuration runs in a fresh subprocess so that its peak memory is its own.

    python scripts/bench_explainer.py                 # tiny model, CPU, fp32 and 4-bit
    python scripts/bench_explainer.py --steps 50 --batch-size 16 --threads 1

Columns: median step time (ms), samples/s (batch / median step), peak resident memory of the process
(CPU) or peak allocated CUDA memory (GPU), and the bytes held by the model's weights.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nemo_train.console import print_table  # noqa: E402


def _weights_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers()
    )


def _peak_memory_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def run_one(path: str, args: argparse.Namespace) -> dict:
    """One configuration in this process: returns step times and memory."""
    import lightning as L
    import torch

    torch.set_num_threads(args.threads)
    from datamodules.explanations import ExplanationDataModule
    from nemo_train.explainer import ExplainerModule
    from nemo_train.models.trainer import quiet_trainer
    from nemo_train.models.vlm import load_processor

    four_bit = path.endswith("4bit")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    L.seed_everything(0, verbose=False)
    dm = ExplanationDataModule(
        model_name_or_path=args.model,
        processor_loader=load_processor,
        data_dir=args.data_dir,
        per_cause=args.per_cause,
        batch_size=args.batch_size,
    )
    dm.prepare_data()
    dm.setup("fit")
    module = ExplainerModule(model_name_or_path=args.model, load_in_4bit=four_bit, lr=args.lr, lora_r=16, lora_alpha=32)
    total = args.warmup + args.steps
    times: list[float] = []

    if path.startswith("lightning"):

        class StepTimer(L.Callback):
            def on_train_batch_start(self, *_):
                self.start = time.perf_counter()

            def on_train_batch_end(self, *_):
                times.append(time.perf_counter() - self.start)

        trainer = quiet_trainer(
            max_epochs=None,  # as many as max_steps takes
            accelerator=device,
            max_steps=total,
            limit_val_batches=0,
            callbacks=[StepTimer()],
            default_root_dir=args.out,
        )
        trainer.fit(module, train_dataloaders=dm.train_dataloader())
        model = module.model
    else:
        from transformers import TrainerCallback
        from trl import SFTConfig, SFTTrainer

        from datamodules.explanations import ExplanationCollator

        module.configure_model()
        model = module.model

        class StepTimer(TrainerCallback):
            def on_step_begin(self, *_, **__):
                self.start = time.perf_counter()

            def on_step_end(self, *_, **__):
                times.append(time.perf_counter() - self.start)

        config = SFTConfig(
            output_dir=args.out,
            max_steps=total,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.lr,
            lr_scheduler_type="linear",
            logging_steps=10_000,
            save_strategy="no",
            report_to=[],
            remove_unused_columns=False,
            dataset_kwargs={"skip_prepare_dataset": True},
            max_length=None,
            use_cpu=device == "cpu",
            gradient_checkpointing=False,
            dataloader_num_workers=0,
            disable_tqdm=True,
            bf16=False,
            fp16=False,
        )
        from datasets import Dataset

        # the same encoded pairs as a `datasets.Dataset` (what SFTTrainer accepts), tensors kept as they are
        rows = [{k: v.tolist() for k, v in sample.items()} for sample in dm.train_set.samples]
        train_set = Dataset.from_list(rows).with_format("torch")
        trainer = SFTTrainer(
            model=model,
            args=config,
            train_dataset=train_set,
            data_collator=ExplanationCollator(dm.processor.tokenizer.pad_token_id),
            processing_class=dm.processor,
            callbacks=[StepTimer()],
        )
        trainer.train()
    steady = sorted(times[args.warmup :])
    median = steady[len(steady) // 2]
    return {
        "path": path,
        "steps": len(steady),
        "median_step_ms": 1000 * median,
        "samples_per_s": args.batch_size / median,
        "peak_memory_mb": _peak_memory_mb(device),
        "weights_mb": _weights_bytes(model) / 2**20,
        "device": device,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:tiny-qwen2-vl")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=5, help="untimed first steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--per-cause", type=int, default=30)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--data-dir", default="checkpoints/bench_explainer/pairs")
    parser.add_argument("--out", default="checkpoints/bench_explainer")
    parser.add_argument("--paths", nargs="+", default=["lightning", "trl", "lightning-4bit", "trl-4bit"])
    parser.add_argument("--_one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "disabled")
    if args._one:
        print("RESULT " + json.dumps(run_one(args._one, args)))
        return
    rows = []
    for path in args.paths:
        settings = ["model", "steps", "warmup", "batch_size", "per_cause", "lr", "threads", "data_dir", "out"]
        command = [sys.executable, __file__, "--_one", path]
        for name in settings:
            command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            print(f"{path}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(lines[-1][len("RESULT ") :]))
    if not rows:
        raise SystemExit("every configuration failed")
    by_path = {r["path"]: r for r in rows}
    table = []
    for r in rows:
        ref = by_path.get("trl-4bit" if r["path"].endswith("4bit") else "trl")
        ratio = f"{r['samples_per_s'] / ref['samples_per_s']:.2f}x" if ref else None
        table.append([r["path"], r["median_step_ms"], r["samples_per_s"], ratio, r["peak_memory_mb"], r["weights_mb"]])
    print_table(
        ["path", "step ms", "samples/s", "vs TRL", "peak MB", "weights MB"],
        table,
        title=f"Explainer fine-tuning, {args.model}, batch {args.batch_size}, {args.steps} timed steps, "
        f"device {rows[0]['device']}, {args.threads} thread(s)",
        digits=1,
    )


if __name__ == "__main__":
    main()
