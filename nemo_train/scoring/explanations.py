"""How the tables score an explanation of an error, in one place: the entry point for evaluations and trainers.

An explanation of one error (:class:`~nemo_train.scoring.benchmark.ErrorSample`) gets, as in every ``nemo-eval``
and ``distill-eval`` record:

* its counterfactual test (:class:`~nemo_train.scoring.interventions.CounterfactualScorer`): the edit derived
  from its text, applied, and the classifier's ``P(true class)`` before and after (``edit_cei``);
* the judge panel's grade (:class:`~nemo_train.scoring.panel.JudgePanel`; by default the grounded judge, graded
  against the error's own cause): ``judged_match`` and ``grounding``;
* its reading (:mod:`~nemo_train.scoring.text_edits`): the factors the sentence blames and whether the edit
  agrees with them (``consistent``);
* the headline scores ``cei`` and ``llm_match``: those above, or 0 and 0 for an inconsistent explanation
  (:func:`~nemo_train.scoring.text_edits.headline`).

:class:`ExplanationScorer` bundles a benchmark, a classifier's counterfactual scorer and a judge panel;
:meth:`ExplanationScorer.score` scores many explanations at once (a group of explanations of one error is
tested with one call of the editor and one forward pass). :func:`score_texts` is the same as a function, which the
evaluation loop (:func:`nemo_train.nemo.evaluation.score_explanation`) calls for every stored record.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from nemo_train.backends.base import ChatBackend, strict_json
from nemo_train.scoring.benchmark import FACT_SHEETS, ErrorSample, NemoBenchmark
from nemo_train.scoring.editors import EditorSpec, ExactEdit
from nemo_train.scoring.interventions import CounterfactualScorer, Trial
from nemo_train.scoring.judges import GroundedJudge, Judge, JudgeItem, JudgePanel
from nemo_train.scoring.text_edits import ExplanationReader, headline, reader_for

__all__ = ["ExplanationScore", "ExplanationScorer", "jsonable", "judge_panel", "score_texts"]


def jsonable(value: Any) -> Any:
    """``value`` with tensors as lists and keys as strings (an edit instruction as a record stores it)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


@dataclass
class ExplanationScore:
    """The scores of one explanation of one error, as a table counts them.

    ``cei`` and ``llm_match`` are the headline scores (0 and 0 when the sentence and its edit disagree);
    ``edit_cei`` and ``judged_match`` what the counterfactual test and the judges gave before that rule.
    ``trial`` is the counterfactual test itself (with the edited image), ``None`` for an empty explanation.
    """

    text: str
    blamed: tuple[str, ...]
    edit: Any
    consistent: bool | None
    p_original: float | None
    p_edited: float | None
    edit_cei: float
    cei: float
    judged_match: float | None
    llm_match: float | None
    grounding: float | None
    judges: dict[str, float | None] = field(default_factory=dict)
    judge_reasons: dict[str, str] = field(default_factory=dict)
    trial: Trial | None = field(default=None, repr=False)

    def record_fields(self) -> dict[str, Any]:
        """The fields of a stored result record these scores fill (``instruction`` and ``edit`` are the same)."""
        return {
            "instruction": self.edit,
            "blamed": list(self.blamed),
            "edit": self.edit,
            "consistent": self.consistent,
            "p_original": self.p_original,
            "p_edited": self.p_edited,
            "cei": self.cei,
            "edit_cei": self.edit_cei,
            "judges": self.judges,
            "judge_reasons": self.judge_reasons,
            "llm_match": self.llm_match,
            "judged_match": self.judged_match,
            "grounding": self.grounding,
        }


def judge_panel(benchmark: str, judges: Sequence[Judge] | None = None) -> JudgePanel:
    """The panel a table of ``benchmark`` (its name: ``shifts``, ``cmnist``, ...) grades with: ``judges`` (by
    default the grounded judge), each given the benchmark's criterion and, where it is graded against its sheet
    (:data:`~nemo_train.scoring.benchmark.FACT_SHEETS`), its fact sheet."""
    facts = FACT_SHEETS.get(benchmark)
    return JudgePanel([j.for_benchmark(benchmark, facts) for j in (judges or [GroundedJudge()])])


def _trials(
    scorer: CounterfactualScorer, samples: Sequence[ErrorSample], texts: Sequence[str], class_names: Sequence[str]
) -> list[Trial | None]:
    """One counterfactual test per non-empty text; the texts of one error are tested together (one edit batch,
    one forward pass: :meth:`~nemo_train.scoring.interventions.CounterfactualScorer.score`)."""
    groups: dict[int, list[int]] = {}
    for i, (sample, text) in enumerate(zip(samples, texts)):
        if text:
            groups.setdefault(id(sample), []).append(i)
    out: list[Trial | None] = [None] * len(texts)
    for members in groups.values():
        for i, trial in zip(members, scorer.score(samples[members[0]], [texts[i] for i in members], class_names)):
            out[i] = trial
    return out


def score_texts(
    texts: Sequence[str],
    samples: Sequence[ErrorSample],
    benchmark: NemoBenchmark,
    scorer: CounterfactualScorer,
    panel: JudgePanel,
    reader: ExplanationReader | None = None,
    trials: Sequence[Trial | None] | None = None,
    strict_judges: bool = True,
) -> list[ExplanationScore]:
    """Score ``texts[i]``, an explanation of ``samples[i]`` (an error may repeat: a group of explanations of it).

    ``trials[i]``, when given and not ``None``, is the counterfactual test a method already ran for that text
    (SciTX's validation keeps the trial it chose); the others are tested by ``scorer``. ``reader`` reads the
    texts of a benchmark with a fact sheet (``None``: no consistency check, ``consistent`` is ``None``). With
    ``strict_judges`` a judge's grade still malformed after its re-asks raises
    (:func:`~nemo_train.backends.base.strict_json`) instead of counting as no grade.
    """
    if len(texts) != len(samples):
        raise ValueError(f"{len(texts)} explanations for {len(samples)} errors; expected one per error")
    given = list(trials) if trials is not None else [None] * len(texts)
    names = benchmark.class_names
    todo = [i for i, trial in enumerate(given) if trial is None]
    tested = _trials(scorer, [samples[i] for i in todo], [texts[i] for i in todo], names) if todo else []
    for i, trial in zip(todo, tested):
        given[i] = trial
    items = [
        JudgeItem(
            text,
            names[s.label],
            names[s.prediction],
            attributes=benchmark.known_attributes(s),
            cause=s.cause,
        )
        for text, s in zip(texts, samples)
    ]
    with strict_json() if strict_judges else nullcontext():
        verdicts = panel.judge(items)
    out = []
    for text, sample, trial, verdict in zip(texts, samples, given, verdicts):
        edit = jsonable(trial.instruction) if trial else None
        reading = reader.read(sample, text, names, edit) if reader is not None else None
        edit_cei = trial.cei if trial else 0.0
        consistent = reading.consistent if reading is not None else None
        cei, llm_match = headline(edit_cei, verdict.mean, consistent)
        out.append(
            ExplanationScore(
                text=text,
                blamed=tuple(reading.blamed) if reading is not None else (),
                edit=edit,
                consistent=consistent,
                p_original=trial.p_original if trial else None,
                p_edited=trial.p_edited if trial else None,
                edit_cei=edit_cei,
                cei=cei,
                judged_match=verdict.mean,
                llm_match=llm_match,
                grounding=verdict.grounding,
                judges=verdict.scores,
                judge_reasons=verdict.reasons,
                trial=trial,
            )
        )
    return out


class ExplanationScorer:
    """Scores explanations of a classifier's errors on one benchmark as ``nemo-eval`` and ``distill-eval`` do.

    Args:
        benchmark: the errors' benchmark (class names, fact sheet, renderer, known cause).
        scorer: the classifier's counterfactual test (:meth:`build` makes one from an editor).
        panel: the judges (default: :func:`judge_panel` of the benchmark, the grounded judge).

    Example (a reward of a trainer; ``explanations[i]`` explains ``errors[i]``)::

        scoring = ExplanationScorer.build(benchmark, target)  # exact re-rendering, edits read from the text
        rewards = [s.cei / 100 + s.grounding for s in scoring.score(errors, explanations)]
    """

    def __init__(self, benchmark: NemoBenchmark, scorer: CounterfactualScorer, panel: JudgePanel | None = None) -> None:
        self.benchmark, self.scorer = benchmark, scorer
        self.panel = panel if panel is not None else judge_panel(benchmark.name)
        self.reader = reader_for(benchmark)

    @classmethod
    def build(
        cls,
        benchmark: NemoBenchmark,
        target,
        editor: EditorSpec | None = None,
        judges: Sequence[Judge] | None = None,
        backend: ChatBackend | None = None,
        seed: int = 0,
        batched: bool = True,
    ) -> ExplanationScorer:
        """The scoring of ``target``'s (the classifier's) errors: ``editor`` (default :class:`ExactEdit`, which
        without ``backend`` derives edits from the text offline) builds the counterfactual test, ``judges`` (default
        the grounded judge) the panel; ``backend`` is the language model an editor may ask for its edits."""
        scorer = (editor or ExactEdit()).build_scorer(benchmark, target, backend, seed, batched)
        return cls(benchmark, scorer, judge_panel(benchmark.name, judges))

    def score(
        self, samples: Sequence[ErrorSample], texts: Sequence[str], strict_judges: bool = True
    ) -> list[ExplanationScore]:
        """The scores of ``texts[i]`` as an explanation of ``samples[i]`` (see :func:`score_texts`)."""
        return score_texts(
            texts, samples, self.benchmark, self.scorer, self.panel, self.reader, strict_judges=strict_judges
        )
