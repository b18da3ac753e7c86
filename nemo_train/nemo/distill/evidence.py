"""Evidence about the classifier in front of an explainer: how it reads images like the error, one unusual trait at a time.

For an error of a generated benchmark (a renderer and a fact sheet with training-typical values), every factor
of the error image that is off its typical value gets one reference image: a digit of the *true* class, drawn
with a handwriting exemplar of the benchmark's training-like reference images, that has exactly that factor's
unusual value and every other factor at its typical value; one more reference is fully typical. The classifier
under explanation reads all of them (forward passes only; the error image itself is never edited). The explainer
sees the references side by side (a montage, in a seeded random order, so a position says nothing) and a
question saying, per reference, whether the classifier got it right or what it read instead, without naming any
factor: to tell which unusual trait of the error the classifier cannot cope with, it has to look at which
reference was misread and what that reference shares with the error.

This is the observation step of SciTX (reference images of the true class with the classifier's predictions),
built from the generator so that each reference isolates one trait.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from datamodules.sentences import DISTILL_EVIDENCE_PROMPT, evidence_readings
from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark


@dataclass
class Evidence:
    """The references of one error, in the order they are shown (left to right), and the classifier's readings."""

    #: ``float[R, 3, H, W]`` references, quantised to ``uint8`` steps as stored datasets are
    images: torch.Tensor = field(repr=False)
    #: each reference's generator attributes
    attrs: list[dict[str, Any]]
    #: the factor each reference shares with the error (``None``: the fully typical reference); never shown
    shared: list[str | None]
    #: the classifier's prediction on each reference
    predictions: list[int]

    @property
    def montage(self) -> torch.Tensor:
        """``float[3, H, R * W]``: the references side by side, first on the left."""
        return torch.cat(list(self.images), dim=-1)

    def question(self, sample: ErrorSample, class_names: Sequence[str]) -> str:
        """The evidence view's question: the classes and, per reference, right or what it was read as."""
        return DISTILL_EVIDENCE_PROMPT.format(
            true_name=class_names[sample.label],
            pred_name=class_names[sample.prediction],
            readings=evidence_readings(self.predictions, sample.label, class_names),
        )


def check_evidence_benchmark(benchmark: NemoBenchmark) -> None:
    """Refuse, in one line, a benchmark the evidence cannot be drawn from."""
    facts, reference = benchmark.facts, benchmark.reference
    if benchmark.renderer is None or facts is None or reference is None or not reference.attrs:
        raise UserInputError(
            f"the evidence view needs a generated benchmark with a renderer, a fact sheet and reference attributes; "
            f"{benchmark.name!r} has not"
        )
    if not unusual_candidates(facts):
        raise UserInputError(
            f"the evidence view needs training-typical values in the fact sheet; {facts.name!r} names none (shifts does)"
        )


def unusual_candidates(facts) -> list[str]:
    """The factors an image can have off their typical value: a typical value is known and not a distractor."""
    return [f.name for f in facts.factors if f.typical is not None and not f.distractor]


class ClassifierEvidence:
    """Draws the evidence references of errors and has the classifier read them.

    Args:
        seed: picks each error's handwriting exemplar among the training-like references of its true class and the
            order of its references (together with the error's id, so an error's evidence does not depend on which
            other errors are asked with it).
        chunk: references classified per forward pass.
    """

    def __init__(self, seed: int = 0, chunk: int = 256) -> None:
        self.seed, self.chunk = seed, chunk

    def _generator(self, sample: ErrorSample) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(sample.sample_id.encode()))

    def plan(self, sample: ErrorSample, benchmark: NemoBenchmark) -> tuple[list[dict[str, Any]], list[str | None]]:
        """Each reference's attributes and the factor it shares with the error, in the order they are shown."""
        check_evidence_benchmark(benchmark)
        if sample.attrs is None:
            raise UserInputError(
                f"error {sample.sample_id!r} has no generator attributes; the evidence view needs them"
            )
        facts, reference = benchmark.facts, benchmark.reference
        rows = torch.nonzero(reference.labels == sample.label).flatten()
        if len(rows) == 0:
            raise UserInputError(f"no training-like reference of class {benchmark.class_names[sample.label]!r}")
        gen = self._generator(sample)
        base = dict(reference.attrs[int(rows[torch.randint(len(rows), (1,), generator=gen)])])
        typical = {f.name: f.typical_stored for f in facts.factors if f.typical is not None}
        base.update(typical)  # the drawn exemplar (and a distractor's value), every other factor typical
        base[facts.class_attribute] = sample.label
        unusual = [name for name in unusual_candidates(facts) if sample.attrs.get(name, typical[name]) != typical[name]]
        plans = [(dict(base), None)] + [({**base, name: sample.attrs[name]}, name) for name in unusual]
        order = torch.randperm(len(plans), generator=gen).tolist()
        return [plans[i][0] for i in order], [plans[i][1] for i in order]

    @torch.no_grad()
    def gather_many(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark, target) -> list[Evidence]:
        """The evidence of each error: all references rendered in one batch and read by ``target`` (``predict``)."""
        plans = [self.plan(sample, benchmark) for sample in samples]
        rows = [attrs for attrs, _ in plans for attrs in attrs]
        batch = {k: torch.tensor([r[k] for r in rows]) for k in rows[0]}
        images = benchmark.renderer.render_batch(**batch).clamp(0, 1).mul(255).round().div(255)
        chunks = [target.predict(images[i : i + self.chunk]).cpu() for i in range(0, len(images), self.chunk)]
        predictions = torch.cat(chunks).tolist()
        out, start = [], 0
        for attrs, shared in plans:
            stop = start + len(attrs)
            out.append(Evidence(images[start:stop], attrs, shared, [int(p) for p in predictions[start:stop]]))
            start = stop
        return out

    def gather(self, sample: ErrorSample, benchmark: NemoBenchmark, target) -> Evidence:
        return self.gather_many([sample], benchmark, target)[0]
