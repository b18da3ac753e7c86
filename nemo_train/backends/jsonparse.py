"""Pull one JSON object out of a language model's reply (bare, fenced, or wrapped in prose)."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_LINE_COMMENT = re.compile(r"\s#[^\n\"]*$", re.MULTILINE)


def _loads_object(text: str) -> dict[str, Any] | None:
    for candidate in (text, _TRAILING_COMMA.sub(r"\1", _LINE_COMMENT.sub("", text))):
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _first_embedded_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        start = match.start()
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            # a balanced {...} that is not strict JSON: try the lenient cleanup on it
            end = _balanced_end(text, start)
            value = _loads_object(text[start:end]) if end else None
        if isinstance(value, dict):
            return value
    return None


def _balanced_end(text: str, start: int) -> int | None:
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def extract_json(text: str | None) -> dict[str, Any] | None:
    """The first JSON object in ``text``, or ``None`` if there is none.

    Tried in order: the whole reply; each fenced code block (```json ... ```); the first balanced
    ``{...}`` in the surrounding prose. Trailing commas and ``# comments`` at line ends (which models
    copy from prompt templates) are tolerated. Only objects count: a bare list or number is ``None``.
    """
    if not text:
        return None
    text = text.strip()
    found = _loads_object(text)
    if found is not None:
        return found
    for block in _FENCE.findall(text):
        found = _loads_object(block.strip()) or _first_embedded_object(block)
        if found is not None:
            return found
    return _first_embedded_object(text)
