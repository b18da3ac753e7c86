"""``nemo-train nemo-eval``: run explanation methods on a NEMO benchmark, score them, print Table 1.

For every target model, method and error sample the run writes one JSON line to
``<out_dir>/results.jsonl`` as soon as the sample is finished (flushed and fsynced). A rerun with the
same ``out_dir`` reads that file first and skips every finished (target, method, sample); language-model
replies are cached on disk under ``<out_dir>/llm_cache``, so a sample interrupted halfway does not pay
twice for the calls it already made. The table (LLM Match and CEI per method and target) is computed
from the file, so an interrupted-then-resumed run prints the same table as an uninterrupted one.

Embedded default (``benchmark: cmnist``, no ``explainer``): hypotheses come from the offline
attribute-contrast hypothesizer (a template over generator attributes, not a language model),
interventions from the exact CMNIST editor with the keyword deriver, judging from the keyword judge.
These offline parts only suit closed-vocabulary synthetic benchmarks; configure an ``explainer`` and
``judges`` endpoint for real ones.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from nemo_train.errors import UserInputError

METHODS = ("scitx", "error_retrieval", "cam_mllm", "change_mllm", "known_cause", "distractor")
BASELINES = ("error_retrieval", "cam_mllm", "change_mllm")
BENCHMARKS = ("cmnist", "clevr", "imagenet_r", "objectnet", "imagenet_d")
SYNTHETIC_BENCHMARKS = ("cmnist", "clevr")


# --------------------------------------------------------------------------- result file
class ResultStore:
    """Append-only JSONL of finished samples; tolerant of a torn last line after a crash."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict] = {}
        if self.path.exists():
            with self.path.open() as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by a kill
                    self.records[record["key"]] = record
            self._rewrite_if_torn()

    def _rewrite_if_torn(self) -> None:
        text = self.path.read_text()
        if text and not text.endswith("\n"):
            self.path.write_text("".join(json.dumps(r) + "\n" for r in self.records.values()))

    @staticmethod
    def key(target: str, method: str, sample_id: str) -> str:
        return f"{target}|{method}|{sample_id}"

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def append(self, record: dict) -> None:
        """Write one finished sample durably (flush + fsync) before moving on."""
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records[record["key"]] = record


# --------------------------------------------------------------------------- table
def summarize(records: Iterable[dict]) -> dict[tuple[str, str], dict[str, float]]:
    """Mean LLM Match and CEI per (method, target), plus each judge's mean and the sample count."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["method"], r["target"])].append(r)
    out = {}
    for key, rows in groups.items():
        rows = sorted(rows, key=lambda r: r["sample_id"])
        matches = [r["llm_match"] for r in rows if r["llm_match"] is not None]
        judges: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            for name, score in r["judges"].items():
                if score is not None:
                    judges[name].append(score)
        out[key] = {
            "llm_match": sum(matches) / len(matches) if matches else math.nan,
            "cei": sum(r["cei"] for r in rows) / len(rows),
            "n": len(rows),
            "per_judge": {k: sum(v) / len(v) for k, v in judges.items()},
        }
    return out


def format_table(summary: dict[tuple[str, str], dict[str, float]], benchmark: str) -> str:
    """Table-1-style text: one row per method, LLM Match and CEI for each target."""
    methods = list(dict.fromkeys(m for m, _ in summary))
    targets = list(dict.fromkeys(t for _, t in summary))
    width = max([len(m) for m in methods] + [10])
    head = f"{'method':<{width}}" + "".join(f" | {t[:22]:^22}" for t in targets)
    sub = " " * width + "".join(f" | {'LLM Match':>10} {'CEI':>11}" for _ in targets)
    lines = [f"NEMO evaluation on {benchmark}", head, sub, "-" * len(sub)]
    for m in methods:
        cells = []
        for t in targets:
            s = summary.get((m, t))
            cells.append(f" | {s['llm_match']:>10.3f} {s['cei']:>11.2f}" if s else f" | {'-':>10} {'-':>11}")
        lines.append(f"{m:<{width}}" + "".join(cells))
    n = {s["n"] for s in summary.values()}
    lines.append(f"(errors per cell: {', '.join(map(str, sorted(n)))}; CEI in percentage points)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- builders
def make_backend(spec: dict | None, cache_dir: Path):
    """A chat backend from a config dict (``kind: openai | hf_local``); ``None`` stays offline."""
    if spec is None:
        return None
    spec = dict(spec)
    kind = spec.pop("kind", "openai")
    if kind == "openai":
        from nemo_train.backends import OpenAICompatibleBackend

        return OpenAICompatibleBackend(cache=cache_dir, **spec)
    if kind == "hf_local":
        from nemo_train.backends import HFLocalBackend

        return HFLocalBackend(cache=cache_dir, **spec)
    raise UserInputError(f"backend kind {kind!r}; expected 'openai' or 'hf_local'")


def make_target(spec: str, class_names: list[str] | None = None, mapping=None):
    """A target from ``path/to.ckpt``, ``timm:<name>``, ``clip:<hub id>``, ``siglip:<hub id>``."""
    from nemo_train.nemo import targets

    if spec.startswith("timm:"):
        return targets.TimmTarget(spec[5:], mapping=mapping)
    if spec.startswith(("clip:", "siglip:")):
        if class_names is None:
            raise UserInputError(f"zero-shot target {spec!r} needs the benchmark's class names")
        return targets.ZeroShotTarget(spec.split(":", 1)[1], class_names)
    return targets.load_checkpoint_target(spec, class_names)


def make_panel(judges: list[dict] | None, criterion: str, cache_dir: Path):
    """The judge panel: ``LLMJudge`` per configured endpoint, or the offline keyword judge."""
    from nemo_train.nemo.judges import JudgePanel, KeywordJudge, LLMJudge

    if not judges:
        return JudgePanel([KeywordJudge(criterion)])
    return JudgePanel([LLMJudge(make_backend(spec, cache_dir), criterion) for spec in judges])


def make_scorer(
    benchmark, target, backend, editor: str | None, batched: bool = True, seed: int = 0, deriver: str = "auto"
):
    """The counterfactual test: exact editor on generated data, a diffusers editor or prompt swap otherwise."""
    from nemo_train.nemo import interventions as iv

    if deriver not in ("auto", "keyword", "llm"):
        raise UserInputError(f"deriver {deriver!r}; expected 'auto', 'keyword' or 'llm'")
    if benchmark.renderer is not None and editor in (None, "exact"):
        editable = (benchmark.cause or {}).get("editable", ("color", "angle"))
        if backend is None or deriver == "keyword":
            deriver = iv.KeywordAttributeDeriver(benchmark.vocabulary, editable=editable)
        else:
            deriver = iv.LLMAttributeDeriver(backend, benchmark.vocabulary, editable=editable)
        return iv.CounterfactualScorer(target, deriver, iv.ExactAttributeEditor(benchmark.renderer), batched=batched)
    if backend is None:
        raise UserInputError(f"benchmark {benchmark.name!r} needs an explainer endpoint to derive interventions")
    if editor == "prompt":
        return iv.CounterfactualScorer(
            target,
            iv.LLMInstructionDeriver(backend, "prompt", prompt_template=target.template),
            mode="prompt",
            batched=batched,
        )
    if editor in (None, "exact"):
        raise UserInputError(
            f"benchmark {benchmark.name!r} has no renderer; set editor to a diffusers model id/path or 'prompt'"
        )
    from nemo_train.nemo.editors import DiffusersEditor

    return iv.CounterfactualScorer(
        target, iv.LLMInstructionDeriver(backend, "image"), DiffusersEditor(editor, seed=seed), batched=batched
    )


def make_methods(
    names: list[str],
    validation: bool,
    benchmark,
    target,
    backend,
    scorer,
    k: int,
    m: int,
    clip_model: str | None,
    hypotheses: str = "auto",
):
    """Method objects in table order; ``validation`` adds each baseline's "+validation" variant."""
    from nemo_train.nemo.methods import cam_mllm, change_mllm, error_retrieval, reference, scitx
    from nemo_train.nemo.methods import validation as val
    from nemo_train.nemo.targets import ZeroShotTarget, tiny_random_clip

    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise UserInputError(f"unknown method(s) {unknown}; expected some of {list(METHODS)}")
    out = []
    for name in names:
        if name == "scitx":
            if hypotheses not in ("auto", "json", "plain", "attributes"):
                raise UserInputError(f"hypotheses {hypotheses!r}; expected 'auto', 'json', 'plain' or 'attributes'")
            if hypotheses == "attributes" or (hypotheses == "auto" and backend is None):
                if benchmark.vocabulary is None:
                    raise UserInputError("SciTX without an explainer endpoint works only on generated benchmarks")
                cause = benchmark.cause or {}
                hyp = scitx.AttributeContrastHypothesizer(
                    benchmark.vocabulary, cause.get("editable", ("color", "angle")), cause.get("object", "digit")
                )
            elif backend is None:
                raise UserInputError(f"hypotheses {hypotheses!r} needs an explainer backend")
            elif hypotheses == "plain":
                hyp = scitx.PlainTextHypothesizer(backend)
            else:
                hyp = scitx.MLLMHypothesizer(backend)
            captioner = scitx.MLLMCaptioner(backend) if backend is not None else None
            out.append(scitx.SciTX(target, hyp, scorer, k=k, m=m, captioner=captioner))
            continue
        if name == "error_retrieval":
            encoder = (
                ZeroShotTarget(clip_model, benchmark.class_names)
                if clip_model
                else tiny_random_clip(benchmark.class_names)
            )
            method = error_retrieval.ErrorRetrieval(encoder)
            if not clip_model:
                method.name = "ErrorRetrieval(random CLIP)"
        elif name == "cam_mllm":
            method = cam_mllm.CamMLLM(target, backend)
        elif name == "change_mllm":
            method = change_mllm.ChangeMLLM(target, backend)
        elif name == "known_cause":
            method = reference.KnownCauseExplainer()
        else:
            method = reference.DistractorExplainer((benchmark.cause or {}).get("distractor", "angle"))
        out.append(method)
        if validation and name in BASELINES:
            out.append(val.WithValidation(method, scorer, m))
    return out


def load_benchmark(
    benchmark: str,
    target,
    n: int,
    seed: int,
    data_root: str | None,
    reference_root: str | None,
    test_styles: int = 2,
    mapping=None,
    data_kwargs: dict | None = None,
):
    from nemo_train.nemo.benchmark import build_folder_benchmark, build_synthetic_benchmark

    if benchmark in SYNTHETIC_BENCHMARKS:
        return build_synthetic_benchmark(
            benchmark, target=target, n=n, seed=seed, test_styles=test_styles, datamodule_kwargs=data_kwargs
        )
    if data_root is None:
        raise UserInputError(f"benchmark {benchmark!r} needs data_root (its image folder)")
    folders = mapping.folders if mapping is not None else None
    return build_folder_benchmark(
        benchmark, data_root, target, benchmark, n=n, seed=seed, class_folders=folders, extra_reference=reference_root
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


# --------------------------------------------------------------------------- evaluation
def evaluate_sample(method, sample, benchmark, scorer, panel, target_name: str) -> tuple[dict, Any]:
    """Explain, score (CEI) and judge one error; returns the JSON record and the selected trial."""
    from nemo_train.nemo.judges import JudgeItem

    explanation = method.explain(sample, benchmark)
    trial = explanation.trial
    if trial is None:
        trials = scorer.score(sample, [explanation.text], benchmark.class_names) if explanation.text else []
        trial = trials[0] if trials else None
    names = benchmark.class_names
    verdict = panel.judge([JudgeItem(explanation.text, names[sample.label], names[sample.prediction])])[0]
    record = {
        "key": ResultStore.key(target_name, method.name, sample.sample_id),
        "target": target_name,
        "method": method.name,
        "sample_id": sample.sample_id,
        "label": sample.label,
        "prediction": sample.prediction,
        "explanation": explanation.text,
        "candidates": explanation.candidates,
        "candidate_cei": [t.cei for t in explanation.trials],
        "instruction": _jsonable(trial.instruction) if trial else None,
        "p_original": trial.p_original if trial else None,
        "p_edited": trial.p_edited if trial else None,
        "cei": trial.cei if trial else 0.0,
        "judges": verdict.scores,
        "llm_match": verdict.mean,
    }
    return record, trial


def _log_wandb(records: list[dict], summary, benchmark_name: str, images: dict[str, tuple]) -> None:
    import wandb

    from nemo_train.loggers import default_wandb_mode

    run = wandb.run or wandb.init(project="nemo-train", job_type="nemo-eval", mode=default_wandb_mode())
    table = wandb.Table(columns=["method", "target", "llm_match", "cei", "n"])
    for (method, target), s in summary.items():
        table.add_data(method, target, s["llm_match"], s["cei"], s["n"])
    judge_names = sorted({j for r in records for j in r["judges"]})
    samples = wandb.Table(
        columns=["image", "y", "y_hat", "method", "target", "explanation", "edit", "edited image", "cei", *judge_names]
    )
    for r in records:
        image, edited = images.get(r["key"], (None, None))
        samples.add_data(
            wandb.Image(image.permute(1, 2, 0).numpy()) if image is not None else None,
            r["label"],
            r["prediction"],
            r["method"],
            r["target"],
            r["explanation"],
            json.dumps(r["instruction"]),
            wandb.Image(edited.permute(1, 2, 0).numpy()) if edited is not None else None,
            r["cei"],
            *[r["judges"].get(j) for j in judge_names],
        )
    run.log({f"nemo/{benchmark_name}/table": table, f"nemo/{benchmark_name}/samples": samples})


def nemo_eval(
    benchmark: str = "cmnist",
    targets: list[str] | None = None,
    methods: list[str] | None = None,
    validation: bool = False,
    n: int = 100,
    seed: int = 0,
    k: int = 8,
    m: int = 3,
    explainer: dict | None = None,
    judges: list[dict] | None = None,
    editor: str | None = None,
    clip_model: str | None = None,
    data_root: str | None = None,
    reference_root: str | None = None,
    mapping_file: str | None = None,
    out_dir: str = "checkpoints/nemo_eval",
    wandb: bool = False,
    batched: bool = True,
    global_explanation: bool = False,
    test_styles: int = 2,
    hypotheses: str = "auto",
    deriver: str = "auto",
    data_kwargs: dict | None = None,
) -> dict:
    """Run explanation methods on a NEMO benchmark and print LLM Match and CEI per method and target.

    Args:
        benchmark: ``cmnist`` (embedded default), ``clevr`` (generated), or ``imagenet_r`` / ``objectnet`` /
            ``imagenet_d`` image folders.
        targets: classifiers: checkpoint paths (CMNIST), ``timm:<name>``, ``clip:<hub id>``, ``siglip:<hub id>``.
        methods: some of scitx, error_retrieval, cam_mllm, change_mllm, known_cause, distractor.
        validation: also run each baseline's "+validation" variant (Table 2).
        n: errors sampled per benchmark and target; seed: their sampling seed.
        k: SciTX observations; m: hypotheses per error.
        explainer: MLLM backend config (``{kind: openai, base_url, model, api_key_env}`` or
            ``{kind: hf_local, model_name_or_path, adapter}``); none = offline rule-based parts.
        judges: one backend config per LLM judge; none = offline keyword judge (synthetic data only).
        editor: ``exact`` (generated data), a diffusers model id/path, or ``prompt`` (zero-shot targets).
        clip_model: CLIP hub id/path for ErrorRetrieval (none: a random tiny CLIP, chance-level ranking).
        data_root, reference_root, mapping_file: image folders of a real benchmark, its ImageNet reference
            subset, and its class mapping JSON (``{class: [imagenet ids]}``).
        out_dir: results (``results.jsonl``), LLM cache and per-sample images; reruns resume here.
        wandb: log the table and a per-sample table to Weights & Biases.
        batched: classify all counterfactuals of an error in one batch.
        hypotheses: SciTX's hypothesis source: ``auto`` (the explainer's JSON replies, or offline the
            attribute-contrast template), ``json``, ``plain`` (one sentence per reply, for the fine-tuned
            tiny explainer) or ``attributes``.
        deriver: ``auto`` (the explainer derives edits, or offline the keyword deriver), ``keyword`` or ``llm``.
        test_styles: generated data only: exemplars / views per cell of the test attribute grid.
        data_kwargs: generated data only: extra datamodule arguments (e.g. ``{image_size: 32}`` for CLEVR).
        global_explanation: summarise SciTX's explanations into one global explanation and score it on
            every error (row ``Global``, paper 000 Sec. 4.2.7).
    """
    if benchmark not in BENCHMARKS:
        raise UserInputError(f"unknown benchmark {benchmark!r}; expected one of {list(BENCHMARKS)}")
    if not targets:
        raise UserInputError("no target classifier given; pass --targets [path/to/model.ckpt] or timm:/clip: names")
    if n < 1 or k < 1 or m < 1:
        raise UserInputError(f"n={n}, k={k}, m={m}; each must be at least 1")
    missing = [spec for spec in targets if spec.endswith(".ckpt") and not Path(spec).is_file()]
    if missing:  # before anything is written to out_dir
        raise UserInputError(
            f"classifier checkpoint(s) {missing} do not exist; train one with `nemo-train fit --config configs/cmnist/model_a.yaml`"
        )
    methods = list(methods or ["scitx", "error_retrieval", "cam_mllm", "change_mllm"])
    out = Path(out_dir)
    store = ResultStore(out / "results.jsonl")
    cache_dir = out / "llm_cache"
    backend = make_backend(explainer, cache_dir)
    criterion = benchmark
    panel = make_panel(judges, criterion, cache_dir)
    offline = []
    if backend is None:
        offline.append("hypotheses from the attribute-contrast template and edits derived by the keyword parser")
    if not judges:
        offline.append("judging by the keyword judge")
    if offline:
        print(
            f"note: offline parts in use ({'; '.join(offline)}); they suit only closed-vocabulary synthetic benchmarks."
        )
    mapping, class_names = None, None
    if benchmark not in SYNTHETIC_BENCHMARKS:
        from nemo_train.nemo.targets import ClassMapping

        if data_root is None or not Path(data_root).is_dir():
            raise UserInputError(
                f"benchmark {benchmark!r} needs data_root, an existing image folder; got {data_root!r}"
            )
        if mapping_file is not None:
            mapping = ClassMapping.from_json(mapping_file)
        elif benchmark == "imagenet_r":
            mapping = ClassMapping.from_wnids(sorted(p.name for p in Path(data_root).iterdir() if p.is_dir()))
        class_names = (
            mapping.class_names
            if mapping is not None
            else sorted(p.name for p in Path(data_root).iterdir() if p.is_dir())
        )

    started, skipped, done = time.perf_counter(), 0, 0
    keys: list[str] = []
    images: dict[str, tuple] = {}
    for spec in targets:
        target = make_target(spec, class_names, mapping)
        target_name = Path(spec).stem if spec.endswith(".ckpt") else spec
        bench = load_benchmark(benchmark, target, n, seed, data_root, reference_root, test_styles, mapping, data_kwargs)
        scorer = make_scorer(bench, target, backend, editor, batched, seed, deriver)
        chosen = make_methods(methods, validation, bench, target, backend, scorer, k, m, clip_model, hypotheses)
        bar = tqdm(total=len(chosen) * len(bench.errors), desc=f"nemo-eval {target_name}", unit="sample")
        for method in chosen:
            for sample in bench.errors:
                key = ResultStore.key(target_name, method.name, sample.sample_id)
                keys.append(key)
                if key in store:
                    skipped += 1
                else:
                    record, trial = evaluate_sample(method, sample, bench, scorer, panel, target_name)
                    store.append(record)
                    done += 1
                    if wandb:
                        images[key] = (sample.image, trial.edited_image if trial is not None else None)
                bar.update(1)
        bar.close()
        if global_explanation:
            keys += _run_global(store, bench, target_name, backend, scorer, panel)

    records = [store.records[k] for k in keys]
    summary = summarize(records)
    print(format_table(summary, benchmark))
    print(f"{done} samples computed, {skipped} resumed from {store.path} in {time.perf_counter() - started:.1f} s")
    if backend is not None:
        print(f"explainer calls: {backend.stats.requests} sent, {backend.stats.cache_hits} from cache")
    if wandb:
        _log_wandb(records, summary, benchmark, images)
    return {
        "summary": {f"{m}|{t}": v for (m, t), v in summary.items()},
        "computed": done,
        "resumed": skipped,
        "results": str(store.path),
    }


def _run_global(store: ResultStore, bench, target_name: str, backend, scorer, panel) -> list[str]:
    """Summarise the finished SciTX explanations of this target and score the summary on every error."""
    from nemo_train.nemo.methods.global_explanation import (
        GlobalExplanation,
        summarize_attribute_explanations,
        summarize_explanations,
    )

    texts = [
        store.records[k]["explanation"]
        for k in (ResultStore.key(target_name, "SciTX", s.sample_id) for s in bench.errors)
        if k in store
    ]
    if not texts:
        raise UserInputError("global_explanation needs SciTX in methods")
    keys = [ResultStore.key(target_name, "Global", s.sample_id) for s in bench.errors]
    if all(k in store for k in keys):
        return keys
    if backend is not None:
        text = summarize_explanations(backend, texts)
    else:
        cause = bench.cause or {}
        text = summarize_attribute_explanations(
            texts, bench.vocabulary or {}, cause.get("object", "digit"), cause.get("attribute", "color")
        )
    if not text:
        print("global explanation: the summary came back empty; skipped")
        return []
    print(f"global explanation ({target_name}): {text}")
    method = GlobalExplanation(text)
    for sample, key in zip(bench.errors, keys):
        if key not in store:
            store.append(evaluate_sample(method, sample, bench, scorer, panel, target_name)[0])
    return keys


def known_cause_win_rate(records: Iterable[dict], target: str | None = None) -> tuple[float, int]:
    """Share of errors where the known-cause explanation has a higher CEI than the distractor's."""
    by_sample: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in records:
        if target is None or r["target"] == target:
            method = "Distractor" if r["method"].startswith("Distractor(") else r["method"]
            by_sample[(r["target"], r["sample_id"])][method] = r["cei"]
    pairs = [v for v in by_sample.values() if "KnownCause" in v and "Distractor" in v]
    if not pairs:
        return math.nan, 0
    wins = sum(v["KnownCause"] > v["Distractor"] for v in pairs)
    return wins / len(pairs), len(pairs)


def demo_step(ctx) -> None:
    """Demo: nemo-eval of SciTX, the three baselines and the reference explainers on Model A's CMNIST errors.

    Offline parts throughout (attribute-contrast hypotheses, keyword deriver, exact editor, keyword judge).
    When the explainer step has run (``ctx.artifacts["explainer"]``), a second, small run takes SciTX's
    hypotheses from that fine-tuned tiny explainer instead.
    """
    checkpoint = ctx.checkpoints.get("cmnist_model_a")
    if checkpoint is None:
        raise UserInputError(
            "the nemo-eval demo step needs the cmnist_model_a checkpoint; run the cmnist_pair step first"
        )
    out_dir = Path(ctx.out_dir) / "nemo_eval"
    result = nemo_eval(
        benchmark="cmnist",
        targets=[str(checkpoint)],
        methods=["scitx", "error_retrieval", "cam_mllm", "change_mllm", "known_cause", "distractor"],
        validation=not ctx.fast,
        n=15 if ctx.fast else 25,
        test_styles=1 if ctx.fast else 2,
        global_explanation=True,
        out_dir=str(out_dir),
    )
    store = ResultStore(result["results"])
    rate, count = known_cause_win_rate(store.records.values())
    print(f"known cause (colour) beats the rotation distractor on CEI for {rate:.0%} of {count} errors")
    ctx.artifacts["nemo_eval_results"] = Path(result["results"])
    ctx.results["nemo_eval"] = {"known_cause_win_rate": rate, "errors": count, **result["summary"]}
    adapter = ctx.artifacts.get("explainer")
    if adapter is not None and Path(adapter).is_dir():
        print("\nSciTX with hypotheses from the fine-tuned tiny explainer (plain-sentence replies, keyword deriver):")
        explained = nemo_eval(
            benchmark="cmnist",
            targets=[str(checkpoint)],
            methods=["scitx"],
            n=4 if ctx.fast else 10,
            m=2,
            test_styles=1 if ctx.fast else 2,
            explainer={"kind": "hf_local", "model_name_or_path": str(adapter)},
            hypotheses="plain",
            deriver="keyword",
            out_dir=str(out_dir / "tiny_explainer"),
        )
        ctx.artifacts["nemo_eval_explainer_results"] = Path(explained["results"])
