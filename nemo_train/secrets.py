"""Keep secrets (API keys, tokens) out of logs, saved configs, results, caches and checkpoints.

One redaction pass, :func:`scrub_secrets`, is applied to everything written: a value is replaced by
``<redacted>`` when

* its key looks secret (``api_key``, ``token``, ``secret``, ``password``, ``authorization``, ``bearer``,
  ``credential``, ``cookie``, ...), except keys that only *name* an environment variable (``api_key_env``) or
  count tokens (``max_tokens``, ``max_new_tokens``, ``tokenizer``);
* it contains the value of a secret-looking environment variable (``OPENAI_API_KEY``, ``HF_TOKEN``, ...);
* it contains a string shaped like a key (:data:`KEY_SHAPES`: ``sk-...``, ``hf_...``, GitHub / Slack / AWS /
  Google key prefixes, JSON web tokens, ``Bearer <token>``, and long random strings that mix upper case,
  lower case and digits). Hex digests (lower-case hex) and model ids (with ``/ - .`` separators) are not
  key-shaped.
"""

from __future__ import annotations

import os
import re
from typing import Any

SECRET_KEY_PATTERN = re.compile(
    r"(api[_-]?key|token|secret|password|passwd|authorization|bearer|credential|cookie|private[_-]?key)",
    re.IGNORECASE,
)
#: Keys that match :data:`SECRET_KEY_PATTERN` but hold no secret: token counts and tokenizer settings.
NOT_SECRET_KEY = re.compile(r"tokens|tokeni[sz]|token_(length|ratio|count|budget|limit)|_env$", re.IGNORECASE)
REDACTED = "<redacted>"

#: Strings shaped like credentials, wherever they appear in a text.
KEY_SHAPES = re.compile(
    r"""
    \bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}         # OpenAI / Anthropic style
    | \bhf_[A-Za-z0-9]{20,}                          # Hugging Face
    | \b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}     # GitHub
    | \bgithub_pat_[A-Za-z0-9_]{20,}
    | \bxox[abprs]-[A-Za-z0-9\-]{10,}                # Slack
    | \bAKIA[0-9A-Z]{16}\b                           # AWS access key id
    | \bAIza[0-9A-Za-z_\-]{35}                       # Google
    | \beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}   # JSON web token
    | \b(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}          # an Authorization header's value
    | \b(?=[A-Za-z0-9]*[a-z])(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]{32,}\b   # long random
    """,
    re.VERBOSE,
)


def secret_env_values(min_length: int = 8) -> set[str]:
    """Values of environment variables whose names look secret (``*_API_KEY``, ``*_TOKEN``, ...)."""
    return {
        v
        for k, v in os.environ.items()
        if SECRET_KEY_PATTERN.search(k) and not NOT_SECRET_KEY.search(k) and len(v) >= min_length
    }


def is_secret_key(key: Any) -> bool:
    """True when a setting named ``key`` holds a secret (``api_key``, ``hf_token``; not ``max_tokens``)."""
    name = str(key)
    return bool(SECRET_KEY_PATTERN.search(name)) and not NOT_SECRET_KEY.search(name)


def secret_values_in(obj: Any) -> set[str]:
    """The strings under secret-looking keys anywhere in ``obj`` (nested dicts and lists), e.g. a key given inline
    in a request's ``extra_body``."""
    found: set[str] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            if is_secret_key(key):
                found |= {v for v in _strings(value) if len(v) >= 4}
            else:
                found |= secret_values_in(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            found |= secret_values_in(value)
    return found


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


def scrub_text(text: str, values: set[str] | None = None) -> str:
    """``text`` with secret environment values (or ``values``) and key-shaped strings replaced."""
    for secret in secret_env_values() if values is None else values:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return KEY_SHAPES.sub(REDACTED, text)


def scrub_secrets(obj: Any, _values: set[str] | None = None) -> Any:
    """A copy of ``obj`` (nested dicts / lists / tuples / strings) with every secret redacted (see the module).

    A value under a secret-looking key is replaced whole (a string) or scrubbed inside (a mapping or list:
    ``{"headers": {"Authorization": ...}}``, ``{"api_key": {"value": ...}}``); numbers and booleans are kept.
    """
    values = secret_env_values() if _values is None else _values
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if is_secret_key(key) and isinstance(value, str) and value:
                out[key] = REDACTED
            elif is_secret_key(key) and isinstance(value, (dict, list, tuple)):
                out[key] = _redact_leaves(value)
            else:
                out[key] = scrub_secrets(value, values)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(scrub_secrets(v, values) for v in obj)
    if isinstance(obj, str):
        return scrub_text(obj, values)
    return obj


def _redact_leaves(obj: Any) -> Any:
    """Every string inside ``obj`` replaced (the whole value sits under a secret-looking key)."""
    if isinstance(obj, dict):
        return {k: _redact_leaves(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_redact_leaves(v) for v in obj)
    return REDACTED if isinstance(obj, str) and obj else obj
