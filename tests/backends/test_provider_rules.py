"""Request fields by model family, reply budgets of reasoning models, and schema-constrained JSON, against an
endpoint that enforces each provider's documented rules (``provider_endpoint.ProviderEndpoint``)."""

from __future__ import annotations

import pytest

from nemo_train.backends import BackendError, OpenAICompatibleBackend, ScriptedBackend, object_schema, user_message
from nemo_train.backends.providers import family_of, is_strict
from tests.backends.provider_endpoint import ProviderEndpoint

JUDGE = object_schema(reasoning="string", score="number")
PROMPT = 'Grade the explanation. Reply with JSON only: {"reasoning": "...", "score": 1}'
MODELS = [
    "gpt-5-mini-2025-08-07",
    "o4-mini",
    "gpt-4o",
    "claude-haiku-4-5",
    "gemini-3-flash-preview",
    "Qwen/Qwen2.5-VL-7B-Instruct",
]


def backend(endpoint, model, **kwargs) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(endpoint.base_url, model, api_key_env=None, max_retries=0, **kwargs)


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-5-mini-2025-08-07", "openai_reasoning"),
        ("gpt-5", "openai_reasoning"),
        ("o3-mini", "openai_reasoning"),
        ("o1", "openai_reasoning"),
        ("gpt-4o", "openai"),
        ("claude-haiku-4-5", "anthropic"),
        ("gemini-3-flash-preview", "gemini"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "vllm"),
        ("meta-llama/Llama-3.1-8B-Instruct", "vllm"),
        ("omni-model", "vllm"),
    ],
)
def test_family_of_model_names(model, family):
    assert family_of(model) == family


def test_strict_schemas():
    assert is_strict(JUDGE)
    assert not is_strict({"type": "object", "properties": {"a": {"type": "string"}}})
    assert not is_strict({"type": "object", "properties": {"a": {"type": "string"}}, "required": []})


def test_the_old_request_shape_is_refused_as_the_provider_refuses_it():
    """What the NEMO presets sent gpt-5-mini before: ``max_tokens`` and temperature 0 (HTTP 400, not retried)."""
    with ProviderEndpoint() as endpoint:
        old = backend(endpoint, "gpt-5-mini-2025-08-07", family="vllm")
        with pytest.raises(BackendError, match="max_completion_tokens"):
            old.chat([user_message("Hello")], temperature=0.0, max_tokens=256)
        field_only = backend(endpoint, "gpt-5-mini-2025-08-07", family="vllm", max_tokens_field="max_completion_tokens")
        with pytest.raises(BackendError, match="Only the default"):
            field_only.chat([user_message("Hello")], temperature=0.0, max_tokens=256)
        claude = backend(endpoint, "claude-haiku-4-5", native_n=True)
        with pytest.raises(BackendError, match="exactly 1"):
            claude.chat([user_message("Hello")], n=3, temperature=0.7)
        gemini = backend(endpoint, "gemini-3-flash-preview", reasoning_effort="none")
        with pytest.raises(BackendError, match="cannot be turned off"):
            gemini.chat([user_message("Hello")])
        vllm = backend(endpoint, "Qwen/Qwen2.5-VL-7B-Instruct", extra_body={"guided_json": JUDGE})
        with pytest.raises(BackendError, match="removed"):
            vllm.chat([user_message("Hello")])
        assert len(endpoint.refused) == 5 and not endpoint.accepted


@pytest.mark.parametrize("model", MODELS)
def test_each_family_gets_fields_its_endpoint_accepts(model):
    with ProviderEndpoint(lambda body: "A short answer.") as endpoint:
        replies = backend(endpoint, model).chat([user_message("Hello")], n=3, temperature=0.7, max_tokens=16, seed=1)
    assert replies == ["A short answer."] * 3
    assert not endpoint.refused
    bodies = endpoint.accepted
    if model.startswith("claude"):  # one reply per request, seeds 1, 2, 3 dropped (ignored there)
        assert len(bodies) == 3 and all("n" not in b and "seed" not in b for b in bodies)
    if model.startswith(("gpt-5", "o4")):
        (body,) = bodies
        assert "temperature" not in body and "max_tokens" not in body
        assert body["max_completion_tokens"] == 16 + 2048 and body["reasoning_effort"] == "low"
    if model.startswith("Qwen"):
        (body,) = bodies
        assert body["max_tokens"] == 16 and body["temperature"] == 0.7 and body["n"] == 3


def test_hidden_reasoning_gets_a_budget_and_one_larger_retry():
    """The endpoint spends 512 simulated reasoning tokens at effort "low": 32 tokens come back empty."""
    with ProviderEndpoint(lambda body: "[1] Model A") as endpoint:
        bare = backend(endpoint, "gpt-5-mini", reasoning_budget=0)
        with pytest.raises(BackendError, match="finish_reason 'length'"):
            bare.chat([user_message("Which model?")], max_tokens=32)  # 32, then 128: both spent on reasoning
        assert [b["max_completion_tokens"] for b in endpoint.accepted] == [32, 128]
        rescued = backend(endpoint, "gpt-5-mini", reasoning_budget=0)
        assert rescued.chat([user_message("Which model?")], max_tokens=200) == ["[1] Model A"]  # 200, then 800
        assert rescued.stats.budget_retries == 1
        default = backend(endpoint, "gpt-5-mini")
        assert default.chat([user_message("Which model?")], max_tokens=32) == ["[1] Model A"]
        assert default.stats.budget_retries == 0


@pytest.mark.parametrize("model", MODELS)
def test_json_is_constrained_where_the_endpoint_can_and_re_asked_elsewhere(model):
    """Four judge replies each; the endpoint cuts unconstrained JSON short the first time (a re-ask mends it).

    Measured share of replies needing a re-ask: 0 where the schema is sent (OpenAI, Gemini, vLLM), 1 on
    Claude, whose compatible endpoint ignores ``response_format``."""
    answer = {"reasoning": "It names the cause.", "score": 1}
    with ProviderEndpoint(lambda body: answer, unconstrained_json="broken_first") as endpoint:
        chat = backend(endpoint, model)
        replies = chat.chat_json_batch([[user_message(f"{PROMPT} #{i}")] for i in range(4)], schema=JUDGE)
    assert replies == [[answer]] * 4
    assert not endpoint.refused
    constrained = not model.startswith("claude")
    assert chat.stats.json_replies == 4
    assert chat.stats.reask_share == (0.0 if constrained else 1.0)
    assert chat.stats.constrained == (4 if constrained else 0)
    formats = [body.get("response_format", {}).get("type") for body in endpoint.accepted]
    assert formats == (["json_schema"] * 4 if constrained else [None] * 8)
    print(f"{model}: share of JSON replies re-asked {chat.stats.reask_share:.2f}")


def test_json_mode_only_when_the_prompt_says_json():
    """OpenAI's JSON mode needs the word JSON in the messages; without it the backend sends no format."""
    with ProviderEndpoint(lambda body: {"explanation": "A differs."}) as endpoint:
        chat = backend(endpoint, "gpt-4o")
        assert chat.chat_json([user_message("Answer as a JSON object.")]) == [{"explanation": "A differs."}]
        assert chat.chat_json([user_message("Answer with one object.")]) == [{"explanation": "A differs."}]
    assert [b.get("response_format") for b in endpoint.accepted] == [{"type": "json_object"}, None]
    assert not endpoint.refused


def test_structured_output_can_be_turned_off_and_local_backends_ignore_schemas():
    with ProviderEndpoint(lambda body: {"reasoning": "x", "score": 0}) as endpoint:
        chat = backend(endpoint, "Qwen/Qwen2.5-VL-7B-Instruct", structured_output=False)
        assert chat.chat_json([user_message(PROMPT)], schema=JUDGE) == [{"reasoning": "x", "score": 0}]
    assert "response_format" not in endpoint.accepted[0]
    scripted = ScriptedBackend(['{"reasoning": "x", "score": 1}'])
    assert scripted.chat_json([user_message(PROMPT)], schema=JUDGE) == [{"reasoning": "x", "score": 1}]
    assert scripted.stats.constrained == 0 and scripted.stats.reask_share == 0.0
