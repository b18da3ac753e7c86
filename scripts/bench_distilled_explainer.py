"""Seconds per explained error and CEI: the distillation teacher vs the distilled student, same errors, same machine.

    python scripts/bench_distilled_explainer.py --student checkpoints/distill_cmnist/adapter \
        --classifier checkpoints/cmnist_model_a/checkpoints/best.ckpt [--dataset cmnist] [--errors 16] [--m 4]

Rows, each run over the same held-out errors (test grid) with the reply cache off:

* Teacher, exhaustive search: every single-attribute edit rendered and classified (not a language model);
* Teacher, SciTX (M=m): the offline SciTX of ``nemo-eval`` (attribute-contrast template hypotheses, keyword
  deriver: rule-based stand-ins, not language models), the pipeline a distilled student replaces;
* Teacher, SciTX (M=m) with an MLLM: the same SciTX whose hypotheses and edits come from an MLLM, here the
  student itself sampled ``m`` times (the structured edit needs no derivation call); it stands for the cost
  profile of an MLLM teacher;
* Student, greedy: one pass of the student on the error image (its stated edit is scored by CEI).

Timing uses ``torch.utils.benchmark.Timer`` (one run of the whole error loop per row, after one warm-up error);
on a shared CPU the absolute numbers are inflated by the load, the ratios less so.
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
    args = parser.parse_args()
    torch.set_num_threads(1)

    from nemo_train.backends.student import StudentBackend
    from nemo_train.console import print_table
    from nemo_train.nemo.benchmark import build_synthetic_benchmark
    from nemo_train.nemo.distill_eval import StudentGreedy, TeacherMethod
    from nemo_train.nemo.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
    from nemo_train.nemo.methods.scitx import AttributeContrastHypothesizer, MLLMHypothesizer, SciTX
    from nemo_train.nemo.structured import DISTILL_PROMPT, StructuredEditDeriver
    from nemo_train.nemo.targets import load_checkpoint_target

    target = load_checkpoint_target(args.classifier)
    kwargs = {"image_size": args.image_size} if args.image_size else None
    bench = build_synthetic_benchmark(args.dataset, target=target, n=args.errors, datamodule_kwargs=kwargs)
    cause, editor = bench.cause, ExactAttributeEditor(bench.renderer)
    structured = CounterfactualScorer(target, StructuredEditDeriver(bench.vocabulary, cause["editable"]), editor)
    keyword = CounterfactualScorer(target, KeywordAttributeDeriver(bench.vocabulary, cause["editable"]), editor)
    student = StudentBackend(args.student)  # no cache: every call generates
    offline = SciTX(
        target,
        AttributeContrastHypothesizer(bench.vocabulary, cause["editable"], cause["object"]),
        keyword,
        k=args.k,
        m=args.m,
    )
    sampled = SciTX(target, MLLMHypothesizer(student, template=DISTILL_PROMPT), structured, k=args.k, m=args.m)
    rows = {
        "Teacher: exhaustive search (not a model)": (TeacherMethod(target), structured),
        f"Teacher: SciTX M={args.m}, template hypotheses + keyword deriver (not models)": (offline, keyword),
        f"Student: SciTX M={args.m} sampled + argmax CEI": (sampled, structured),
        "Student: one greedy pass": (StudentGreedy(student), structured),
    }
    results = []
    for name, (method, scorer) in rows.items():
        method.explain(bench.errors[0], bench)  # warm-up (model load, first forward)
        ceis: list[float] = []

        def run(method=method, scorer=scorer, ceis=ceis) -> None:
            ceis.clear()
            for sample in bench.errors:
                explanation = method.explain(sample, bench)
                trial = explanation.trial
                if trial is None and explanation.text:
                    trial = scorer.score(sample, [explanation.text], bench.class_names)[0]
                ceis.append(trial.cei if trial is not None else 0.0)

        seconds = Timer("run()", globals={"run": run}).timeit(1).mean
        results.append([name, seconds / len(bench.errors), sum(ceis) / len(ceis)])
    base = results[1][1]
    teacher_cei = results[1][2]
    print_table(
        ["method", "s / error", "mean CEI", "speed-up vs SciTX teacher", "CEI / SciTX teacher's"],
        [[n, s, c, base / s, c / teacher_cei if teacher_cei else None] for n, s, c in results],
        title=f"Distilled explainer vs teacher on {len(bench.errors)} held-out {args.dataset} errors (1 CPU thread)",
        digits=3,
    )


if __name__ == "__main__":
    main()
