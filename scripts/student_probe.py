"""Can the tiny embedded explainer learn to explain shifts errors from the image, in the demo's time?

Stage 1 fine-tunes the tiny VLM to caption shifts digits (the ``shift_captions`` recipe of
``ExplanationDataModule``); stage 2 starts from its adapter and trains on known-shift pairs (the one shifted factor
of each image is the answer, class names drawn at random: :mod:`datamodules.explanations.shift_pairs`); then the
student answers held-out shifted images (test handwriting) greedily and is graded on the right factor, the right
value, the right classes and all three. Wall time and steps of each stage are printed; with ``--compare`` stage 2
is also trained from the base model (no stage 1).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/student_probe.py --out /tmp/student_probe --compare
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

from datamodules.explanations import ExplanationDataModule, read_records, write_records  # noqa: E402
from datamodules.explanations.captions import caption_references, facts_named, parse_caption  # noqa: E402
from datamodules.explanations.shift_pairs import GRADES, known_shift_records, score_answer  # noqa: E402
from nemo_train.callbacks.adapter_checkpoint import AdapterCheckpoint  # noqa: E402
from nemo_train.explainer import ExplainerModule  # noqa: E402
from nemo_train.explainer.generation import generate_explanations  # noqa: E402
from nemo_train.models.vlm import load_processor  # noqa: E402
from nemo_train.nemo.grounding import ClaimParser  # noqa: E402


def _fit(module: ExplainerModule, data: ExplanationDataModule, steps: int, adapter_dir: Path) -> dict[str, float]:
    """Train ``steps`` steps (no validation, no checkpoint but the adapter); wall time of the fit."""
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=[AdapterCheckpoint(dirpath=str(adapter_dir), on_checkpoint=False)],
        default_root_dir=str(adapter_dir.parent),
    )
    data.setup()
    start = time.perf_counter()
    trainer.fit(module, datamodule=data)
    seconds = time.perf_counter() - start
    loss = trainer.callback_metrics.get("train/loss")
    return {"steps": steps, "seconds": seconds, "s_per_step": seconds / steps, "loss": float(loss or float("nan"))}


def _module(args: argparse.Namespace, lr: float, visual_lr: float, adapter: str | None) -> ExplainerModule:
    return ExplainerModule(
        adapter=adapter,
        visual_lr=visual_lr,
        lora_r=args.lora_r,
        lora_alpha=2 * args.lora_r,
        modules_to_save=args.modules_to_save,
        lr=lr,
        warmup_steps=args.warmup,
    )


def stage1(args: argparse.Namespace, out: Path) -> dict[str, object]:
    """Caption training; returns timings, the adapter folder and the held-out caption accuracy."""
    start = time.perf_counter()
    data = ExplanationDataModule(
        model_name_or_path="embedded:tiny-qwen2-vl",
        processor_loader=load_processor,
        data_dir=str(out / "captions"),
        recipe="shift_captions",
        caption_pairs=args.caption_pairs,
        seed=args.seed,
        max_length=args.max_length,
        batch_size=args.batch_size,
    )
    data.setup()
    prep = time.perf_counter() - start
    module = _module(args, args.lr1, args.visual_lr1, None)
    result: dict[str, object] = {"prep_s": prep, **_fit(module, data, args.stage1_steps, out / "stage1" / "adapter")}
    facts = facts_named("shifts")
    records = caption_references(data.val_records, facts)[: args.eval]
    start = time.perf_counter()
    texts = [
        s[0]
        for s in generate_explanations(
            module, [r.image for r in records], prompts=[r.prompt for r in records], max_new_tokens=40, batch_size=64
        )
    ]
    result["caption_eval_s"] = time.perf_counter() - start
    attributes = [facts.class_attribute, *(f.name for f in facts.factors)]
    for attribute in attributes:
        hits = [
            parse_caption(t, facts)[attribute] == parse_caption(r.explanation, facts)[attribute]
            for r, t in zip(records, texts)
        ]
        result[f"caption_acc/{attribute}"] = sum(hits) / len(hits)
    result["examples"] = list(zip([r.explanation for r in records[:3]], texts[:3]))
    result["adapter"] = str(out / "stage1" / "adapter")
    return result


def known_pairs(args: argparse.Namespace, out: Path) -> tuple[Path, list]:
    """Stage-2 training pairs (training handwriting) and held-out records (test handwriting)."""
    start = time.perf_counter()
    train = known_shift_records(out / "known", args.pairs, seed=args.seed, pool="train", prefix="t")
    held_out = known_shift_records(out / "known", args.eval, seed=args.seed + 100, pool="test", prefix="e")
    path = write_records(train, out / "known" / "train.jsonl")
    print(f"known-shift pairs: {len(train)} train, {len(held_out)} held out ({time.perf_counter() - start:.1f} s)")
    return path, read_records(write_records(held_out, out / "known" / "held_out.jsonl"))


def stage2(args: argparse.Namespace, out: Path, train: Path, held_out: list, adapter: str | None) -> dict:
    """Distillation on known-shift pairs from ``adapter`` (or the base model); grades on ``held_out``."""
    start = time.perf_counter()
    data = ExplanationDataModule(
        model_name_or_path="embedded:tiny-qwen2-vl",
        processor_loader=load_processor,
        train_jsonl=str(train),
        max_length=args.max_length,
        batch_size=args.batch_size,
    )
    data.setup()
    prep = time.perf_counter() - start
    module = _module(args, args.lr2, args.visual_lr2, adapter)
    name = "stage2" if adapter else "stage2_alone"
    result: dict = {"prep_s": prep, **_fit(module, data, args.stage2_steps, out / name / "adapter")}
    start = time.perf_counter()
    texts = [
        s[0]
        for s in generate_explanations(
            module, [r.image for r in held_out], prompts=[r.prompt for r in held_out], max_new_tokens=40, batch_size=64
        )
    ]
    result["eval_s"] = time.perf_counter() - start
    grades = [score_answer(t, r.explanation) for r, t in zip(held_out, texts)]
    for grade in GRADES:
        result[grade] = sum(g[grade] for g in grades) / len(grades)
    result["true_claims"], result["cause_named"] = _grounding(held_out, texts)
    factors = sorted({r.cause for r in held_out})
    for factor in factors:
        mine = [g for g, r in zip(grades, held_out) if r.cause == factor]
        result[f"factor/{factor}"] = sum(g["factor"] for g in mine) / len(mine)
        result[f"all/{factor}"] = sum(g["all"] for g in mine) / len(mine)
    result["examples"] = list(zip([r.explanation for r in held_out[:3]], texts[:3]))
    return result


def _grounding(records: list, texts: list[str]) -> tuple[float, float]:
    """Share of the checkable claims that are true (the grounded judge's reading) and share of answers that
    blame the shifted factor."""
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


def _print(name: str, result: dict) -> None:
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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--caption-pairs", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=600, help="known-shift training pairs")
    parser.add_argument("--eval", type=int, default=200, help="held-out images per evaluation")
    parser.add_argument("--stage1-steps", type=int, default=300)
    parser.add_argument("--stage2-steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr1", type=float, default=6e-3)
    parser.add_argument("--lr2", type=float, default=6e-3)
    parser.add_argument("--visual-lr1", type=float, default=1e-3)
    parser.add_argument("--visual-lr2", type=float, default=1e-3)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--modules-to-save", nargs="+", default=["visual", "lm_head", "embed_tokens"])
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--compare", action="store_true", help="also train stage 2 without stage 1")
    parser.add_argument("--skip-stage1", action="store_true", help="only stage 2 from the base model")
    parser.add_argument("--json", default=None, help="write every result to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    L.seed_everything(args.seed, verbose=False)
    load_processor("embedded:tiny-qwen2-vl")  # build the tiny model's cache outside the timings
    train, held_out = known_pairs(args, out)
    if not args.skip_stage1:
        results["stage1"] = stage1(args, out)
        _print("stage 1 (captions)", results["stage1"])
        L.seed_everything(args.seed, verbose=False)
        results["stage2"] = stage2(args, out, train, held_out, results["stage1"]["adapter"])
        _print("stage 2 (from the stage-1 adapter)", results["stage2"])
    if args.compare or args.skip_stage1:
        L.seed_everything(args.seed, verbose=False)
        results["stage2_alone"] = stage2(args, out, train, held_out, None)
        _print("stage 2 alone (from the base model)", results["stage2_alone"])
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **results}, indent=2))


if __name__ == "__main__":
    main()
