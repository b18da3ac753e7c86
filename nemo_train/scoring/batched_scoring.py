"""Counterfactual tests of many errors' hypotheses: one derivation round, shared edits, one forward.

:class:`~nemo_train.scoring.interventions.CounterfactualScorer` tests one error at a time: it derives, edits
and classifies that error's hypotheses (one batched request, one editor call, one forward). For a chunk of
``B`` errors:

* :func:`with_derived_edits` asks for the edits of every hypothesis of every error in one round through the
  deriver's ``derive_batch`` (the language-model derivers: one ``chat_json_batch`` call, each distinct
  request once; a local model generates them in batched ``generate`` calls, an endpoint gets them
  ``concurrency`` at a time). A deriver without ``derive_batch`` (keywords, structured answers: no language
  model) is called per error.
* :func:`score_many` tests the hypotheses of all errors together where the editor has ``edit_many`` (the
  diffusers editor): their edits derived in one round (:func:`derive_many`), made in pipeline calls of the
  editor's ``batch_size`` edits, and the originals and all edits classified in one forward pass per image
  size. With any other editor it scores each error alone, so the exact editor's results on generated data
  stay bit for bit those of the per-error path.
* :func:`select_by_cei` keeps the argmax-CEI trial of one error's candidates (SciTX's validation step);
  :func:`select_many` is the same over such a chunk.

The trials are those :meth:`CounterfactualScorer.score` gives per error (diffusers edits and batched
classification up to float rounding).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from nemo_train.scoring.benchmark import ErrorSample
from nemo_train.scoring.interventions import CounterfactualScorer, Trial, trial_list


def select_by_cei(
    scorer, sample: ErrorSample, candidates: Sequence[str], class_names: Sequence[str]
) -> tuple[Trial | None, list[Trial]]:
    """Score every candidate with ``scorer`` (one batch) and return the argmax-CEI trial and all trials.

    Ties go to the earlier candidate (``argmax`` returns the first maximum), as in Alg. 1 (strict ``>``).
    """
    trials = scorer.score(sample, list(candidates), class_names)
    if not trials:
        return None, []
    best = int(torch.tensor([t.cei for t in trials]).argmax())
    return trials[best], trials


def derive_many(
    deriver, samples: Sequence[ErrorSample], hypotheses: Sequence[Sequence[str]], class_names: Sequence[str]
) -> list[list[Any]]:
    """The instructions of every error's hypotheses (``None`` where underivable), one list per error."""
    batch = getattr(deriver, "derive_batch", None)
    if batch is not None:
        return [list(found) for found in batch(list(samples), [list(h) for h in hypotheses], class_names)]
    return [deriver.derive(s, list(h), class_names) if h else [] for s, h in zip(samples, hypotheses)]


class _Derived:
    """A deriver that returns instructions derived beforehand, by error."""

    def __init__(self, instructions: dict[str, list[Any]]) -> None:
        self.instructions = instructions

    def derive(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list[Any]:
        return self.instructions[sample.sample_id]


def with_derived_edits(
    scorer: CounterfactualScorer,
    samples: Sequence[ErrorSample],
    hypotheses: Sequence[Sequence[str]],
    class_names: Sequence[str],
) -> CounterfactualScorer:
    """A copy of ``scorer`` whose :meth:`~CounterfactualScorer.score` of these errors' hypotheses uses edits
    derived for all of them in one round (it edits and classifies as ``scorer`` does)."""
    derived = derive_many(scorer.deriver, samples, hypotheses, class_names)
    fixed = copy.copy(scorer)
    fixed.deriver = _Derived({s.sample_id: d for s, d in zip(samples, derived)})
    return fixed


def score_many(
    scorer: CounterfactualScorer,
    samples: Sequence[ErrorSample],
    hypotheses: Sequence[Sequence[str]],
    class_names: Sequence[str],
) -> list[list[Trial]]:
    """:meth:`~CounterfactualScorer.score` of several errors, one list of trials per error (see the module)."""
    editor = getattr(scorer, "editor", None)
    if getattr(scorer, "mode", "image") == "prompt" or not hasattr(editor, "edit_many"):
        return [scorer.score(s, list(h), class_names) for s, h in zip(samples, hypotheses)]
    live = [j for j, found in enumerate(hypotheses) if found]
    derived = derive_many(scorer.deriver, [samples[j] for j in live], [hypotheses[j] for j in live], class_names)
    instructions = dict(zip(live, derived))
    edits = editor.edit_many([samples[j] for j in live], [instructions[j] for j in live])
    images = {j: torch.cat([samples[j].image[None], edited.cpu()]) for j, edited in zip(live, edits)}
    probs = class_probabilities(scorer.target, {j: (images[j], samples[j].label) for j in live}, scorer.batched)
    return [
        trial_list(list(hypotheses[j]), instructions[j], probs[j], images[j][1:]) if j in images else []
        for j in range(len(samples))
    ]


def class_probabilities(
    target, items: dict[int, tuple[torch.Tensor, int]], batched: bool = True
) -> dict[int, torch.Tensor]:
    """``P(y | image)`` for each item's images (``[N, 3, H, W]`` and its true class ``y``): the images of all
    items of one size in one ``predict_proba`` forward when ``batched``, else one image at a time."""
    if not batched:
        return {
            j: torch.stack([target.predict_proba(image[None])[0, y].cpu() for image in images])
            for j, (images, y) in items.items()
        }
    by_size: dict[tuple[int, ...], list[int]] = {}
    for j, (images, _) in items.items():
        by_size.setdefault(tuple(images.shape[1:]), []).append(j)
    out = {}
    for group in by_size.values():
        probs = target.predict_proba(torch.cat([items[j][0] for j in group])).cpu()
        for j, rows in zip(group, probs.split([len(items[j][0]) for j in group])):
            out[j] = rows[:, items[j][1]]
    return out


class _Scored:
    """A scorer that returns one error's trials, computed beforehand."""

    def __init__(self, trials: list[Trial]) -> None:
        self.trials = trials

    def score(self, sample: ErrorSample, hypotheses: Sequence[str], class_names: Sequence[str]) -> list[Trial]:
        return self.trials


def select_many(
    scorer: CounterfactualScorer,
    samples: Sequence[ErrorSample],
    candidates: Sequence[Sequence[str]],
    class_names: Sequence[str],
) -> list[tuple[Trial | None, list[Trial]]]:
    """:func:`select_by_cei` of each error (its argmax-CEI trial and all its
    trials), the chunk tested together by :func:`score_many`."""
    scored = score_many(scorer, samples, candidates, class_names)
    return [select_by_cei(_Scored(t), s, list(c), class_names) for s, c, t in zip(samples, candidates, scored)]
