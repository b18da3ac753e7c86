"""LLM Match is named after what judged it: a panel of rules reports ``rule_match`` and names its stand-ins."""

from __future__ import annotations

import wandb

from nemo_train.backends import ScriptedBackend
from nemo_train.nemo.judges import GroundedJudge, KeywordJudge, LLMJudge
from nemo_train.nemo.labels import match_key, match_label, stand_in_judges
from nemo_train.nemo.report import CellScore, log_wandb

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


def test_wandb_summary_table_names_the_stand_in_judge(monkeypatch, tmp_path):
    logged = []
    monkeypatch.setattr(wandb, "run", type("FakeRun", (), {"log": lambda self, data: logged.append(data)})())
    record = {
        "key": "k",
        "label": "5",
        "prediction": "3",
        "method": "KnownCause",
        "target": "model_a",
        "explanation": "The colour.",
        "instruction": {"attribute": "color", "value": 0},
        "cei": 80.0,
        "judges": {GROUNDED: 1.0},
    }
    cell = CellScore("KnownCause", "model_a", 1.0, 80.0, 1)
    log_wandb([record], [cell], "cmnist", {}, tmp_path)
    ((data,),) = [logged]
    table = data["nemo/cmnist/table"]
    assert table.columns == [
        "method",
        "target",
        "rule_match [grounded-judge (attribute parser, not a model)]",
        "grounding",
        "cei",
        "n",
        "failed",
    ]
    assert table.data[0][2] == 1.0  # the value is unchanged
    assert data["nemo/cmnist/samples"].columns[-1] == GROUNDED
