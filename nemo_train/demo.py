"""``nemo-train demo``: every capability once, end to end, on the embedded default data and models.

Each step runs a shipped preset from ``configs/`` exactly as its command would (``nemo-train fit`` through
the same LightningCLI parser, pipelines through their own jsonargparse parser), with a few overrides for
speed and the output folder. No recipe is restated here: change a preset and the demo follows it. The demo
ends with one table of every headline number and where each output was written.

The steps are listed in :mod:`nemo_train.demo_steps`; a step whose preset or command is missing is skipped
with one line.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import wandb
import yaml
from lightning.pytorch import seed_everything

from nemo_train.cli import PIPELINE_COMMANDS, run_pipeline
from nemo_train.console import print_table
from nemo_train.demo_readers import read_classifier, read_numbers
from nemo_train.demo_steps import DROP, STEPS, DemoContext, FitResult, Headline, Step
from nemo_train.errors import UserInputError
from nemo_train.lightning_cli import NemoLightningCLI
from nemo_train.reports import write_report
from nemo_train.runs import OutDir, run_command
from nemo_train.store import write_json_atomic

__all__ = ["DROP", "STEPS", "DemoContext", "FitResult", "Headline", "Step", "demo", "read_numbers", "run_step"]

#: The presets shipped with the repository (``configs/`` next to the package).
DEFAULT_PRESET_DIR = Path(__file__).resolve().parents[1] / "configs"


def edited_preset(ctx: DemoContext, step: Step, preset: Path) -> Path:
    """``preset`` itself, or (for a step with ``edits``) a copy in the output folder with those values replaced.

    An edit names a value by its dotted path (list items by index, e.g. ``trainer.callbacks.0.init_args.errors``);
    strings in the new value are filled in like overrides; the value :data:`DROP` removes the item (list several
    items of one list from the last). Used where the command line cannot reach a value (an item of a list of
    callbacks or rows).
    """
    if not step.edits:
        return preset
    config = yaml.safe_load(preset.read_text())
    for dotted, value in step.edits.items():
        *parents, last = dotted.split(".")
        node = config
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key = int(last) if isinstance(node, list) else last
        if value == DROP:
            del node[key]
        else:
            node[key] = _expand_all(ctx, value)
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
        # the preset's best checkpoint by path: "best" would make Lightning warn about the second ModelCheckpoint
        # (LastCheckpoint, which writes last.ckpt)
        best = cli.trainer.checkpoint_callback.best_model_path or None
        (tested,) = cli.trainer.test(cli.model, cli.datamodule, ckpt_path=best, verbose=False)
        metrics.update(tested)
    if wandb.run is not None:
        wandb.finish()
    return FitResult(metrics, cli.trainer, cli.model)


def checkpoint_of(ctx: DemoContext, name: str, result: FitResult) -> None:
    """Record the fit's best checkpoint (a fit whose product is an adapter folder keeps no checkpoint)."""
    if result.trainer.checkpoint_callback is not None:
        ctx.checkpoints[name] = Path(result.trainer.checkpoint_callback.best_model_path)


def _number(value: Any) -> Any:
    """Plain Python numbers in the recap (tensors and numpy scalars become floats)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return None if value != value else round(value, 4)  # NaN (nothing measured) is written as null
    return value


#: The recap's caption when some number has an interval.
INTERVAL_CAPTION = "[bootstrap 95 % interval over the errors / items] where a number is a mean over them"


def recap_text(row: dict[str, Any]) -> str:
    """A recap row's number: ``0.720``, or with its interval ``0.720 [0.610, 0.830]`` (``ci_low`` / ``ci_high``)."""
    value, low, high = row["value"], row.get("ci_low"), row.get("ci_high")
    if not isinstance(value, float):
        return str(value)
    return f"{value:.3f} [{low:.3f}, {high:.3f}]" if low is not None and high is not None else f"{value:.3f}"


def recap_lines(rows: list[dict[str, Any]], per_line: int = 3) -> list[tuple[str, str, str]]:
    """``(step, method, "metric value [ci_low, ci_high] · ...")`` per step and method, in the order the rows name
    them; a method with more than ``per_line`` numbers continues on the next lines (step and method left blank)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        grouped.setdefault((r["step"], r["method"]), []).append(f"{r['metric']} {recap_text(r)}")
    lines = []
    for (step, method), cells in grouped.items():
        for start in range(0, len(cells), per_line):
            first = start == 0
            lines.append((step if first else "", method if first else "", " · ".join(cells[start : start + per_line])))
    return lines


def print_recap(rows: list[dict[str, Any]], where: dict[str, str]) -> None:
    """The recap table, drawn from the rows of ``recap.json``, and the folder of each step."""
    print_table(
        ["step", "method", "numbers"],
        recap_lines(rows),
        title="nemo-train demo: recap",
        caption=INTERVAL_CAPTION if any(r.get("ci_low") is not None for r in rows) else None,
    )
    print_table(["step", "written to"], list(where.items()), title="nemo-train demo: outputs")


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
    for method, metric, value, *interval in step.read(ctx, result):
        low, high = interval if interval else (None, None)
        ctx.headlines.append(Headline(step.name, method, metric, _number(value), where, _number(low), _number(high)))
    print(f"demo: {step.name} done in {time.perf_counter() - started:.0f} s; its output: {log}")
    return True


@run_command("demo")
def demo(
    out_dir: OutDir = "checkpoints/demo",
    preset_dir: str | None = None,
    steps: list[str] | None = None,
    fast: bool = False,
) -> DemoContext:
    """Run every capability once on the embedded data (the shipped presets, sized for minutes), then recap.

    Every step writes under ``out_dir`` (checkpoints, W&B offline runs, tables, images, its own provenance).

    Args:
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
    rows = [h.row() for h in ctx.headlines]
    write_json_atomic(ctx.out_dir / "recap.json", rows)
    print_recap(rows, {h.step: h.where for h in ctx.headlines})
    page = write_report(ctx.out_dir, steps=ctx.outputs)  # one page linking every step's page
    print(f"demo: report page of every step: {page}")
    return ctx
