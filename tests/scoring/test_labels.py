"""LLM Match is named after what judged it: a panel of rules reports ``rule_match`` and names its stand-ins."""

from __future__ import annotations

from nemo_train.backends import ScriptedBackend
from nemo_train.scoring.judges import GroundedJudge, KeywordJudge, LLMJudge
from nemo_train.scoring.labels import match_key, match_label, stand_in_judges

GROUNDED = GroundedJudge().name
KEYWORD = KeywordJudge().name
LLM = LLMJudge(ScriptedBackend([], model="gpt-5-mini")).name


def test_judge_names_say_which_are_models():
    assert LLM == "llm:gpt-5-mini"
    assert stand_in_judges([GROUNDED, LLM, KEYWORD]) == [
        "grounded-judge (attribute parser, not a model)",
        "keyword-judge (closed-vocabulary synthetic only), not a model",
    ]


def test_match_key_and_label():
    assert match_key([LLM]) == match_label([LLM]) == "llm_match"
    assert match_key([GROUNDED]) == "rule_match"
    assert match_label([GROUNDED]) == "rule_match [grounded-judge (attribute parser, not a model)]"
    assert match_key([LLM, KEYWORD]) == "llm_match"  # a model judges; the rule is still named
    assert match_label([LLM, KEYWORD]) == "llm_match [keyword-judge (closed-vocabulary synthetic only), not a model]"
    assert match_key([]) == "llm_match"
