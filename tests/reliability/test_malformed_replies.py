"""Replies that are not JSON even after the re-asks: never stored as results, never replayed from the reply cache.

A judge's grade, a SciTX hypothesis or an edit that stays malformed used to give a record with ``failed=False``
(an empty explanation, or no LLM Match) that a rerun kept, and the malformed reply stayed in the reply cache, so
a retry read it again. Now the sample is recorded as failed, naming the backend and that its reply was not JSON;
the malformed replies are dropped from the cache; a rerun against a fixed endpoint retries only those samples and
ends with the table of an uninterrupted good run.
"""

from __future__ import annotations

import json
import sqlite3
from types import SimpleNamespace

import pytest
from loopback_openai_server import LoopbackOpenAIServer, completion

from nemo_train.backends import MalformedReplyError, ScriptedBackend, strict_json, user_message
from nemo_train.backends.base import BackendError
from nemo_train.cli import run_pipeline
from nemo_train.errors import UserInputError
from nemo_train.nemo.evaluation import TargetJob, global_text, record_key
from nemo_train.store import ResultStore

pytestmark = pytest.mark.fault
BAD = "BAD-REPLY: I would say the colour did it, but I cannot be sure."
GOOD = '{"cause_of_error": "The stroke colour is unusual."}'


def _asking(good: dict[str, bool]):
    """A responder: prose for a question while ``good[question]`` is false, else its JSON answer."""

    def respond(messages) -> str:
        question = messages[0]["content"][-1]["text"]
        return json.dumps({"answer": question}) if good[question] else BAD

    return respond


def test_a_reply_that_stays_malformed_leaves_nothing_in_the_cache_and_is_asked_again(tmp_path):
    good = {"q1": False, "q2": True}
    backend = ScriptedBackend(_asking(good), model="flaky", cache=tmp_path / "cache")
    first = backend.chat_json_batch([[user_message("q1")], [user_message("q2")]], max_reasks=2)
    assert first == [[None], [{"answer": "q2"}]] and backend.stats.json_failures == 1
    assert len(backend.calls) == 4  # q1, q2, then two re-asks of q1
    stored = [row[0] for row in sqlite3.connect(backend.cache.path).execute("SELECT value FROM replies")]
    assert stored == [json.dumps(['{"answer": "q2"}'])]  # the good reply only: no malformed one, no re-ask

    good["q1"] = True  # the endpoint is fixed: the rerun asks q1 again instead of replaying the bad reply
    again = ScriptedBackend(_asking(good), model="flaky", cache=tmp_path / "cache")
    assert again.chat_json_batch([[user_message("q1")], [user_message("q2")]]) == [
        [{"answer": "q1"}],
        [{"answer": "q2"}],
    ]
    assert len(again.calls) == 1 and again.stats.cache_hits == 1


def test_a_reply_repaired_by_a_reask_stays_cached_with_its_reask(tmp_path):
    script = [BAD, '{"answer": "late"}']
    backend = ScriptedBackend(script, model="slow-to-json", cache=tmp_path / "cache")
    assert backend.chat_json([user_message("q")]) == [{"answer": "late"}]
    rerun = ScriptedBackend([], model="slow-to-json", cache=tmp_path / "cache")  # no reply left to give
    assert rerun.chat_json([user_message("q")]) == [{"answer": "late"}] and rerun.stats.cache_hits == 2


def test_inside_strict_json_a_malformed_reply_raises_naming_the_backend(tmp_path):
    backend = ScriptedBackend(lambda messages: BAD, model="prose-model", cache=tmp_path / "cache")
    assert backend.chat_json([user_message("q")], max_reasks=1) == [None]  # outside: the soft contract
    with strict_json(), pytest.raises(MalformedReplyError) as info:
        backend.chat_json_batch([[user_message("q")], [user_message("r")]], max_reasks=1)
    assert isinstance(info.value, BackendError)  # every caller that records backend failures records it
    message = str(info.value)
    assert "ScriptedBackend 'prose-model'" in message and "2 replies are not JSON" in message and "BAD-REPLY" in message
    assert len(backend.cache) == 0
    assert backend.chat_json([user_message("q")], max_reasks=0) == [None]  # the block ended: soft again


def _conversation(request) -> str:
    return " ".join(
        m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])
        for m in request["body"]["messages"]
    )


# where each role's question names the error's true and predicted class
MARKERS = {
    "judge": 'labelled an image of a "{}" as "{}"',
    "hypothesizer": 'belongs to the class "{}", but the classifier predicted "{}"',
    "deriver": 'An image of a "{}" was classified as "{}"',
}


def _endpoint(broken: dict):
    """An endpoint serving the explainer (model ``tiny``) and the judge (model ``judge``): well-formed JSON, except
    prose for ``broken["role"]``'s questions about errors of ``broken["pair"]`` (true, predicted class names)."""

    def respond(request):
        text, n = _conversation(request), request["body"].get("n", 1)
        role = (
            "judge"
            if request["body"]["model"] == "judge"
            else "deriver"
            if "Pick the ONE attribute" in text
            else "hypothesizer"
        )
        if broken.get("pair") and role == broken["role"] and MARKERS[role].format(*broken["pair"]) in text:
            return completion(*[BAD] * n)
        if role == "judge":
            return completion(json.dumps({"reasoning": "names the colour", "score": 1, "grounding": 1}))
        if role == "deriver":
            return completion('{"attribute": "color", "value": "red"}')
        return completion(*[GOOD] * n)

    return respond


def _config(tmp_path, ckpt: str, base_url: str, out: str) -> str:
    backend = f"{{base_url: {base_url}, api_key_env: MALFORMED_TEST_KEY, max_retries: 0"
    path = tmp_path / f"{out}.yaml"
    path.write_text(
        f"benchmark: {{n: 4, test_styles: 1}}\ntargets: [{ckpt}]\n"
        "methods: [{class_path: SciTXMethod, init_args: {m: 2}}]\n"
        f"out_dir: {tmp_path / out}\n"
        "explainer:\n  class_path: OpenAICompatibleBackend\n"
        f"  init_args: {backend}, model: tiny}}\n"
        "judges:\n  - class_path: LLMJudge\n"
        f"    init_args: {{backend: {{class_path: OpenAICompatibleBackend, init_args: {backend}, model: judge}}}}}}\n"
    )
    return str(path)


@pytest.mark.parametrize("role", ["judge", "hypothesizer", "deriver"])
def test_nemo_eval_records_malformed_replies_as_failures_and_a_rerun_retries_only_them(
    role, checkpoint_factory, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("MALFORMED_TEST_KEY", "sk-malformed-test-000")
    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    broken: dict = {"role": role}
    with LoopbackOpenAIServer(_endpoint(broken)) as server:
        clean = run_pipeline("nemo-eval", ["--config", _config(tmp_path, ckpt, server.base_url, "clean")])
        errors = sorted(ResultStore(clean.results).records.values(), key=lambda r: r["sample_id"])
        assert clean.failed == 0 and len(errors) == 4 and all(r["llm_match"] == 1.0 for r in errors)
        broken["pair"] = (str(errors[0]["label"]), str(errors[0]["prediction"]))
        hit = {r["sample_id"] for r in errors if (str(r["label"]), str(r["prediction"])) == broken["pair"]}
        assert 0 < len(hit) < len(errors)  # some errors get malformed replies, the others well-formed ones
        capsys.readouterr()

        config = _config(tmp_path, ckpt, server.base_url, "out")
        first = run_pipeline("nemo-eval", ["--config", config])
        printed = capsys.readouterr().out
        records = list(ResultStore(first.results).records.values())
        failed = [r for r in records if r["failed"]]
        assert {r["sample_id"] for r in failed} == hit  # before: stored as finished, failed=False
        model = "judge" if role == "judge" else "tiny"
        assert all(f"OpenAICompatibleBackend '{model}'" in r["reason"] and "not JSON" in r["reason"] for r in failed)
        assert first.failed == len(hit) and first.failed_per_method == {"SciTX": len(hit)}
        assert first.cell("SciTX", "model_r").failed == len(hit)
        assert first.cell("SciTX", "model_r").n == len(errors) - len(hit)
        assert f"failed samples per method (a rerun retries them): SciTX: {len(hit)}" in printed
        header = next(line for line in printed.splitlines() if "LLM Match" in line)
        row = next(line for line in printed.splitlines() if line.startswith("│ SciTX"))
        assert header.split("┃")[-2].strip() == "failed" and row.split("│")[-2].strip() == str(len(hit))
        assert f"{len(errors) - len(hit)} samples computed, 0 resumed, {len(hit)} failed" in printed
        with sqlite3.connect(tmp_path / "out" / "llm_cache" / "llm_replies.sqlite") as cache:  # reads the WAL too
            stored = [value for (value,) in cache.execute("SELECT value FROM replies")]
        assert stored and not any("BAD-REPLY" in value for value in stored)  # none kept to be replayed on a rerun

        broken["pair"] = None  # the endpoint is fixed
        asked = len(server.requests)
        rerun = run_pipeline("nemo-eval", ["--config", config])
        assert rerun.computed == len(hit) and rerun.resumed == len(errors) - len(hit) and rerun.failed == 0
        assert len(server.requests) > asked  # the failed samples' questions were asked again, not replayed
    assert rerun.cells == clean.cells  # the table of an uninterrupted good run, and its rows
    fields = ("explanation", "candidates", "instruction", "cei", "judges", "llm_match", "grounding", "failed")
    rows = {k: {f: r.get(f) for f in fields} for k, r in ResultStore(rerun.results).records.items()}
    assert rows == {k: {f: r.get(f) for f in fields} for k, r in ResultStore(clean.results).records.items()}


def test_a_global_summary_that_is_not_json_is_a_failed_summary_not_an_empty_one(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    store.append({"key": record_key("t", "SciTX", "s0"), "failed": False, "explanation": "The stroke is red."})
    bench = SimpleNamespace(errors=[SimpleNamespace(sample_id="s0")])
    job = TargetJob("t", bench, scorer=None, panel=None, methods=[], strict_json=True)  # as nemo-eval's jobs
    said: list[str] = []
    backend = ScriptedBackend(lambda messages: BAD, model="summariser", cache=tmp_path / "cache")
    assert global_text(job, store, backend, said.append) is None
    # before: "the summary came back empty", as if the model had nothing to say
    assert said and "the summary failed" in said[0] and "ScriptedBackend 'summariser'" in said[0]
    assert "not JSON" in said[0] and len(backend.cache) == 0


def test_distill_eval_records_a_judge_grade_that_is_not_json_as_failed_and_a_rerun_retries_it(
    checkpoint_factory, tmp_path, capsys
):
    from nemo_train.nemo.distill.rows import KnownCause
    from nemo_train.nemo.distill.student_eval import distill_eval
    from nemo_train.scoring.judges import LLMJudge

    grade = json.dumps({"reasoning": "names the colour", "score": 1, "grounding": 1})
    broken = {"on": True}
    judge = LLMJudge(ScriptedBackend(lambda messages: BAD if broken["on"] else grade, model="judge"))
    student = tmp_path / "student"
    student.mkdir()  # rows without the student never load it
    ckpt = checkpoint_factory(tmp_path / "model_r" / "best.ckpt", seed=0)
    kwargs = dict(student=str(student), targets=[ckpt], methods=[KnownCause()], judges=[judge], n=4, test_styles=1)
    with pytest.raises(UserInputError, match=r"every row failed \(first: .*not JSON"):  # nothing scored: exit 2
        distill_eval(**kwargs, out_dir=str(tmp_path / "eval"))
    rows = [json.loads(line) for line in open(tmp_path / "eval" / "results.jsonl")]
    assert rows and all(r["failed"] and "not JSON" in r["reason"] for r in rows)  # before: scored with no LLM Match
    broken["on"] = False  # the judge answers again
    rerun = distill_eval(**kwargs, out_dir=str(tmp_path / "eval"))
    rows = [json.loads(line) for line in open(rerun["results"])]
    done = {r["key"]: r for r in rows if not r.get("failed")}
    assert len(done) == len({r["key"] for r in rows}) and all(r["llm_match"] == 1.0 for r in done.values())
    capsys.readouterr()
