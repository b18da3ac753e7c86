"""What each family of chat endpoints accepts, so that a request is shaped by the model it goes to.

The rules below follow the providers' own documentation (read when this module was written):

* OpenAI reasoning models (``gpt-5*``, ``o1`` / ``o3`` / ``o4*``): the token budget goes in
  ``max_completion_tokens`` (``max_tokens`` is refused: "Unsupported parameter: 'max_tokens' is not supported
  with this model. Use 'max_completion_tokens' instead."), ``temperature`` takes only its default of 1, and
  the hidden reasoning is paid out of ``max_completion_tokens``: a small budget ends in empty content with
  ``finish_reason: "length"``; ``reasoning_effort`` sets how much the model reasons.
  https://platform.openai.com/docs/guides/reasoning ,
  https://community.openai.com/t/inconsistent-token-limits-with-o3-mini-2025-01-31-model-empty-response-despite-supposed-large-context/1134663/2 ,
  https://github.com/openai/openai-python/issues/2046
* OpenAI structured outputs: ``response_format={"type": "json_schema", "json_schema": {"name", "schema",
  "strict"}}``; ``{"type": "json_object"}`` needs the word "JSON" somewhere in the messages.
  https://platform.openai.com/docs/guides/structured-outputs
* Anthropic's OpenAI-compatible endpoint (``claude-*``): ``n`` must be exactly 1; ``temperature`` between 0
  and 1; ``response_format``, ``seed`` and ``reasoning_effort`` are ignored; ``max_tokens`` and
  ``max_completion_tokens`` both work. https://docs.anthropic.com/en/api/openai-sdk
* Gemini's OpenAI-compatible endpoint (``gemini-*``): ``reasoning_effort`` low / medium / high stands for
  thinking budgets of about 1K / 8K / 24K tokens, and thinking is paid out of the output budget; Gemini 3
  cannot switch thinking off (no ``"none"``); ``response_format`` with a JSON schema is supported.
  https://ai.google.dev/gemini-api/docs/openai , https://ai.google.dev/gemini-api/docs/thinking
* vLLM (any other model, e.g. a hub id): ``response_format`` with a JSON schema, or
  ``structured_outputs={"json": schema}``; the older ``guided_json`` fields were removed in v0.12.
  https://docs.vllm.ai/en/latest/features/structured_outputs/
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

ModelFamily = Literal["auto", "openai_reasoning", "openai", "anthropic", "gemini", "vllm"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]

#: A JSON schema that asks only for "some JSON object" (JSON mode where the endpoint has one).
ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class RequestRules:
    """What one family of endpoints accepts."""

    #: the field holding the reply budget
    tokens_field: Literal["max_tokens", "max_completion_tokens"]
    #: the temperatures it accepts (``None``: only its default, so the field is never sent)
    temperature: tuple[float, float] | None
    #: whether one request may ask for ``n > 1`` replies
    native_n: bool
    #: whether hidden reasoning is paid out of the reply budget
    thinks: bool
    #: whether it takes ``reasoning_effort``
    effort: bool
    #: whether it takes ``seed``
    seed: bool
    #: whether it constrains replies to a JSON schema (``response_format`` ``json_schema``)
    json_schema: bool
    #: whether it has a JSON mode (``response_format`` ``json_object``)
    json_object: bool


RULES: dict[str, RequestRules] = {
    "openai_reasoning": RequestRules("max_completion_tokens", None, True, True, True, True, True, True),
    "openai": RequestRules("max_completion_tokens", (0.0, 2.0), True, False, False, True, True, True),
    "anthropic": RequestRules("max_tokens", (0.0, 1.0), False, False, False, False, False, False),
    "gemini": RequestRules("max_tokens", (0.0, 2.0), False, True, True, False, True, False),
    "vllm": RequestRules("max_tokens", (0.0, math.inf), True, False, False, True, True, True),
}

_REASONING = re.compile(r"^(gpt-5|o[1-9])([.-]|$)")


def family_of(model: str) -> str:
    """The family of ``model`` by its name: a hub id (``owner/name``) or an unknown name is served by vLLM."""
    name = model.strip().lower()
    if "/" in name:
        return "vllm"
    if _REASONING.match(name) and "chat" not in name:
        return "openai_reasoning"
    if name.startswith(("gpt-", "chatgpt-")):
        return "openai"
    if name.startswith("claude-"):
        return "anthropic"
    if name.startswith("gemini-"):
        return "gemini"
    return "vllm"


def is_strict(schema: Any) -> bool:
    """Whether ``schema`` meets OpenAI's strict mode: every object lists all its properties as required and
    forbids others (checked through nested objects and arrays)."""
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object":
        props = schema.get("properties") or {}
        if (
            not props
            or schema.get("additionalProperties") is not False
            or set(schema.get("required", [])) != set(props)
        ):
            return False
        return all(is_strict(p) for p in props.values())
    if schema.get("type") == "array":
        return is_strict(schema.get("items"))
    return True


def mentions_json(messages: list[dict[str, Any]]) -> bool:
    """Whether the word JSON appears in the text of ``messages`` (OpenAI's condition for JSON mode)."""
    for message in messages:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        if any("json" in str(part.get("text", "")).lower() for part in parts if isinstance(part, dict)):
            return True
    return False


def response_format(rules: RequestRules, schema: dict[str, Any], messages: list[dict[str, Any]]) -> dict | None:
    """The ``response_format`` that constrains a reply to ``schema`` on this family (``None``: none can)."""
    if schema == ANY_OBJECT or not schema.get("properties"):
        if rules.json_object and mentions_json(messages):
            return {"type": "json_object"}
        return None
    if not rules.json_schema:
        return None
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": is_strict(schema)}}


def constrains(rules: RequestRules, schema: dict[str, Any] | None) -> bool:
    """Whether this family can constrain a reply to ``schema`` at all."""
    if schema is None:
        return False
    if schema == ANY_OBJECT or not schema.get("properties"):
        return rules.json_object
    return rules.json_schema


def object_schema(**fields: str | tuple[str, ...]) -> dict[str, Any]:
    """A strict JSON schema of one object with exactly these fields, each a JSON type name or a tuple of them
    (``object_schema(reasoning="string", score="number", grounding=("number", "null"))``)."""
    properties = {name: {"type": list(kind) if isinstance(kind, tuple) else kind} for name, kind in fields.items()}
    return {"type": "object", "properties": properties, "required": list(fields), "additionalProperties": False}
