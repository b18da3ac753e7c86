"""ChangeMLLM baseline: the error image next to a correctly classified reference; an MLLM describes the
difference and infers the cause (NEMO paper, Sec. 4.1.3, App. A.2, after change captioning)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from datamodules.fact_sheets import DEFAULT_FACTS
from nemo_train.backends.messages import user_message
from nemo_train.nemo import prompts
from nemo_train.nemo.methods.base import Explanation, ask_causes_batch
from nemo_train.nemo.methods.scitx import reference_index
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark

#: The correctly classified reference an error is compared with: the nearest one of the true or the
#: predicted class (``either``, as in the NEMO paper), of only one of them (``true`` / ``predicted``), or the
#: true class's ``prototype`` (:func:`prototype_reference`).
ReferenceClass = Literal["either", "true", "predicted", "prototype"]
#: The attributes the offline comparison lists, in this order, where both images have them (a factor of the
#: benchmark's fact sheet, or CLEVR's class attribute): the shifts digits' style, background and size are not listed.
COMPARED: tuple[str, ...] = ("color", "angle", "material", "shape", "size")


def prototype_reference(target, benchmark: NemoBenchmark, label: int) -> int | None:
    """Index of the correctly classified reference of class ``label`` with the largest ``P(label)``; ``None``
    when the classifier gets no reference of that class right.

    ChangeMLLM's nearest reference is often an atypical image for a biased classifier (a magenta 3 that a
    "3s are red" classifier still gets right); the prototype shows what the classifier expects of the class
    (a red 3), so a distilled explainer can read the expected colour from it."""
    reference = benchmark.reference
    mask = reference.correct & (reference.labels == label)
    if not bool(mask.any()):
        return None
    return int(reference.confidence(target).masked_fill(~mask, float("-inf")).argmax())


class ChangeMLLM:
    """Compare the error with a correctly classified reference (by default the nearest of its true or
    predicted class).

    With ``backend=None`` (offline, generated data only) the comparison is rule-based: it lists the
    generator attributes in which the two images differ ("its colour is green where the reference is
    red"), without any language model.
    """

    name = "ChangeMLLM"

    def __init__(
        self,
        target,
        backend=None,
        temperature: float = 0.7,
        reference_class: ReferenceClass = "either",
        template: str = prompts.CHANGE_MLLM,
    ) -> None:
        self.target, self.backend, self.temperature, self.template = target, backend, temperature, template
        self.reference_class = reference_class

    def reference(self, sample: ErrorSample, benchmark: NemoBenchmark) -> int | None:
        """Index of the nearest correctly classified reference of class ``y`` or ``y_hat`` (``either``, as in
        the NEMO paper), or of only one of them (``true`` / ``predicted``), or the true class's ``prototype``;
        ``None`` when there is none."""
        if self.reference_class == "prototype":
            return prototype_reference(self.target, benchmark, sample.label)
        query = self.target.features(sample.image[None]).cpu()
        classes = {"true": [sample.label], "predicted": [sample.prediction]}.get(
            self.reference_class, [sample.label, sample.prediction]
        )
        found = reference_index(benchmark.reference).search(query, 1, torch.tensor([classes])).as_lists()[0]
        return found[0] if found else None

    def _offline(self, sample: ErrorSample, benchmark: NemoBenchmark, index: int) -> str:
        ref_attrs, vocab = benchmark.reference.attrs[index], benchmark.vocabulary or {}
        # how a factor and its values read (word, unit) comes from the fact sheet; the default benchmark's without one
        facts = benchmark.facts or DEFAULT_FACTS
        diffs = []
        for name in COMPARED:
            if name not in sample.attrs or name not in ref_attrs or sample.attrs[name] == ref_attrs[name]:
                continue
            factor = facts.factor(name) if name in facts.factor_names else None
            values, unit = vocab.get(name, []), factor.unit if factor is not None else ""
            named = (
                (lambda v: values[int(v)])
                if values and isinstance(values[0], str)
                else (lambda v: f"{int(v)} {unit}" if unit else str(v))
            )
            label = factor.word if factor is not None else name
            diffs.append(f"its {label} is {named(sample.attrs[name])} where the reference is {named(ref_attrs[name])}")
        true = benchmark.class_names[sample.label]
        if not diffs:
            return f"The image matches a correctly classified {true} in every listed attribute; the difference lies in the handwriting."
        return f"Compared with a correctly classified {true}, " + " and ".join(diffs) + "."

    def _compare(self, samples, references: list[int | None], benchmark: NemoBenchmark, m: int) -> list[list[str]]:
        """Up to ``m`` comparisons of each error with its reference (one batched request for all of them)."""
        found: list[list[str]] = [[] for _ in samples]
        asked = [i for i, index in enumerate(references) if index is not None]
        if self.backend is None:
            for i in asked:
                found[i] = [self._offline(samples[i], benchmark, references[i])]
            return found
        names, ref = benchmark.class_names, benchmark.reference
        conversations = []
        for i in asked:
            sample, index = samples[i], references[i]
            text = self.template.format(
                true_name=names[sample.label],
                pred_name=names[sample.prediction],
                ref_name=names[int(ref.labels[index])],
            )
            conversations.append([user_message(text, images=[sample.image, ref.image(index)])])
        replies = ask_causes_batch(self.backend, conversations, n=m, temperature=self.temperature if m > 1 else 0.0)
        for i, causes in zip(asked, replies):
            found[i] = causes
        return found

    def candidates(self, sample: ErrorSample, benchmark: NemoBenchmark, m: int) -> list[str]:
        return self.candidates_batch([sample], benchmark, m)[0]

    def candidates_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark, m: int) -> list[list[str]]:
        return self._compare(samples, [self.reference(s, benchmark) for s in samples], benchmark, m)

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        references = [self.reference(s, benchmark) for s in samples]
        return [
            Explanation(found[0] if found else "", found, details={"reference": index})
            for found, index in zip(self._compare(samples, references, benchmark, 1), references)
        ]
