"""Keep secrets (API keys, tokens) out of logs, saved configs and checkpoints."""

from __future__ import annotations

import os
import re
from typing import Any

SECRET_KEY_PATTERN = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization)", re.IGNORECASE)
REDACTED = "<redacted>"


def secret_env_values(min_length: int = 8) -> set[str]:
    """Values of environment variables whose names look secret (``*_API_KEY``, ``*_TOKEN``, ...)."""
    return {v for k, v in os.environ.items() if SECRET_KEY_PATTERN.search(k) and len(v) >= min_length}


def scrub_secrets(obj: Any, _values: set[str] | None = None) -> Any:
    """A copy of ``obj`` (nested dicts / lists / strings) with secret-looking entries redacted.

    A value is redacted when its key looks secret (``api_key``, ``token``, ...) — except keys such as
    ``api_key_env`` that only *name* an environment variable — or when it contains the value of a
    secret-looking environment variable.
    """
    values = secret_env_values() if _values is None else _values
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            names_env_var = str(key).lower().endswith("_env")
            if SECRET_KEY_PATTERN.search(str(key)) and not names_env_var and isinstance(value, str) and value:
                out[key] = REDACTED
            else:
                out[key] = scrub_secrets(value, values)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(scrub_secrets(v, values) for v in obj)
    if isinstance(obj, str):
        for secret in values:
            if secret in obj:
                obj = obj.replace(secret, REDACTED)
        return obj
    return obj
