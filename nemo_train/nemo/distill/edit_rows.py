"""The student with a budget of experiments: ``edits`` counterfactual tests per error, a knob of ``distill-eval``.

SciTX's experiment step: the explainer proposes hypotheses, the toolkit applies the edit each one implies and
classifies the result, and the outcome decides the answer. :class:`StudentEdits` makes the number of such tests
per error a row setting, so that a reader can see what each test buys:

* ``edits: 0`` is the student's one greedy answer (no test; its edit is applied only to *score* it);
* ``edits: e`` asks the greedy answer and ``samples`` sampled ones, keeps the *distinct* hypotheses (two answers
  whose edits change the same factor are one hypothesis; an edit to the value the image already has is none;
  greedy first, then in sampled order), tests the first
  ``e`` of them and answers the confirmed one whose edit raised ``P(true class)`` most. A test confirms its
  hypothesis when its CEI reaches ``accept_cei`` (``accept: cei``) or when the edited image is read as the true
  class (``accept: true_class``, the benchmark's definition of a cause). When no test confirms and an untested
  distinct hypothesis is left, the next one is answered instead (a refuted hypothesis is a worse answer than one
  not yet refuted); else the best tested one.

A student that proposes fewer distinct hypotheses than its budget leaves tests unspent: its sampled answers mostly
repeat its greedy one. With ``fill: evidence`` the remaining tests go to the error's other unusual traits in the
order the evidence in the student's prompt ranks them (a rule, named in the row), each as a true sentence with the
edit back to the trait's typical value. With no student at all (``backend=None``) the evidence's order alone is
tested: the trivial row beside the budget rows (:class:`~nemo_train.nemo.distill.evidence_rule.EvidenceRule` with
``edits``), which shows what the tests buy without any explainer.

Each record keeps the CEI of every tested edit (``candidate_cei``), so the row's mean edits per error is what it
spent (fewer than ``e`` where the student proposed fewer distinct hypotheses). The exhaustive teacher's count is
its candidate edits (:class:`~nemo_train.nemo.distill.rows.ExhaustiveSearchExplainer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from jsonargparse.typing import NonNegativeInt

from nemo_train.backends.base import ChatBackend
from nemo_train.backends.messages import user_message
from nemo_train.errors import UserInputError
from nemo_train.nemo.distill.evidence import ClassifierEvidence, Evidence, EvidenceView
from nemo_train.nemo.distill.rows import DistillContext, DistillMethod, EvidenceQuestions, StudentView
from nemo_train.nemo.methods.base import Explanation, Method, ask_causes_batch
from nemo_train.nemo.methods.trivial import blame_sentence, off_typical
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.interventions import CounterfactualScorer, Trial
from nemo_train.scoring.structured import DISTILL_PROMPT

#: What confirms a tested hypothesis (see :class:`StudentEdits`).
#: Who reads the evidence references: the classifier under explanation, or a training-zoo member (a control).
EvidenceReader = Literal["target", "training_member"]
Acceptance = Literal["cei", "true_class"]
#: When two proposed edits are one hypothesis: when they change the same factor, or only when they are equal.
Distinctness = Literal["factor", "edit"]
#: Where the tests the student's own hypotheses leave unspent go: nowhere, or the evidence's ranking of the traits.
Fill = Literal["none", "evidence"]
#: What is tested and answered: the student's sentences as written, or the factor each blames restated as a true
#: sentence with the edit back to its typical value (the student picks the factors, a rule writes the sentence).
Hypotheses = Literal["as_written", "restated"]


class ErrorQuestions:
    """The ``error`` view's conversations: the error image with the distillation question."""

    def __init__(self, benchmark: NemoBenchmark) -> None:
        self.benchmark = benchmark

    def conversations(self, samples: Sequence[ErrorSample]) -> list[list]:
        names = self.benchmark.class_names
        return [
            [user_message(DISTILL_PROMPT.format(true_name=names[s.label], pred_name=names[s.prediction]), [s.image])]
            for s in samples
        ]


def distinct_hypotheses(
    scorer: CounterfactualScorer,
    sample: ErrorSample,
    answers: Sequence[str],
    class_names: Sequence[str],
    distinct: Distinctness = "factor",
) -> list[str]:
    """The answers whose edit changes a factor no earlier answer's edit changes (``distinct: edit``: whose edit no
    earlier answer's edit equals, so another value of a factor is another hypothesis), in order. Answers with no
    derivable edit are dropped (there is nothing to test or to score), and so are attribute edits that set the value
    the image already has (known for generated data): such an edit leaves the image as it is and tests nothing."""
    if not answers:
        return []
    seen, out = set(), []
    for answer, instruction in zip(answers, scorer.deriver.derive(sample, list(answers), class_names)):
        if instruction is None or _leaves_unchanged(sample, instruction):
            continue
        # one factor is one hypothesis (a restoring edit's value comes from the sentence or its Edit: line)
        by_factor = distinct == "factor" and isinstance(instruction, dict)
        key = instruction.get("attribute") if by_factor else repr(instruction)
        if key not in seen:
            seen.add(key)
            out.append(answer)
    return out


def _leaves_unchanged(sample: ErrorSample, instruction: Any) -> bool:
    """Whether an attribute edit sets the value the image already has (``False`` when either is unknown)."""
    if not isinstance(instruction, dict) or not sample.attrs or "value" not in instruction:
        return False
    attribute = instruction.get("attribute")
    return attribute in sample.attrs and sample.attrs[attribute] == instruction["value"]


def evidence_order(sample: ErrorSample, evidence: Evidence, benchmark: NemoBenchmark) -> list[str]:
    """A true sentence blaming each unusual trait of the error, strongest evidence first (the order of the tallies in
    the student's question; traits with equal tallies in the order shown), then the unusual traits no reference
    shares."""
    tallies = evidence.tallies(sample.label)
    ranked = sorted(tallies, key=lambda name: evidence.strength(tallies[name]), reverse=True)
    ranked += [name for name in off_typical(sample, benchmark) if name not in tallies]
    return [blame_sentence(sample, benchmark, name) for name in ranked]


class BudgetExplainer:
    """The student with ``edits`` tests per error (see the module docstring); many errors in one request."""

    def __init__(
        self,
        backend: ChatBackend | None,
        questions,
        scorer: CounterfactualScorer,
        edits: int,
        samples: int,
        temperature: float,
        accept_cei: float,
        name: str,
        seed: int = 0,
        accept: Acceptance = "cei",
        target=None,
        distinct: Distinctness = "factor",
        fill: Fill = "none",
        hypotheses: Hypotheses = "as_written",
    ) -> None:
        if accept == "true_class" and target is None:
            raise ValueError("accept='true_class' needs the classifier (target)")
        if backend is None and edits and fill != "evidence":
            raise ValueError("with no student (backend None) the hypotheses to test come from fill='evidence' alone")
        if fill == "evidence" and not hasattr(questions, "gather"):
            raise ValueError("fill='evidence' needs the evidence view (its questions gather the evidence)")
        self.fill, self.hypotheses = fill, hypotheses
        self.backend, self.questions, self.scorer, self.name = backend, questions, scorer, name
        self.accept, self.target, self.distinct = accept, target, distinct
        self.edits, self.samples, self.temperature, self.accept_cei, self.seed = (
            edits, samples, temperature, accept_cei, seed,
        )  # fmt: skip

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        if self.fill == "evidence" and self.edits:
            conversations, found = self.questions.gather(samples)
            fills = [evidence_order(s, e, benchmark) for s, e in zip(samples, found)]
        else:
            conversations, fills = self.questions.conversations(samples), [[] for _ in samples]
        sampled = [[] for _ in samples]  # no sampled answers (none asked, or no explainer)
        if self.backend is None:  # no explainer: the evidence's order alone
            greedy = sampled
        else:
            greedy = ask_causes_batch(self.backend, conversations)
        if self.hypotheses == "restated":
            greedy = [self._restated(s, g, benchmark) for s, g in zip(samples, greedy)]
        if self.edits == 0:
            return [Explanation(found[0] if found else "", found) for found in greedy]
        if self.backend is not None and self.samples:
            sampled = ask_causes_batch(
                self.backend, conversations, n=self.samples, temperature=self.temperature, seed=self.seed
            )
        if self.hypotheses == "restated":
            sampled = [self._restated(s, a, benchmark) for s, a in zip(samples, sampled)]
        names = benchmark.class_names
        return [self._choose(s, g + a + f, names) for s, g, a, f in zip(samples, greedy, sampled, fills)]

    def _restated(self, sample: ErrorSample, answers: list[str], benchmark: NemoBenchmark) -> list[str]:
        """Each answer's blamed factor as a true sentence with the edit back to its typical value (answers with no
        derivable attribute edit are dropped)."""
        edits = self.scorer.deriver.derive(sample, list(answers), benchmark.class_names) if answers else []
        return [
            blame_sentence(sample, benchmark, e["attribute"])
            for e in edits
            if isinstance(e, dict) and e.get("attribute")
        ]

    def _choose(self, sample: ErrorSample, answers: list[str], names: Sequence[str]) -> Explanation:
        hypotheses = distinct_hypotheses(self.scorer, sample, answers, names, self.distinct)
        tested = hypotheses[: self.edits]
        trials: list[Trial] = self.scorer.score(sample, tested, names) if tested else []
        if not trials:
            return Explanation(answers[0] if answers else "", hypotheses)
        accepted = self._accepted(sample, trials)
        best = max(accepted or trials, key=lambda t: t.cei)  # ties: the earlier hypothesis
        if not accepted and len(hypotheses) > len(tested):
            return Explanation(hypotheses[len(tested)], hypotheses, trials)  # scored like any untested answer
        return Explanation(best.hypothesis, hypotheses, trials, best)

    def _accepted(self, sample: ErrorSample, trials: list[Trial]) -> list[Trial]:
        """The tests that confirm their hypothesis: CEI at least ``accept_cei``, or (``true_class``) the edited image
        read as the true class, as the benchmark establishes a cause."""
        if self.accept == "cei":
            return [t for t in trials if t.cei >= self.accept_cei]
        edited = [t for t in trials if t.edited_image is not None]
        if not edited:
            return []
        with torch.no_grad():
            read = self.target.predict(torch.stack([t.edited_image for t in edited]).to(sample.image.device)).tolist()
        return [t for t, p in zip(edited, read) if int(p) == sample.label]


class StudentEdits(DistillMethod):
    """The student with a budget of ``edits`` counterfactual tests per error (``0``: its greedy answer).

    Args:
        edits: edits tested per error (SciTX's experiments); 0 tests none.
        view: what the student is asked: ``evidence`` (the error beside the classifier's readings of references
            that share one unusual trait of it each) or ``error`` (the error image alone).
        samples: sampled answers per error besides the greedy one, from which the distinct hypotheses come (0: the
            greedy answer is the student's only hypothesis; with ``fill: evidence`` the evidence's order follows it).
        temperature: their sampling temperature.
        accept_cei: with ``accept: cei``, a tested edit below this CEI (percentage points) counts as refuted.
        accept: what confirms a tested hypothesis: ``cei`` (its CEI reaches ``accept_cei``) or ``true_class`` (the
            edited image is read as the true class: how the benchmark establishes a cause; a weak classifier's true
            cause can earn little CEI).
        evidence: the evidence view's references and question (:class:`~nemo_train.nemo.distill.evidence.EvidenceView`;
            the one the student's teacher pairs were drawn with).
        evidence_reader: who reads the references: the classifier under explanation (``target``) or, as a
            classifier-blind control, a member of the training zoo (``training_member``: the one at the run's seed,
            the same for every target), so the student is shown evidence about a classifier that made no such error.
        distinct: which proposed edits are different hypotheses: those changing different factors (``factor``), or
            any two different edits (``edit``: the student's other values of a factor are tested too, and the one
            raising ``P(true class)`` most is kept).
        fill: where the tests the student's own distinct hypotheses leave unspent go: ``none`` (unspent), or
            ``evidence`` (the error's other unusual traits in the order the evidence ranks them; a rule, needs
            ``view: evidence``).
        hypotheses: what is tested and answered: the student's sentences ``as_written``, or each one's blamed factor
            ``restated`` as a true sentence with the edit back to the factor's typical value (a rule writes it: the
            student's choice of factors is measured apart from the values it writes; generated data only).
    """

    def __init__(
        self,
        edits: NonNegativeInt = 0,
        view: StudentView = "evidence",
        samples: NonNegativeInt = 8,
        temperature: float = 1.0,
        accept_cei: float = 20.0,
        accept: Acceptance = "cei",
        evidence: EvidenceView | None = None,
        evidence_reader: EvidenceReader = "target",
        distinct: Distinctness = "factor",
        fill: Fill = "none",
        hypotheses: Hypotheses = "as_written",
    ) -> None:
        if fill != "none" and view != "evidence":
            raise UserInputError(
                f"StudentEdits fill: {fill} needs view: evidence (the ranking comes from the evidence)"
            )
        self.edits, self.view, self.samples, self.temperature, self.accept_cei = (
            edits, view, samples, temperature, accept_cei,
        )  # fmt: skip
        self.accept, self.evidence, self.evidence_reader = accept, evidence or EvidenceView(), evidence_reader
        self.distinct, self.fill, self.hypotheses = distinct, fill, hypotheses

    @property
    def name(self) -> str:
        """The row's name in the tables: ``Student (2 edits, evidence)``."""
        view = f"evidence {self.evidence.label}".strip()
        suffix = (f", {view}" if self.view == "evidence" else "") + (
            ", true-class test" if self.accept != "cei" else ""
        )
        if self.evidence_reader != "target":
            suffix += ", another classifier's evidence"
        if self.distinct != "factor":
            suffix += ", distinct edits"
        if not self.samples and self.edits:
            suffix += ", its greedy answer alone"
        if self.hypotheses != "as_written":
            suffix += ", factors restated"
        if self.fill != "none" and self.edits:
            suffix += ", then the evidence's order"
        return f"Student ({self.edits} edit{'' if self.edits == 1 else 's'}{suffix})"

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        if self.view == "evidence":
            reader = ctx.target if self.evidence_reader == "target" else _training_member(ctx)
            questions = EvidenceQuestions(reader, ctx.benchmark, ClassifierEvidence(view=self.evidence))
        else:
            questions = ErrorQuestions(ctx.benchmark)
        method = BudgetExplainer(
            ctx.student, questions, ctx.structured, self.edits, self.samples, self.temperature, self.accept_cei,
            self.name, seed=ctx.seed, accept=self.accept, target=ctx.target, distinct=self.distinct, fill=self.fill,
            hypotheses=self.hypotheses,
        )  # fmt: skip
        return method, ctx.structured

    def settings(self) -> dict[str, Any]:
        found: dict[str, Any] = {"class": type(self).__name__, "edits": self.edits, "view": self.view}
        if self.edits:
            found.update(samples=self.samples, temperature=self.temperature, accept_cei=self.accept_cei)
        found |= {"accept": self.accept} if self.accept != "cei" else {}
        found |= {"evidence_reader": self.evidence_reader} if self.evidence_reader != "target" else {}
        found |= {"distinct": self.distinct} if self.distinct != "factor" else {}
        found |= {"fill": self.fill} if self.fill != "none" and self.edits else {}
        found |= {"hypotheses": self.hypotheses} if self.hypotheses != "as_written" else {}
        return found | ({"evidence": self.evidence.settings()} if self.evidence.settings() else {})


def _training_member(ctx: DistillContext):
    """The classifier-blind control's reader: the training-zoo member at the run's seed."""
    if not ctx.training_zoo:
        raise UserInputError("evidence_reader: training_member needs distill-eval over a held-out zoo (zoo: <folder>)")
    member = ctx.training_zoo[ctx.seed % len(ctx.training_zoo)]
    return member.spec.build().to(next(ctx.target.parameters(), torch.empty(0)).device)
