"""Token Length with tiktoken's ``o200k_base`` (GPT-5-mini's encoding), offline.

tiktoken downloads its BPE file on first use. The ``bpe-openai`` wheel ships the same file
(``o200k_base.tiktoken.gz``); :func:`encoding` decompresses it into ``TIKTOKEN_CACHE_DIR`` (default
``<system temp folder>/nemo_train-tiktoken``: a run writes nothing outside its out_dir but temp files) under the SHA-1 of tiktoken's URL, which is where tiktoken looks
before downloading, after checking its SHA-256 against the hash tiktoken itself expects.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np
import tiktoken

from nemo_train.errors import UserInputError
from nemo_train.store import write_bytes_atomic

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def install_o200k(cache_dir: str | Path | None = None) -> Path:
    """Put the wheel's ``o200k_base`` BPE file where tiktoken finds it; return its path."""
    cache_dir = Path(
        cache_dir or os.environ.get("TIKTOKEN_CACHE_DIR") or Path(tempfile.gettempdir()) / "nemo_train-tiktoken"
    )
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    target = cache_dir / hashlib.sha1(O200K_URL.encode()).hexdigest()
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == O200K_SHA256:
        return target
    try:
        packed = resources.files("bpe_openai").joinpath("data", "o200k_base.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        raise UserInputError("o200k_base is not available offline: install the `bpe-openai` wheel") from None
    data = gzip.decompress(packed)
    if hashlib.sha256(data).hexdigest() != O200K_SHA256:
        raise UserInputError("the o200k_base file shipped by bpe-openai does not match tiktoken's SHA-256")
    return write_bytes_atomic(target, data)


@functools.cache
def encoding() -> tiktoken.Encoding:
    """tiktoken's ``o200k_base`` encoding, loaded without a download."""
    install_o200k()
    return tiktoken.get_encoding("o200k_base")


def token_length(text: str) -> int:
    """Number of ``o200k_base`` tokens of ``text``."""
    return len(encoding().encode(text, disallowed_special=()))


def tokenize(text: str) -> list[int]:
    return encoding().encode(text, disallowed_special=())


def detokenize(tokens: list[int]) -> str:
    return encoding().decode(tokens)


def token_strings(text: str) -> list[str]:
    """The text of each token (for attribution figures)."""
    enc = encoding()
    return [enc.decode([t]) for t in tokenize(text)]


def drop_tokens(tokens: list[int], ratio: float, rng: np.random.Generator) -> tuple[list[int], np.ndarray]:
    """Remove ``round(ratio * len)`` tokens at random; the kept tokens and the boolean drop mask."""
    mask = np.zeros(len(tokens), dtype=bool)
    count = int(round(ratio * len(tokens)))
    if count:
        mask[rng.choice(len(tokens), size=count, replace=False)] = True
    return [t for t, dropped in zip(tokens, mask) if not dropped], mask
