"""The Evidence rule row of ``distill-eval``: what the classifier evidence in the student's prompt tells, read by a rule.

The evidence view (:mod:`nemo_train.nemo.distill.evidence`) shows the explainer references of the error's true
class that share one unusual trait of the error each, and how the classifier under explanation read them. A
reader that takes that evidence at its word blames the trait whose reference the classifier misread. This row is
that reader written as a rule (not a model): with no edit of the error image (the references are forward passes
of the classifier, as in the student's prompt), it names

1. the unusual factor whose single-trait reference was misread; when several were,
2. those read as the error's own predicted class first; then
3. a pick drawn with the command's seed and the error's id among what is left.

With another evidence view (:class:`~nemo_train.nemo.distill.evidence.EvidenceView`: several exemplars, the
leave-one-trait-out references) it reads the tallies the named question shows: the trait whose references
without it were read right most often (the benchmark's test of a cause), then whose references with it alone were
misread most often; ties drawn as in 3.

When no single-trait reference was misread the evidence points nowhere and the pick is drawn among all of the
image's unusual factors (as Odd-one-out does). The sentence states the image's own value of the factor and the
edit back to its typical value, so every claim in it is true (:func:`~nemo_train.nemo.methods.trivial.blame_sentence`).
Its score is the ceiling of what the evidence alone can tell an explainer at 0 edits: the row a student reading
that evidence is to be compared with.

With ``edits: e`` the row is the trivial row beside the student's budget rows: the error's unusual traits in the
order the evidence ranks them (ties in the order the question shows them), the first ``e`` tested exactly as the
student's hypotheses are (:class:`~nemo_train.nemo.distill.edit_rows.BudgetExplainer` with no student). What it
scores is what the tests buy with no explainer at all; a student's budget row is worth what it scores above it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from jsonargparse.typing import NonNegativeInt

from nemo_train.errors import UserInputError
from nemo_train.nemo.distill.edit_rows import Acceptance, BudgetExplainer
from nemo_train.nemo.distill.evidence import ClassifierEvidence, Evidence, EvidenceView, check_evidence_benchmark
from nemo_train.nemo.distill.rows import DistillContext, DistillMethod, EvidenceQuestions
from nemo_train.nemo.methods.base import Explanation, Method
from nemo_train.nemo.methods.trivial import blame_sentence, off_typical
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.interventions import CounterfactualScorer

__all__ = ["EvidenceRule", "EvidenceRuleExplainer", "evidence_pick"]


def evidence_pick(evidence: Evidence, sample: ErrorSample, unusual: Sequence[str], seed: int) -> str | None:
    """The factor the evidence blames (see the module docstring): a misread single-trait reference's factor,
    those read as ``sample``'s predicted class first, ties drawn with ``seed`` and the error's id; among
    ``unusual`` when no single-trait reference was misread; ``None`` when there is nothing to pick from."""
    if evidence.view != EvidenceView():
        return _tally_pick(evidence, sample, unusual, seed)
    misread = [
        (factor, predicted)
        for factor, predicted in zip(evidence.shared, evidence.predictions)
        if factor is not None and predicted != sample.label
    ]
    same = [factor for factor, predicted in misread if predicted == sample.prediction]
    pool = same or [factor for factor, _ in misread] or list(unusual)
    if not pool:
        return None
    return random.Random(f"{seed}:{sample.sample_id}").choice(sorted(set(pool), key=pool.index))


def _tally_pick(evidence: Evidence, sample: ErrorSample, unusual: Sequence[str], seed: int) -> str | None:
    """The trait with the most ``restored`` references read right, then the most ``alone`` ones misread."""
    keys = {name: evidence.strength(counts) for name, counts in evidence.tallies(sample.label).items()}
    best = max(keys.values(), default=None)
    pool = [name for name, key in keys.items() if key == best] if best and any(best) else list(unusual)
    if not pool:
        return None
    return random.Random(f"{seed}:{sample.sample_id}").choice(pool)


def rule_name(view: EvidenceView, tests: str = "") -> str:
    """The row's name in the tables: ``Evidence rule (not a model)``, with what it tests and the view it reads."""
    told = ", ".join(part for part in (tests, view.label) if part)
    return f"Evidence rule (not a model; {told})" if told else "Evidence rule (not a model)"


class EvidenceRuleExplainer:
    """Blames the factor the classifier evidence points at (:func:`evidence_pick`); a rule, not a model.

    Args:
        target: the classifier under explanation (it reads the references).
        evidence: draws the references (the student's evidence view draws the same ones for the same seed).
        seed: the seed of tie-breaking picks.
    """

    name = "Evidence rule (not a model)"

    def __init__(self, target, evidence: ClassifierEvidence | None = None, seed: int = 0) -> None:
        self.target, self.evidence, self.seed = target, evidence or ClassifierEvidence(), seed
        self.name = rule_name(self.evidence.view)  # rows reading other views are told apart in the tables

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        check_evidence_benchmark(benchmark)
        found = self.evidence.gather_many(samples, benchmark, self.target)
        out = []
        for sample, evidence in zip(samples, found):
            factor = evidence_pick(evidence, sample, off_typical(sample, benchmark), self.seed)
            if factor is None:  # nothing unusual: the first factor that is not a distractor
                factor = next(f.name for f in benchmark.facts.factors if not f.distractor)
            text = blame_sentence(sample, benchmark, factor)
            out.append(Explanation(text, [text]))
        return out


class EvidenceRule(DistillMethod):
    """The Evidence rule row: the factor whose single-trait reference the classifier misread, named in a true
    sentence (:class:`EvidenceRuleExplainer`; a rule, not a model). Asks the classifier to read the evidence
    references (forward passes), never the student; with ``edits: 0`` it applies no edit before answering.

    Args:
        evidence: the evidence view it reads (the student rows' ``evidence``; default the single-trait view).
        edits: counterfactual tests per error, spent on the unusual traits in the evidence's order (the trivial row
            beside the student's budget rows; see the module docstring).
        accept: what confirms a test, as for the student's budget rows
            (:class:`~nemo_train.nemo.distill.edit_rows.StudentEdits`).
        accept_cei: with ``accept: cei``, the CEI (percentage points) a confirming edit reaches.
    """

    uses_student: ClassVar[bool] = False

    def __init__(
        self,
        evidence: EvidenceView | None = None,
        edits: NonNegativeInt = 0,
        accept: Acceptance = "true_class",
        accept_cei: float = 20.0,
    ) -> None:
        self.evidence, self.edits, self.accept, self.accept_cei = evidence or EvidenceView(), edits, accept, accept_cei

    @property
    def name(self) -> str:
        """The row's name: ``Evidence rule (not a model; its order with 2 true-class tests)`` with edits."""
        if not self.edits:
            return rule_name(self.evidence)
        test = "true-class test" if self.accept == "true_class" else f"CEI ≥ {self.accept_cei:g} test"
        return rule_name(self.evidence, f"its order with {self.edits} {test}{'' if self.edits == 1 else 's'}")

    def build(self, ctx: DistillContext) -> tuple[Method, CounterfactualScorer]:
        if ctx.keyword is None:
            raise UserInputError("EvidenceRule needs a generated benchmark (a fact sheet and a renderer)")
        found = ClassifierEvidence(view=self.evidence)
        if not self.edits:
            return EvidenceRuleExplainer(ctx.target, found, seed=ctx.seed), ctx.keyword
        questions = EvidenceQuestions(ctx.target, ctx.benchmark, found)
        method = BudgetExplainer(
            None, questions, ctx.structured, self.edits, 0, 0.0, self.accept_cei, self.name,
            seed=ctx.seed, accept=self.accept, target=ctx.target, fill="evidence",
        )  # fmt: skip
        return method, ctx.structured

    def settings(self) -> dict[str, Any]:
        view = self.evidence.settings()
        found: dict[str, Any] = {"class": type(self).__name__, **({"evidence": view} if view else {})}
        if self.edits:
            found |= {"edits": self.edits, "accept": self.accept}
            found |= {"accept_cei": self.accept_cei} if self.accept == "cei" else {}
        return found
