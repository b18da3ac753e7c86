"""Benchmark: time per image of the five counterfactual methods at batch 1 and batch 64.

    .venv/bin/python scripts/bench_counterfactuals.py --run_dir checkpoints/counterfactuals [--images 64]

Uses the classifier, PaRCE estimator, datamodule and cause directions that an earlier ``nemo-train
counterfactuals`` run in ``--run_dir`` recorded in its ``results.json``, builds the six-cause set from
them, and prints per method: seconds per image at batch 1 (each image alone) and at batch 64 (``--images``
images in one batch; at batch 1 every image for Reco / LGD / LNN, the first ``--single`` for the slow
IGD / FGD, with their mean iterations shown), the speed-up, and for the gradient methods the same batch
under the reference's batch-wide stopping rule (no per-image freezing), with success rates and mean
iterations, and the batching ceiling: seconds per image of one optimisation step at batch 1 and at batch 64.
The generators get the options the run used (``generator_options`` in its ``results.json``: objective,
learning rates, distances), so the timing is of the configuration that produced the run's table.
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run_dir", default="checkpoints/counterfactuals", help="out_dir of a counterfactuals run")
    parser.add_argument("--images", type=int, default=64, help="images in the large batch (and in the batch-1 loop)")
    parser.add_argument(
        "--single",
        type=int,
        default=8,
        help="images timed one by one at batch 1 for IGD / FGD (all images for the others)",
    )
    parser.add_argument("--methods", nargs="+", default=["IGD", "FGD", "Reco", "LGD", "LNN"], help="methods to time")
    parser.add_argument("--max_iter", type=int, default=100)
    parser.add_argument(
        "--ceiling_steps", type=int, default=10, help="steps timed with every image active (the batching ceiling)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--channels_last",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="channels-last conv weights (default: as the run)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from datamodules.six_causes import SixCausesDataModule
    from nemo_train.competency.counterfactuals import METHODS, build_generator
    from nemo_train.competency.pipeline import load_run
    from nemo_train.errors import UserInputError

    try:
        estimator, datamodule, recorded = load_run(args.run_dir)
    except UserInputError as error:
        parser.error(str(error))
    run_options, run_info = recorded.get("generator_options", {}), recorded["run"]
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
    images = six.dataset.images[torch.randperm(len(six.dataset), generator=torch.Generator().manual_seed(0))][
        : args.images
    ]
    holdout = torch.cat([b["image"] for b in datamodule.val_dataloader()])
    print(
        f"device {args.device}, torch threads {torch.get_num_threads()}, channels_last {channels_last}, "
        f"{len(images)} six-cause images, max_iter {args.max_iter}"
    )
    for name in args.methods:
        print(f"  {name} options: {run_options.get(name, {})}")

    def make(name: str, stopping: str = "per_image", **overrides):
        options = dict(run_options.get(name, {}))
        if name in ("IGD", "FGD", "LGD"):
            options.update(max_iter=args.max_iter, stopping=stopping)
        generator = build_generator(name, estimator, **{**options, **overrides})
        if name == "LNN":
            generator.fit(holdout)
        return generator

    def seconds_per_step(name: str, batch: torch.Tensor) -> float:
        """Seconds per image per optimisation step with every image of ``batch`` active for all steps
        (a threshold no image reaches): what batching can save at most on this device."""
        result = make(name, max_iter=args.ceiling_steps, threshold=1 - 1e-6)(batch)
        return result.seconds / max(int(result.iterations.sum()), 1)

    rows = []
    for name in [m for m in METHODS if m in args.methods]:
        generator = make(name)
        generator(images[:2])  # warm-up
        count = min(args.single, len(images)) if name in ("IGD", "FGD") else len(images)
        single = [generator(images[i : i + 1]) for i in range(count)]
        per_image_1 = sum(r.seconds for r in single) / max(sum(r.processed for r in single), 1)
        big = generator(images)
        row = {
            "method": name,
            "batch1": per_image_1,
            "batch64": big.seconds_per_image,
            "speedup": per_image_1 / max(big.seconds_per_image, 1e-12),
            "n1": count,
            "iters1": sum(float(r.iterations.float().sum()) for r in single) / max(count, 1),
            "success": float(big.success.float().mean()),
            "iters": float(big.iterations.float().mean()),
        }
        if name in ("IGD", "FGD", "LGD"):
            ref = make(name, "batch")(images)
            row.update(
                ref64=ref.seconds_per_image,
                ref_success=float(ref.success.float().mean()),
                ref_iters=float(ref.iterations.float().mean()),
            )
            step1 = sum(seconds_per_step(name, images[i : i + 1]) for i in range(4)) / 4
            step64 = seconds_per_step(name, images)
            row.update(step1=step1, step64=step64, ceiling=step1 / max(step64, 1e-12))
        rows.append(row)
        print(f"  done {name}", flush=True)

    big_n = len(images)
    header = (
        f"{'method':<6} {'b=1 imgs':>8} {'b=1 iters':>9} {'s/img b=1':>10} {f's/img b={big_n}':>11} {'speed-up':>9} {'success':>8} {'iters':>6}"
        f" | {f'ref rule s/img b={big_n}':>19} {'ref success':>11} {'ref iters':>9}"
        f" | {'ms/img/step b=1':>15} {f'b={big_n}':>7} {'ceiling':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        ref = (
            f"{r['ref64']:>19.4f} {r['ref_success']:>11.2%} {r['ref_iters']:>9.1f}"
            if "ref64" in r
            else f"{'-':>19} {'-':>11} {'-':>9}"
        )
        step = (
            f"{1e3 * r['step1']:>15.2f} {1e3 * r['step64']:>7.2f} {r['ceiling']:>7.1f}x"
            if "step1" in r
            else f"{'-':>15} {'-':>7} {'-':>8}"
        )
        print(
            f"{r['method']:<6} {r['n1']:>8} {r['iters1']:>9.1f} {r['batch1']:>10.4f} {r['batch64']:>11.4f} {r['speedup']:>8.1f}x {r['success']:>8.2%} {r['iters']:>6.1f} | {ref} | {step}"
        )
    print(
        "ceiling: time of one optimisation step per image at batch 1 over the same at the large batch, every image active;\n"
        "the speed-up of the gradient methods cannot exceed it, and falls below it when a few slow images keep the batch running."
    )
    by_name = {r["method"]: r for r in rows}
    for name in ("Reco", "LNN"):
        if "LGD" in by_name and name in by_name:
            ratio = by_name["LGD"]["batch64"] / max(by_name[name]["batch64"], 1e-12)
            print(f"LGD / {name} time per image at batch {big_n}: {ratio:.1f}x")


if __name__ == "__main__":
    main()
