"""How a judge panel's LLM Match is named wherever its numbers go, so that a rule's score never reads as a model's.

A language-model judge (:class:`~nemo_train.scoring.judges.LLMJudge`) is named ``llm:<model>``; every other judge
(the grounded judge's attribute parser, the keyword judge) stands in for a language model and is named by
what it is. A panel of stand-ins only reports ``rule_match`` instead of ``llm_match``; table columns and recap
rows also name the stand-ins, each marked "not a model".
"""

from __future__ import annotations

from collections.abc import Iterable

LLM_JUDGE_PREFIX = "llm:"


def stand_in_judges(judge_names: Iterable[str]) -> list[str]:
    """The judges of a panel that are not language models, by name, each marked "not a model"."""
    return [
        name if "not a model" in name else f"{name}, not a model"
        for name in dict.fromkeys(judge_names)
        if not name.startswith(LLM_JUDGE_PREFIX)
    ]


def match_key(judge_names: Iterable[str]) -> str:
    """The metric name of the panel's mean score: ``llm_match`` when a language model judges, else ``rule_match``."""
    names = list(dict.fromkeys(judge_names))
    return "rule_match" if names and len(stand_in_judges(names)) == len(names) else "llm_match"


def match_label(judge_names: Iterable[str]) -> str:
    """A column or row title for the panel's mean score: :func:`match_key`, with the stand-ins in brackets
    (``rule_match [grounded-judge (attribute parser, not a model)]``)."""
    names = list(judge_names)
    rules = stand_in_judges(names)
    return f"{match_key(names)} [{'; '.join(rules)}]" if rules else match_key(names)
