"""``nemo-train distill-eval``: NEMO evaluation of a distilled explainer next to its teacher and KnownCause.

On held-out errors of each target (the test grid of a generated benchmark; the teacher mined a disjoint
split) it runs, with the student as the MLLM everywhere:

* ``Teacher`` — the exhaustive single-attribute search (the max-CEI edit; not a language model);
* ``Student (greedy)`` — one greedy pass of the student on the error image;
* ``SciTX (student, M=m)`` — SciTX with the student as hypothesis source (``m`` sampled answers, argmax CEI);
* ``CamMLLM (student)`` — the student reads the Grad-CAM overlay of the prediction;
* ``ChangeMLLM (student)`` — the student compares the error with a correctly classified reference;
* ``KnownCause`` — names the planted bias (edit derived by the keyword deriver, a rule-based parser).

The student's edits are read from its structured answers (:class:`~nemo_train.nemo.structured.StructuredEditDeriver`).
LLM Match comes from the keyword judge (closed-vocabulary synthetic data only, not a model). Every target
after the first is a classifier whose errors the student never saw in distillation: the generalisation
report. Results resume from ``<out_dir>/results.jsonl`` like ``nemo-eval``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from nemo_train.backends.student import StudentBackend
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark, build_synthetic_benchmark
from nemo_train.nemo.class_mapping import ClassMapping
from nemo_train.nemo.components.editors import DiffusersEdit
from nemo_train.nemo.components.targets import TargetSpec, as_spec, unique_names
from nemo_train.nemo.evaluation import evaluate_sample, record_key
from nemo_train.nemo.folder_benchmark import build_folder_benchmark
from nemo_train.nemo.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
from nemo_train.nemo.judges import CriterionName, Judge, JudgePanel, KeywordJudge, LLMJudge
from nemo_train.nemo.methods.base import Explanation, ask_causes
from nemo_train.nemo.methods.cam_mllm import CamMLLM
from nemo_train.nemo.methods.change_mllm import ChangeMLLM
from nemo_train.nemo.methods.reference import KnownCauseExplainer
from nemo_train.nemo.methods.scitx import MLLMHypothesizer, SciTX
from nemo_train.nemo.structured import (
    DISTILL_CAM_PROMPT,
    DISTILL_CHANGE_PROMPT,
    DISTILL_PROMPT,
    StructuredEditDeriver,
)
from nemo_train.nemo.teacher import ExhaustiveAttributeTeacher
from nemo_train.quiet import progress_bar
from nemo_train.store import ResultStore

MethodName = Literal["teacher", "student", "scitx", "cam_mllm", "change_mllm", "known_cause"]


class TeacherMethod:
    """The exhaustive teacher as an explanation method (its answer carries the max-CEI edit)."""

    name = "Teacher (exhaustive search, not a model)"

    def __init__(self, target) -> None:
        self.teacher = ExhaustiveAttributeTeacher(target)

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        label = self.teacher.label(sample, benchmark)
        return Explanation(label.answer if label else "")


class StudentGreedy:
    """One greedy pass of the student on the error image with its distillation question."""

    def __init__(self, backend, template: str = DISTILL_PROMPT) -> None:
        self.backend, self.template = backend, template
        self.name = "Student (greedy)"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        from nemo_train.backends.messages import user_message

        names = benchmark.class_names
        text = self.template.format(true_name=names[sample.label], pred_name=names[sample.prediction])
        found = ask_causes(self.backend, [user_message(text, images=[sample.image])], n=1, temperature=0.0)
        return Explanation(found[0] if found else "", found)


def edit_scorers(
    bench: NemoBenchmark, target, editor: DiffusersEdit | None, seed: int
) -> tuple[CounterfactualScorer, CounterfactualScorer | None]:
    """``(structured, keyword)`` scorers: the edit a structured answer states (an attribute edit re-rendered
    exactly on generated data, an instruction applied by the diffusers ``editor`` on folder data), and the
    keyword parser for KnownCause (generated data only; ``None`` on folder data)."""
    if bench.renderer is None:
        if editor is None:
            raise UserInputError("folder data needs editor: a DiffusersEdit that applies the student's instructions")
        return CounterfactualScorer(target, StructuredEditDeriver(), editor.editor(seed)), None
    exact = ExactAttributeEditor(bench.renderer)
    editable = bench.cause["editable"]
    structured = CounterfactualScorer(target, StructuredEditDeriver(bench.vocabulary, editable), exact)
    return structured, CounterfactualScorer(target, KeywordAttributeDeriver(bench.vocabulary, editable), exact)


def student_methods(
    names: list[MethodName],
    target,
    student,
    k: int,
    m: int,
    structured: CounterfactualScorer,
    keyword: CounterfactualScorer | None,
) -> list[tuple[object, CounterfactualScorer]]:
    """(method, scorer) pairs: the student's answers scored by their stated edit, KnownCause by keywords."""
    out: list[tuple[object, CounterfactualScorer]] = []
    for name in names:
        if name == "teacher":
            out.append((TeacherMethod(target), structured))
        elif name == "student":
            out.append((StudentGreedy(student), structured))
        elif name == "scitx":
            hypothesizer = MLLMHypothesizer(student, temperature=0.7, template=DISTILL_PROMPT)
            method = SciTX(target, hypothesizer, structured, k=k, m=m)
            method.name = f"SciTX (student, M={m})"
            out.append((method, structured))
        elif name == "cam_mllm":
            method = CamMLLM(target, student, template=DISTILL_CAM_PROMPT)
            method.name = "CamMLLM (student)"
            out.append((method, structured))
        elif name == "change_mllm":
            method = ChangeMLLM(target, student, template=DISTILL_CHANGE_PROMPT)
            method.name = "ChangeMLLM (student)"
            out.append((method, structured))
        else:
            out.append((KnownCauseExplainer(), keyword))
    return out


def mean_scores(records) -> dict[tuple[str, str], tuple[float | None, float]]:
    """Mean LLM Match (judged rows only) and mean CEI per (method, target)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["method"], r["target"]), []).append(r)
    out = {}
    for key, rows in groups.items():
        judged = [r["llm_match"] for r in rows if r.get("llm_match") is not None]
        out[key] = (sum(judged) / len(judged) if judged else None, sum(r["cei"] for r in rows) / len(rows))
    return out


def distill_eval(
    student: str,
    targets: list[str | TargetSpec],
    biases: list[str] | None = None,
    dataset: Literal["cmnist", "clevr", "folder"] = "cmnist",
    methods: list[MethodName] | None = None,
    n: int = 32,
    seed: int = 0,
    test_styles: int = 2,
    data_kwargs: dict | None = None,
    evaluation_root: str | None = None,
    mapping_file: str | None = None,
    criterion: CriterionName | None = None,
    judges: list[Judge] | None = None,
    editor: DiffusersEdit | None = None,
    k: int = 8,
    m: int = 4,
    max_tokens: int = 128,
    out_dir: str = "checkpoints/distill_cmnist/eval",
) -> dict:
    """Evaluate a distilled explainer with NEMO (CEI, LLM Match) on held-out errors, next to its teacher and KnownCause.

    Args:
        student: the distilled explainer's adapter folder (``<fit root>/adapter``).
        targets: classifier checkpoints, or target objects (``TimmModel`` with hub or local weights) for folder
            data; the first is the one distilled on, the others are the generalisation report (biases the
            student never saw).
        biases: the bias preset of each target (which errors are bias-conflicting; default: the dataset's).
        dataset: ``cmnist`` / ``clevr`` (the held-out test grid) or ``folder`` (``evaluation_root``).
        methods: rows, some of teacher, student, scitx, cam_mllm, change_mllm, known_cause (default: all;
            on folder data teacher and known_cause do not exist: default the four student rows).
        n, seed, test_styles, data_kwargs: the held-out errors (test grid) per target.
        evaluation_root, mapping_file: folder data: the evaluation folder ``<root>/<class>/<image>`` (the one
            the teacher's mining folder was checked against) and an optional class mapping JSON
            (default: the folder names are WordNet ids).
        criterion: the failure factor the judges grade against (``imagenet_r``, ``objectnet``, ``imagenet_d``;
            default on generated data: the dataset's).
        judges: LLM judges (``LLMJudge`` with an OpenAI-compatible backend; needed on folder data); default on
            generated data: the keyword judge (closed vocabulary, not a model).
        editor: folder data: the diffusers instruction editor that applies the student's ``Edit:`` instructions.
        k, m: SciTX observations and sampled hypotheses.
        max_tokens: longest answer the student may write (its structured answers are far shorter).
        out_dir: ``results.jsonl`` and the reply cache; reruns resume.
    """
    if not Path(student).is_dir():
        raise UserInputError(f"student adapter folder {student!r} does not exist; run the distilled explainer's fit")
    specs = [as_spec(t) for t in targets]
    for spec in specs:
        spec.check()
    if biases is not None and len(biases) != len(targets):
        raise UserInputError(f"{len(biases)} biases for {len(targets)} targets; give one per target")
    folder = dataset == "folder"
    if folder and (evaluation_root is None or not Path(evaluation_root).is_dir()):
        raise UserInputError(
            f"dataset 'folder' needs evaluation_root, an existing image folder; got {evaluation_root!r}"
        )
    if folder and (criterion is None or not judges):
        raise UserInputError("folder data needs judges (LLMJudge) and the criterion they grade (e.g. imagenet_r)")
    if folder and editor is None:
        raise UserInputError("folder data needs editor: a DiffusersEdit that applies the student's instructions")
    default = ["student", "scitx", "cam_mllm", "change_mllm"]
    names = list(methods or (default if folder else ["teacher", *default, "known_cause"]))
    if folder and {"teacher", "known_cause"} & set(names):
        raise UserInputError("methods teacher and known_cause need generated data (cmnist, clevr)")
    out = Path(out_dir)
    store = ResultStore(out / "results.jsonl")
    backend = StudentBackend(student, cache=out / "llm_cache", max_tokens=max_tokens)
    for judge in judges or []:
        if isinstance(judge, LLMJudge):
            judge.backend.attach_cache(out / "llm_cache")
    panel = JudgePanel([j.for_benchmark(criterion or dataset) for j in judges or [KeywordJudge()]])
    mapping = ClassMapping.for_folder(evaluation_root, mapping_file) if folder else None
    started, keys = time.perf_counter(), []
    for i, (spec, target_name) in enumerate(zip(specs, unique_names(specs))):
        target = spec.build(None if mapping is None else mapping.class_names, mapping)
        if folder:
            bench = build_folder_benchmark(
                "folder", evaluation_root, target, criterion, n=n, seed=seed, class_folders=mapping.folders
            )
        else:
            bench = build_synthetic_benchmark(
                dataset,
                target=target,
                n=n,
                seed=seed,
                bias=biases[i] if biases else None,
                test_styles=test_styles,
                datamodule_kwargs=data_kwargs,
            )
        structured, keyword = edit_scorers(bench, target, editor, seed)
        chosen = student_methods(names, target, backend, k, m, structured, keyword)
        bar = progress_bar(total=len(chosen) * len(bench.errors), desc=f"distill-eval {target_name}", unit="sample")
        for method, scorer in chosen:
            for sample in bench.errors:
                key = record_key(target_name, method.name, sample.sample_id)
                keys.append(key)
                if key not in store:
                    store.append(evaluate_sample(method, sample, bench, scorer, panel, target_name)[0])
                bar.update(1)
        bar.close()
    summary = mean_scores(store.records[k] for k in keys)
    target_names = list(dict.fromkeys(t for _, t in summary))
    rows = []
    for method in dict.fromkeys(mm for mm, _ in summary):
        row = [method]
        for t in target_names:
            row += list(summary.get((method, t), (None, None)))
        rows.append(row)
    columns = ["method"] + [f"{t} {c}" for t in target_names for c in ("LLM Match", "CEI")]
    print_table(
        columns,
        rows,
        title=f"Distilled explainer on held-out {dataset} errors (distilled on {target_names[0]}; others: unseen biases)",
        caption=f"LLM Match: {', '.join(panel.names)}; CEI in percentage points",
        digits=3,
    )
    print(f"{len(keys)} rows in {time.perf_counter() - started:.1f} s; results in {store.path}")
    return {
        "summary": {f"{mm}|{t}": {"llm_match": v[0], "cei": v[1]} for (mm, t), v in summary.items()},
        "results": str(store.path),
    }
