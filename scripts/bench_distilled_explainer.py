"""Seconds per explained error and CEI: the distillation teachers vs the distilled student, same errors, same machine.

    python scripts/bench_distilled_explainer.py --student checkpoints/distill_cmnist/adapter \
        --classifier checkpoints/cmnist_model_a/checkpoints/best.ckpt [--dataset cmnist] [--errors 16] [--m 4] \
        [--hypothesis-explainer checkpoints/explainer_tiny/adapter]

Rows, each over the same held-out errors (test grid) with the reply cache off:

* Teacher, exhaustive search: every single-attribute edit rendered and classified (not a language model);
* Teacher, SciTX (M=m): the offline SciTX of ``nemo-eval`` (attribute-contrast template hypotheses, keyword
  deriver: rule-based stand-ins, not language models);
* Teacher, SciTX (M=m) with a learned hypothesis source (``--hypothesis-explainer``: a saved explainer that
  answers in plain sentences, e.g. the six-cause explainer; not the student): ``m`` sampled sentences per
  error, edits by the keyword deriver (rule-based);
* Student, SciTX (M=m): the student's ``m`` sampled structured answers, argmax CEI;
* Student, one greedy pass: the serving path (errors batched into one left-padded ``generate`` call, LoRA
  merged into the base model, answers capped at 128 tokens), and the same student served one error per call
  with the adapter unmerged and no cap (the path before batching), whose answers must be the same.

A row's time is what producing its explanations costs (a method's own counterfactual tests included); the
CEI test that scores an answer afterwards is timed apart ("+ CEI test" column). Timing uses
``torch.utils.benchmark.Timer.blocked_autorange`` (median over repeated runs of the whole error loop, after
one warm-up run), one CPU thread; on a shared machine the absolute numbers are inflated by the load.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch.utils.benchmark import Timer

os.environ.setdefault("WANDB_MODE", "disabled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--student", required=True, help="the distilled explainer's adapter folder")
    parser.add_argument("--classifier", required=True, help="the classifier checkpoint it was distilled on")
    parser.add_argument("--dataset", default="cmnist", choices=["cmnist", "clevr"])
    parser.add_argument("--image-size", type=int, default=None, help="CLEVR render size (the classifier's)")
    parser.add_argument("--errors", type=int, default=16)
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument(
        "--hypothesis-explainer", default=None, help="a plain-text explainer folder (learned SciTX row)"
    )
    parser.add_argument("--min-run-time", type=float, default=2.0, help="seconds of repeated runs per row")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from nemo_train.backends.hf_local import HFLocalBackend
    from nemo_train.backends.student import StudentBackend
    from nemo_train.console import print_table
    from nemo_train.models.targets import load_checkpoint_target
    from nemo_train.nemo.distill.rows import ExhaustiveSearchExplainer, OnePassExplainer
    from nemo_train.nemo.methods.base import explain_many
    from nemo_train.nemo.methods.scitx import (
        AttributeContrastHypothesizer,
        MLLMHypothesizer,
        PlainTextHypothesizer,
        SciTX,
    )
    from nemo_train.scoring.benchmark import build_synthetic_benchmark
    from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
    from nemo_train.scoring.structured import DISTILL_PROMPT, StructuredEditDeriver

    target = load_checkpoint_target(args.classifier)
    kwargs = {"image_size": args.image_size} if args.image_size else None
    bench = build_synthetic_benchmark(args.dataset, target=target, n=args.errors, datamodule_kwargs=kwargs)
    errors, cause, editor = bench.errors, bench.cause, ExactAttributeEditor(bench.renderer)
    structured = CounterfactualScorer(target, StructuredEditDeriver(bench.vocabulary, cause["editable"]), editor)
    keyword = CounterfactualScorer(target, KeywordAttributeDeriver(bench.vocabulary, cause["editable"]), editor)
    # no cache: every call generates; answers capped at 128 tokens as in distill-eval
    student = StudentBackend(args.student, batch_size=len(errors), max_new_tokens=128)
    one_by_one = StudentBackend(args.student, batch_size=1, merge_adapter=False)
    m, k = args.m, args.k
    template = AttributeContrastHypothesizer(bench.vocabulary, cause["editable"], cause["object"])
    rows = {
        "Teacher: exhaustive search (not a model)": (ExhaustiveSearchExplainer(target), structured, True),
        f"Teacher: SciTX M={m}, template hypotheses + keyword deriver (not models)": (
            SciTX(target, template, keyword, k=k, m=m),
            keyword,
            True,
        ),
    }
    if args.hypothesis_explainer:
        learned = PlainTextHypothesizer(HFLocalBackend(args.hypothesis_explainer, batch_size=len(errors) * m))
        rows[f"Teacher: SciTX M={m}, learned explainer's sentences (not the student) + keyword deriver (rule)"] = (
            SciTX(target, learned, keyword, k=k, m=m),
            keyword,
            True,
        )
    sampled = SciTX(target, MLLMHypothesizer(student, template=DISTILL_PROMPT), structured, k=k, m=m)
    rows[f"Student: SciTX M={m} sampled + argmax CEI (batched)"] = (sampled, structured, False)
    rows["Student: one greedy pass (batched, LoRA merged)"] = (OnePassExplainer(student), structured, False)
    rows["Student: one greedy pass (one error per call, LoRA unmerged)"] = (
        OnePassExplainer(one_by_one),
        structured,
        False,
    )

    results, answers = [], {}
    for name, (method, scorer, is_teacher) in rows.items():
        explain_many(method, errors, bench)  # warm-up: model load, first forwards
        explanations = []

        def explain(method=method, explanations=explanations) -> None:
            explanations[:] = explain_many(method, errors, bench)

        def explain_and_score(method=method, scorer=scorer) -> None:
            for sample, e in zip(errors, explain_many(method, errors, bench)):
                if e.trial is None and e.text:
                    scorer.score(sample, [e.text], bench.class_names)

        seconds = Timer("explain()", globals={"explain": explain}).blocked_autorange(min_run_time=args.min_run_time)
        scored = Timer("f()", globals={"f": explain_and_score}).blocked_autorange(min_run_time=args.min_run_time)
        ceis = []
        for sample, e in zip(errors, explanations):
            trial = e.trial
            if trial is None and e.text:
                trial = scorer.score(sample, [e.text], bench.class_names)[0]
            ceis.append(trial.cei if trial is not None else 0.0)
        answers[name] = [e.text for e in explanations]
        results.append(
            (name, is_teacher, seconds.median / len(errors), scored.median / len(errors), sum(ceis) / len(ceis))
        )

    greedy = [a for n, a in answers.items() if n.startswith("Student: one greedy pass")]
    same = sum(a == b for a, b in zip(*greedy))
    print_table(
        ["method", "s / error", "s / error + CEI test", "mean CEI"],
        [[n, s, t, c] for n, _, s, t, c in results],
        title=f"Distilled explainer vs teachers on {len(errors)} held-out {args.dataset} errors (1 CPU thread)",
        caption=f"greedy answers, batched + merged vs one per call + unmerged: {same} of {len(errors)} identical",
        digits=4,
    )
    teachers = [(n, s, c) for n, is_teacher, s, _, c in results if is_teacher]
    print_table(
        ["student row", "teacher row", "speed-up (s / error)", "CEI / teacher's"],
        [
            [n, tn, ts / s, c / tc if abs(tc) >= 1 else None]  # no ratio to a teacher whose CEI is ~0
            for n, is_teacher, s, _, c in results
            if not is_teacher
            for tn, ts, tc in teachers
        ],
        title="Student vs each teacher (explanation time per error; > 1 = the student is faster)",
        caption="CEI ratio left out where the teacher's mean CEI is below 1 point",
        digits=3,
    )


if __name__ == "__main__":
    main()
