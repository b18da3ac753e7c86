"""Training a zoo of shifts classifiers together against training them one by one: wall time and test accuracy.

    .venv/bin/python scripts/bench_zoo.py --members 4 --train_size 2000 --test_size 1000

Draws ``--members`` gap assignments (:func:`datamodules.shifts_zoo.draw_zoo`, the training side of
``--zoo_seed``) and trains them three ways on the same data: N separate fits (one ``ClassifierModule`` per
member, one after another in this process, as N ``nemo-train fit`` runs would minus their start-up), and the
stacked zoo (:class:`~nemo_train.models.zoo.StackedClassifiers`) run member by member (``loop``) and batched
(``vmap``). Every member starts from the same weights in all three (seed ``--seed + k``); the data order differs
(one shuffle for the zoo). Prints one row per way: seconds spent rendering the data and training, and each
member's accuracy on its shift test split (``--test_shift``).
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch

from datamodules.shifts import ShiftsDataModule
from datamodules.shifts_zoo import ShiftsZooDataModule, draw_zoo
from nemo_train.console import print_table
from nemo_train.models.classifier import ClassifierModule
from nemo_train.models.trainer import fit_quietly
from nemo_train.models.zoo import StackedClassifiers, member_module
from nemo_train.models.zoo_run import accuracy


def separate(args: argparse.Namespace, members: list) -> tuple[float, float, list[float], list[float]]:
    """N fits one after another: (render seconds, train seconds, validation and test accuracy per member)."""
    render = train = 0.0
    accuracies, validation = [], []
    for k, member in enumerate(members):
        start = time.perf_counter()
        dm = ShiftsDataModule(gaps=dict(member.gaps.gaps), **data_args(args))
        dm.setup("fit")
        render += time.perf_counter() - start
        L.seed_everything(args.seed + k, verbose=False)
        module = ClassifierModule(lr=args.lr)
        start = time.perf_counter()
        trainer = fit_quietly(module, dm, max_epochs=args.max_epochs)
        train += time.perf_counter() - start
        validation.append(float(trainer.callback_metrics["val/acc"]))
        accuracies.append(accuracy(module.eval(), dm.test_set.images, dm.test_set.labels))
    return render, train, validation, accuracies


def together(args: argparse.Namespace, members: list, execution: str) -> tuple[float, float, list[float], list[float]]:
    """One stacked fit of all members: (render seconds, train seconds, validation and test accuracy per member)."""
    start = time.perf_counter()
    dm = ShiftsZooDataModule([m.gaps.gaps for m in members], **data_args(args))
    dm.setup("fit")
    render = time.perf_counter() - start
    L.seed_everything(args.seed, verbose=False)
    stacked = StackedClassifiers(len(members), lr=args.lr, member_seed=args.seed, execution=execution)
    start = time.perf_counter()
    fit_quietly(stacked, dm, max_epochs=args.max_epochs)
    train = time.perf_counter() - start
    accuracies = [
        accuracy(member_module(stacked, k, stacked.best_states[k]), m.test_set.images, m.test_set.labels)
        for k, m in enumerate(dm.members)
    ]
    return render, train, list(stacked.best_acc), accuracies


def data_args(args: argparse.Namespace) -> dict:
    return {
        "train_size": args.train_size,
        "test_size": args.test_size,
        "test_shift": args.test_shift,
        "batch_size": args.batch_size,
        "seed": args.data_seed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=4, help="classifiers in the zoo")
    parser.add_argument("--zoo_seed", type=int, default=0, help="seed of the gap assignments")
    parser.add_argument("--train_size", type=int, default=2000, help="training images per member")
    parser.add_argument("--test_size", type=int, default=1000, help="shift test images per member")
    parser.add_argument(
        "--test_shift", default="multi", choices=["single", "multi", "multi3", "multi4"], help="factors off per image"
    )
    parser.add_argument("--batch_size", type=int, default=64, help="images per member in a step")
    parser.add_argument("--max_epochs", type=int, default=1, help="passes over the training images")
    parser.add_argument("--lr", type=float, default=0.003, help="learning rate")
    parser.add_argument("--seed", type=int, default=0, help="member k starts from seed + k")
    parser.add_argument("--data_seed", type=int, default=0, help="seed of the rendered data")
    parser.add_argument("--ways", nargs="+", default=["separate", "loop", "vmap"], help="which ways to time")
    args = parser.parse_args()

    members = draw_zoo(args.zoo_seed, train=args.members, heldout=0)
    rows = []
    for way in args.ways:
        run = separate(args, members) if way == "separate" else together(args, members, way)
        render, train, validation, accuracies = run
        label = f"{args.members} separate fits" if way == "separate" else f"zoo, stacked ({way})"
        val = sum(validation) / len(validation)
        each = " ".join(f"{a:.3f}" for a in accuracies)
        rows.append((label, render, train, render + train, val, sum(accuracies) / len(accuracies), each))
        print(f"{label}: render {render:.1f} s, train {train:.1f} s, val acc {val:.3f}, test acc {each}", flush=True)
    print_table(
        ["way", "render s", "train s", "total s", "mean val acc", "mean test acc", "test acc per member"],
        rows,
        title=f"{args.members} shifts classifiers, {args.train_size} training images each, {args.max_epochs} epoch(s), "
        f"{torch.get_num_threads()} CPU threads",
        caption=f"val: the training distribution; test: {args.test_size} images of the {args.test_shift}-factor shift "
        "split per member",
        digits=2,
    )


if __name__ == "__main__":
    main()
