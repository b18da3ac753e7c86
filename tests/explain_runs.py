"""Test helper: a small ``explain`` command line over three generated images."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image


def explain_argv(folder: Path, adapter: Path) -> tuple[list[str], Path]:
    """``explain`` of three 28 px images written in ``folder`` by ``adapter`` (two new tokens each, one image
    at a time, on the CPU), into ``folder / "out"``; the argument list and the results file it writes."""
    images = []
    for i in range(3):
        Image.new("RGB", (28, 28), (40 * i, 30, 30)).save(folder / f"{i}.png")
        images.append(str(folder / f"{i}.png"))
    out = folder / "out"
    argv = ["explain", "--model", str(adapter), "--images", json.dumps(images), "--out_dir", str(out)]
    argv += ["--generation.max_new_tokens", "2", "--generation.batch_size", "1", "--device", "cpu"]
    return argv, out / "explanations.jsonl"
