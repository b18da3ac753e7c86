"""Can the tiny embedded explainer learn to explain shifts errors from the image, in the demo's time?

Runs the two shipped configs as the demo does, on CPU, with no logger and no validation:

1. ``configs/explainer/captions_shifts.yaml``: the tiny VLM learns to caption shifts digits; then its held-out
   caption accuracy per factor is measured.
2. ``configs/explainer/distill_shifts.yaml`` from the stage-1 adapter, on *known-shift* pairs instead of a
   teacher's (the one shifted factor of each image is the answer, class names drawn at random:
   :mod:`datamodules.explanations.shift_pairs`; training handwriting pool). With ``--compare`` stage 2 is also
   trained from the base model (no stage 1).

The student then answers held-out shifted images (test handwriting pool) greedily; the answers are graded on the
right factor, the right value of it, the right classes, all three, and by the grounded judge's claim reader (the
share of checkable claims that hold). Wall time of each stage (building and encoding the pairs included) and
seconds per training step are printed. Config overrides go through ``--stage1=--key=value`` / ``--stage2=...``.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/student_probe.py --out /tmp/student_probe --compare
    OMP_NUM_THREADS=1 .venv/bin/python scripts/student_probe.py --stage1=--model.init_args.lr=0.004
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import lightning as L  # noqa: E402
import torch  # noqa: E402

from datamodules.explanations import read_records, write_records  # noqa: E402
from datamodules.explanations.caption_pairs import caption_references, facts_named, parse_caption  # noqa: E402
from datamodules.explanations.shift_pairs import GRADES, known_shift_records, score_answer  # noqa: E402
from nemo_train.explainer.generation import generate_explanations  # noqa: E402
from nemo_train.lightning_cli import NemoLightningCLI  # noqa: E402
from nemo_train.models.vlm import load_processor  # noqa: E402
from nemo_train.scoring.grounding import ClaimParser  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "explainer"


class StepClock(L.Callback):
    """Wall time of the training loop (first batch to last)."""

    def __init__(self) -> None:
        self.start = self.seconds = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start = time.perf_counter()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.seconds = time.perf_counter() - self.start


def fit(config: str, root: Path, steps: int | None, overrides: list[str]) -> tuple[NemoLightningCLI, dict[str, float]]:
    """Fit ``config`` under ``root`` (``steps`` steps, default the config's); wall times of the whole run (pairs
    built and encoded, model loaded) and of the training loop."""
    start = time.perf_counter()
    args = [
        "--config",
        str(CONFIGS / config),
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.limit_val_batches=0",
        f"--trainer.default_root_dir={root}",
        *([f"--trainer.max_steps={steps}"] if steps else []),
        *overrides,
    ]
    cli = NemoLightningCLI(args=args, run=False)
    clock = StepClock()
    cli.trainer.callbacks.append(clock)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    wall = time.perf_counter() - start
    loss = float(cli.trainer.callback_metrics.get("train/loss", float("nan")))
    steps = cli.trainer.global_step
    return cli, {
        "steps": steps,
        "wall_s": wall,
        "train_s": clock.seconds,
        "s_per_step": clock.seconds / steps,
        "loss": loss,
    }


def answer(module, records: list, max_new_tokens: int = 40) -> list[str]:
    images, prompts = [r.image for r in records], [r.prompt for r in records]
    return [s[0] for s in generate_explanations(module, images, prompts, max_new_tokens=max_new_tokens, batch_size=64)]


def stage1(args: argparse.Namespace, out: Path) -> dict:
    """Caption training; timings, the adapter folder and the held-out caption accuracy per factor."""
    cli, result = fit("captions_shifts.yaml", out / "stage1", args.stage1_steps, args.stage1)
    facts = facts_named("shifts")
    records = caption_references(cli.datamodule.val_records, facts)[: args.eval]
    start = time.perf_counter()
    texts = answer(cli.model, records)
    result["eval_s"] = time.perf_counter() - start
    said = [parse_caption(t, facts) for t in texts]
    truth = [parse_caption(r.explanation, facts) for r in records]
    for name in [facts.class_attribute, *(f.name for f in facts.factors)]:
        result[f"caption_acc/{name}"] = sum(s[name] == t[name] for s, t in zip(said, truth)) / len(records)
        typical = facts.factor(name).typical if name != facts.class_attribute else None
        if typical is not None:  # on the images where the factor is off its typical value
            shifted = [(s, t) for s, t in zip(said, truth) if t[name] != str(typical)]
            result[f"caption_acc_shifted/{name}"] = sum(s[name] == t[name] for s, t in shifted) / max(len(shifted), 1)
    result["examples"] = list(zip([r.explanation for r in records[:3]], texts[:3]))
    result["adapter"] = str(out / "stage1" / "adapter")
    return result


def known_pairs(args: argparse.Namespace, out: Path) -> tuple[Path, list]:
    """Stage-2 training pairs (training handwriting) and held-out records (test handwriting)."""
    start = time.perf_counter()
    train = known_shift_records(out / "known", args.pairs, seed=args.seed, pool="train", prefix="t")
    held_out = known_shift_records(out / "known", args.eval, seed=args.seed + 100, pool="test", prefix="e")
    train_path = write_records(train, out / "known" / "train.jsonl")
    held_path = write_records(held_out, out / "known" / "held_out.jsonl")
    print(f"known-shift pairs: {len(train)} train, {len(held_out)} held out ({time.perf_counter() - start:.1f} s)")
    return train_path, read_records(held_path)


def grounding(records: list, texts: list[str]) -> tuple[float, float]:
    """Share of checkable claims that hold (the grounded judge's claim reader) and share of answers blaming
    the shifted factor."""
    facts = facts_named("shifts")
    parser = ClaimParser(facts)
    true_claims = claims = named = 0
    for record, text in zip(records, texts):
        attributes = facts.value_names(record.provenance["attrs"])
        reading = parser.read(text, attributes, facts.classes[record.label], facts.classes[record.prediction])
        claims += len(reading.claims)
        true_claims += sum(c.holds for c in reading.claims)
        named += record.cause in reading.blamed
    return true_claims / max(claims, 1), named / len(records)


def stage2(args: argparse.Namespace, out: Path, train: Path, held_out: list, adapter: str | None) -> dict:
    """Distillation on known-shift pairs from ``adapter`` (or the base model); graded on ``held_out``."""
    name = "stage2" if adapter else "stage2_alone"
    data = [f"--data.init_args.train_jsonl={train}", "--data.init_args.val_jsonl=null"]
    start_from = f"--model.init_args.adapter={adapter or 'null'}"
    cli, result = fit("distill_shifts.yaml", out / name, args.stage2_steps, [start_from, *data, *args.stage2])
    start = time.perf_counter()
    texts = answer(cli.model, held_out)
    result["eval_s"] = time.perf_counter() - start
    grades = [score_answer(t, r.explanation) for r, t in zip(held_out, texts)]
    for grade in GRADES:
        result[grade] = sum(g[grade] for g in grades) / len(grades)
    result["true_claims"], result["cause_named"] = grounding(held_out, texts)
    for factor in sorted({r.cause for r in held_out}):
        mine = [g for g, r in zip(grades, held_out) if r.cause == factor]
        result[f"factor/{factor}"] = sum(g["factor"] for g in mine) / len(mine)
        result[f"all/{factor}"] = sum(g["all"] for g in mine) / len(mine)
    result["examples"] = list(zip([r.explanation for r in held_out[:3]], texts[:3]))
    return result


def show(name: str, result: dict) -> None:
    print(f"== {name}")
    for key, value in result.items():
        if key == "examples":
            for want, got in value:
                print(f"   want: {want}\n   got:  {got}")
        else:
            print(f"   {key}: {value:.3f}" if isinstance(value, float) else f"   {key}: {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/student_probe", help="work folder (pairs, adapters)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the known-shift pairs and of both fits")
    parser.add_argument("--pairs", type=int, default=600, help="known-shift training pairs")
    parser.add_argument("--eval", type=int, default=200, help="held-out images per evaluation")
    parser.add_argument("--stage1-steps", type=int, default=None, help="default: the config's max_steps")
    parser.add_argument("--stage2-steps", type=int, default=None, help="default: the config's max_steps")
    parser.add_argument("--stage1", action="append", default=[], help="a stage-1 config override: --stage1=--key=value")
    parser.add_argument("--stage2", action="append", default=[], help="a stage-2 config override: --stage2=--key=value")
    parser.add_argument("--compare", action="store_true", help="also train stage 2 without stage 1")
    parser.add_argument("--skip-stage1", action="store_true", help="only stage 2, from the base model")
    parser.add_argument("--json", default=None, help="write every result to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    seed = f"--seed_everything={args.seed}"
    args.stage1, args.stage2 = [seed, *args.stage1], [seed, *args.stage2]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_processor("embedded:tiny-qwen2-vl")  # build the tiny model's cache outside the timings
    train, held_out = known_pairs(args, out)
    results: dict[str, dict] = {}
    if not args.skip_stage1:
        results["stage1"] = stage1(args, out)
        show("stage 1 (captions)", results["stage1"])
        results["stage2"] = stage2(args, out, train, held_out, results["stage1"]["adapter"])
        show("stage 2 (from the stage-1 adapter)", results["stage2"])
    if args.compare or args.skip_stage1:
        results["stage2_alone"] = stage2(args, out, train, held_out, None)
        show("stage 2 alone (from the base model)", results["stage2_alone"])
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **results}, indent=2))


if __name__ == "__main__":
    main()
