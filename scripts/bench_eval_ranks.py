"""Samples per second of ``nemo-eval`` on one process vs several (Lightning Fabric on CPU, gloo).

    python scripts/bench_eval_ranks.py --checkpoint checkpoints/cmnist_model_a/checkpoints/best.ckpt \
        [--benchmark cmnist] [--n 96] [--test_styles 2] [--devices 1 2]

Each row runs ``nemo-train nemo-eval`` on the embedded offline workload (SciTX's attribute template, the
baselines, exact CMNIST edits, the grounded judge: CPU-bound, no language model) into a fresh output folder
with ``--devices`` set to the row's value and ``OMP_NUM_THREADS=1`` per process. ``run s`` is the time the
command reports for its work (building the target and its benchmark on every process, the sharded samples,
the merge); ``wall s`` adds the start (imports, the launch of the other processes). Speed-ups are against the
first row. Every row's stored results must equal the first row's. The machine's load average (``uptime``) is
printed before and after: on a shared machine the numbers only mean something beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nemo_train.console import print_table

NEMO_TRAIN = str(Path(sys.executable).with_name("nemo-train"))
COUNTS = re.compile(r"(\d+) samples computed, (\d+) resumed.*, ([\d.]+) s\)")


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


def rows_of(out_dir: Path) -> dict[str, tuple]:
    records = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    return {r["key"]: tuple(r.get(f) for f in ("explanation", "llm_match", "cei", "failed")) for r in records}


def run(args: argparse.Namespace, devices: int, out_dir: Path) -> tuple[int, float, float]:
    """``(samples computed, seconds the command reports, wall seconds)`` of one ``nemo-eval`` run."""
    command = [
        NEMO_TRAIN, "nemo-eval", "--targets", f"[{args.checkpoint}]", "--out_dir", str(out_dir),
        "--benchmark.name", args.benchmark, "--benchmark.n", str(args.n),
        "--benchmark.test_styles", str(args.test_styles), "--device", "cpu", "--devices", str(devices),
    ]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"nemo-eval --devices {devices} failed: {done.stderr.strip().splitlines()[-1]}")
    found = COUNTS.search(done.stdout)
    if found is None:
        sys.exit(f"nemo-eval --devices {devices} printed no counts line")
    return int(found[1]), float(found[3]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a CMNIST classifier checkpoint of `nemo-train fit`")
    parser.add_argument("--benchmark", default="cmnist", help="a generated NEMO benchmark (cmnist, clevr, shifts)")
    parser.add_argument("--n", type=int, default=96, help="errors per target")
    parser.add_argument("--test_styles", type=int, default=2, help="exemplars per cell of the test grid")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2], help="processes of each row")
    args = parser.parse_args()
    if not Path(args.checkpoint).is_file():
        sys.exit(f"checkpoint {args.checkpoint!r} does not exist; train it with nemo-train fit first")
    before = load_average()
    table, reference = [], None
    with tempfile.TemporaryDirectory() as scratch:
        for devices in args.devices:
            out = Path(scratch) / f"devices{devices}"
            computed, seconds, wall = run(args, devices, out)
            found = rows_of(out)
            if reference is None:
                reference = (found, seconds, wall)
            elif found != reference[0]:
                sys.exit(f"--devices {devices} stored other results than --devices {args.devices[0]}")
            table.append(
                [devices, computed, seconds, computed / seconds, reference[1] / seconds, wall, reference[2] / wall]
            )
    after = load_average()
    print_table(
        ["processes", "samples", "run s", "samples/s", "speed-up", "wall s", "wall speed-up"],
        table,
        title=f"nemo-eval on {args.benchmark} (n={args.n}, OMP_NUM_THREADS=1 per process, CPU)",
        caption=f"{os.cpu_count()} CPU cores; load average before: {before}; after: {after}",
        digits=2,
    )


if __name__ == "__main__":
    main()
