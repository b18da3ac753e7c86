"""Counterfactual image edits per second: one edit per diffusers call vs several edits per call.

    python scripts/bench_edits.py [--device cpu|cuda] [--batches 1 8] [--errors 4] [--m 4] [--steps 4]
    python scripts/bench_edits.py --device cuda --model timbrooks/instruct-pix2pix --size 512 --steps 20

SciTX tests ``M`` hypotheses per error, each an image edit. This script edits ``--errors`` random images
with ``--m`` instructions each through :meth:`~nemo_train.scoring.editing.DiffusersEditor.edit_many` (the
path a chunk of errors takes) at every ``--batches`` value (edits per pipeline call), and prints edits per
second, the speed-up over the first batch size, and the largest pixel difference from the first batch
size's edits (each edit has its own seeded generator, so edits agree up to float rounding). By default
the editor is a tiny random InstructPix2Pix pipeline built offline (no download): its numbers measure the
pipeline's per-call overhead against its batched compute, not a real editor's speed; ``--model`` loads a
diffusers folder or hub id instead. Each batch size is timed ``--repeats`` times after one warm-up call;
the best time counts.
"""

from __future__ import annotations

import argparse
import time

import torch

from nemo_train.console import print_table
from nemo_train.quiet import set_output
from nemo_train.scoring.benchmark import ErrorSample
from nemo_train.scoring.editing import DiffusersEditor, tiny_random_instruct_pix2pix

WORDS = ["red", "green", "blue", "striped", "upright", "smaller", "blurred", "brighter"]


def errors_and_instructions(n: int, m: int, size: int) -> tuple[list[ErrorSample], list[list[str]]]:
    """``n`` random images and ``m`` distinct instructions for each."""
    generator = torch.Generator().manual_seed(0)
    samples = [ErrorSample(f"e{j}", torch.rand(3, size, size, generator=generator), 0, 1) for j in range(n)]
    texts = [[f"make it {WORDS[(j + i) % len(WORDS)]}, variant {i}" for i in range(m)] for j in range(n)]
    return samples, texts


def time_edits(editor: DiffusersEditor, samples, texts, repeats: int) -> tuple[float, list[torch.Tensor]]:
    """Best wall time of ``repeats`` runs of ``edit_many`` (after a warm-up call) and the edits."""
    editor.edit_many(samples[:1], [texts[0][:1]])  # warm-up: lazy initialisation, kernel selection
    best, edits = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        edits = editor.edit_many(samples, texts)  # the editor returns CPU tensors: the device has finished
        best = min(best, time.perf_counter() - start)
    return best, edits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--errors", type=int, default=4)
    parser.add_argument("--m", type=int, default=4, help="instructions (hypotheses) per error")
    parser.add_argument("--steps", type=int, default=4, help="denoising steps per edit")
    parser.add_argument("--size", type=int, default=32, help="edit resolution")
    parser.add_argument("--width", type=int, default=8, help="UNet width of the tiny random editor")
    parser.add_argument("--model", default=None, help="a diffusers folder or hub id instead of the tiny editor")
    parser.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    torch.set_num_threads(args.threads)
    set_output()  # library notices (e.g. optional kernels missing) stay quiet

    if args.model is None:
        pipeline, name = (
            tiny_random_instruct_pix2pix(width=args.width).to(args.device),
            f"tiny pix2pix (w={args.width})",
        )
        if args.dtype:
            pipeline = pipeline.to(getattr(torch, args.dtype))
    else:
        pipeline, name = args.model, args.model
    samples, texts = errors_and_instructions(args.errors, args.m, args.size)
    steps = {"num_inference_steps": args.steps}
    rows, first = [], None
    for batch in args.batches:
        editor = DiffusersEditor(
            pipeline, batch_size=batch, device=args.device, dtype=args.dtype, size=args.size, call_kwargs=steps
        )
        pipeline = editor.pipeline  # loaded once, shared by every batch size
        seconds, edits = time_edits(editor, samples, texts, args.repeats)
        rate = args.errors * args.m / seconds
        if first is None:
            first = (rate, edits)
        diff = max(float((a - b).abs().max()) for a, b in zip(edits, first[1]))
        rows.append((args.device, name, batch, rate, f"{rate / first[0]:.2f}x", f"{diff:.1e}"))
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{args.threads} CPU thread(s)"
    print_table(
        ["device", "editor", "batch", "edits/s", "speed-up", f"max |diff| vs batch {args.batches[0]}"],
        rows,
        title=(
            f"Image edits per second ({where}; {args.errors} errors x {args.m} edits, {args.steps} steps, "
            f"{args.size} px, torch {torch.__version__})"
        ),
        digits=2,
    )


if __name__ == "__main__":
    main()
