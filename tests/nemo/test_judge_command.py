"""``nemo-train judge``: per-item scores in input order, agreement with labels (accuracy, Cohen's kappa with
intervals), judge-vs-judge kappa, bad input as one line. Kappas are checked against sklearn on the same numbers."""

from __future__ import annotations

import json
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from nemo_train.backends import ScriptedBackend
from nemo_train.errors import UserInputError
from nemo_train.nemo.judge_command import _kappa_of_resamples, judge, kappa
from nemo_train.scoring.judges import GroundedJudge, LLMJudge

#: a red 3 read as an 8 on the shifts sheet, caused by its colour
ATTRS = {"digit": "3", "color": "red", "style": "solid", "angle": "0", "background": "plain", "scale": "normal",
         "position": "centre"}  # fmt: skip
#: (text, label, group, what the grounded judge scores by the rubric)
ITEMS = [
    ("The classifier read this 3 as an 8 because of the red colour. Edit: color -> white", 1.0, "sheet_words", 1.0),
    ("The red colour and the plain background confused it.", 0.5, "several_causes", 0.5),
    ("It is not the background but the colour that misled it.", 1.0, "negation", 1.0),
    ("The red colour caused it. Edit: background -> plain", 0.0, "contradiction", 0.0),
    ("The colour, style, rotation, background, size or position.", 0.0, "everything", 0.0),
    ("The blue colour made it read this 3 as an 8.", 0.0, "false_claim", 0.0),
    # a known miss of the parser: the "small" frame is read as a claim that the digit is small (false: 0)
    ("The image shows a 3 in a small square frame. The red colour misled the classifier.", 1.0, "mllm_paragraph", 0.0),
]


def write_items(path, items=ITEMS, **extra) -> str:
    rows = [{"text": t, "true_class": "3", "predicted_class": "8", "attributes": ATTRS, "cause": "color",
             "label": label, "group": group, **extra} for t, label, group, _ in items]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_scores_come_in_input_order_and_agreement_is_sklearns_kappa(tmp_path, capsys):
    result = judge(benchmark="shifts", items=write_items(tmp_path / "items.jsonl"), out_dir=str(tmp_path / "out"),
                   n_resamples=200)  # fmt: skip
    rows = [json.loads(line) for line in open(result["scores"])]
    assert [r["index"] for r in rows] == list(range(len(ITEMS)))
    assert [r["score"] for r in rows] == [expected for *_, expected in ITEMS]
    name = GroundedJudge().name
    assert all(set(r["judges"]) == {name} and r["reasons"][name] for r in rows)
    stats = result["judges"][name]["all"]
    labels, scores = [label for _, label, _, _ in ITEMS], [expected for *_, expected in ITEMS]
    codes = {0.0: 0, 0.5: 1, 1.0: 2}
    reference = cohen_kappa_score([codes[x] for x in labels], [codes[x] for x in scores])
    assert stats["kappa"] == pytest.approx(reference) and stats["n"] == len(ITEMS)
    assert stats["accuracy"] == pytest.approx(6 / 7)
    assert stats["kappa_ci_low"] <= stats["kappa"] <= stats["kappa_ci_high"]
    assert stats["accuracy_ci_low"] <= 6 / 7 <= stats["accuracy_ci_high"]
    assert result["judges"][name]["mllm_paragraph"]["accuracy"] == 0.0 and result["judges"][name]["failed"] == 0
    stored = json.loads((tmp_path / "out" / "agreement.json").read_text())
    assert stored["judges"][name]["all"]["kappa"] == pytest.approx(reference)
    out = capsys.readouterr().out
    assert "Cohen's kappa" in out and "mllm_paragraph" in out and f"{reference:.2f}" in out


def test_a_panel_prints_judge_versus_judge_kappa(tmp_path, capsys):
    grades = dict(zip((t for t, *_ in ITEMS), [1, 0.5, 0, 0, 0, 0, 1]))  # disagrees with the parser on items 3, 7

    def grade(messages) -> str:
        (text,) = [t for t in grades if t in json.dumps(messages)]
        return json.dumps({"reasoning": "r", "score": grades[text], "grounding": None})

    backend = ScriptedBackend(grade)
    panel = [GroundedJudge(), LLMJudge(backend, name="llm")]
    result = judge(benchmark="shifts", items=write_items(tmp_path / "items.jsonl"), judges=panel,
                   out_dir=str(tmp_path / "out"), n_resamples=200)  # fmt: skip
    rows = [json.loads(line) for line in open(result["scores"])]
    parser = [r["judges"][GroundedJudge().name] for r in rows]
    llm = [r["judges"]["llm"] for r in rows]
    assert llm == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert rows[2]["score"] == pytest.approx(0.5)  # the panel mean of 1 and 0
    (pair,) = result["pairs"].values()
    codes = {0.0: 0, 0.5: 1, 1.0: 2}
    assert pair["kappa"] == pytest.approx(cohen_kappa_score([codes[x] for x in parser], [codes[x] for x in llm]))
    assert "judges" in capsys.readouterr().out


def test_stored_attribute_indices_are_read_as_value_names(tmp_path):
    stored = {"digit": 3, "color": 1, "style": 0, "angle": 0, "background": 0, "scale": 0, "position": 0}
    row = {"text": "The red colour made it read this 3 as an 8.", "true_class": "3", "predicted_class": "8",
           "attributes": stored, "cause": "color"}  # fmt: skip
    (tmp_path / "items.jsonl").write_text(json.dumps(row) + "\n")
    result = judge(benchmark="shifts", items=str(tmp_path / "items.jsonl"), out_dir=str(tmp_path / "out"))
    (line,) = [json.loads(x) for x in open(result["scores"])]
    assert line["score"] == 1.0 and line["grounding"] == 1.0  # colour index 1 is red
    assert result["agreement"] is None  # no labels: scores only


@pytest.mark.parametrize(
    "content, benchmark, message",
    [
        (None, "shifts", "does not exist"),
        ('{"text": "x"\n', "shifts", "items.jsonl:1: not a JSON object"),
        ('{"text": "x"}\n', "shifts", "missing true_class, predicted_class, attributes, cause"),
        ("", "shifts", "holds no items"),
    ],
)
def test_bad_input_is_one_line(tmp_path, content, benchmark, message):
    path = tmp_path / "items.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserInputError, match=message) as err:
        judge(benchmark=benchmark, items=str(path), out_dir=str(tmp_path / "out"))
    assert "\n" not in str(err.value)


def test_an_unknown_benchmark_and_a_bad_label_are_one_line(tmp_path):
    with pytest.raises(UserInputError, match="unknown benchmark 'mnist'"):
        judge(benchmark="mnist", items=write_items(tmp_path / "a.jsonl"), out_dir=str(tmp_path / "out"))
    bad = write_items(tmp_path / "b.jsonl", items=[("The colour.", 0.7, "g", 1.0)])
    with pytest.raises(UserInputError, match="label 0.7 is not 1, 0.5 or 0"):
        judge(benchmark="shifts", items=bad, out_dir=str(tmp_path / "out2"))


def test_the_bootstrap_statistic_is_sklearns_kappa():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 3, size=(50, 40)), rng.integers(0, 3, size=(50, 40))
    b[:10] = a[:10]  # some resamples agree perfectly
    fast = _kappa_of_resamples(a, b, axis=-1)
    assert fast == pytest.approx([cohen_kappa_score(x, y, labels=[0, 1, 2]) for x, y in zip(a, b)])
    assert kappa([0, 0.5, 1, 1], [0, 0.5, 1, 0.5]) == pytest.approx(cohen_kappa_score([0, 1, 2, 2], [0, 1, 2, 1]))
    assert np.isnan(kappa([0, 0], [0, 0]))  # undefined: one level only
