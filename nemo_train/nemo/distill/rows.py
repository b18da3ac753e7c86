"""The rows of ``distill-eval`` as configurable objects (``class_path`` / ``init_args`` in YAML).

Each builds, for one target and its held-out errors, the explanation method and the scorer its answers are
tested with: the student's structured answers by the edit they state
(:class:`~nemo_train.scoring.structured.StructuredEditDeriver`), KnownCause's sentence by the keyword deriver
(a rule-based parser, not a model). The student is the MLLM of every student row.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from jsonargparse.typing import PositiveInt

from datamodules.fact_sheets import DEFAULT_EDITABLE, DEFAULT_FACTS
from nemo_train.backends.base import ChatBackend
from nemo_train.backends.messages import user_message
from nemo_train.errors import UserInputError
from nemo_train.nemo.distill.evidence import ClassifierEvidence, Evidence, EvidenceView, check_evidence_benchmark
from nemo_train.nemo.distill.teachers import ExhaustiveAttributeTeacher
from nemo_train.nemo.distill.zoo_members import ZooClassifier
from nemo_train.nemo.methods.base import Explanation, Method, ask_causes_batch
from nemo_train.nemo.methods.cam_mllm import CamMLLM
from nemo_train.nemo.methods.change_mllm import ChangeMLLM, ReferenceClass
from nemo_train.nemo.methods.reference import KnownCauseExplainer
from nemo_train.nemo.methods.scitx import AttributeContrastHypothesizer, MLLMHypothesizer, SciTX
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.interventions import CounterfactualScorer, Trial
from nemo_train.scoring.structured import DISTILL_CAM_PROMPT, DISTILL_CHANGE_PROMPT, DISTILL_PROMPT


class ExhaustiveSearchExplainer:
    """The exhaustive teacher as an explanation method (its answer carries the max-CEI edit)."""

    name = "Teacher (exhaustive search, not a model)"

    def __init__(self, target) -> None:
        self.teacher = ExhaustiveAttributeTeacher(target)

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        """The max-CEI edit's answer; ``trials`` are all the candidate edits it tested (its edits per error)."""
        edits, probs = self.teacher.search(sample, benchmark)
        label = self.teacher.label_from(sample, benchmark, edits, probs)
        p_o = float(probs[0])
        trials = [Trial(str(edit), edit, p_o, float(p)) for edit, p in zip(edits, probs[1:])]
        return Explanation(label.answer, trials=trials)


class OnePassExplainer:
    """One greedy pass of an explainer on the error image with its question (``{true_name}``,
    ``{pred_name}`` filled in); many errors are asked in one batched request."""

    def __init__(self, backend: ChatBackend, template: str = DISTILL_PROMPT, name: str = "Student (greedy)") -> None:
        self.backend, self.template, self.name = backend, template, name

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        names = benchmark.class_names
        conversations = [
            [user_message(self.template.format(true_name=names[s.label], pred_name=names[s.prediction]), [s.image])]
            for s in samples
        ]
        return [
            Explanation(found[0] if found else "", found) for found in ask_causes_batch(self.backend, conversations)
        ]


class EvidenceQuestions:
    """The ``evidence`` view's conversations: the error beside the montage of its references (true class, one
    unusual trait of the error each) and the question with the classifier's reading of each, the classifier being
    the one under evaluation (:mod:`nemo_train.nemo.distill.evidence`)."""

    def __init__(self, target, benchmark: NemoBenchmark, evidence: ClassifierEvidence | None = None) -> None:
        check_evidence_benchmark(benchmark)
        self.target, self.benchmark, self.evidence = target, benchmark, evidence or ClassifierEvidence()

    def conversations(self, samples: Sequence[ErrorSample]) -> list[list]:
        return self.gather(samples)[0]

    def gather(self, samples: Sequence[ErrorSample]) -> tuple[list[list], list[Evidence]]:
        """The conversations and the evidence each one shows."""
        names = self.benchmark.class_names
        found = self.evidence.gather_many(samples, self.benchmark, self.target)
        facts = self.benchmark.facts
        asked = [[user_message(e.question(s, names, facts), [s.image, e.montage])] for s, e in zip(samples, found)]
        return asked, found


class EvidencePassExplainer:
    """One greedy pass of an explainer on the ``evidence`` view of each error; many errors in one request."""

    def __init__(self, backend: ChatBackend, questions: EvidenceQuestions, name: str) -> None:
        self.backend, self.questions, self.name = backend, questions, name

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        found = ask_causes_batch(self.backend, self.questions.conversations(samples))
        return [Explanation(answers[0] if answers else "", answers) for answers in found]


class EvidenceHypothesizer:
    """SciTX's hypothesis source asked the ``evidence`` view: ``m`` sampled answers per error (the retrieved
    observations are not shown; the evidence references take their place)."""

    reads_captions = False

    def __init__(self, backend: ChatBackend, questions: EvidenceQuestions, temperature: float = 0.7) -> None:
        self.backend, self.questions, self.temperature = backend, questions, temperature

    def hypothesize(self, sample, observations, class_names, m):
        return self.hypothesize_batch([sample], [observations], class_names, m)[0]

    def hypothesize_batch(self, samples, observations, class_names, m):
        temperature = self.temperature if m > 1 else 0.0
        return ask_causes_batch(
            self.backend, self.questions.conversations(samples), n=m, temperature=temperature, seed=0
        )


#: What the student is shown: the error image alone, or the error beside the classifier's evidence.
StudentView = Literal["error", "evidence"]


def view_settings(view: StudentView, evidence: EvidenceView) -> dict[str, Any]:
    """A student row's view in its stored settings: nothing for the error view, the evidence view's options
    only where they are not the default (so stored rows of before resume)."""
    if view == "error":
        return {}
    return {"view": view, **({"evidence": evidence.settings()} if evidence.settings() else {})}


@dataclass
class DistillContext:
    """What a row needs: the held-out errors, the target, the student and the two scorers."""

    benchmark: NemoBenchmark
    target: Any
    #: the student (``None`` when the run asks none: only rows with ``uses_student`` false)
    student: ChatBackend | None
    #: reads the edit a structured answer states (``... Edit: color -> red``)
    structured: CounterfactualScorer
    #: derives an edit from a free sentence by keywords (a rule-based parser, not a model); generated data only
    keyword: CounterfactualScorer | None
    #: the command's seed (a row that draws something derives its draws from it)
    seed: int = 0
    #: the training zoo's members (``distill-eval`` over a held-out zoo): what a student distilled on the training
    #: zoo saw, e.g. the source of the Class prior row's prior
    training_zoo: list[ZooClassifier] | None = None
    #: the run's extra datamodule arguments (e.g. the shifts ``test_shift``): a row that renders its own split
    #: (Class prior's mining split) follows them unless it is given its own
    data_kwargs: dict[str, Any] | None = None


class DistillMethod(ABC):
    """One row of the distilled explainer's evaluation."""

    #: whether the row asks the student (rows that do not never load it)
    uses_student: ClassVar[bool] = True

    @abstractmethod
    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        """The method and the scorer its answers are tested with."""

    def settings(self) -> dict[str, Any]:
        """What changes this row's results (stored with every record, so a changed option recomputes)."""
        return {"class": type(self).__name__, **vars(self)}


class ExhaustiveTeacher(DistillMethod):
    """The distillation teacher: every single-attribute edit rendered and classified, the max-CEI edit kept
    (not a language model)."""

    uses_student = False

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        return ExhaustiveSearchExplainer(ctx.target), ctx.structured


class StudentGreedy(DistillMethod):
    """The student's single greedy pass on the error image with its distillation question.

    Args:
        view: ``error`` (the error image alone) or ``evidence`` (beside the classifier's readings of references
            sharing one unusual trait of the error each; for a student distilled on that view).
        evidence: which references the evidence view draws and how its question reads them (the teacher's).
    """

    def __init__(self, view: StudentView = "error", evidence: EvidenceView | None = None) -> None:
        self.view, self.evidence = view, evidence or EvidenceView()

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        if self.view == "evidence":
            questions = EvidenceQuestions(ctx.target, ctx.benchmark, ClassifierEvidence(view=self.evidence))
            name = f"Student (greedy, {f'evidence {self.evidence.label}'.strip()})"
            return EvidencePassExplainer(ctx.student, questions, name), ctx.structured
        return OnePassExplainer(ctx.student), ctx.structured

    def settings(self) -> dict[str, Any]:
        return {"class": type(self).__name__, **view_settings(self.view, self.evidence)}


class StudentSciTX(DistillMethod):
    """SciTX with the student as hypothesis source: ``m`` sampled answers, the argmax-CEI one kept.

    Args:
        k: observations retrieved per error; m: sampled hypotheses per error.
        temperature: sampling temperature of the hypotheses.
        view: what the student is asked: ``error`` (the error image alone) or ``evidence`` (as :class:`StudentGreedy`).
        evidence: the evidence view's references and question (as :class:`StudentGreedy`).
    """

    def __init__(
        self,
        k: PositiveInt = 8,
        m: PositiveInt = 4,
        temperature: float = 0.7,
        view: StudentView = "error",
        evidence: EvidenceView | None = None,
    ) -> None:
        self.k, self.m, self.temperature, self.view = k, m, temperature, view
        self.evidence = evidence or EvidenceView()

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        if self.view == "evidence":
            questions = EvidenceQuestions(ctx.target, ctx.benchmark, ClassifierEvidence(view=self.evidence))
            hypothesizer = EvidenceHypothesizer(ctx.student, questions, temperature=self.temperature)
        else:
            hypothesizer = MLLMHypothesizer(ctx.student, temperature=self.temperature, template=DISTILL_PROMPT)
        method = SciTX(ctx.target, hypothesizer, ctx.structured, k=self.k, m=self.m)
        method.name = f"SciTX (student, M={self.m}{', evidence' if self.view == 'evidence' else ''})"
        return method, ctx.structured

    def settings(self) -> dict[str, Any]:
        settings = {"class": type(self).__name__, "k": self.k, "m": self.m, "temperature": self.temperature}
        return settings | view_settings(self.view, self.evidence)


class StudentCamMLLM(DistillMethod):
    """CamMLLM with the student reading the Grad-CAM overlay of the prediction."""

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        method = CamMLLM(ctx.target, ctx.student, template=DISTILL_CAM_PROMPT)
        method.name = "CamMLLM (student)"
        return method, ctx.structured


class StudentChangeMLLM(DistillMethod):
    """ChangeMLLM with the student comparing the error with a correctly classified reference.

    Args:
        reference_class: the nearest correctly classified reference of the true or the predicted class
            (``either``), or only of the ``true`` / ``predicted`` class, or the true class's ``prototype`` (the
            correctly classified reference with the largest ``P(y)``; for a student trained on that view).
    """

    def __init__(self, reference_class: ReferenceClass = "either") -> None:
        self.reference_class = reference_class

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        method = ChangeMLLM(
            ctx.target, ctx.student, template=DISTILL_CHANGE_PROMPT, reference_class=self.reference_class
        )
        method.name = "ChangeMLLM (student)"
        return method, ctx.structured


class KnownCause(DistillMethod):
    """Names the planted bias; its edit comes from the keyword deriver (rule-based, not a model)."""

    uses_student = False

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        return KnownCauseExplainer(), ctx.keyword


def student_distill_methods() -> list[DistillMethod]:
    """The rows driven by the student: its greedy pass, SciTX, CamMLLM and ChangeMLLM (any data)."""
    return [StudentGreedy(), StudentSciTX(), StudentCamMLLM(), StudentChangeMLLM()]


def default_distill_methods() -> list[DistillMethod]:
    """Every row: the teacher, the student's greedy pass, SciTX / CamMLLM / ChangeMLLM driven by the student,
    and KnownCause."""
    return [ExhaustiveTeacher(), *student_distill_methods(), KnownCause()]


class SciTXTemplate(DistillMethod):
    """SciTX with the attribute-contrast template as its hypothesis source (a rule, not a model): ``k``
    references of the true and predicted class retrieved, ``m`` template hypotheses from how the error's
    attributes differ from the true-class references', the one with the highest CEI kept; its edits per error
    are the hypotheses it tested. Generated data only (it reads the generator's attributes); its sentences are
    read by the keyword deriver, like the trivial rows'.

    Args:
        k: observations retrieved per error; m: template hypotheses tested per error.
    """

    uses_student: ClassVar[bool] = False

    def __init__(self, k: PositiveInt = 8, m: PositiveInt = 3) -> None:
        self.k, self.m = k, m

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        bench = ctx.benchmark
        if bench.vocabulary is None or ctx.keyword is None:
            raise UserInputError("SciTXTemplate needs a generated benchmark (a fact sheet and its vocabulary)")
        cause = bench.cause or {}
        hypothesizer = AttributeContrastHypothesizer(
            bench.vocabulary, cause.get("editable", DEFAULT_EDITABLE), cause.get("object", DEFAULT_FACTS.object_word)
        )
        method = SciTX(ctx.target, hypothesizer, ctx.keyword, k=self.k, m=self.m)
        method.name = f"SciTX (template, not a model; M={self.m})"
        return method, ctx.keyword
