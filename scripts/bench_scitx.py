"""Throughput of SciTX on CMNIST errors: all M interventions classified in one batch vs one at a time.

    python scripts/bench_scitx.py [--errors 40] [--m 2 8] [--targets bias_cnn resnet18]

For each target and number of hypotheses M it runs the whole SciTX pipeline (retrieval, offline
hypotheses, derivation, exact re-rendering, classification, argmax) over the same errors twice, once
with ``batched=True`` (original + M counterfactuals in one forward pass) and once with
``batched=False`` (M + 1 forward passes), checks both choose the same explanations, and prints
samples/s. Targets are randomly initialised (speed does not depend on the weights); ``resnet18`` is
run at ``--size`` px (64 by default, 224 on a GPU) to show the effect on a larger backbone. Retrieval timing for 10^4 / 10^6
references is in ``scripts/bench_retrieval.py``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from nemo_train.console import print_table
from nemo_train.models import ClassifierModule
from nemo_train.models.targets import ClassifierTarget
from nemo_train.nemo.methods.scitx import SciTX
from nemo_train.scoring.benchmark import build_cmnist_benchmark
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver

os.environ.setdefault("WANDB_MODE", "disabled")


class CyclingHypothesizer:
    """M hypotheses per error in the generator's vocabulary (colour and rotation values in turn)."""

    def __init__(self, vocabulary: dict) -> None:
        self.colors, self.angles = vocabulary["color"], vocabulary["angle"]

    def hypothesize(self, sample, observations, class_names, m):
        out = []
        for j in range(m):
            if j % 2 == 0:
                out.append(
                    f"The digit is drawn in {self.colors[sample.attrs['color']]} but correct ones are mostly {self.colors[(j // 2) % len(self.colors)]}."
                )
            else:
                out.append(
                    f"The digit is rotated; correct ones sit at {self.angles[(j // 2) % len(self.angles)]} degrees."
                )
        return out


def make_target(name: str, size: int):
    torch.manual_seed(0)
    module = ClassifierModule(backbone=name, num_classes=10)
    return ClassifierTarget(module, [str(i) for i in range(10)], image_size=None if name == "bias_cnn" else size)


def run(target, bench, m: int, batched: bool) -> tuple[float, list[str]]:
    scorer = CounterfactualScorer(
        target, KeywordAttributeDeriver(bench.vocabulary), ExactAttributeEditor(bench.renderer), batched=batched
    )
    method = SciTX(target, CyclingHypothesizer(bench.vocabulary), scorer, k=8, m=m)
    method.explain(bench.errors[0], bench)  # warm-up
    start = time.perf_counter()
    texts = [method.explain(e, bench).text for e in bench.errors]
    return len(bench.errors) / (time.perf_counter() - start), texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--errors", type=int, default=40)
    parser.add_argument("--m", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--targets", nargs="+", default=["bias_cnn", "resnet18"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", type=int, default=64, help="input size of the non-CMNIST backbones")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    for name in args.targets:
        target = make_target(name, args.size).to(args.device)
        with torch.no_grad():
            bench = build_cmnist_benchmark(target=target, n=args.errors, seed=0, test_styles=1, only_conflicting=False)
        for m in args.m:
            batched, texts_b = run(target, bench, m, True)
            single, texts_s = run(target, bench, m, False)
            rows.append((name, m, len(bench.errors), single, batched, texts_b == texts_s))
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{args.threads} CPU threads"
    print_table(
        ["target", "M", "errors", "one-at-a-time/s", "batched/s", "speed-up", "same picks"],
        [(name, m, n, single, batched, f"{batched / single:.2f}x", same) for name, m, n, single, batched, same in rows],
        title=f"SciTX throughput on CMNIST errors ({where}, resnet18 at {args.size} px, torch {torch.__version__})",
        digits=2,
    )


if __name__ == "__main__":
    main()
