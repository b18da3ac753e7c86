"""Reference explainers for generated benchmarks whose cause is known: one names the planted bias, one
names an irrelevant factor. They bound the table and check that CEI separates right from wrong causes."""

from __future__ import annotations

from nemo_train.errors import UserInputError
from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark
from nemo_train.nemo.methods.base import Explanation


def _cause(benchmark: NemoBenchmark, sample: ErrorSample) -> dict:
    if benchmark.cause is None or sample.attrs is None:
        raise UserInputError(
            f"benchmark {benchmark.name!r} has no known cause; the reference explainers need a generated benchmark"
        )
    return benchmark.cause


class KnownCauseExplainer:
    """Names the planted bias (CMNIST: the colour the true class had in training; CLEVR: its material)."""

    name = "KnownCause"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        cause = _cause(benchmark, sample)
        attribute, obj = cause["attribute"], cause.get("object", "object")
        values = benchmark.vocabulary[attribute]
        current = values[int(sample.attrs[attribute])]
        trained = [v for v in cause["values"][sample.label] if v != current]
        word = {"color": "colour"}.get(attribute, attribute)
        if not trained:
            return Explanation(f"The {obj}'s {word} {current} is typical of its class.")
        true = benchmark.class_names[sample.label]
        text = (
            f"The classifier relies on {word}: in training every {true} was {trained[0]}, "
            f"and this one is {current}, so it was read as another {obj}."
        )
        return Explanation(text, [text])


class DistractorExplainer:
    """Names an irrelevant factor (CMNIST: rotation; CLEVR: size), harmless by construction."""

    def __init__(self, attribute: str = "angle") -> None:
        self.attribute = attribute
        self.name = "Distractor(rotation)" if attribute == "angle" else f"Distractor({attribute})"

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        if sample.attrs is None or self.attribute not in sample.attrs:
            raise UserInputError(
                f"sample {sample.sample_id!r} has no {self.attribute!r} attribute; the distractor needs one"
            )
        if self.attribute == "angle":
            angle = int(sample.attrs["angle"])
            text = (
                f"The digit is rotated {angle} degrees; the classifier may not recognise the tilted shape "
                "and would read it correctly if it stood upright."
            )
            return Explanation(text, [text])
        values = benchmark.vocabulary[self.attribute]
        current = int(sample.attrs[self.attribute])
        other = values[(current + 1) % len(values)]
        text = (
            f"The object's {self.attribute} is {values[current]}; the classifier may not recognise objects of that "
            f"{self.attribute} and would read it correctly if it were {other}."
        )
        return Explanation(text, [text])
