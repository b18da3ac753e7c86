"""Reference explainers for generated benchmarks whose cause is known: one names the planted bias, one
names an irrelevant factor. They bound the table and check that CEI separates right from wrong causes."""

from __future__ import annotations

from nemo_train.errors import UserInputError
from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark
from nemo_train.nemo.methods.base import Explanation


class KnownCauseExplainer:
    """Names the planted bias of a generated benchmark (CMNIST: the colour the true class had in training)."""

    name = "KnownCause"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        cause = benchmark.cause
        if cause is None or cause.get("attribute") != "color" or sample.attrs is None:
            raise UserInputError(f"benchmark {benchmark.name!r} has no known colour cause; KnownCause needs one")
        colors = benchmark.vocabulary["color"]
        current = colors[int(sample.attrs["color"])]
        trained = [c for c in cause["values"][sample.label] if c != current]
        if not trained:
            return Explanation(f"The digit's colour {current} is typical of its class.")
        true = benchmark.class_names[sample.label]
        text = (f"The classifier relies on colour: in training every {true} was {trained[0]}, "
                f"and this one is {current}, so it was read as another digit.")
        return Explanation(text, [text])


class DistractorExplainer:
    """Names an irrelevant factor: the rotation of the figure (harmless by construction on CMNIST)."""

    name = "Distractor(rotation)"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        if sample.attrs is None or "angle" not in sample.attrs:
            raise UserInputError(f"sample {sample.sample_id!r} has no angle attribute; the rotation distractor needs one")
        angle = int(sample.attrs["angle"])
        text = (f"The digit is rotated {angle} degrees; the classifier may not recognise the tilted shape "
                "and would read it correctly if it stood upright.")
        return Explanation(text, [text])
