"""Benchmark: one training epoch of the CMNIST classifier under ``lightning.Trainer`` vs a bare PyTorch loop.

Both paths train the same ``ClassifierModule`` (same init, same optimiser and schedule from
``configure_optimizers``) on the same DataLoader for one epoch; the table shows the median wall time
of ``--repeats`` epochs each and the ratio (goal: Lightning <= 1.05x the bare loop).

    python scripts/bench_lightning_overhead.py [--train-size 12000] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from datamodules.cmnist import CMNISTDataModule  # noqa: E402
from nemo_train.console import print_table  # noqa: E402
from nemo_train.models import ClassifierModule  # noqa: E402
from nemo_train.models.trainer import quiet_trainer  # noqa: E402


def make_module(seed: int) -> ClassifierModule:
    torch.manual_seed(seed)
    return ClassifierModule(backbone="bias_cnn", num_classes=10, lr=3e-3)


def lightning_epoch(datamodule: CMNISTDataModule, seed: int) -> float:
    module = make_module(seed)
    trainer = quiet_trainer(max_epochs=1, limit_val_batches=0)
    start = time.perf_counter()
    trainer.fit(module, train_dataloaders=datamodule.train_dataloader())
    return time.perf_counter() - start


def bare_epoch(datamodule: CMNISTDataModule, seed: int) -> float:
    module = make_module(seed)
    loader = datamodule.train_dataloader()
    optimizer = torch.optim.AdamW(module.parameters(), lr=module.hparams.lr, weight_decay=module.hparams.weight_decay)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=module.hparams.lr, total_steps=len(loader), pct_start=0.15
    )
    module.train()
    start = time.perf_counter()
    for batch in loader:
        logits = module(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        loss.item()  # Lightning also reads the loss back every step for logging
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-size", type=int, default=12000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")

    datamodule = CMNISTDataModule(train_size=args.train_size, batch_size=args.batch_size)
    datamodule.setup("fit")
    bare_epoch(datamodule, 0)  # warm-up (allocator, thread pools)
    times = {"bare PyTorch loop": [], "lightning.Trainer": []}
    for repeat in range(args.repeats):  # interleaved, so drifting machine load hits both alike
        times["bare PyTorch loop"].append(bare_epoch(datamodule, repeat))
        times["lightning.Trainer"].append(lightning_epoch(datamodule, repeat))

    steps = len(datamodule.train_dataloader())
    base = statistics.median(times["bare PyTorch loop"])
    rows = [
        [
            name,
            statistics.median(v),
            min(v),
            max(v),
            round(args.train_size / statistics.median(v)),
            statistics.median(v) / base,
        ]
        for name, v in times.items()
    ]
    print_table(
        ["path", "median s", "min s", "max s", "img/s", "ratio"],
        rows,
        title=(
            f"One epoch of CMNIST bias_cnn: {args.train_size} images, batch {args.batch_size}, {steps} steps, "
            f"{args.threads} threads, median of {args.repeats}"
        ),
    )


if __name__ == "__main__":
    main()
