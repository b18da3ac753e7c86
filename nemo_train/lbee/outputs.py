"""Where an ``lbee`` run keeps what it writes besides its results: everything under its ``out_dir``.

The default joint space (a :class:`~nemo_train.lbee.encoders.SyntheticCLIP` given no ``path``) is trained into
``<out_dir>/clip``, and every language-model backend of the run (the sentence generator's, the VQA models')
that has no cache of its own caches its replies in ``<out_dir>/llm_cache``: a rerun asks nothing twice, and a
run cut short by a failing endpoint asks again only what failed. A path given explicitly stays the user's: an
input, trained into when missing only if the encoder asks for it (``train_missing``; one process at a time).
"""

from __future__ import annotations

from pathlib import Path

from nemo_train.backends import ChatBackend
from nemo_train.errors import UserInputError

#: Sub-folders of ``out_dir``.
CLIP_DIR, CACHE_DIR = "clip", "llm_cache"


def backends_of(*parts: object) -> list[ChatBackend]:
    """The chat backends held by ``parts`` (``backend`` or ``backends`` attributes)."""
    found = []
    for part in parts:
        for backend in [getattr(part, "backend", None), *(getattr(part, "backends", None) or [])]:
            if isinstance(backend, ChatBackend) and all(backend is not b for b in found):
                found.append(backend)
    return found


def place_outputs(out: Path, encoder: object, sentences: object, relevance: object) -> None:
    """Point the run's default outputs into ``out``: the joint space's folder when none was given, and a reply
    cache for every backend of ``sentences`` and ``relevance`` without one."""
    if getattr(encoder, "path", "") is None:
        encoder.path = str(out / CLIP_DIR)
    for backend in backends_of(sentences, relevance):
        backend.attach_cache(out / CACHE_DIR)


def check_given_joint_space(out: Path, encoder: object) -> None:
    """A joint-space folder given outside ``out`` is an input: when it does not exist, a one-line error naming the
    command that trains it, unless the encoder asks for it to be trained there (``train_missing``)."""
    path = getattr(encoder, "path", None)
    asked = getattr(encoder, "train_missing", False)
    if path is None or asked or Path(path).exists() or Path(path).resolve().is_relative_to(out.resolve()):
        return
    raise UserInputError(
        f"joint space {path!r} does not exist; train and export one first (`nemo-train fit --config "
        "configs/clip/synthetic.yaml` writes checkpoints/clip_synthetic/hf), leave encoder.path unset to train one "
        f"into {out / CLIP_DIR}, or set encoder.init_args.train_missing: true to train it there"
    )
