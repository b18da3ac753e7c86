"""The pooled report of distill-eval over a zoo: intervals over the classifiers (hand-worked), edits per error, and
the student's budget rows (tests, distinct hypotheses, refuted answers)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from nemo_train.nemo.distill.edit_rows import BudgetExplainer, StudentEdits
from nemo_train.nemo.distill.zoo_report import budget_points, plot_budget, pooled_scores
from nemo_train.scoring.benchmark import ErrorSample
from nemo_train.scoring.interventions import Trial


def _records(target: str, values: list[float], method: str = "row", edits: int = 0) -> list[dict]:
    return [
        {"target": target, "method": method, "sample_id": f"{target}-{i}", "llm_match": v, "grounding": 1.0,
         "cei": 100 * v, "candidate_cei": [0.0] * edits}
        for i, v in enumerate(values)
    ]  # fmt: skip


def test_the_classifier_interval_resamples_classifiers_hand_worked():
    # six classifiers of two errors each: five explained wrongly (0, 0), one rightly (1, 1). A resample of the
    # classifiers draws K ~ Binomial(6, 1/6) right ones and scores K / 6: P(K = 0) = 0.335, so the 2.5 % point is
    # 0; P(K <= 2) = 0.938 < 0.975 <= P(K <= 3) = 0.991, so the 97.5 % point is 3 / 6 = 0.5.
    records = [r for k in range(5) for r in _records(f"c{k}", [0.0, 0.0])] + _records("c5", [1.0, 1.0])
    cell = pooled_scores(records, [f"c{k}" for k in range(6)])["row"]
    assert cell["classifiers"] == 6 and cell["errors"] == 12
    assert cell["llm_match"] == pytest.approx(1 / 6)
    assert (cell["llm_match_clf_ci_low"], cell["llm_match_clf_ci_high"]) == (0.0, 0.5)
    # over the errors the interval is narrower: 12 errors, 2 right (K ~ Binomial(12, 1/6): 97.5 % point 5 / 12)
    assert cell["llm_match_ci_low"] == 0.0 and cell["llm_match_ci_high"] == pytest.approx(5 / 12)
    # two classifiers: every resample is one of them twice or both, so the interval spans their means
    two = pooled_scores(_records("a", [0.0, 1.0]) + _records("b", [1.0, 1.0, 1.0, 1.0]), ["a", "b"])["row"]
    assert (two["llm_match_clf_ci_low"], two["llm_match_clf_ci_high"]) == (0.5, 1.0)


def test_edits_per_error_and_the_budget_plot(tmp_path):
    records = _records("a", [0.0, 1.0], "s0") + _records("a", [1.0, 1.0], "s2", edits=2)
    records += _records("b", [1.0], "s2", edits=1) + _records("a", [1.0], "teacher", edits=40)
    pooled = pooled_scores(records, ["a", "b"])
    assert pooled["s0"]["edits"] == 0 and pooled["s2"]["edits"] == pytest.approx(5 / 3)
    points = budget_points(pooled, ["s2", "s0"], "teacher")
    assert [p[0] for p in points["student"]] == [0, pytest.approx(5 / 3)]
    assert points["teacher"] == [(40, 1.0, 100.0)] and points["rule"] == []
    # the evidence's order with no explainer: a second curve, by edits
    assert [p[0] for p in budget_points(pooled, ["s0"], None, ["s2", "s0"])["rule"]] == [0, pytest.approx(5 / 3)]
    points["rule"] = points["student"]
    path = plot_budget(points, tmp_path / "out" / "budget.png", "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_budget({"student": [], "teacher": []}, tmp_path / "none.png", "t") is None


class _Backend:
    """Replies ``{"cause_of_error": ...}``: the greedy answer, then the sampled ones, per conversation."""

    def __init__(self, greedy: str, sampled: list[str]) -> None:
        self.greedy, self.sampled, self.calls = greedy, sampled, []

    def chat_json_batch(self, conversations, n=1, temperature=0.0, seed=None, schema=None):
        self.calls.append((n, temperature))
        replies = [self.greedy] if temperature == 0.0 else self.sampled[:n]
        return [[{"cause_of_error": r} for r in replies] for _ in conversations]


class _Scorer:
    """A sentence ``"<factor> ..."`` implies the edit of that factor; each factor's edit has a fixed CEI."""

    def __init__(self, cei: dict[str, float]) -> None:
        self.cei, self.tested = cei, []
        self.deriver = self

    def derive(self, sample, texts, names):
        return [{"attribute": t.split()[0]} if t.split()[0] in self.cei else None for t in texts]

    def score(self, sample, texts, names):
        self.tested.append(list(texts))
        # the edited image: ones where the edit makes the classifier read the true class (style), else zeros
        return [
            Trial(
                t,
                {"attribute": t.split()[0]},
                0.0,
                self.cei[t.split()[0]] / 100,
                torch.full((3, 4, 4), float(t.startswith("style"))),
            )
            for t in texts
        ]


class _Reader(torch.nn.Module):
    """Reads an image of ones as the true class (3) and any other as 0."""

    def predict(self, images):
        return torch.where(images.flatten(1).mean(1) > 0.5, 3, 0)


class _Questions:
    def conversations(self, samples):
        return [[{"role": "user", "content": "why"}] for _ in samples]


@pytest.mark.parametrize(
    ("edits", "answer", "tested"),
    [
        (0, "color a", []),
        (1, "style b", [["color a"]]),  # the one test refutes the greedy answer: the next hypothesis, untested
        (2, "style b", [["color a", "style b"]]),
        (4, "angle d", [["color a", "style b", "angle d", "scale e"]]),
    ],
)
def test_the_student_spends_its_edits_on_distinct_hypotheses(edits, answer, tested):
    # greedy "color", samples repeat it and "style" (same edit, other words), plus an underivable one
    backend = _Backend("color a", ["color a", "style b", "style c", "nonsense", "angle d", "scale e"])
    scorer = _Scorer({"color": 5.0, "style": 60.0, "angle": 90.0, "scale": 10.0})
    explainer = BudgetExplainer(backend, _Questions(), scorer, edits, 6, 1.0, 20.0, "s")
    sample = ErrorSample("e", torch.zeros(3, 4, 4), 3, 8, {})
    (found,) = explainer.explain_batch([sample], SimpleNamespace(class_names=list("0123456789")))
    assert found.text == answer and scorer.tested == tested
    assert len(found.trials) == sum(len(t) for t in tested)  # the record's candidate_cei: its edits
    if edits:
        assert found.candidates == ["color a", "style b", "angle d", "scale e"]


def test_an_edit_to_the_value_the_image_already_has_is_no_test():
    # the image is already upright: "angle" restores nothing, so the budget of one goes to the next hypothesis
    backend = _Backend("angle d", ["angle d", "style b"])
    scorer = _Scorer({"style": 60.0, "angle": 90.0})
    scorer.derive = lambda sample, texts, names: [{"attribute": t.split()[0], "value": 0} for t in texts]
    explainer = BudgetExplainer(backend, _Questions(), scorer, 1, 2, 1.0, 20.0, "s")
    upright = ErrorSample("e", torch.zeros(3, 4, 4), 3, 8, {"angle": 0, "style": 2})
    (found,) = explainer.explain_batch([upright], SimpleNamespace(class_names=list("0123456789")))
    assert scorer.tested == [["style b"]] and found.text == "style b" and found.candidates == ["style b"]
    scorer.tested.clear()  # turned: the angle edit changes the image and is tested first
    turned = ErrorSample("e", torch.zeros(3, 4, 4), 3, 8, {"angle": 2, "style": 2})
    explainer.explain_batch([turned], SimpleNamespace(class_names=list("0123456789")))
    assert scorer.tested == [["angle d"]]


class _ValueScorer(_Scorer):
    """``"<factor> <value>"`` implies setting that factor to that value; each edit has a fixed CEI."""

    def derive(self, sample, texts, names):
        return [{"attribute": t.split()[0], "value": t.split()[1]} for t in texts]

    def score(self, sample, texts, names):
        self.tested.append(list(texts))
        return [Trial(t, self.derive(sample, [t], names)[0], 0.0, self.cei[t] / 100) for t in texts]


@pytest.mark.parametrize(("distinct", "tested", "answer"), [
    ("factor", [["color white", "style solid"]], "color white"),  # one colour hypothesis: white, as proposed first
    ("edit", [["color white", "color red"]], "color red"),  # the student's other colour tested too: red kept
])  # fmt: skip
def test_distinct_edits_test_another_value_of_a_factor(distinct, tested, answer):
    backend = _Backend("color white", ["color white", "color red", "style solid"])
    scorer = _ValueScorer({"color white": 30.0, "color red": 45.0, "style solid": 25.0})
    explainer = BudgetExplainer(backend, _Questions(), scorer, 2, 3, 1.0, 20.0, "s", distinct=distinct)
    sample = ErrorSample("e", torch.zeros(3, 4, 4), 3, 8, {"color": "green", "style": "dotted"})
    (found,) = explainer.explain_batch([sample], SimpleNamespace(class_names=list("0123456789")))
    assert scorer.tested == tested and found.text == answer
    row = StudentEdits(edits=2, distinct="edit")
    assert row.name == "Student (2 edits, evidence, distinct edits)" and row.settings()["distinct"] == "edit"
    assert "distinct" not in StudentEdits(edits=2).settings()  # the default keeps earlier rows' keys


@pytest.mark.parametrize(("edits", "answer"), [(1, "style b"), (2, "style b"), (4, "style b")])
def test_a_true_class_test_confirms_the_edit_that_makes_the_classifier_right(edits, answer):
    # angle earns more CEI (90) but only the style edit makes the classifier read the true class: the cause
    backend = _Backend("color a", ["style b", "angle d", "scale e"])
    scorer = _Scorer({"color": 5.0, "style": 60.0, "angle": 90.0, "scale": 10.0})
    explainer = BudgetExplainer(backend, _Questions(), scorer, edits, 3, 1.0, 20.0, "s", accept="true_class",
                                target=_Reader())  # fmt: skip
    sample = ErrorSample("e", torch.zeros(3, 4, 4), 3, 8, {})
    (found,) = explainer.explain_batch([sample], SimpleNamespace(class_names=list("0123456789")))
    assert found.text == answer and len(found.trials) == min(edits, 4)
    with pytest.raises(ValueError, match="target"):
        BudgetExplainer(backend, _Questions(), scorer, 1, 3, 1.0, 20.0, "s", accept="true_class")


def test_budget_rows_are_named_and_keyed_by_their_budget():
    row = StudentEdits(edits=2)
    assert row.name == "Student (2 edits, evidence)" and StudentEdits(edits=1, view="error").name == "Student (1 edit)"
    assert row.settings() == {"class": "StudentEdits", "edits": 2, "view": "evidence", "samples": 8,
                              "temperature": 1.0, "accept_cei": 20.0}  # fmt: skip
    assert json.dumps(StudentEdits().settings()) == '{"class": "StudentEdits", "edits": 0, "view": "evidence"}'
    flip = StudentEdits(edits=2, accept="true_class")
    assert flip.name == "Student (2 edits, evidence, true-class test)" and flip.settings()["accept"] == "true_class"
