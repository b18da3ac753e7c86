"""``nemo-train demo``: every capability once, end to end, on the embedded default data and models.

Each step runs a shipped preset from ``configs/`` exactly as its command would (``nemo-train fit`` through
the same LightningCLI parser, pipelines through their own jsonargparse parser), with a few overrides for
speed and the output folder. No recipe is restated here: change a preset and the demo follows it. The demo
ends with one table of every headline number and where each output was written.

Adding a step: one :class:`Step` in :data:`STEPS` (preset, command, overrides, a reader of its numbers).
A step whose preset or command is missing is skipped with one line.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wandb
import yaml
from lightning.pytorch import seed_everything

from nemo_train.cli import PIPELINE_COMMANDS, run_pipeline
from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.lightning_cli import NemoLightningCLI

#: The presets shipped with the repository (``configs/`` next to the package).
DEFAULT_PRESET_DIR = Path(__file__).resolve().parents[1] / "configs"


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


def edited_preset(ctx: DemoContext, step: Step, preset: Path) -> Path:
    """``preset`` itself, or (for a step with ``edits``) a copy in the output folder with those values replaced.

    An edit names a value by its dotted path (list items by index, e.g. ``trainer.callbacks.0.init_args.errors``);
    strings in the new value are filled in like overrides. Used where the command line cannot reach a value
    (an item of a list of callbacks).
    """
    if not step.edits:
        return preset
    config = yaml.safe_load(preset.read_text())
    for dotted, value in step.edits.items():
        *parents, last = dotted.split(".")
        node = config
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = _expand_all(ctx, value)
    copy = ctx.out_dir / "presets" / step.preset
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(yaml.safe_dump(config, sort_keys=False))
    return copy


def _expand_all(ctx: DemoContext, value: Any) -> Any:
    if isinstance(value, str):
        return ctx.expand(value)
    if isinstance(value, list):
        return [_expand_all(ctx, v) for v in value]
    if isinstance(value, dict):
        return {k: _expand_all(ctx, v) for k, v in value.items()}
    return value


def run_fit(ctx: DemoContext, preset: Path, overrides: list[str], test: bool) -> FitResult:
    """``nemo-train fit`` on ``preset`` (the same parser, in this process), then ``test`` on the best checkpoint."""
    cli = NemoLightningCLI(args=["--config", str(preset), *overrides], run=False)
    cli.trainer.fit(cli.model, cli.datamodule)
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    if test:
        (tested,) = cli.trainer.test(cli.model, cli.datamodule, ckpt_path="best", verbose=False)
        metrics.update(tested)
    if wandb.run is not None:
        wandb.finish()
    return FitResult(metrics, cli.trainer, cli.model)


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


def read_nemo(ctx: DemoContext, result: Any) -> list[tuple[str, Any]]:
    """LLM Match and CEI of each method on each target, and how often the known cause beats a distractor."""
    rows = [
        (f"{c.method} LLM Match / CEI", f"{c.llm_match:.3f} / {c.cei:.2f}")
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


def checkpoint_of(ctx: DemoContext, name: str, result: FitResult) -> None:
    ctx.checkpoints[name] = Path(result.trainer.checkpoint_callback.best_model_path)


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
        name="nemo_eval",
        preset="nemo/cmnist.yaml",
        command="nemo-eval",
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
        fast=["--n=4", "--methods=[student, known_cause]"],
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


def run_step(ctx: DemoContext, step: Step) -> bool:
    """Run one step and add its headline numbers to ``ctx``; False (and one line) when it cannot run here."""
    preset = ctx.preset_dir / step.preset
    runnable = step.command == "fit" or step.command in PIPELINE_COMMANDS
    if not preset.is_file() or not runnable:
        missing = f"preset {preset}" if not preset.is_file() else f"command {step.command!r}"
        print(f"demo: skipping {step.name} ({missing} not found)")
        return False
    overrides = [ctx.expand(arg) for arg in step.overrides + (step.fast if ctx.fast else [])]
    preset = edited_preset(ctx, step, preset)
    seed_everything(0, verbose=False)
    started = time.perf_counter()
    where = ctx.expand(step.output)
    log = Path(where) / "demo_step_output.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as output, contextlib.redirect_stdout(output):  # the step's tables; the recap sums them up
        if step.command == "fit":
            result = run_fit(ctx, preset, overrides, test=step.read is read_classifier)
            checkpoint_of(ctx, step.name, result)
        else:
            result = run_pipeline(step.command, ["--config", str(preset), *overrides])
    ctx.outputs[step.name] = Path(where)
    for metric, value in step.read(ctx, result):
        ctx.headlines.append(Headline(step.name, metric, value, where))
    print(f"demo: {step.name} done in {time.perf_counter() - started:.0f} s; its output: {log}")
    return True


def demo(
    out_dir: str = "checkpoints/demo",
    preset_dir: str | None = None,
    steps: list[str] | None = None,
    fast: bool = False,
) -> DemoContext:
    """Run every capability once on the embedded data (the shipped presets, sized for minutes), then recap.

    Args:
        out_dir: where every step writes (checkpoints, W&B offline runs, tables, images).
        preset_dir: folder of the presets to run (default: the repository's ``configs/``).
        steps: names of the steps to run (default: all), e.g. ``[cmnist_model_a, counterfactuals]``.
        fast: tiny sizes everywhere (for tests; the numbers are not meaningful).
    """
    known = [step.name for step in STEPS]
    unknown = [name for name in steps or [] if name not in known]
    if unknown:
        raise UserInputError(f"unknown demo step(s) {unknown}; known steps: {known}")
    ctx = DemoContext(
        out_dir=Path(out_dir), preset_dir=Path(preset_dir) if preset_dir else DEFAULT_PRESET_DIR, fast=fast
    )
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    for step in STEPS:
        if steps is None or step.name in steps:
            run_step(ctx, step)
    print_table(
        ["step", "headline", "value", "written to"],
        [(h.step, h.metric, h.value, h.where) for h in ctx.headlines],
        title="nemo-train demo: recap",
    )
    return ctx
