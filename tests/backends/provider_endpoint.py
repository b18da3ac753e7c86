"""A loopback chat endpoint that answers like the provider its model names, refusing what that provider refuses.

Built on :class:`loopback_openai_server.LoopbackOpenAIServer`. The family is read from the request's model
name, independently of ``nemo_train.backends.providers``: ``gpt-5*`` / ``o1`` / ``o3`` / ``o4*`` are OpenAI
reasoning models, other ``gpt-*`` OpenAI chat models, ``claude-*`` Anthropic's OpenAI-compatible endpoint,
``gemini-*`` Gemini's, and anything else a vLLM server. The rules it enforces, as the providers document them:

* OpenAI reasoning models: ``max_tokens`` refused (``max_completion_tokens`` only), ``temperature`` only 1,
  ``reasoning_effort`` one of minimal (gpt-5 only) / low / medium / high; hidden reasoning is paid out of
  ``max_completion_tokens``, so a small budget returns empty content with ``finish_reason: "length"``.
  (https://platform.openai.com/docs/guides/reasoning ; the error texts as quoted in
  https://github.com/openai/openai-python/issues/2046 and
  https://community.openai.com/t/inconsistent-token-limits-with-o3-mini-2025-01-31-model-empty-response-despite-supposed-large-context/1134663/2)
* every OpenAI model: ``response_format`` ``json_object`` needs "JSON" in the messages; ``json_schema`` needs a
  name of letters, digits, ``_`` or ``-`` and, when strict, objects that require every property and forbid
  others (https://platform.openai.com/docs/guides/structured-outputs).
* Anthropic (https://docs.anthropic.com/en/api/openai-sdk): ``n`` must be exactly 1, temperature 0..1 (more is
  capped), ``response_format`` / ``seed`` / ``reasoning_effort`` ignored (so replies are not constrained).
* Gemini (https://ai.google.dev/gemini-api/docs/openai): ``reasoning_effort`` none / minimal / low / medium /
  high, low / medium / high standing for about 1K / 8K / 24K thinking tokens paid out of the output budget;
  Gemini 3 cannot turn thinking off (``none`` refused); ``reasoning_effort`` and a ``thinking_config`` may not
  be sent together; ``response_format`` with a JSON schema is honoured.
* vLLM (https://docs.vllm.ai/en/latest/features/structured_outputs/): ``response_format`` ``json_schema`` or
  ``structured_outputs={"json": ...}`` constrain the reply; the ``guided_*`` fields were removed in v0.12 (a
  real server would ignore them silently, this one refuses them so that the silence cannot go unnoticed).

The reasoning-token counts are a simulation (fixed per effort), not a measurement of any model. Replies are
the test's ``answer(request)``: a string, or a dict that the endpoint returns as JSON when the request
constrains the reply (filled to the schema) and otherwise wrapped in prose, the first time cut short when
``unconstrained_json="broken_first"`` (a re-ask then gets the clean object).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from loopback_openai_server import LoopbackOpenAIServer, Reply

#: hidden reasoning tokens a request spends, per family and effort (None: the effort was not sent)
REASONING_TOKENS = {
    "openai_reasoning": {None: 2048, "minimal": 64, "low": 512, "medium": 2048, "high": 8192},
    "gemini": {None: 8192, "none": 0, "minimal": 256, "low": 1024, "medium": 8192, "high": 24576},
}
REMOVED_VLLM_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend")
_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def family(model: str) -> str:
    name = model.lower()
    if "/" in name:
        return "vllm"
    if re.match(r"^(gpt-5|o[134])([.-]|$)", name):
        return "openai_reasoning"
    if name.startswith("gpt-"):
        return "openai"
    for prefix in ("claude", "gemini"):
        if name.startswith(prefix + "-"):
            return {"claude": "anthropic", "gemini": "gemini"}[prefix]
    return "vllm"


def _text(messages: list[dict]) -> str:
    out = []
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else [{"type": "text", "text": content or ""}]:
            if part.get("type") == "text":
                out.append(part["text"])
    return "\n".join(out)


def _strict_ok(schema: dict) -> bool:
    if schema.get("type") == "object":
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False or sorted(schema.get("required", [])) != sorted(props):
            return False
        return all(_strict_ok(p) for p in props.values())
    if schema.get("type") == "array":
        return _strict_ok(schema.get("items", {}))
    return True


def fill(schema: dict, hint: Any = None) -> Any:
    """A value that satisfies ``schema`` (the subset our schemas use), taking ``hint`` where it fits."""
    kind = schema.get("type")
    if isinstance(kind, list):
        if hint is None and "null" in kind:
            return None
        kind = next(k for k in kind if k != "null")
    if "enum" in schema:
        return hint if hint in schema["enum"] else schema["enum"][0]
    if kind == "object":
        hint = hint if isinstance(hint, dict) else {}
        return {k: fill(v, hint.get(k)) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        items = hint if isinstance(hint, list) else [None]
        return [fill(schema.get("items", {}), item) for item in items]
    if kind in ("number", "integer"):
        return hint if isinstance(hint, (int, float)) and not isinstance(hint, bool) else 0
    if kind == "boolean":
        return hint if isinstance(hint, bool) else False
    return hint if isinstance(hint, str) else "a short answer"


class ProviderEndpoint:
    """A loopback endpoint enforcing the rules above; ``accepted`` / ``refused`` list the requests by outcome.

    ``answer(request_body) -> str | dict`` gives the reply (default: a short sentence). Use as a context
    manager; ``base_url`` ends in ``/v1``.
    """

    def __init__(
        self,
        answer: Callable[[dict], str | dict] | None = None,
        unconstrained_json: str = "prose",
    ) -> None:
        self.answer = answer or (lambda body: "A short answer.")
        self.unconstrained_json = unconstrained_json
        self.accepted: list[dict] = []
        self.refused: list[tuple[dict, str]] = []
        self._server = LoopbackOpenAIServer(self._respond)

    @property
    def base_url(self) -> str:
        return self._server.base_url

    def __enter__(self) -> ProviderEndpoint:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.__exit__(*exc)

    # ------------------------------------------------------------------ rules
    def violation(self, body: dict) -> str | None:
        """Why the provider would refuse ``body`` (HTTP 400), or ``None``."""
        model = str(body.get("model", ""))
        kind = family(model)
        temperature = body.get("temperature")
        effort = body.get("reasoning_effort")
        if kind == "openai_reasoning":
            if "max_tokens" in body:
                return "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
            if temperature is not None and temperature != 1:
                return f"Unsupported value: 'temperature' does not support {temperature} with this model. Only the default (1) value is supported."
            allowed = {"low", "medium", "high"} | ({"minimal"} if model.startswith("gpt-5") else set())
            if effort is not None and effort not in allowed:
                return f"Unsupported value: 'reasoning_effort' does not support {effort!r} with this model."
        if kind == "openai" and temperature is not None and not 0 <= temperature <= 2:
            return f"temperature={temperature}: expected a value between 0 and 2"
        if kind in ("openai", "openai_reasoning"):
            problem = self._response_format_violation(body)
            if problem:
                return problem
        if kind == "anthropic":
            if body.get("n", 1) != 1:
                return "n: must be exactly 1"
            if temperature is not None and temperature < 0:
                return "temperature: must be between 0 and 1"
        if kind == "gemini":
            if effort is not None and effort not in REASONING_TOKENS["gemini"]:
                return f"reasoning_effort {effort!r} is not one of none, minimal, low, medium, high"
            if effort == "none" and model.startswith("gemini-3"):
                return "thinking cannot be turned off for Gemini 3 models"
            if effort is not None and "thinking_config" in json.dumps(body.get("extra_body", body.get("google", {}))):
                return "reasoning_effort and thinking_config cannot both be set"
            if temperature is not None and not 0 <= temperature <= 2:
                return "temperature must be between 0 and 2"
        if kind == "vllm":
            removed = [name for name in REMOVED_VLLM_FIELDS if name in body]
            if removed:
                return f"{removed} were removed in vLLM 0.12; use structured_outputs"
            if body.get("response_format", {}).get("type") == "json_schema":
                spec = body["response_format"].get("json_schema") or {}
                if not isinstance(spec.get("schema"), dict):
                    return "response_format.json_schema.schema must be a JSON schema"
        return None

    def _response_format_violation(self, body: dict) -> str | None:
        fmt = body.get("response_format")
        if fmt is None:
            return None
        kind = fmt.get("type")
        if kind == "json_object" and "json" not in _text(body["messages"]).lower():
            return (
                "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
            )
        if kind == "json_schema":
            spec = fmt.get("json_schema") or {}
            if not _SCHEMA_NAME.match(str(spec.get("name", ""))):
                return "response_format.json_schema.name must match ^[a-zA-Z0-9_-]{1,64}$"
            if not isinstance(spec.get("schema"), dict):
                return "response_format.json_schema.schema is required"
            if spec.get("strict") and not _strict_ok(spec["schema"]):
                return "Invalid schema for response_format: strict mode needs additionalProperties false and every property required"
        elif kind not in ("json_object", "text"):
            return f"response_format.type {kind!r} is not supported"
        return None

    # ------------------------------------------------------------------ replies
    def _constraint(self, body: dict) -> dict | None:
        """The schema the reply is held to (``{}`` for plain JSON mode), or ``None``."""
        if family(body["model"]) == "anthropic":
            return None  # response_format is ignored there
        structured = body.get("structured_outputs") or {}
        if family(body["model"]) == "vllm" and isinstance(structured.get("json"), dict):
            return structured["json"]
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            return fmt["json_schema"]["schema"]
        if fmt.get("type") == "json_object" and family(body["model"]) != "gemini":
            return {}
        return None

    def _content(self, body: dict) -> str:
        answer = self.answer(body)
        schema = self._constraint(body)
        if schema is not None:
            if schema:
                return json.dumps(fill(schema, answer))
            return json.dumps(answer if isinstance(answer, dict) else {"answer": answer})
        if not isinstance(answer, dict):
            return answer
        text = json.dumps(answer)
        reasked = "could not be read as a json object" in _text(body["messages"][-1:]).lower()
        if self.unconstrained_json == "broken_first" and not reasked:
            return text[: len(text) // 2]
        return f"Here is my assessment.\n```json\n{text}\n```"

    def _respond(self, request: dict) -> Reply:
        body = request["body"]
        problem = self.violation(body)
        if problem:
            self.refused.append((body, problem))
            return Reply(400, {"error": {"message": problem, "type": "invalid_request_error"}})
        self.accepted.append(body)
        kind = family(body["model"])
        budget = body.get("max_completion_tokens", body.get("max_tokens"))
        thinking = REASONING_TOKENS.get(kind, {}).get(body.get("reasoning_effort"), 0)
        choices = []
        for i in range(body.get("n", 1)):
            content = self._content(body)
            cut = budget is not None and thinking + max(1, len(content) // 4) > budget
            if cut:  # about four characters a token: what is left after the reasoning, often nothing
                content = content[: max(0, budget - thinking) * 4]
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "length" if cut else "stop",
                }
            )
        usage = {"completion_tokens_details": {"reasoning_tokens": thinking}}
        return Reply(
            200,
            {
                "id": "cmpl-rules",
                "object": "chat.completion",
                "model": body["model"],
                "choices": choices,
                "usage": usage,
            },
        )
