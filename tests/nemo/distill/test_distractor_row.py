"""The Distractor row of distill-eval: it blames the benchmark's distractor (on shifts the digit's position, which is
never a cause) in a sentence that is true of the image, so it scores no LLM Match however well grounded it is."""

from __future__ import annotations

import pytest
import torch

from datamodules.shifts import FACTS
from nemo_train.errors import UserInputError
from nemo_train.nemo.distill.rows import DistillContext
from nemo_train.nemo.distill.trivial_rows import Distractor
from nemo_train.scoring.explanations import ExplanationScorer
from tests.nemo.distill.test_evidence_rule import PREDICTED, RED, STRIPES, TRUE, Reads, _bench, _error, shifts  # noqa: F401


class ReadsColour(Reads):
    """Reads a coloured digit as the error's predicted class and anything else right, with certainty."""

    def __init__(self) -> None:
        super().__init__(colour_as=PREDICTED, background_as=None)

    def predict_proba(self, images: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(self.predict(images), 10).float()


def test_the_row_blames_the_distractor_truthfully_and_matches_no_cause(shifts):  # noqa: F811
    error = _error(shifts, color=RED, background=STRIPES, scale=1)
    error.cause = "color"
    bench = _bench(shifts, [error])
    target = ReadsColour()
    scorer = ExplanationScorer.build(bench, target)
    row = Distractor()
    assert not row.uses_student and row.settings() == {"class": "Distractor", "attribute": None}
    method, _ = row.build(DistillContext(bench, target, None, structured=None, keyword=scorer.scorer))
    assert method.name == f"Distractor({FACTS.distractors[0]})"
    text = method.explain(error, bench).text
    (score,) = scorer.score([error], [text])
    assert list(score.blamed) == [FACTS.distractors[0]] and score.consistent
    assert score.grounding == pytest.approx(1.0)  # every claim of the sentence is true of the image
    assert score.llm_match == 0.0  # the cause is the colour
    assert score.cei == pytest.approx(0.0, abs=1e-6)  # moving the digit leaves this classifier's reading alone


def test_a_benchmark_without_a_distractor_needs_an_attribute(shifts):  # noqa: F811
    bench = _bench(shifts, [_error(shifts, color=RED, background=STRIPES)])
    bench.cause = {**bench.cause, "distractor": None}
    ctx = DistillContext(bench, Reads(PREDICTED, None), None, structured=None, keyword=object())
    with pytest.raises(UserInputError, match="names no distractor"):
        Distractor().build(ctx)
    method, _ = Distractor("angle").build(ctx)
    assert method.name == "Distractor(rotation)"
    assert torch.is_tensor(bench.errors[0].image) and bench.errors[0].label == TRUE
