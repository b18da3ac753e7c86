"""Reference explainers for generated benchmarks whose cause is known: one names the planted bias, one
names an irrelevant factor. They bound the table and check that CEI separates right from wrong causes."""

from __future__ import annotations

from nemo_train.errors import UserInputError
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.structured import EDIT_MARK, format_edit, hypothesis_sentence


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
        if sample.cause is not None and benchmark.facts is not None:
            return per_error_cause(sample, benchmark)
        cause = _cause(benchmark, sample)
        attribute, obj = cause["attribute"], cause.get("object", "object")
        values = benchmark.vocabulary[attribute]
        current = values[int(sample.attrs[attribute])]
        trained = [v for v in cause["values"][sample.label] if v != current]
        word = benchmark.facts.factor(attribute).word
        if not trained:
            return Explanation(f"The {obj}'s {word} {current} is typical of its class.")
        true = benchmark.class_names[sample.label]
        text = (
            f"The classifier relies on {word}: in training every {true} was {trained[0]}, "
            f"and this one is {current}, so it was read as another {obj}."
        )
        return Explanation(text, [text])


def factor_sentence(sample: ErrorSample, benchmark: NemoBenchmark, attribute: str, value) -> str:
    """The structured sentence blaming ``attribute`` of this image, with the edit ``attribute -> value``."""
    edit = {"attribute": attribute, "value": value}
    obj = (benchmark.cause or {}).get("object", "object")
    text = hypothesis_sentence(sample, edit, benchmark.vocabulary, benchmark.class_names, obj)
    return f"{text} {EDIT_MARK} {format_edit(edit, benchmark.vocabulary)}"


def per_error_cause(sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
    """This error's own cause (established by re-rendering), its value in the image and the edit back to the
    training-typical value."""
    factor = benchmark.facts.factor(sample.cause)
    text = factor_sentence(sample, benchmark, factor.name, factor.typical_stored)
    return Explanation(text, [text])


class ConstantExplainer:
    """One fixed explanation for every error (the "what would no explanation score" row).

    Args:
        text: the explanation, e.g. the most frequent explanation of a teacher.
    """

    name = "Constant"

    def __init__(self, text: str) -> None:
        if not text:
            raise UserInputError("the constant explanation is empty")
        self.text = text

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return Explanation(self.text, [self.text])


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
        # every generated benchmark has a fact sheet: the distractor's value in this image, moved to another
        values = benchmark.vocabulary[self.attribute]
        current = int(sample.attrs[self.attribute])
        text = factor_sentence(sample, benchmark, self.attribute, (current + 1) % len(values))
        return Explanation(text, [text])
