"""Teachers for a distilled explainer: CEI-validated explanations of mined errors.

A teacher labels one error with a hypothesis, the edit it implies and that edit's CEI:

* :class:`ExhaustiveAttributeTeacher` (generated data, NOT a language model): every single-attribute edit
  over the generator's vocabulary is rendered and classified in one batch; the edit with the largest CEI
  is the label, so on generated data it finds the max-CEI single-attribute edit exactly. Its sentence is a
  template naming what the edit changes.
* :class:`SciTXTeacher`: SciTX with any hypothesis source (an MLLM backend on real data, where the edit is
  the instruction the deriver wrote for an image editor); the label is its argmax-CEI hypothesis.

:func:`view_inputs` turns a label into training conversations for the student: the error image with the
distillation question (SciTX's hypothesis source), its Grad-CAM overlay (CamMLLM's reader), the error
beside a correctly classified reference (ChangeMLLM's comparer) and the error beside the classifier's evidence
(references of the true class that share one unusual trait of the error each, with the classifier's readings:
:mod:`nemo_train.nemo.distill.evidence`), all with the same structured answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from nemo_train.errors import UserInputError
from nemo_train.metrics.nemo import cei_points
from nemo_train.nemo.distill.evidence import ClassifierEvidence
from nemo_train.nemo.methods.cam_mllm import gradcam_overlay
from nemo_train.nemo.methods.change_mllm import ChangeMLLM, ReferenceClass
from nemo_train.nemo.methods.scitx import hypothesize_many
from nemo_train.scoring.batched_scoring import select_many, with_derived_edits
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.interventions import ExactAttributeEditor
from nemo_train.scoring.structured import (
    DISTILL_CAM_PROMPT,
    DISTILL_CHANGE_PROMPT,
    DISTILL_PROMPT,
    format_answer,
    hypothesis_sentence,
)

View = Literal["error", "gradcam", "change", "evidence"]


@dataclass
class TeacherLabel:
    """A teacher's explanation of one error: hypothesis, implied edit, its CEI and where it came from."""

    sample_id: str
    label: int
    prediction: int
    hypothesis: str
    edit: Any
    cei: float
    p_original: float
    p_edited: float
    teacher: str
    candidates: int
    answer: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ExhaustiveAttributeTeacher:
    """Exhaustive single-attribute search over a generator's vocabulary (not a language model).

    For an error with attributes ``a`` every edit ``a[attribute] := value`` (``attribute`` in ``editable``,
    ``value`` different from the current one) is rendered with the exact editor, the original and all edits
    are classified in one batch, and the edit raising ``P(y)`` most is returned with its CEI.

    Args:
        target: the classifier (``predict_proba``).
        editable: attributes it may change (default: the benchmark's ``cause["editable"]``).
    """

    name = "exhaustive attribute search (not a language model)"

    def __init__(self, target, editable: Sequence[str] | None = None) -> None:
        self.target, self.editable = target, None if editable is None else list(editable)

    def candidates(self, sample: ErrorSample, benchmark: NemoBenchmark) -> list[dict]:
        editable = self.editable or list((benchmark.cause or {}).get("editable", ()))
        vocabulary = benchmark.vocabulary or {}
        unknown = [a for a in editable if a not in vocabulary or a not in (sample.attrs or {})]
        if unknown or not editable:
            raise UserInputError(
                f"the exhaustive teacher cannot edit {unknown or editable}; it needs generator attributes"
            )
        out = []
        for attribute in editable:
            values = vocabulary[attribute]
            as_index = bool(values) and isinstance(values[0], str)
            for i, v in enumerate(values):
                value = i if as_index else v
                if value != sample.attrs[attribute]:
                    out.append({"attribute": attribute, "value": value})
        return out

    @torch.no_grad()
    def search(self, sample: ErrorSample, benchmark: NemoBenchmark) -> tuple[list[dict], torch.Tensor]:
        """Every candidate edit and ``P(true class)`` of the original (first) and of each edited image."""
        if benchmark.renderer is None or sample.attrs is None:
            raise UserInputError("the exhaustive teacher needs a generated benchmark (renderer and attributes)")
        edits = self.candidates(sample, benchmark)
        edited = ExactAttributeEditor(benchmark.renderer).edit(sample, edits).cpu()
        probs = self.target.predict_proba(torch.cat([sample.image[None], edited]))[:, sample.label].float().cpu()
        return edits, probs

    def label(self, sample: ErrorSample, benchmark: NemoBenchmark) -> TeacherLabel | None:
        return self.label_from(sample, benchmark, *self.search(sample, benchmark))

    def label_from(
        self, sample: ErrorSample, benchmark: NemoBenchmark, edits: list[dict], probs: torch.Tensor
    ) -> TeacherLabel:
        """The label of a finished :meth:`search`: its max-CEI edit."""
        best = int(probs[1:].argmax())
        edit, p_o, p_e = edits[best], float(probs[0]), float(probs[1 + best])
        obj = (benchmark.cause or {}).get("object", "object")
        text = hypothesis_sentence(sample, edit, benchmark.vocabulary, benchmark.class_names, obj)
        return TeacherLabel(
            sample.sample_id,
            sample.label,
            sample.prediction,
            text,
            edit,
            cei_points(p_e, p_o),
            p_o,
            p_e,
            self.name,
            len(edits),
            answer=format_answer(text, edit, benchmark.vocabulary),
        )

    def label_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[TeacherLabel | None]:
        """:meth:`label` of each error (the search asks no language model, so there is nothing to batch)."""
        return [self.label(sample, benchmark) for sample in samples]


class SciTXTeacher:
    """SciTX as a teacher: its argmax-CEI hypothesis and the instruction derived from it.

    :meth:`label_batch` labels several errors with one request per stage for all of them: the reference
    captions, the hypotheses and the edits they imply (:mod:`nemo_train.scoring.batched_scoring`); each
    error's label is the one :meth:`label` gives it alone.

    Args:
        scitx: a configured :class:`~nemo_train.nemo.methods.scitx.SciTX` (any hypothesizer, deriver, editor).
    """

    def __init__(self, scitx) -> None:
        self.scitx = scitx
        self.name = f"SciTX(m={scitx.m}, {type(scitx.hypothesizer).__name__})"

    def label(self, sample: ErrorSample, benchmark: NemoBenchmark) -> TeacherLabel | None:
        return self.label_batch([sample], benchmark)[0]

    def label_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[TeacherLabel | None]:
        scitx, names = self.scitx, benchmark.class_names
        observations = scitx.observe_batch(samples, benchmark)
        hypotheses = hypothesize_many(scitx.hypothesizer, samples, observations, names, scitx.m)
        scorer = with_derived_edits(scitx.scorer, samples, hypotheses, names)
        out: list[TeacherLabel | None] = []
        for sample, found, (trial, _) in zip(samples, hypotheses, select_many(scorer, samples, hypotheses, names)):
            if trial is None or trial.instruction is None:
                out.append(None)
                continue
            out.append(
                TeacherLabel(
                    sample.sample_id,
                    sample.label,
                    sample.prediction,
                    trial.hypothesis,
                    trial.instruction,
                    trial.cei,
                    trial.p_original,
                    trial.p_edited,
                    self.name,
                    len(found),
                    answer=format_answer(trial.hypothesis, trial.instruction, benchmark.vocabulary),
                )
            )
        return out


def view_inputs(
    view: View,
    sample: ErrorSample,
    benchmark: NemoBenchmark,
    target,
    reference_class: ReferenceClass = "either",
    evidence: ClassifierEvidence | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, str] | None:
    """``(image, second image or None, question)`` the student sees in one view of an error; ``None`` when the
    view cannot be built (no correctly classified reference of ``reference_class`` for ``change``).

    ``reference_class``: ChangeMLLM's nearest reference of the true or predicted class (``either``), of one
    of them (``true`` / ``predicted``), or the true class's ``prototype`` (the most confident correct one).
    ``evidence``: draws the ``evidence`` view's references (default: seed 0); the second image is their montage.
    """
    names = benchmark.class_names
    true_name, pred_name = names[sample.label], names[sample.prediction]
    if view == "evidence":
        found = (evidence or ClassifierEvidence()).gather(sample, benchmark, target)
        return sample.image, found.montage, found.question(sample, names, benchmark.facts)
    if view == "error":
        return sample.image, None, DISTILL_PROMPT.format(true_name=true_name, pred_name=pred_name)
    if view == "gradcam":
        reshape = target.gradcam_reshape() if hasattr(target, "gradcam_reshape") else None
        _, overlay = gradcam_overlay(target, sample.image, sample.prediction, None, reshape)
        return overlay, None, DISTILL_CAM_PROMPT.format(true_name=true_name, pred_name=pred_name)
    index = ChangeMLLM(target, reference_class=reference_class).reference(sample, benchmark)
    if index is None:
        return None
    ref_name = names[int(benchmark.reference.labels[index])]
    question = DISTILL_CHANGE_PROMPT.format(true_name=true_name, pred_name=pred_name, ref_name=ref_name)
    return sample.image, benchmark.reference.image(index), question
