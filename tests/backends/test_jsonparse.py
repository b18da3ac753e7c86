"""JSON extraction from model replies."""

from __future__ import annotations

import pytest

from nemo_train.backends.jsonparse import extract_json


@pytest.mark.parametrize(
    "reply, expected",
    [
        ('{"score": 1, "reasoning": "names colour"}', {"score": 1, "reasoning": "names colour"}),
        ('  \n{"a": [1, 2]}\n ', {"a": [1, 2]}),
        ('```json\n{"cause_of_error": "red digit"}\n```', {"cause_of_error": "red digit"}),
        ('Sure! Here is my answer:\n```\n{"x": "y"}\n```\nHope it helps.', {"x": "y"}),
        ('The answer is {"solution": "make the digit blue"} as requested.', {"solution": "make the digit blue"}),
        # braces inside strings do not end the object early
        ('note {"text": "a } inside", "n": {"m": 2}} tail', {"text": "a } inside", "n": {"m": 2}}),
        # trailing commas and a copied "# comment" are tolerated
        ('{"reasoning": "r", "solution": "s", # 1 sentence\n}', {"reasoning": "r", "solution": "s"}),
        ('```json\n{"a": 1,}\n```', {"a": 1}),
        # the first object wins; a stray brace before it is skipped
        ('{ not json } then {"ok": true} and {"later": 1}', {"ok": True}),
    ],
)
def test_extracts_the_object(reply, expected):
    assert extract_json(reply) == expected


@pytest.mark.parametrize("reply", [None, "", "no json at all", "[1, 2, 3]", "42", '{"unclosed": 1', "```json\n```"])
def test_returns_none_without_an_object(reply):
    assert extract_json(reply) is None
