"""``nemo-train explain``: JSONL in, explanations out, resumable; bad input as one-line errors."""

from __future__ import annotations

import json

import pytest

from nemo_train.cli import PIPELINE_COMMANDS, run_pipeline
from nemo_train.errors import UserInputError
from nemo_train.explainer import ExplainerModule


@pytest.fixture
def explain_command(monkeypatch):
    assert PIPELINE_COMMANDS["explain"].target == "nemo_train.explainer.explain_command:explain"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, explainer_cache):
    module = ExplainerModule(modules_to_save=["lm_head"])
    module.configure_model()
    return module.save_adapter(tmp_path_factory.mktemp("adapter"))


def test_explain_writes_one_line_per_pair_and_resumes(explain_command, adapter, six_cause_pairs, tmp_path, capsys):
    output = tmp_path / "explanations.jsonl"
    args = [
        "--model",
        str(adapter),
        "--pairs",
        str(six_cause_pairs["val"]),
        "--out_dir",
        str(tmp_path),
        "--generation.max_new_tokens",
        "6",
    ]
    run_pipeline("explain", [*args, "--generation.num_samples", "2", "--generation.temperature", "1.0"])
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    n = len(six_cause_pairs["val"].read_text().splitlines())
    assert len(rows) == n
    assert all(len(r["explanations"]) == 2 and len(r["correct"]) == 2 and r["cause"] for r in rows)
    assert "Spatial" in capsys.readouterr().out  # the per-cause table is printed
    # the headline number: mean over causes of the first explanation's hit rate, worked out from the rows
    accuracy = json.loads((tmp_path / "explanations.jsonl.accuracy.json").read_text())
    per_cause = {}
    for row in rows:
        per_cause.setdefault(row["cause"], []).append(row["correct"][0])
    means = [sum(v) / len(v) for v in per_cause.values()]
    assert accuracy["average"] == pytest.approx(sum(means) / len(means))
    # a killed run resumes: drop the last line and run again
    output.write_text("\n".join(output.read_text().splitlines()[:-1]) + "\n")
    run_pipeline("explain", [*args, "--generation.num_samples", "2", "--generation.temperature", "1.0"])
    again = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(again) == n and again[:-1] == rows[:-1]


def test_explain_images_with_counterfactuals(explain_command, adapter, six_cause_pairs, tmp_path):
    from datamodules.explanations import read_records

    records = read_records(six_cause_pairs["val"])[:2]
    output = tmp_path / "explanations.jsonl"
    run_pipeline(
        "explain",
        [
            "--model",
            str(adapter),
            "--images",
            json.dumps([r.image for r in records]),
            "--counterfactuals",
            json.dumps([r.counterfactual for r in records]),
            "--out_dir",
            str(tmp_path),
            "--generation.max_new_tokens",
            "4",
        ],
    )
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["image"] for r in rows] == [r.image for r in records] and all("correct" not in r for r in rows)


def test_explain_bad_input(explain_command, adapter, tmp_path):
    model = ["--model", str(adapter), "--out_dir", str(tmp_path / "out")]
    with pytest.raises(UserInputError, match="exactly one of --pairs"):
        run_pipeline("explain", model)
    with pytest.raises(UserInputError, match="does not exist"):
        run_pipeline("explain", [*model, "--images", json.dumps([str(tmp_path / "gone.png")])])
    with pytest.raises(UserInputError, match="2 counterfactuals for 1 images"):
        run_pipeline("explain", [*model, "--images", '["a.png"]', "--counterfactuals", '["b.png", "c.png"]'])
    assert not (tmp_path / "out").exists()  # refused runs leave nothing behind
