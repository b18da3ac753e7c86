"""A prototype reference: the correctly classified image of a class the classifier is most sure of.

ChangeMLLM compares an error with the *nearest* correctly classified reference, which for a biased
classifier is often an atypical one (a magenta 3 that a "3s are red" classifier still gets right). The
prototype of the true class, the correctly classified reference with the largest ``P(y)``, shows what the
classifier expects of that class instead (a red 3); a distilled explainer can read the expected colour
from it. :class:`PrototypeChangeMLLM` is ChangeMLLM with that reference.
"""

from __future__ import annotations

import torch

from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark
from nemo_train.nemo.methods.change_mllm import ChangeMLLM


@torch.no_grad()
def reference_confidence(target, benchmark: NemoBenchmark, chunk: int = 256) -> torch.Tensor:
    """``P(label | reference)`` of every reference image under ``target`` (kept on the reference set, by
    target, after the first call)."""
    reference = benchmark.reference
    cached = getattr(reference, "_confidence", {})
    if id(target) not in cached:
        probs = []
        for start in range(0, len(reference), chunk):
            indices = range(start, min(start + chunk, len(reference)))
            images = torch.stack([reference.image(i) for i in indices])
            labels = reference.labels[start : start + len(indices)].long()
            p = target.predict_proba(images).float().cpu()
            probs.append(p.gather(1, labels[:, None])[:, 0])
        cached[id(target)] = torch.cat(probs) if probs else torch.empty(0)
        reference._confidence = cached
    return cached[id(target)]


def prototype_reference(target, benchmark: NemoBenchmark, label: int) -> int | None:
    """Index of the correctly classified reference of class ``label`` with the largest ``P(label)``; ``None``
    when the classifier gets no reference of that class right."""
    reference = benchmark.reference
    mask = reference.correct & (reference.labels == label)
    if not bool(mask.any()):
        return None
    confidence = reference_confidence(target, benchmark).masked_fill(~mask, float("-inf"))
    return int(confidence.argmax())


class PrototypeChangeMLLM(ChangeMLLM):
    """ChangeMLLM comparing each error with the prototype of its true class (:func:`prototype_reference`)."""

    def reference(self, sample: ErrorSample, benchmark: NemoBenchmark) -> int | None:
        return prototype_reference(self.target, benchmark, sample.label)
