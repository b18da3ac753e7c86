"""The demo's steps: which shipped preset each runs, with which overrides, and how its headline numbers are read.

Adding a step: one :class:`Step` in :data:`STEPS` (preset, command, overrides, a reader of its numbers).
The machinery that runs them is in :mod:`nemo_train.demo`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_train.errors import UserInputError


@dataclass
class Headline:
    """One number of the recap table."""

    step: str
    metric: str
    value: float | str | None
    where: str


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
        """``{out}``, ``{ckpt[step]}`` and ``{outputs[step]}`` in an override, filled in."""
        try:
            return arg.format(out=self.out_dir, ckpt=self.checkpoints, outputs=self.outputs)
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


#: A reader turns a step's result into (metric, value) pairs for the recap table.
Reader = Callable[[DemoContext, Any], list[tuple[str, Any]]]


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


def read_classifier(ctx: DemoContext, result: FitResult) -> list[tuple[str, Any]]:
    """Test accuracy on bias-aligned and bias-conflicting images, and the gap between them."""
    m = result.metrics
    aligned, conflicting = m["test/acc_aligned"], m["test/acc_conflicting"]
    return [
        (
            "test acc aligned / conflicting (bias gap)",
            f"{aligned:.3f} / {conflicting:.3f} ({aligned - conflicting:.3f})",
        )
    ]


def read_explainer(ctx: DemoContext, result: FitResult) -> list[tuple[str, Any]]:
    """Held-out explanation accuracy (share of pairs whose explanation names the right cause)."""
    return [("explanation accuracy (held out)", result.metrics["val/explanation_acc"])]


def read_teacher(ctx: DemoContext, result: dict) -> list[tuple[str, Any]]:
    """How many teacher labels became training pairs, and their mean CEI."""
    numbers = {key: value for key, value in result.items() if isinstance(value, (int, float))}
    return [(" / ".join(k.replace("_", " ") for k in numbers), " / ".join(f"{v:g}" for v in numbers.values()))]


def read_distilled(ctx: DemoContext, result: FitResult) -> list[tuple[str, Any]]:
    """CEI and LLM Match of the student's answers on held-out errors at the last validation."""
    m = result.metrics
    return [
        (name, m[key])
        for key, name in (("nemo/cei", "student CEI"), ("nemo/llm_match", "student LLM Match"))
        if key in m
    ]


def read_distill_eval(ctx: DemoContext, result: dict) -> list[tuple[str, Any]]:
    """LLM Match / CEI of each row (teacher, student, methods driven by the student, known cause) per target."""
    rows: dict[str, list[str]] = {}
    for key, v in result["summary"].items():
        method, target = key.split("|", 1)
        rows.setdefault(method, []).append(f"{target}: {v['llm_match']:.2f} / {v['cei']:.1f}")
    return [(f"{method} LLM Match / CEI", "; ".join(cells)) for method, cells in rows.items()]


def read_differences(ctx: DemoContext, result: Any) -> list[tuple[str, Any]]:
    """Completeness, Density and Token Length of each explainer of how Model A and Model B differ."""
    return [
        (
            f"{method} completeness / density / tokens",
            f"{v['completeness']:.3f} / {v['density']:.3f} / {v['token_length']}",
        )
        for method, v in result.headline().items()
    ]


def read_lbee(ctx: DemoContext, result: Any) -> list[tuple[str, Any]]:
    """ACR / AHR / TPR / JI of each sentence-selection method on the hard clusters."""
    return [
        (f"{s.method} ACR / AHR / TPR / JI", f"{s.acr:.3f} / {s.ahr:.3f} / {s.tpr:.3f} / {s.ji:.3f}")
        for s in result.scores
    ]


def read_counterfactuals(ctx: DemoContext, result: Any) -> list[tuple[str, Any]]:
    """Success rate (share of counterfactuals above the competency threshold) of each method."""
    methods = [method for method in result.table if method != "Orig"]
    return [
        (f"success {' / '.join(methods)}", " / ".join(f"{result.table[method]['success']:.2f}" for method in methods))
    ]


def read_clip(ctx: DemoContext, result: FitResult) -> list[tuple[str, Any]]:
    """Zero-shot accuracy of every attribute on held-out images (prompt classification in the trained space)."""
    prefix = "val/zeroshot/"
    found = {k[len(prefix) :]: v for k, v in sorted(result.metrics.items()) if k.startswith(prefix)}
    return [(f"zero-shot {' / '.join(found)}", " / ".join(f"{v:.2f}" for v in found.values()))] if found else []


def read_nemo(ctx: DemoContext, result: Any) -> list[tuple[str, Any]]:
    """LLM Match and CEI of each method on each target, and how often the known cause beats a distractor."""
    rows = [
        (f"{c.label} LLM Match / CEI", f"{c.llm_match:.3f} / {c.cei:.2f}")
        for c in result.cells
        if not c.method.endswith("+validation")
    ]
    if result.known_cause_win_rate is not None:
        rows.append(("known cause beats distractor (CEI)", result.known_cause_win_rate))
    return rows


def read_numbers(ctx: DemoContext, result: Any) -> list[tuple[str, Any]]:
    """Every top-level number a pipeline returns (for steps without a reader of their own)."""
    if not isinstance(result, dict):
        return []
    return [
        (key, value) for key, value in result.items() if isinstance(value, (int, float)) and not isinstance(value, bool)
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
            "--estimator.classifier_checkpoint={ckpt[cmnist_model_a]}",
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
            "--run.out_dir={out}/nemo_eval",
            "--targets=[{ckpt[cmnist_model_a]}]",
            "--benchmark.n=25",
            "--benchmark.test_styles=2",
        ],
        fast=["--benchmark.n=6", "--benchmark.test_styles=1", "--run.global_explanation=false"],
        read=read_nemo,
        output="{out}/nemo_eval",
    ),
    Step(
        name="distill_teacher",
        preset="distill/cmnist_teacher.yaml",
        command="distill-teacher",
        overrides=[
            "--out_dir={out}/distill_cmnist/teacher",
            "--classifier={ckpt[cmnist_model_a]}",
        ],
        fast=["--n=24"],
        read=read_teacher,
        output="{out}/distill_cmnist/teacher",
    ),
    Step(
        name="distilled_explainer",
        preset="explainer/distill_cmnist.yaml",
        command="fit",
        overrides=[
            "--trainer.default_root_dir={out}/distill_cmnist",
            "--data.init_args.train_jsonl={out}/distill_cmnist/teacher/pairs/train.jsonl",
            "--data.init_args.val_jsonl={out}/distill_cmnist/teacher/pairs/val.jsonl",
        ],
        edits={
            "trainer.callbacks.0.init_args.errors": [
                {"classifier": "{ckpt[cmnist_model_a]}", "dataset": "cmnist", "n": 16, "seed": 0}
            ]
        },
        fast=["--trainer.max_epochs=1"],
        read=read_distilled,
        output="{out}/distill_cmnist",
    ),
    Step(
        name="distill_eval",
        preset="distill/cmnist_eval.yaml",
        command="distill-eval",
        overrides=[
            "--out_dir={out}/distill_cmnist/eval",
            "--student={out}/distill_cmnist/adapter",
            "--targets=[{ckpt[cmnist_model_a]}, {ckpt[cmnist_model_b]}]",
            "--n=16",
        ],
        fast=["--n=4", "--methods=[StudentGreedy, KnownCause]"],
        read=read_distill_eval,
        output="{out}/distill_cmnist/eval",
    ),
    Step(
        name="differences",
        preset="differences/cmnist.yaml",
        command="differences",
        overrides=[
            "--out_dir={out}/differences",
            "--model_a.init_args.checkpoint={ckpt[cmnist_model_a]}",
            "--model_b.init_args.checkpoint={ckpt[cmnist_model_b]}",
            "--wandb=false",
        ],
        fast=["--protocol.test_conditions=40", "--optimization.iterations=2", "--protocol.attribution_questions=10"],
        read=read_differences,
        output="{out}/differences",
    ),
    Step(
        name="lbee",
        preset="lbee/nico85.yaml",
        command="lbee",
        overrides=[
            "--out_dir={out}/lbee",
            "--classifier.checkpoint={out}/lbee/classifier.ckpt",
            "--encoder.init_args.path={out}/lbee/clip_nico",
            # an eighth of the preset's CLIP training (6,000 captions x 8 epochs): the demo's time budget
            "--encoder.init_args.train_per_source=6000",
            "--encoder.init_args.max_epochs=8",
            "--wandb=false",
        ],
        fast=[
            "--encoder.init_args.max_epochs=1",
            "--classifier.max_epochs=1",
            "--encoder.init_args.train_per_source=300",
        ],
        read=read_lbee,
        output="{out}/lbee",
    ),
]
