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

:class:`EvidenceView` asks for more than that: ``references: paired`` adds, per unusual trait, a reference with
*every other* unusual trait of the error and that one back at its typical value (the benchmark's own test of a
cause, a single restoration that fixes the error, tried on another handwriting), ``exemplars`` repeats the set on
that many handwriting exemplars, and ``named`` writes the readings as tallies per trait, naming the trait (the
toolkit rendered the references, so it knows what each shares with the error; it never knows the cause). The
montage shows the first exemplar's references.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from jsonargparse.typing import PositiveInt

from datamodules.sentences import DISTILL_EVIDENCE_PROMPT, DISTILL_TALLY_PROMPT, evidence_readings, evidence_tallies
from nemo_train.errors import UserInputError
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark

#: The references drawn per exemplar: ``single_trait`` (one unusual trait of the error each, plus a typical one) or
#: ``paired`` (those, and per trait one with every other unusual trait of the error, that one restored).
ReferenceSet = Literal["single_trait", "paired"]


@dataclass(frozen=True)
class EvidenceView:
    """What the evidence shows (see the module docstring); the default is the view of before, reference for reference.

    Args:
        exemplars: handwriting exemplars the reference set is drawn on (more than one needs ``named``).
        references: ``single_trait`` or ``paired`` (adds the leave-one-trait-out references).
        named: the question gives, per unusual trait, how many of its references the classifier misread (alone)
            and read right (restored), naming the trait; otherwise it numbers the montage's references.
        ranked: the named question lists the traits strongest evidence first (:meth:`Evidence.strength`), not in
            the montage's seeded order: the comparison of the tallies is then made by the toolkit, and what is
            left to the explainer is to read the list and the image.
    """

    exemplars: PositiveInt = 1
    references: ReferenceSet = "single_trait"
    named: bool = False
    ranked: bool = False

    def __post_init__(self) -> None:
        if (self.exemplars > 1 or self.ranked) and not self.named:
            raise UserInputError(
                f"evidence exemplars={self.exemplars}, ranked={self.ranked} needs named: true (the montage shows one "
                "exemplar's references, in a seeded order)"
            )

    @property
    def label(self) -> str:
        """How a row's name tells the view: empty for the default, else ``paired x3``."""
        if self == EvidenceView():
            return ""
        return f"{self.references.replace('_', '-')} x{self.exemplars}" + (" ranked" if self.ranked else "")

    def settings(self) -> dict[str, Any]:
        """What identifies the view in stored records (empty for the default, so stored rows resume)."""
        if self == EvidenceView():
            return {}
        return {k: v for k, v in asdict(self).items() if k != "ranked" or v}  # rows stored before ``ranked`` resume


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
    #: each reference's kind: ``typical``, ``alone`` (the shared trait alone) or ``restored`` (every other unusual
    #: trait of the error, the shared one typical); default: ``alone`` where a trait is shared
    kinds: list[str] | None = None
    #: the view the references were drawn for
    view: EvidenceView = field(default_factory=EvidenceView)
    #: references per exemplar (the montage shows the first ``shown``); default all
    shown: int | None = None

    def __post_init__(self) -> None:
        if self.kinds is None:
            self.kinds = ["typical" if name is None else "alone" for name in self.shared]

    @property
    def montage(self) -> torch.Tensor:
        """``float[3, H, R * W]``: the (first exemplar's) references side by side, first on the left."""
        return torch.cat(list(self.images[: self.shown or len(self.images)]), dim=-1)

    def tallies(self, label: int) -> dict[str, tuple[int, int]]:
        """Per shared trait, in the order first shown: (``alone`` references misread, ``restored`` ones read right)."""
        found: dict[str, list[int]] = {}
        for name, kind, predicted in zip(self.shared, self.kinds, self.predictions):
            if name is None:
                continue
            counts = found.setdefault(name, [0, 0])
            counts[0] += kind == "alone" and predicted != label
            counts[1] += kind == "restored" and predicted == label
        tallies = {name: (alone, restored) for name, (alone, restored) in found.items()}
        if self.view.ranked:
            tallies = dict(sorted(tallies.items(), key=lambda item: self.strength(item[1]), reverse=True))
        return tallies

    def strength(self, counts: tuple[int, int]) -> tuple[int, ...]:
        """How strongly a trait's tallies (alone misread, restored read right) point at it: the restored references
        read right first (the benchmark's test of a cause), then the ones with it alone misread."""
        alone, restored = counts
        return (restored, alone) if self.view.references == "paired" else (alone,)

    def question(self, sample: ErrorSample, class_names: Sequence[str], facts=None) -> str:
        """The evidence view's question: the classes and, per reference, right or what it was read as (or, with a
        ``named`` view, the tallies per trait, each named by its word in ``facts``)."""
        names = {"true_name": class_names[sample.label], "pred_name": class_names[sample.prediction]}
        if self.view.named:
            words = {f.name: f.word for f in facts.factors} if facts is not None else {}
            tallies = {words.get(name, name): counts for name, counts in self.tallies(sample.label).items()}
            paired = self.view.references == "paired"
            legend, text = evidence_tallies(tallies, self.view.exemplars, paired)
            return DISTILL_TALLY_PROMPT.format(**names, legend=legend, tallies=text)
        return DISTILL_EVIDENCE_PROMPT.format(
            **names, readings=evidence_readings(self.predictions, sample.label, class_names)
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
        seed: picks each error's handwriting exemplars among the training-like references of its true class and the
            order of its references (together with the error's id, so an error's evidence does not depend on which
            other errors are asked with it).
        chunk: references classified per forward pass.
        view: which references are drawn and how the question reads them (default: one exemplar, single-trait).
    """

    def __init__(self, seed: int = 0, chunk: int = 256, view: EvidenceView | None = None) -> None:
        self.seed, self.chunk, self.view = seed, chunk, view or EvidenceView()

    def _generator(self, sample: ErrorSample) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(sample.sample_id.encode()))

    def plan(self, sample: ErrorSample, benchmark: NemoBenchmark) -> list[tuple[dict[str, Any], str | None, str]]:
        """Each reference's attributes, the factor it shares with the error and its kind, in the order shown
        (exemplar by exemplar, each block in a seeded order)."""
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
        typical = {f.name: f.typical_stored for f in facts.factors if f.typical is not None}
        unusual = [name for name in unusual_candidates(facts) if sample.attrs.get(name, typical[name]) != typical[name]]
        out = []
        for _ in range(self.view.exemplars):
            base = dict(reference.attrs[int(rows[torch.randint(len(rows), (1,), generator=gen)])])
            base.update(typical)  # the drawn exemplar (and a distractor's value), every other factor typical
            base[facts.class_attribute] = sample.label
            plans = [(dict(base), None, "typical")] + [({**base, n: sample.attrs[n]}, n, "alone") for n in unusual]
            if self.view.references == "paired":
                every = {**base, **{n: sample.attrs[n] for n in unusual}}
                plans += [({**every, n: typical[n]}, n, "restored") for n in unusual]
            out += [plans[i] for i in torch.randperm(len(plans), generator=gen).tolist()]
        return out

    @torch.no_grad()
    def gather_many(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark, target) -> list[Evidence]:
        """The evidence of each error: all references rendered in one batch and read by ``target`` (``predict``)."""
        plans = [self.plan(sample, benchmark) for sample in samples]
        rows = [attrs for plan in plans for attrs, _, _ in plan]
        batch = {k: torch.tensor([r[k] for r in rows]) for k in rows[0]}
        images = benchmark.renderer.render_batch(**batch).clamp(0, 1).mul(255).round().div(255)
        chunks = [target.predict(images[i : i + self.chunk]).cpu() for i in range(0, len(images), self.chunk)]
        predictions = torch.cat(chunks).tolist()
        out, start = [], 0
        for plan in plans:
            stop = start + len(plan)
            attrs, shared, kinds = (list(column) for column in zip(*plan))
            readings = [int(p) for p in predictions[start:stop]]
            shown = len(plan) // self.view.exemplars
            out.append(Evidence(images[start:stop], attrs, shared, readings, kinds, self.view, shown))
            start = stop
        return out

    def gather(self, sample: ErrorSample, benchmark: NemoBenchmark, target) -> Evidence:
        return self.gather_many([sample], benchmark, target)[0]
