"""Why a shifts classifier errs: accuracies on the shift test split and the share of each error cause.

    .venv/bin/python scripts/shift_causes.py --ckpt checkpoints/shifts_gaps_a/checkpoints/best.ckpt

Rebuilds the datamodule the checkpoint was trained with (its saved hyper-parameters; ``--gaps``,
``--test_size``, ``--test_shift``, ``--seed`` and ``--pool`` override them), classifies the shift split of ``--pool`` (``test``;
``train`` gives the mining split, made of other exemplars), labels every error with
:func:`datamodules.shifts.label_causes` and prints two tables: accuracy overall, on aligned images (the shifted
factor is not a gap of the digit) and on conflicting ones, then each cause with its count and its share of the
errors that have a single cause ("none" and "several" are counted apart).
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch

from datamodules.shifts import CAUSE_FACTORS, FACTS, ShiftsDataModule, label_causes
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.models import ClassifierModule


def cause_table(causes: list[str]) -> list[tuple[str, int, float]]:
    """``(cause, count, share)`` rows: factors by their share of single-cause errors, then none / several."""
    counts = Counter(causes)
    single = sum(counts[f] for f in CAUSE_FACTORS)
    rows = [(f, counts[f], counts[f] / max(single, 1)) for f in CAUSE_FACTORS]
    rows.sort(key=lambda row: -row[1])
    return rows + [(name, counts[name], float("nan")) for name in ("none", "several")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="best.ckpt of a shifts classifier")
    parser.add_argument("--gaps", default=None, help="gap preset of the data (default: the checkpoint's)")
    parser.add_argument("--test_size", type=int, default=None, help="shift images (default: the checkpoint's)")
    parser.add_argument(
        "--test_shift",
        default=None,
        choices=["single", "multi", "multi3", "multi4"],
        help="factors off per image (default: the checkpoint's)",
    )
    parser.add_argument("--seed", type=int, default=None, help="data seed (default: the checkpoint's)")
    parser.add_argument("--pool", default="test", choices=["train", "val", "test"], help="exemplar pool")
    args = parser.parse_args()

    try:
        checkpoint = torch.load(args.ckpt, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        parser.error(f"no checkpoint at {args.ckpt}")
    data_hp = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    for key in ("gaps", "test_size", "test_shift", "seed"):
        if getattr(args, key) is not None:
            data_hp[key] = getattr(args, key)
    try:
        datamodule = ShiftsDataModule(**{k: v for k, v in data_hp.items() if not k.startswith("_")})
    except UserInputError as error:
        parser.error(str(error))
    datamodule.setup("test")
    hp = datamodule.hparams
    data = (
        datamodule.test_set if args.pool == "test" else datamodule.shifted_split(args.pool, hp.test_size, hp.seed + 1)
    )
    model = ClassifierModule.load_from_checkpoint(args.ckpt, map_location="cpu", weights_only=True).eval()

    def predict(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([model(chunk).argmax(-1) for chunk in images.split(512)])

    preds = predict(data.images.float() / 255.0)
    right = preds == data.labels
    rows = [("all", len(right), right.float().mean().item())]
    for g, name in enumerate(datamodule.group_names):
        chosen = data.groups == g
        rows.append((name, int(chosen.sum()), right[chosen].float().mean().item() if chosen.any() else float("nan")))
    print_table(["images", "count", "accuracy"], rows, title=f"{args.pool} shift split")

    wrong = torch.nonzero(~right).flatten()
    attrs = {k: v[wrong] for k, v in data.attrs.items()}
    causes = label_causes(datamodule.renderer, FACTS, attrs, data.labels[wrong], predict)
    print_table(["cause", "count", "share"], cause_table(causes), title=f"causes of {len(wrong)} errors")


if __name__ == "__main__":
    main()
