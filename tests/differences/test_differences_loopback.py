"""Summarization and two Optimization rounds against a loopback OpenAI-compatible server.

Scripted replies include malformed JSON (re-asked, or given up on and recorded), unreadable evaluator
answers and proposals outside the vocabulary, already tested or held out. A rerun on the same cache
sends no request.
"""

from __future__ import annotations

import json
import re

from loopback_openai_server import LoopbackOpenAIServer, completion
from rule_pair import AttributeEchoGenerator, rule_pair, true_sign

from nemo_train.backends import OpenAICompatibleBackend
from nemo_train.backends.base import REASK_TEXT
from nemo_train.differences.diff_model import DiffModel
from nemo_train.differences.evaluators import LLMEvaluator
from nemo_train.differences.explorers import LLMExplorer
from nemo_train.differences.generators import CMNIST_SPACE
from nemo_train.differences.methods import Optimization, OptimizationArgs, summarization
from nemo_train.differences.summarizers import LLMSummarizer

GOOD = (
    "Model B is better than Model A for digits 0, 1, 2, 3 and 4, colour other than red. "
    "Model A is better than Model B for digits 5, 6, 7, 8 and 9, colour other than blue."
)
PARTIAL = "Model B is better than Model A for digits 0, 1, 2, 3 and 4, colour other than red."
SUMMARY = "Model B is better than Model A for digits 0 and 1."
C = CMNIST_SPACE.make
INITIAL = [
    C(digit=d, color=c, angle=0)
    for d, c in [(0, "green"), (1, "red"), (5, "cyan"), (6, "blue"), (2, "pink"), (8, "grey")]
]
TEST = [C(digit=d, color="green", angle=5) for d in range(10)] + [C(digit=3, color="green", angle=0)]
EXPLORE_1 = [
    {"strategy": "exploration", "condition": {"digit": 4, "color": "yellow", "angle": 10}},
    {"strategy": "exploitation", "condition": {"digit": 12, "color": "red", "angle": 0}},  # out of range
    {"strategy": "exploration", "condition": {"digit": 3, "color": "teal", "angle": 0}},  # not a colour
    {"strategy": "exploitation", "condition": {"digit": 0, "color": "green", "angle": 0}},  # already tested
    {"strategy": "exploration", "condition": {"digit": 3, "color": "green", "angle": 0}},  # held out
    {"strategy": "exploitation", "condition": {"digit": 7, "color": "orange", "angle": -30}},
]
EXPLORE_2 = [
    {"strategy": "exploitation", "condition": {"digit": 9, "color": "magenta", "angle": 30}},
    {"strategy": "exploration", "condition": {"digit": 1, "color": "purple", "angle": -5}},
    {"strategy": "exploration", "condition": {"digit": 5, "color": "blue", "angle": 15}},
    "digit 2 in red",  # not an object
]


def text_of(request) -> str:
    content = request["body"]["messages"][-1]["content"]
    return content if isinstance(content, str) else content[0]["text"]


def responder(request):
    text = text_of(request)
    first = request["body"]["messages"][0]["content"][0]["text"]
    if text == REASK_TEXT:
        if "gather more evidence" in first:
            return completion(json.dumps({"conditions": EXPLORE_1}))
        if "From the evaluation results below" in first:
            return completion(json.dumps({"explanation": SUMMARY}))
        return completion("still no JSON, sorry")
    if "Options: [1] Model A" in text:
        explanation = text.split("Explanation: ")[-1].split("\n\nQuestion:")[0]
        digit, colour = re.search(r"condition: digit (\d), (\w+),", text).groups()
        if digit == "7":
            return completion("I would rather not say.")  # unreadable answer
        sign = true_sign(C(digit=int(digit), color=colour, angle=0))
        known = ("0, 1, 2" in explanation and int(digit) < 5) or ("5, 6, 7" in explanation and int(digit) >= 5)
        answer = {1: "[1] Model A", -1: "[2] Model B", 0: "[3] Cannot be determined"}[sign]
        return completion(answer if known else "[3] Cannot be determined")
    if "From the evaluation results below" in text:
        return completion("Here is my summary: Model B wins on small digits.")  # malformed: re-asked
    if "check an explanation" in text:
        current = text.split("- Explanation: ")[1].split("\n")[0]
        if current == GOOD:
            return completion("not JSON at all")  # stays malformed: the candidate is kept unchanged
        if current == PARTIAL:
            return completion(json.dumps({"feedback": "add digits 5-9", "explanation": GOOD}))
        return completion(json.dumps({"feedback": "name the colour", "explanation": PARTIAL}))
    if "gather more evidence" in text:
        tested = text.split("Conditions already tested: ")[1].split(".\n")[0].count(";") + 1
        if tested == len(INITIAL):
            return completion("Let me think about which conditions matter most...")  # malformed: re-asked
        return completion(json.dumps({"conditions": EXPLORE_2}))
    return completion("unexpected prompt")


def run(base_url, cache):
    backend = OpenAICompatibleBackend(base_url, "scripted", api_key_env=None, cache=cache, max_retries=0)
    evaluator, summarizer, explorer = LLMEvaluator(backend), LLMSummarizer(backend), LLMExplorer(backend)
    for part in (evaluator, summarizer, explorer):
        part.bind(CMNIST_SPACE, "digit classifiers")
    diff = DiffModel(*rule_pair(1.0), AttributeEchoGenerator(), n=4)
    summary = summarization(summarizer, diff.observe(INITIAL))
    args = OptimizationArgs(iterations=2, conditions_per_iteration=4, candidates=3, initial_conditions=len(INITIAL))
    result = Optimization(diff, summarizer, explorer, evaluator, args, held_out=TEST).run(INITIAL)
    return summary, result, backend, evaluator


def test_summarization_and_two_optimization_rounds(tmp_path):
    with LoopbackOpenAIServer(responder) as server:
        summary, result, backend, evaluator = run(server.base_url, tmp_path / "cache")
        first_requests = len(server.requests)

        assert summary == SUMMARY
        assert backend.stats.json_reasks >= 2 and backend.stats.json_failures >= 1
        assert evaluator.failures > 0  # the unreadable answers were counted (and read as 0)

        explored = [(e["iteration"], CMNIST_SPACE.parse(e["condition"]), e["strategy"]) for e in result.explored]
        round_1 = [(c.values["digit"], s) for t, c, s in explored if t == 1]
        round_2 = [(c.values["digit"], s) for t, c, s in explored if t == 2]
        assert round_1[:2] == [(4, "exploration"), (7, "exploitation")] and [s for _, s in round_1[2:]] == ["fill"] * 2
        assert round_2[:3] == [(9, "exploitation"), (1, "exploration"), (5, "exploration")] and round_2[3][1] == "fill"
        assert not {c for _, c, _ in explored} & set(TEST)
        reasons = [r["reason"] for r in result.rejected]
        assert len(reasons) == 5
        for expected in ("out of range", "not in the vocabulary", "already tested", "held out", "expected an object"):
            assert any(expected in r for r in reasons), expected

        last = [h for h in result.history if h["iteration"] == 2]
        assert {h["explanation"] for h in last if h["kept"]} == {GOOD, PARTIAL, SUMMARY}
        best = max(last, key=lambda h: (h["completeness"] + h["density"], -h["token_length"]))
        assert result.best.text == best["explanation"] == result.candidates[0].text
        # the full explanation answers the most questions; the partial one keeps more of its Completeness
        # per token (higher Density), and the objective is their sum
        by_text = {h["explanation"]: h for h in last}
        assert by_text[GOOD]["completeness"] > by_text[PARTIAL]["completeness"] > by_text[SUMMARY]["completeness"]

        bodies = [json.dumps(r["body"], sort_keys=True) for r in server.requests]
        assert len(bodies) == len(set(bodies))  # no request sent twice
        again, result_again, backend_again, _ = run(server.base_url, tmp_path / "cache")
        # the rerun is answered from the cache but for the reply that stayed malformed (not kept in the cache):
        # the check of the full explanation and its two re-asks are sent again, and it stays malformed
        again_bodies = [json.dumps(r["body"], sort_keys=True) for r in server.requests[first_requests:]]
        assert len(again_bodies) == 3 and set(again_bodies) <= set(bodies)
        assert f"- Explanation: {GOOD}" in server.requests[first_requests]["body"]["messages"][0]["content"][0]["text"]
        assert backend_again.stats.requests == 3 and result_again.best.text == result.best.text
