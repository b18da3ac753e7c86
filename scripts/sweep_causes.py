"""Mean competency of each low-competency cause, per direction and severity, for a counterfactuals run.

    .venv/bin/python scripts/sweep_causes.py --run_dir checkpoints/counterfactuals_clevr [--images 200]

Uses the classifier, PaRCE estimator and datamodule recorded in the run's ``results.json`` (see
``nemo-train counterfactuals``), takes ``--images`` test images spread over the test split, applies every
cause at each ``--severities`` value (both directions where a cause has two) and prints the mean score and
the fraction of images below the run's threshold. Use it to choose ``causes.directions`` and
``causes.severity`` for a dataset: a cause whose images stay above the threshold contributes nothing to the
six-cause set.
"""

from __future__ import annotations

import argparse

import torch

from datamodules.six_causes import CAUSES, DEFAULT_DIRECTIONS, apply_cause
from nemo_train.competency.estimator import load_run
from nemo_train.console import print_table
from nemo_train.errors import UserInputError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", required=True, help="out_dir of a counterfactuals run")
    parser.add_argument("--images", type=int, default=200, help="test images, spread evenly over the test split")
    parser.add_argument("--severities", type=float, nargs="+", default=[0.5, 0.75, 1.0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    try:
        estimator, datamodule, _ = load_run(args.run_dir)
    except UserInputError as error:
        parser.error(str(error))
    datamodule.setup("test")
    test_set = datamodule.test_set
    picks = torch.linspace(0, len(test_set) - 1, min(args.images, len(test_set))).round().long().unique()
    images = torch.stack([test_set[int(i)]["image"] for i in picks])
    generator = torch.Generator().manual_seed(args.seed)
    threshold = estimator.threshold
    rows = []

    def row(name: str, direction: str, severity: str, scores: torch.Tensor) -> None:
        rows.append([name, direction, severity, float(scores.mean()), float((scores < threshold).float().mean())])

    with torch.no_grad():
        row("clean", "—", "—", estimator(images))
        for cause in CAUSES:
            directions = ["up", "down"] if cause in DEFAULT_DIRECTIONS else [None]
            for direction in directions:
                for severity in args.severities:
                    corrupted = apply_cause(images, cause, severity, generator, direction=direction)
                    label = direction or "—"
                    if direction == DEFAULT_DIRECTIONS.get(cause):
                        label += " (default)"
                    row(cause, label, f"{severity:g}", estimator(corrupted))
    print_table(
        ["cause", "direction", "severity", "mean competency", "below threshold"],
        rows,
        title=f"{len(images)} test images of {type(datamodule).__name__}, threshold {threshold}",
    )


if __name__ == "__main__":
    main()
