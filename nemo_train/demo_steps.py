"""The demo's steps: which shipped preset each runs, with which overrides, and how its headline numbers are read.

Adding a step: one :class:`Step` in :data:`STEPS` (preset, command, overrides, a reader of its numbers).
The machinery that runs them is in :mod:`nemo_train.demo`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_train.errors import UserInputError
from nemo_train.nemo.labels import match_label


@dataclass
class Headline:
    """One number of the recap: a row of ``recap.json`` (step / method / metric / value) and where it was written."""

    step: str
    method: str
    metric: str
    value: float | str | None
    where: str

    def row(self) -> dict[str, Any]:
        return {"step": self.step, "method": self.method, "metric": self.metric, "value": self.value}


@dataclass
class DemoContext:
    """What the steps share: where presets are read and outputs written, and what earlier steps produced."""

    out_dir: Path
    preset_dir: Path
    fast: bool = False
    checkpoints: dict[str, Path] = field(default_factory=dict)  # step -> best checkpoint
    outputs: dict[str, Path] = field(default_factory=dict)  # step -> output folder (or adapter, results file)
    headlines: list[Headline] = field(default_factory=list)

    def expand(self, arg: str) -> str:
        """``{out}``, ``{presets}`` (the preset folder), ``{ckpt[step]}`` and ``{outputs[step]}`` in an override, filled in."""
        try:
            return arg.format(out=self.out_dir, presets=self.preset_dir, ckpt=self.checkpoints, outputs=self.outputs)
        except KeyError as missing:
            raise UserInputError(
                f"demo override {arg!r} needs the output of step {missing}; run that step too"
            ) from None


@dataclass
class FitResult:
    """What a fit step hands its reader: test metrics (or the last validation ones) and the trained objects."""

    metrics: dict[str, float]
    trainer: Any
    model: Any


#: A reader turns a step's result into (method, metric, value) rows of the recap.
Reader = Callable[[DemoContext, Any], list[tuple[str, str, Any]]]


@dataclass
class Step:
    """A demo step: a preset run by ``command`` (``fit`` or a pipeline) with overrides, and its headline reader.

    ``overrides`` always apply (output folders, inputs from earlier steps, sizes for a few-minute demo);
    ``fast`` ones are added by ``--fast`` (the tests). ``output`` names what the step wrote.
    """

    name: str
    preset: str
    command: str
    overrides: list[str]
    read: Reader
    fast: list[str] = field(default_factory=list)
    output: str = "{out}"
    optional: bool = False
    edits: dict[str, Any] = field(default_factory=dict)


def _finite(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def read_classifier(ctx: DemoContext, result: FitResult) -> list[tuple[str, str, Any]]:
    """Test accuracy on bias-aligned and bias-conflicting images."""
    m = result.metrics
    return [
        ("classifier", "acc_aligned", m["test/acc_aligned"]),
        ("classifier", "acc_conflicting", m["test/acc_conflicting"]),
    ]


def read_explainer(ctx: DemoContext, result: FitResult) -> list[tuple[str, str, Any]]:
    """Held-out explanation accuracy (share of pairs whose explanation names the right cause; keyword rule)."""
    return [
        ("tiny explainer", "explanation_acc (keyword rule, not manual grading)", result.metrics["val/explanation_acc"])
    ]


def read_captions(ctx: DemoContext, result: FitResult) -> list[tuple[str, str, Any]]:
    """Held-out caption accuracy of the tiny VLM's first stage (per factor and mean)."""
    prefix = "val/caption_acc"
    return [
        ("tiny VLM (captions)", k.removeprefix("val/"), v)
        for k, v in sorted(result.metrics.items())
        if k.startswith(prefix)
    ]


def read_teacher(ctx: DemoContext, result: dict) -> list[tuple[str, str, Any]]:
    """How many teacher labels became training pairs, and their mean CEI."""
    return [
        ("Teacher (exhaustive search, not a model)", k, v)
        for k, v in result.items()
        if k in ("labels", "kept", "mean_cei")
    ]


def read_distilled(ctx: DemoContext, result: FitResult) -> list[tuple[str, str, Any]]:
    """CEI and LLM Match of the student's answers on held-out errors at the last validation."""
    m = result.metrics
    rows = [("Student", "cei", m["nemo/cei"])] if "nemo/cei" in m else []
    for key in ("llm_match", "rule_match"):  # rule_match: no judge was a language model
        if f"nemo/{key}" in m:
            judges = [k.split("/", 2)[2] for k in m if k.startswith(f"nemo/{key}/") and k.count("/") == 2]
            rows.append(("Student", match_label(judges) if judges else key, m[f"nemo/{key}"]))
    return rows


def _shares(step_target: str, counts: dict[str, int] | None) -> list[tuple[str, str, Any]]:
    from nemo_train.nemo.shift_benchmark import cause_shares

    return [(step_target, f"share/{cause}", share) for cause, share in cause_shares(counts or {}).items()]


def read_distill_eval(ctx: DemoContext, result: dict) -> list[tuple[str, str, Any]]:
    """LLM Match / grounding / CEI of each row (teacher, student, methods driven by the student, known cause,
    constant) per target; the first target's cause shares."""
    rows = _shares("causes", result.get("cause_counts"))
    for key, v in result["summary"].items():
        method, target = key.split("|", 1)
        for metric in ("llm_match", "grounding", "cei"):
            if _finite(v.get(metric)):
                label = match_label(result.get("judges", [])) if metric == "llm_match" else metric
                rows.append((f"{method} @ {target}", label, v[metric]))
    return rows


def read_differences(ctx: DemoContext, result: Any) -> list[tuple[str, str, Any]]:
    """Completeness, Density and Token Length of each explainer of how Model A and Model B differ."""
    parts = {"evaluator": result.evaluator, "summarizer": result.summarizer, "explorer": result.explorer}
    rules = [part for part, label in parts.items() if not label.startswith("LLM ")]
    note = f" ({', '.join(rules)}: rules, not LLMs)" if rules else ""
    return [
        (method + note, metric, v[metric])
        for method, v in result.headline().items()
        for metric in ("completeness", "density", "token_length")
    ]


def read_lbee(ctx: DemoContext, result: Any) -> list[tuple[str, str, Any]]:
    """ACR / AHR / TPR / JI of each sentence-selection method on the hard clusters."""
    return [(s.method, metric, getattr(s, metric)) for s in result.scores for metric in ("acr", "ahr", "tpr", "ji")]


def read_counterfactuals(ctx: DemoContext, result: Any) -> list[tuple[str, str, Any]]:
    """Success rate (share of counterfactuals above the competency threshold) of each method."""
    return [(method, "success", v["success"]) for method, v in result.table.items() if method != "Orig"]


def read_clip(ctx: DemoContext, result: FitResult) -> list[tuple[str, str, Any]]:
    """Zero-shot accuracy of every attribute on held-out images (prompt classification in the trained space)."""
    prefix = "val/zeroshot/"
    return [
        ("CLIP", f"zeroshot/{k[len(prefix) :]}", v) for k, v in sorted(result.metrics.items()) if k.startswith(prefix)
    ]


def read_nemo(ctx: DemoContext, result: Any) -> list[tuple[str, str, Any]]:
    """LLM Match, grounding and CEI of each method on each target, the cause shares, and how often the known
    cause beats a distractor."""
    rows = [row for target, counts in result.cause_counts.items() for row in _shares(target, counts)]
    for c in result.cells:
        method = c.label if len({x.target for x in result.cells}) == 1 else f"{c.label} @ {c.target}"
        rows += [
            (method, match_label(c.per_judge) if metric == "llm_match" else metric, getattr(c, metric))
            for metric in ("llm_match", "grounding", "cei")
            if _finite(getattr(c, metric))
        ]
    if result.known_cause_win_rate is not None:
        rows.append(("KnownCause", "beats_distractor_cei", result.known_cause_win_rate))
    return rows


def read_numbers(ctx: DemoContext, result: Any) -> list[tuple[str, str, Any]]:
    """Every top-level number a pipeline returns (for steps without a reader of their own)."""
    if not isinstance(result, dict):
        return []
    return [
        ("", key, value)
        for key, value in result.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]


STEPS: list[Step] = [
    *(
        Step(
            name=f"cmnist_{model}",
            preset=f"cmnist/{model}.yaml",
            command="fit",
            overrides=["--trainer.default_root_dir={out}/cmnist_" + model, "--data.init_args.train_size=6000"],
            fast=["--trainer.max_epochs=1", "--data.init_args.train_size=1024", "--data.init_args.test_styles=1"],
            read=read_classifier,
            output="{out}/cmnist_" + model,
        )
        for model in ("model_a", "model_b")
    ),
    Step(
        name="counterfactuals",
        preset="competency/counterfactuals_cmnist.yaml",
        command="counterfactuals",
        overrides=[
            "--out_dir={out}/counterfactuals",
            "--classifier={ckpt[cmnist_model_a]}",
            "--causes.per_cause=10",
            "--train.autoencoder_epochs=4",
            "--datamodule.init_args.train_size=6000",
        ],
        fast=["--causes.per_cause=4", "--train.autoencoder_epochs=1", "--datamodule.init_args.train_size=1024"],
        read=read_counterfactuals,
        output="{out}/counterfactuals",
    ),
    Step(
        name="explainer",
        preset="explainer/tiny.yaml",
        command="fit",
        overrides=[
            "--trainer.default_root_dir={out}/explainer_tiny",
            "--data.init_args.data_dir={out}/explainer_tiny/pairs",
        ],
        fast=["--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1", "--data.init_args.per_cause=12"],
        read=read_explainer,
        output="{out}/explainer_tiny",
    ),
    Step(
        name="clip",
        preset="clip/synthetic.yaml",
        command="fit",
        overrides=[
            "--trainer.default_root_dir={out}/clip",
            # CMNIST captions only, 60 steps: enough for the colours the NEMO step's ErrorRetrieval ranks
            "--data.init_args.sources=[cmnist]",
            "--trainer.max_epochs=4",
            "--model.init_args.lr=0.002",  # the preset's 1e-3 suits its long run; 60 steps learn more at 2e-3
            "--data.init_args.train_per_source=2000",
            "--data.init_args.val_per_source=200",
            "--trainer.log_every_n_steps=5",
        ],
        fast=["--trainer.max_epochs=1", "--data.init_args.train_per_source=256", "--data.init_args.val_per_source=64"],
        read=read_clip,
        output="{out}/clip",
    ),
    Step(
        name="nemo_eval",
        preset="nemo/cmnist.yaml",
        command="nemo-eval",
        edits={"methods.1.init_args.clip_model": "{outputs[clip]}/hf"},  # ErrorRetrieval in the space just trained
        overrides=[
            "--out_dir={out}/nemo_eval",
            "--targets=[{ckpt[cmnist_model_a]}]",
            "--benchmark.n=25",
            "--benchmark.test_styles=2",
        ],
        fast=["--benchmark.n=6", "--benchmark.test_styles=1", "--run.global_explanation=false"],
        read=read_nemo,
        output="{out}/nemo_eval",
    ),
    *(
        Step(
            name=f"shifts_{gaps}",
            preset=f"shifts/{gaps}.yaml",
            command="fit",
            overrides=[f"--trainer.default_root_dir={{out}}/shifts_{gaps}"],
            fast=["--trainer.max_epochs=1", "--data.init_args.train_size=1024", "--data.init_args.test_size=1000"],
            read=read_classifier,
            output=f"{{out}}/shifts_{gaps}",
        )
        for gaps in ("gaps_a", "gaps_b")
    ),
    Step(
        name="nemo_shifts",
        preset="nemo/shifts.yaml",
        command="nemo-eval",
        edits={"methods.1.init_args.clip_model": "{outputs[clip]}/hf"},  # ErrorRetrieval in the demo's CLIP
        overrides=["--out_dir={out}/nemo_shifts", "--targets=[{ckpt[shifts_gaps_a]}]"],
        fast=["--benchmark.n=6", "--run.global_explanation=false"],
        read=read_nemo,
        output="{out}/nemo_shifts",
    ),
    Step(
        name="distill_teacher",
        preset="distill/shifts_teacher.yaml",
        command="distill-teacher",
        overrides=["--out_dir={out}/distill_shifts/teacher", "--classifier={ckpt[shifts_gaps_a]}"],
        fast=["--n=24"],
        read=read_teacher,
        output="{out}/distill_shifts/teacher",
    ),
    Step(
        name="captions",
        preset="explainer/captions_shifts.yaml",
        command="fit",
        overrides=[
            "--trainer.default_root_dir={out}/captions_shifts",
            "--data.init_args.data_dir={out}/captions_shifts/pairs",
        ],
        fast=["--trainer.max_steps=4"],
        read=read_captions,
        output="{out}/captions_shifts",
    ),
    Step(
        name="distilled_explainer",
        preset="explainer/distill_shifts.yaml",
        command="fit",
        overrides=[
            "--trainer.default_root_dir={out}/distill_shifts",
            "--model.init_args.adapter={out}/captions_shifts/adapter",
            "--data.init_args.train_jsonl={out}/distill_shifts/teacher/pairs/train.jsonl",
            "--data.init_args.val_jsonl={out}/distill_shifts/teacher/pairs/val.jsonl",
        ],
        fast=["--trainer.max_steps=4"],
        read=read_distilled,
        output="{out}/distill_shifts",
    ),
    Step(
        name="distill_eval",
        preset="distill/shifts_eval.yaml",
        command="distill-eval",
        overrides=[
            "--out_dir={out}/distill_shifts/eval",
            "--student={out}/distill_shifts/adapter",
            "--targets=[{ckpt[shifts_gaps_a]}, {ckpt[shifts_gaps_b]}]",
        ],
        fast=["--n=4", "--methods=[StudentGreedy, KnownCause]"],
        read=read_distill_eval,
        output="{out}/distill_shifts/eval",
    ),
    Step(
        name="differences",
        preset="differences/cmnist.yaml",
        command="differences",
        overrides=[
            "--out_dir={out}/differences",
            "--targets=[{ckpt[cmnist_model_a]}, {ckpt[cmnist_model_b]}]",
            "--wandb=false",
        ],
        fast=["--protocol.test_conditions=40", "--optimization.iterations=2", "--protocol.attribution_questions=10"],
        read=read_differences,
        output="{out}/differences",
    ),
    Step(
        name="nico85_cnn",
        preset="nico/nico85_cnn.yaml",
        command="fit",
        overrides=["--trainer.default_root_dir={out}/nico85_cnn"],
        fast=["--trainer.max_epochs=1"],
        read=read_classifier,
        output="{out}/nico85_cnn",
    ),
    Step(
        name="lbee",
        preset="lbee/nico_base.yaml",
        command="lbee",
        overrides=[
            "--config={presets}/lbee/nico85.yaml",
            "--out_dir={out}/lbee",
            "--classifier={ckpt[nico85_cnn]}",
            "--encoder.init_args.path={out}/lbee/clip_nico",
            # an eighth of the preset's CLIP training (6,000 captions x 8 epochs): the demo's time budget
            "--encoder.init_args.train_per_source=6000",
            "--encoder.init_args.max_epochs=8",
            "--wandb=false",
        ],
        fast=[
            "--encoder.init_args.max_epochs=1",
            "--encoder.init_args.train_per_source=300",
        ],
        read=read_lbee,
        output="{out}/lbee",
    ),
]
