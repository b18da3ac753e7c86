"""The demo runs the shipped presets (a changed preset changes the demo), skips missing steps, and recaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from nemo_train import demo as demo_module
from nemo_train.cli import main
from nemo_train.demo import DROP, INTERVAL_CAPTION, STEPS, DemoContext, Step, demo, read_numbers, recap_text
from nemo_train.demo_readers import read_nemo
from nemo_train.metrics.bootstrap import mean_interval
from nemo_train.nemo.report import NemoEvalSummary, summarize

ROOT = Path(__file__).resolve().parents[1]


def test_every_step_names_a_shipped_preset_or_is_optional():
    for step in STEPS:
        assert step.optional or (ROOT / "configs" / step.preset).is_file(), step.name
        assert any("{out}" in arg for arg in step.overrides), f"{step.name} must write under the demo's out_dir"


def test_the_demo_uses_a_changed_preset(tmp_path, capsys):
    presets = tmp_path / "configs"
    (presets / "cmnist").mkdir(parents=True)
    preset = yaml.safe_load((ROOT / "configs/cmnist/model_a.yaml").read_text())
    preset["model"]["init_args"]["lr"] = 0.0123  # not among the demo's overrides
    preset["data"]["init_args"]["batch_size"] = 100
    (presets / "cmnist" / "model_a.yaml").write_text(yaml.safe_dump(preset))
    out = tmp_path / "out"
    ctx = demo(out_dir=str(out), preset_dir=str(presets), steps=["cmnist_model_a"], fast=True)

    saved = yaml.safe_load((out / "cmnist_model_a" / "config.yaml").read_text())
    assert saved["model"]["init_args"]["lr"] == 0.0123 and saved["data"]["init_args"]["batch_size"] == 100
    assert saved["data"]["init_args"]["train_size"] == 1024  # the --fast override on top of the preset
    checkpoint = ctx.checkpoints["cmnist_model_a"]
    assert checkpoint == out / "cmnist_model_a" / "checkpoints" / "best.ckpt"
    assert torch.load(checkpoint, weights_only=True)["hyper_parameters"]["lr"] == 0.0123

    metrics = {h.metric: h.value for h in ctx.headlines}
    assert 0 <= metrics["acc_conflicting"] <= metrics["acc_aligned"] <= 1
    recap = json.loads((out / "recap.json").read_text())
    assert recap == [h.row() for h in ctx.headlines]
    assert {r["metric"] for r in recap} == {"acc_aligned", "acc_conflicting"}
    assert all(set(r) == {"step", "method", "metric", "value", "ci_low", "ci_high"} for r in recap)
    assert all(r["ci_low"] is None and r["ci_high"] is None for r in recap)  # accuracies: no per-item values
    printed = capsys.readouterr().out
    assert (
        "nemo-train demo: recap" in printed and "acc_conflicting" in printed and str(out / "cmnist_model_a") in printed
    )
    assert not [line for line in printed.splitlines() if line.startswith("wandb:")]
    assert len(printed.splitlines()) <= 20
    index = out / "report" / "index.html"  # one page linking every step's page, its path printed last
    assert printed.splitlines()[-1] == f"demo: report page of every step: {index}"
    assert 'href="../cmnist_model_a/report/index.html"' in index.read_text()
    assert (out / "cmnist_model_a" / "report" / "index.html").is_file()


def test_a_step_without_its_preset_is_skipped_with_one_line(tmp_path, capsys):
    ctx = demo(out_dir=str(tmp_path / "out"), preset_dir=str(tmp_path / "no_presets"), steps=["differences", "lbee"])
    lines = capsys.readouterr().out.splitlines()
    skipped = [line for line in lines if line.startswith("demo: skipping")]
    assert len(skipped) == 2 and "differences" in skipped[0] and "preset" in skipped[0]
    assert ctx.headlines == []


def test_a_pipeline_step_runs_its_preset_through_the_command_parser(tmp_path, monkeypatch, capsys):
    """A new step is a few lines: preset + overrides + reader; the pipeline's own parser reads the preset."""
    calls = []

    def fake_pipeline(name, args):
        calls.append((name, args))
        return {"score": 0.5, "label": "x"}

    presets = tmp_path / "configs"
    (presets / "toy").mkdir(parents=True)
    (presets / "toy" / "preset.yaml").write_text("out_dir: somewhere\n")
    step = Step(
        name="toy",
        preset="toy/preset.yaml",
        command="nemo-eval",
        overrides=["--out_dir={out}/toy"],
        read=read_numbers,
        output="{out}/toy",
    )
    monkeypatch.setattr(demo_module, "STEPS", [step])
    monkeypatch.setattr(demo_module, "run_pipeline", fake_pipeline)
    ctx = demo(out_dir=str(tmp_path / "out"), preset_dir=str(presets))
    assert calls == [
        ("nemo-eval", ["--config", str(presets / "toy" / "preset.yaml"), f"--out_dir={tmp_path / 'out'}/toy"])
    ]
    assert [(h.step, h.metric, h.value) for h in ctx.headlines] == [("toy", "score", 0.5)]
    assert json.loads((tmp_path / "out" / "recap.json").read_text()) == [
        {"step": "toy", "method": "", "metric": "score", "value": 0.5, "ci_low": None, "ci_high": None}
    ]


def test_recap_rows_carry_the_interval_of_each_mean_from_the_records(tmp_path, monkeypatch, capsys):
    """A nemo-eval step's recap rows get the bootstrap interval of its stored per-error scores."""
    records = [
        {"method": "SciTX", "target": "a", "sample_id": f"s{i}", "explanation": "x", "cei": c, "llm_match": m}
        | {"judges": {"j": m}}
        for i, (c, m) in enumerate([(40.0, 1.0), (10.0, 0.5), (-5.0, 0.0), (25.0, 1.0), (5.0, 0.5)])
    ]
    summary = NemoEvalSummary("toy", summarize(records))
    presets = tmp_path / "configs"
    (presets / "toy").mkdir(parents=True)
    (presets / "toy" / "preset.yaml").write_text("out_dir: somewhere\n")
    step = Step(
        name="toy", preset="toy/preset.yaml", command="nemo-eval", overrides=["--out_dir={out}"], read=read_nemo
    )
    monkeypatch.setattr(demo_module, "STEPS", [step])
    monkeypatch.setattr(demo_module, "run_pipeline", lambda name, args: summary)
    demo(out_dir=str(tmp_path / "out"), preset_dir=str(presets))
    recap = {r["metric"]: r for r in json.loads((tmp_path / "out" / "recap.json").read_text())}
    cei = recap["cei"]
    low, high = mean_interval([40.0, 10.0, -5.0, 25.0, 5.0])
    assert (cei["value"], cei["ci_low"], cei["ci_high"]) == (15.0, round(low, 4), round(high, 4))
    (match,) = [r for metric, r in recap.items() if metric != "cei"]  # named after the judge panel
    assert (match["ci_low"], match["ci_high"]) == tuple(round(v, 4) for v in mean_interval([1.0, 0.5, 0.0, 1.0, 0.5]))
    printed = capsys.readouterr().out
    assert f"cei 15.000 [{round(low, 4):.3f}, {round(high, 4):.3f}]" in printed and INTERVAL_CAPTION in printed


def test_recap_text_shows_an_interval_only_where_there_is_one():
    row = {"step": "s", "method": "m", "metric": "cei", "value": 0.5}
    assert recap_text({**row, "ci_low": None, "ci_high": None}) == "0.500"
    assert recap_text({**row, "ci_low": 0.25, "ci_high": 0.75}) == "0.500 [0.250, 0.750]"
    assert recap_text({**row, "value": 12}) == "12"


def test_an_override_needing_an_earlier_step_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--out_dir", str(tmp_path), "--steps", "[nemo_eval]"])
    assert exit_info.value.code == 2
    assert "cmnist_model_a" in capsys.readouterr().err


def test_unknown_step_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--out_dir", str(tmp_path), "--steps", "[cmnist_pair]"])
    err = capsys.readouterr().err
    assert err.startswith("nemo-train: error: unknown demo step") and err.count("\n") == 1


def test_a_step_edit_replaces_or_drops_list_items_of_a_copy_of_the_preset(tmp_path):
    preset = tmp_path / "rows.yaml"
    preset.write_text(yaml.safe_dump({"methods": ["a", "b", "c", "d"], "n": 4}))
    ctx = DemoContext(out_dir=tmp_path / "out", preset_dir=tmp_path)
    step = Step("s", "rows.yaml", "distill-eval", [], read_numbers, edits={"methods.3": DROP, "methods.1": "{out}"})
    copy = demo_module.edited_preset(ctx, step, preset)
    assert yaml.safe_load(copy.read_text()) == {"methods": ["a", str(tmp_path / "out"), "c"], "n": 4}
    assert yaml.safe_load(preset.read_text())["methods"] == ["a", "b", "c", "d"]


def test_the_demo_evaluation_drops_exactly_the_students_2_and_4_edit_rows(tmp_path):
    # the drops name rows by their index in configs/distill/zoo_eval.yaml: a reordered preset must not drop others
    (step,) = [s for s in STEPS if s.name == "distill_eval"]
    ctx = DemoContext(out_dir=tmp_path, preset_dir=ROOT / "configs")
    full = yaml.safe_load((ROOT / "configs" / step.preset).read_text())["methods"]
    kept = yaml.safe_load(demo_module.edited_preset(ctx, step, ROOT / "configs" / step.preset).read_text())["methods"]
    dropped = [row for row in full if row not in kept]
    assert [(r["class_path"].rsplit(".", 1)[-1], r["init_args"]["edits"]) for r in dropped] == [
        ("StudentEdits", 2),
        ("StudentEdits", 4),
    ]
    assert len(kept) == len(full) - 2


def test_context_expands_outputs_of_earlier_steps(tmp_path):
    ctx = DemoContext(out_dir=tmp_path, preset_dir=tmp_path, checkpoints={"a": tmp_path / "a.ckpt"})
    assert ctx.expand("--x={ckpt[a]}") == f"--x={tmp_path / 'a.ckpt'}"


@pytest.mark.parametrize("step", [s for s in STEPS if (ROOT / "configs" / s.preset).is_file()], ids=lambda s: s.name)
def test_every_override_is_an_option_of_the_step_command(step, tmp_path):
    """The overrides name keys the preset's command accepts (catches a renamed option before a demo run)."""
    from jsonargparse import auto_parser
    from test_configs import ParseOnlyCLI

    from nemo_train.cli import PIPELINE_COMMANDS, _load

    ctx = DemoContext(
        out_dir=tmp_path,
        preset_dir=ROOT / "configs",
        checkpoints={
            "cmnist_model_a": tmp_path / "a.ckpt",
            "cmnist_model_b": tmp_path / "b.ckpt",
            "shifts_gaps_a": tmp_path / "sa.ckpt",
            "nico85_cnn": tmp_path / "n.ckpt",
        },
        outputs={
            name: tmp_path / name for name in ("clip", "zoo", "distill_teacher", "captions", "distilled_explainer")
        },
    )
    preset = demo_module.edited_preset(ctx, step, ROOT / "configs" / step.preset)  # a step's edits apply
    for overrides in (step.overrides, step.overrides + step.fast):
        args = ["--config", str(preset), *(ctx.expand(arg) for arg in overrides)]
        if step.command == "fit":
            ParseOnlyCLI(args=args, run=False)
        else:
            parser = auto_parser(
                _load(PIPELINE_COMMANDS[step.command].target), as_positional=False, exit_on_error=False
            )
            parser.parse_args(args)
