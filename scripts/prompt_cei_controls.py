"""Control rewrites for counterfactual prompt intervention with the small CLIP as the zero-shot target.

For every sampled error of the caption-prompt target (``CaptionZeroShotModel``) on a generated benchmark,
the caption prompt rule (a rule, not a model) rewrites the true class's prompt from one-line control
statements: one naming the value the image really has ("The digit is green."), one naming another value
("The digit is cyan.") for every attribute but the class, and one naming all the image's values. The
table gives the mean prompt CEI of each and the share of errors where it is positive: it shows what the
intervention rewards (a prompt that describes the image better), independent of any explanation method.

    python scripts/prompt_cei_controls.py --clip_model checkpoints/clip_synthetic/hf --captions cmnist
"""

from __future__ import annotations

import argparse
import statistics

import torch

from datamodules.captions import VOCABULARIES
from nemo_train.console import print_table
from nemo_train.metrics.nemo import cei_points
from nemo_train.models.specs import CaptionZeroShotModel
from nemo_train.nemo.components import BenchmarkArgs
from nemo_train.scoring.prompt_rule import CAPTION_ATTRIBUTES, CaptionPromptRule


def statements(rule: CaptionPromptRule, attrs: dict, obj: str) -> dict[str, str]:
    """Control statements: the image's own value and another one of every attribute, and all own values."""
    out, own_words = {}, []
    for attribute, slot in rule.slots.items():
        words = rule.words[slot]
        own = rule.image_value(attribute, attrs)
        out[f"{slot}: the image's value"] = f"The {obj} is {words[own]}."
        out[f"{slot}: another value"] = f"The {obj} is {words[(own + 1) % len(words)]}."
        own_words.append(words[own])
    out["every attribute: the image's values"] = f"The {obj} is {', '.join(own_words)}."
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip_model", default="checkpoints/clip_synthetic/hf")
    parser.add_argument("--captions", choices=sorted(CAPTION_ATTRIBUTES), default="cmnist")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--test_styles", type=int, default=4)
    args = parser.parse_args()

    target = CaptionZeroShotModel(args.clip_model, args.captions).build(None, None)
    data_kwargs = {"image_size": 32} if args.captions == "clevr" else None
    bench = BenchmarkArgs(name=args.captions, n=args.n, test_styles=args.test_styles, data_kwargs=data_kwargs)
    benchmark = bench.build(target, None)
    rule = CaptionPromptRule(args.captions, benchmark.vocabulary)
    obj = benchmark.cause["object"]
    cei: dict[str, list[float]] = {}
    example: dict[str, str] = {}
    for error in benchmark.errors:
        controls = statements(rule, error.attrs, obj)
        prompts = [rule.rewrite(text, error.label, error.attrs) for text in controls.values()]
        image = error.image[None]
        p_o = float(target.predict_proba(image)[0, error.label])
        p_e = target.proba_with_prompts(image, error.label, prompts)[0].tolist()
        for (name, _), prompt, p in zip(controls.items(), prompts, p_e):
            cei.setdefault(name, []).append(cei_points(p, p_o))
            example.setdefault(
                name, f"{VOCABULARIES[args.captions].zero_shot_prompts(rule.class_attribute)[error.label]} -> {prompt}"
            )
    rows = [
        [name, example[name], round(statistics.mean(v), 2), round(sum(x > 0 for x in v) / len(v), 2)]
        for name, v in cei.items()
    ]
    print_table(
        ["rewrite names", "example (first error)", "mean CEI", "share CEI > 0"],
        rows,
        title=f"Prompt CEI of control rewrites ({args.captions}, {len(benchmark.errors)} errors of {args.clip_model})",
        caption="prompts written by the caption rule, not a model; CEI in percentage points",
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
