"""The demo's steps: which shipped preset each runs, with which overrides, and how its headline numbers are read.

Adding a step: one :class:`Step` in :data:`STEPS` (preset, command, overrides, a reader of its numbers).
The machinery that runs them is in :mod:`nemo_train.demo`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemo_train.demo_readers import (
    Row,
    read_captions,
    read_classifier,
    read_clip,
    read_counterfactuals,
    read_differences,
    read_distill_eval,
    read_distilled,
    read_explainer,
    read_grpo,
    read_lbee,
    read_nemo,
    read_teacher,
    read_zoo,
)
from nemo_train.errors import UserInputError


@dataclass
class Headline:
    """One number of the recap: a row of ``recap.json`` (step / method / metric / value / ci_low / ci_high) and
    where it was written. ``ci_low`` / ``ci_high`` bound the bootstrap 95 % interval of a mean over items
    (``None`` for a number without per-item values, e.g. a training accuracy)."""

    step: str
    method: str
    metric: str
    value: float | str | None
    where: str
    ci_low: float | None = None
    ci_high: float | None = None

    def row(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "method": self.method,
            "metric": self.metric,
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
        }


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


#: A step's edit that removes a list item from its preset (:func:`nemo_train.demo.edited_preset`).
DROP = "<drop>"

#: A reader turns a step's result into rows of the recap: ``(method, metric, value)``, or
#: ``(method, metric, value, ci_low, ci_high)`` for a mean with its interval (:mod:`nemo_train.demo_readers`).
Reader = Callable[[DemoContext, Any], list[Row]]


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
            "--trainer.max_epochs=16",  # half the preset's 32: the demo's time budget
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
    Step(
        name="shifts_gaps_a",
        preset="shifts/gaps_a.yaml",
        command="fit",
        overrides=["--trainer.default_root_dir={out}/shifts_gaps_a"],
        fast=["--trainer.max_epochs=1", "--data.init_args.train_size=1024", "--data.init_args.test_size=1000"],
        read=read_classifier,
        output="{out}/shifts_gaps_a",
    ),
    Step(
        name="nemo_shifts",
        preset="nemo/shifts.yaml",
        command="nemo-eval",
        edits={"methods.1.init_args.clip_model": "{outputs[clip]}/hf"},  # ErrorRetrieval in the demo's CLIP
        overrides=["--out_dir={out}/nemo_shifts", "--targets=[{ckpt[shifts_gaps_a]}]", "--benchmark.n=50"],
        fast=["--benchmark.n=6", "--run.global_explanation=false"],
        read=read_nemo,
        output="{out}/nemo_shifts",
    ),
    # the main loop on a zoo of classifiers: the medium zoo's recipe (configs/explainer/distill_zoo.yaml's five
    # commands) on the small zoo (3 training, 2 held-out members) with the medium zoo's gap draw and test split,
    # the teacher, the student's training and its evaluation at demo sizes
    Step(
        name="zoo",
        preset="zoo/shifts_small.yaml",
        command="zoo",
        overrides=["--out_dir={out}/zoo", "--gap_draw=balanced", "--test_shift=multi3"],
        fast=["--train_size=512", "--test_size=200"],
        read=read_zoo,
        output="{out}/zoo",
    ),
    Step(
        name="distill_teacher",
        preset="distill/zoo_teacher.yaml",
        command="distill-teacher",
        # errors per member; answers naming the factor alone: in its 60 steps the demo's student does not learn to
        # copy the question's classes, and a false class claim scores 0 (the preset's claims: factor at 1,200)
        overrides=["--out_dir={out}/distill_zoo/teacher", "--zoo={outputs[zoo]}", "--n=40", "--claims=cause"],
        fast=["--n=8"],
        read=read_teacher,
        output="{out}/distill_zoo/teacher",
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
        preset="explainer/distill_zoo.yaml",
        command="fit",
        overrides=[
            "--trainer.default_root_dir={out}/distill_zoo",
            "--model.init_args.adapter={outputs[captions]}/adapter",
            "--data.init_args.train_jsonl={outputs[distill_teacher]}/pairs/train.jsonl",
            "--data.init_args.val_jsonl={outputs[distill_teacher]}/pairs/val.jsonl",
            "--trainer.max_steps=60",  # the preset's 1200 at full size
            "--trainer.val_check_interval=60",
        ],
        fast=["--trainer.max_steps=4"],
        read=read_distilled,
        output="{out}/distill_zoo",
    ),
    Step(
        name="grpo",
        preset="explainer/grpo_shifts.yaml",
        command="fit",
        overrides=[
            "--trainer.default_root_dir={out}/grpo_zoo",
            "--model.init_args.adapter={outputs[distilled_explainer]}/adapter",
            "--model.init_args.reward.init_args.teacher={outputs[distill_teacher]}",
            "--data.init_args.train_jsonl={outputs[distill_teacher]}/pairs/train.jsonl",
            "--data.init_args.val_jsonl={outputs[distill_teacher]}/pairs/val.jsonl",
            "--trainer.max_steps=8",  # the preset's 100 at full size
            "--trainer.val_check_interval=4",
            "--trainer.limit_val_batches=2",
            "--model.init_args.group_size=4",
        ],
        fast=["--trainer.max_steps=2", "--trainer.val_check_interval=1", "--trainer.limit_val_batches=1"],
        read=read_grpo,
        output="{out}/grpo_zoo",
    ),
    Step(
        name="distill_eval",
        preset="distill/zoo_eval.yaml",
        command="distill-eval",
        edits={"methods.4": DROP, "methods.3": DROP},  # the student's 4- and 2-edit rows: minutes per classifier
        overrides=[
            "--out_dir={out}/distill_zoo/eval",
            "--student={outputs[distilled_explainer]}/adapter",
            "--zoo={outputs[zoo]}",  # zoo_split: heldout, every row pooled over the held-out members
            "--n=8",  # errors per held-out member (the preset's 64)
        ],
        fast=["--n=4"],
        read=read_distill_eval,
        output="{out}/distill_zoo/eval",
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
            # a sixteenth of the preset's CLIP training (6,000 captions x 4 epochs): the demo's time budget
            "--encoder.init_args.train_per_source=6000",
            "--encoder.init_args.max_epochs=4",
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
