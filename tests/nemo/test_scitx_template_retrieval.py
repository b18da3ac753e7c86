"""The offline attribute template keeps its true-class references under the paper's nearest retrieval.

Hand-worked case: solid-colour squares, a classifier whose logits are 3 x (mean red, mean green) and whose
features are the mean colour. The error is a green square labelled "reddish" (class 0) and predicted
"greenish" (class 1). The correctly classified references are two red squares (class 0) and two green
squares (class 1): the two green ones have cosine 1 to the error, the red ones cosine 0, so the ``k = 2``
nearest are both green and none is of the true class.

With balanced retrieval (one reference per class) the template contrasts the error's green with the red
reference, the keyword deriver edits colour -> red, and the CEI is
100 x (sigmoid(3) - sigmoid(-3)) = 90.51 (p(reddish) of the red square minus that of the green one).
With nearest retrieval the template has nothing to contrast: no hypothesis, an empty explanation.
"""

from __future__ import annotations

import math

import pytest
import torch
from nemo_toys import VOCAB, RedGreenTarget, SolidRenderer, solid

from nemo_train.nemo.components import BuildContext, SciTXMethod
from nemo_train.nemo.methods.scitx import AttributeContrastHypothesizer, MLLMHypothesizer, SciTX
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark, ReferenceSet
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver

RED, GREEN = 0, 1
CEI_RED_EDIT = 100 * (1 / (1 + math.exp(-3)) - 1 / (1 + math.exp(3)))  # 90.51


def far_true_class_benchmark(target: RedGreenTarget) -> NemoBenchmark:
    rows = [(RED, 0, 0), (RED, 0, 10), (GREEN, 1, 0), (GREEN, 1, -10)]  # (colour, label, angle)
    images = torch.stack([solid(c) for c, _, _ in rows])
    reference = ReferenceSet(
        images,
        torch.tensor([y for _, y, _ in rows]),
        target.predict(images),
        torch.nn.functional.normalize(target.features(images), dim=-1),
        [f"reference #{i}" for i in range(len(rows))],
        [{"digit": 3, "color": c, "angle": a, "style": 0} for c, _, a in rows],
        image_size=8,
    )
    error = ErrorSample("e0", solid(GREEN), label=0, prediction=1, attrs={"digit": 3, "color": GREEN, "angle": 0})
    return NemoBenchmark("toy", target.class_names, "cmnist", [error], reference, SolidRenderer(), VOCAB)


def scorer(target) -> CounterfactualScorer:
    return CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))


def test_template_scitx_retrieves_both_classes_and_finds_the_colour_edit():
    target = RedGreenTarget()
    bench = far_true_class_benchmark(target)
    method = SciTX(target, AttributeContrastHypothesizer(VOCAB, obj="square"), scorer(target), k=2, m=3)
    assert method.balanced
    explanation = method.explain(bench.errors[0], bench)
    observations = method.observe(bench.errors[0], bench)
    assert [o.label for o in observations] == [0, 1] and observations[0].attrs["color"] == RED
    assert explanation.candidates == [
        "The square is green, while the correctly classified reddishs it resembles are mostly red; "
        "the classifier seems to tie green to classes such as greenish."
    ]
    assert explanation.trial.instruction == {"attribute": "color", "value": RED}
    assert explanation.trial.cei == pytest.approx(CEI_RED_EDIT, abs=1e-3)


def test_template_under_nearest_retrieval_has_no_hypothesis():
    target = RedGreenTarget()
    bench = far_true_class_benchmark(target)
    method = SciTX(target, AttributeContrastHypothesizer(VOCAB), scorer(target), k=2, m=3, balanced=False)
    observations = method.observe(bench.errors[0], bench)
    assert sorted(o.index for o in observations) == [2, 3]  # both green references, none of the true class
    explanation = method.explain(bench.errors[0], bench)
    assert explanation.text == "" and explanation.candidates == [] and explanation.trial is None


def test_language_model_hypotheses_keep_the_papers_nearest_retrieval():
    target = RedGreenTarget()
    assert not SciTX(target, MLLMHypothesizer(backend=None), scorer(target)).balanced


@pytest.mark.parametrize(
    ("retrieval", "backend", "balanced"),
    [("auto", None, True), ("nearest", None, False), ("balanced", None, True), ("auto", "explainer", False)],
)
def test_scitx_method_retrieval_follows_the_hypothesis_source(retrieval, backend, balanced):
    target = RedGreenTarget()
    bench = far_true_class_benchmark(target)
    bench.cause = {"editable": ("color", "angle"), "object": "square"}
    ctx = BuildContext(bench, target, backend and object(), scorer(target))
    (method,) = SciTXMethod(k=2, m=3, retrieval=retrieval).build(ctx)
    assert method.balanced is balanced
