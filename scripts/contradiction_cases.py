"""Explanations whose sentence and edit disagree, scored on shifts errors as ``nemo-eval`` scores a record.

    .venv/bin/python scripts/contradiction_cases.py --ckpt checkpoints/shifts_gaps_a/checkpoints/best.ckpt --n 60

For each of ``--n`` errors of the shifts benchmark (``test_shift: multi``) it scores four explanations built from the
error's own cause: KnownCause's sentence with its ``Edit:`` line, the same sentence without it, the sentence with
the edit of another of the image's off-typical factors, and a sentence blaming that other factor with the cause's
edit. It prints, per case, the headline LLM Match and CEI (an inconsistent record scores 0), the scores before that
rule and the consistency share. Judge and edits are offline parsers (the grounded judge, the text deriver).
"""

from __future__ import annotations

import argparse
from statistics import mean

from nemo_train.models.specs import as_classifier
from nemo_train.nemo.evaluation import score_explanation
from nemo_train.nemo.methods.base import Explanation
from nemo_train.nemo.methods.reference import per_error_cause
from nemo_train.nemo.methods.trivial import blame_sentence, off_typical
from nemo_train.scoring.editors import ExactEdit
from nemo_train.scoring.judges import GroundedJudge, JudgePanel
from nemo_train.scoring.shift_benchmark import build_shift_benchmark
from nemo_train.scoring.structured import format_edit
from nemo_train.scoring.text_edits import reader_for, restore_value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="a shifts classifier written by nemo-train fit")
    parser.add_argument("--gaps", default="gaps_a")
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    target = as_classifier(args.ckpt).build(None, None)
    bench = build_shift_benchmark(
        target, args.gaps, n=args.n, seed=args.seed, datamodule_kwargs={"test_shift": "multi"}
    )
    scorer = ExactEdit().build_scorer(bench, target, None, args.seed, True)
    panel = JudgePanel([GroundedJudge().for_benchmark("shifts", bench.facts)])
    reader = reader_for(bench)
    cases = ("sentence + its edit", "sentence alone", "cause + another edit", "another + the cause's edit")
    rows: dict[str, list[dict]] = {case: [] for case in cases}
    for sample in bench.errors:
        known = per_error_cause(sample, bench).text
        sentence = known.split(" Edit:")[0]
        other = ([f for f in off_typical(sample, bench) if f != sample.cause] or ["angle", "color"])[0]
        other = other if other != sample.cause else "color"

        def edit(factor: str, sample=sample) -> str:
            value = restore_value(bench.facts, factor, sample, bench.cause)
            return format_edit({"attribute": factor, "value": value}, bench.vocabulary)

        texts = (
            known,
            sentence,
            f"{sentence} Edit: {edit(other)}",
            f"{blame_sentence(sample, bench, other).split(' Edit:')[0]} Edit: {edit(sample.cause)}",
        )
        for case, text in zip(cases, texts):
            record, _ = score_explanation("case", Explanation(text), sample, bench, scorer, panel, "t", reader)
            rows[case].append(record)
    for case, records in rows.items():
        print(
            f"{case:28s} n={len(records)}  LLM Match {mean(r['llm_match'] for r in records):.3f}"
            f"  CEI {mean(r['cei'] for r in records):6.2f}  | before the rule: LLM Match"
            f" {mean(r['judged_match'] for r in records):.3f}, CEI {mean(r['edit_cei'] for r in records):6.2f}"
            f"  | consistent {mean(bool(r['consistent']) for r in records):.2f}"
        )


if __name__ == "__main__":
    main()
