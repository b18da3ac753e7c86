"""Benchmark: time per image of the counterfactual methods at batch 1 and at a large batch.

    .venv/bin/python scripts/bench_counterfactuals.py --run_dir checkpoints/counterfactuals [--images 64]

Uses the classifier, PaRCE estimator, datamodule and cause directions that an earlier ``nemo-train
counterfactuals`` run in ``--run_dir`` recorded in its ``results.json``, builds the six-cause set from
them, and rebuilds each method from the ``class_path`` / ``init_args`` the run recorded
(``generator_options``), so the timing is of the configuration that produced the run's table.

Timings are taken with ``torch.utils.benchmark.Timer`` (which synchronises CUDA and fixes the thread
count) around whole generator calls, and divided by the number of images the call processed. Per method:
seconds per image at batch 1 (each image alone: every image for Reco / LGD / LNN, the first ``--single``
for the slow IGD / FGD) and at the large batch (``--images`` images in one call), the speed-up, success
rate and mean iterations; for the gradient methods also the same batch under the reference's batch-wide
stopping rule, and the batching ceiling: seconds per image of one optimisation step at batch 1 and at the
large batch with every image active.
"""

from __future__ import annotations

import argparse

import torch
from jsonargparse import ArgumentParser
from torch.utils import benchmark

from datamodules.six_causes import SixCausesDataModule
from nemo_train.competency.counterfactuals import CounterfactualGenerator, CounterfactualResult
from nemo_train.competency.estimator import load_run
from nemo_train.competency.gradient_counterfactuals import GradientCounterfactual, paper_methods
from nemo_train.console import print_table
from nemo_train.errors import UserInputError


def build(config: dict) -> CounterfactualGenerator:
    """A generator from its recorded ``{"class_path", "init_args"}``."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--generator", type=CounterfactualGenerator)
    return parser.instantiate_classes(parser.parse_object({"generator": config})).generator


def timed(generator: CounterfactualGenerator, batches: list[torch.Tensor], threads: int) -> tuple[float, list]:
    """Seconds per processed image of running ``generator`` over ``batches`` (one timed pass after the Timer's
    two warm-up passes), and the results of the timed pass."""
    results: list[CounterfactualResult] = []
    timer = benchmark.Timer(
        stmt="results.extend(generator(b) for b in batches)",
        globals={"results": results, "generator": generator, "batches": batches},
        num_threads=threads,
    )
    seconds = timer.timeit(1).median
    results = results[-len(batches) :]
    processed = sum(r.processed for r in results)
    return seconds / max(processed, 1), results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", default="checkpoints/counterfactuals", help="out_dir of a counterfactuals run")
    parser.add_argument("--images", type=int, default=64, help="images in the large batch (and in the batch-1 loop)")
    parser.add_argument("--single", type=int, default=8, help="images timed one by one at batch 1 for IGD / FGD")
    parser.add_argument("--methods", nargs="+", default=["IGD", "FGD", "Reco", "LGD", "LNN"], help="methods to time")
    parser.add_argument("--max_iter", type=int, default=100)
    parser.add_argument("--ceiling_steps", type=int, default=10, help="steps timed with every image active")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--channels_last", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    args = parser.parse_args()
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)

    try:
        estimator, datamodule, recorded = load_run(args.run_dir)
    except UserInputError as error:
        parser.error(str(error))
    run_info = recorded["run"]
    configs = {g.name: {"class_path": g.class_path(), "init_args": g.options()} for g in paper_methods()}
    configs.update(recorded.get("generator_options", {}))
    estimator = estimator.to(args.device)
    channels_last = run_info.get("channels_last", False) if args.channels_last is None else args.channels_last
    if channels_last:
        estimator = estimator.to(memory_format=torch.channels_last)
    datamodule.setup("fit")
    # twice the images needed per cause: a cause can have fewer low-competency images than asked for
    six = SixCausesDataModule(
        datamodule,
        competency=estimator,
        per_cause=2 * max(1, -(-args.images // 6)),
        directions=run_info.get("cause_directions"),
    )
    six.setup()
    order = torch.randperm(len(six.dataset), generator=torch.Generator().manual_seed(0))
    images = six.dataset.images[order][: args.images]
    holdout = torch.cat([b["image"] for b in datamodule.val_dataloader()])

    def make(name: str, **overrides) -> CounterfactualGenerator:
        config = configs[name]
        init_args = dict(config.get("init_args") or {})
        generator = build({"class_path": config["class_path"], "init_args": init_args})
        if isinstance(generator, GradientCounterfactual):
            init_args.update(max_iter=args.max_iter, **overrides)
            generator = build({"class_path": config["class_path"], "init_args": init_args})
        return generator.bind(estimator).fit(holdout)

    big_n = len(images)
    rows = []
    for name in [m for m in configs if m in args.methods]:
        generator = make(name)
        count = min(args.single, big_n) if name in ("IGD", "FGD") else big_n
        per_image_1, single = timed(generator, [images[i : i + 1] for i in range(count)], threads)
        per_image_n, (big,) = timed(generator, [images], threads)
        row = [name, count, sum(float(r.iterations.float().sum()) for r in single) / max(count, 1)]
        row += [per_image_1, per_image_n, per_image_1 / max(per_image_n, 1e-12)]
        row += [float(big.success.float().mean()), float(big.iterations.float().mean())]
        if isinstance(generator, GradientCounterfactual):
            ref_seconds, (ref,) = timed(make(name, stopping="batch"), [images], threads)
            row += [ref_seconds, float(ref.success.float().mean()), float(ref.iterations.float().mean())]
            # one step per image with every image active for all steps (a threshold no image reaches)
            ceiling = make(name, max_iter=args.ceiling_steps, threshold=1 - 1e-6)
            steps = [timed(ceiling, [images[i : i + 1]], threads) for i in range(4)]
            step1 = sum(s / args.ceiling_steps for s, _ in steps) / 4
            step_n = timed(ceiling, [images], threads)[0] / args.ceiling_steps
            row += [1e3 * step1, 1e3 * step_n, f"{step1 / max(step_n, 1e-12):.1f}x"]
        else:
            row += [None] * 6
        rows.append(row)
    print_table(
        ["method", "b=1 imgs", "b=1 iters", "s/img b=1", f"s/img b={big_n}", "speed-up", "success", "iters"]
        + [f"ref rule s/img b={big_n}", "ref success", "ref iters", "ms/img/step b=1", f"b={big_n}", "ceiling"],
        rows,
        title=(
            f"device {args.device}, torch threads {threads}, channels_last {channels_last}, {big_n} six-cause "
            f"images, max_iter {args.max_iter}"
        ),
        caption=(
            "ceiling: one optimisation step per image at batch 1 over the same at the large batch, every image "
            "active; the gradient methods' speed-up cannot exceed it."
        ),
        digits=4,
    )


if __name__ == "__main__":
    main()
