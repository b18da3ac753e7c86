"""Language-model backends behind one chat interface (:class:`ChatBackend`).

``OpenAICompatibleBackend`` talks to any OpenAI-compatible HTTP endpoint (vLLM, OpenAI, other
providers), ``HFLocalBackend`` runs a local Hugging Face image-text-to-text model (optionally with a
LoRA adapter), ``ScriptedBackend`` replays scripted replies for tests.
"""

from nemo_train.backends.base import BackendError, BackendStats, ChatBackend, MalformedReplyError, strict_json
from nemo_train.backends.hf_local import HFLocalBackend
from nemo_train.backends.messages import (
    assistant_message,
    image_part,
    system_message,
    text_part,
    user_message,
)
from nemo_train.backends.openai_compat import OpenAICompatibleBackend
from nemo_train.backends.providers import object_schema
from nemo_train.backends.scripted import ScriptedBackend

__all__ = [
    "BackendError",
    "BackendStats",
    "ChatBackend",
    "HFLocalBackend",
    "MalformedReplyError",
    "OpenAICompatibleBackend",
    "ScriptedBackend",
    "assistant_message",
    "image_part",
    "object_schema",
    "strict_json",
    "system_message",
    "text_part",
    "user_message",
]
