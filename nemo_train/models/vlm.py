"""Vision-language model builders: the embedded default explainer, and resolving model names to folders.

The embedded default is a Qwen2-VL model shrunk to ~0.3 M parameters, random init, no download.

The tokenizer is a byte-level BPE (the scheme of the real Qwen2 tokenizer) trained deterministically on
our own prompts and reference explanations, and on what the explainer reads and writes about the shifts
digits (the fact sheet's words, its captions, the structured explanation of every cause value and the
distillation questions, all generated from ``datamodules.shifts.FACTS`` and ``nemo_train.scoring.structured``),
so that these answers are about one token per word; Qwen2-VL's special tokens are added. It is wrapped with a
``Qwen2VLImageProcessor`` set up for small images (4-pixel patches, 2x2 merge: a 28x28 image becomes
16 image tokens) in the real ``Qwen2VLProcessor``. :func:`materialize_tiny` writes model + processor with
``save_pretrained`` once into a cache folder, so every later load goes through the same
``from_pretrained`` code path as a hub model (including 4-bit quantization).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    PreTrainedTokenizerFast,
    Qwen2VLConfig,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
)

from datamodules.cmnist import COLOR_NAMES
from nemo_train import vocabulary
from nemo_train.errors import UserInputError

#: Name that selects the embedded default wherever a model id or path is expected.
TINY_MODEL = "embedded:tiny-qwen2-vl"
#: File written next to a saved explainer adapter so that it can be reloaded without the training config.
EXPLAINER_META = "nemo_explainer.json"
#: Bump when the recipe below changes, so stale caches are rebuilt.
TINY_VERSION = 4
#: Tokens of the tiny tokenizer: enough merges for whole words of every corpus text (the six-cause sentences
#: keep their length, the shifts captions and structured answers are one token per word).
TINY_VOCAB = 640

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

#: A chat template in the Qwen2-VL layout (role headers, vision markers around each image).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _shift_texts() -> list[str]:
    """What the explainer reads and writes about the shifts digits: the fact sheet's words, a caption per value
    of every factor, the structured explanation of every cause value and the distillation questions."""
    from datamodules.explanations.caption_pairs import CAPTION_PROMPT
    from datamodules.sentences import (
        DISTILL_CAM_PROMPT,
        DISTILL_CHANGE_PROMPT,
        DISTILL_PROMPT,
        format_answer,
        hypothesis_sentence,
    )
    from datamodules.shifts import FACTS

    classes = list(FACTS.classes)
    words = [FACTS.object_word, FACTS.class_attribute, *classes]
    for factor in FACTS.factors:
        words += [factor.name, factor.word, *factor.synonyms, *map(str, factor.values), *factor.phrases.values()]
    typical = {f.name: f.typical_stored if f.typical is not None else f.stored(f.values[0]) for f in FACTS.factors}
    captions, answers, prompts = [], [], [CAPTION_PROMPT.format(class_name=name) for name in classes]
    for k, factor in enumerate(FACTS.factors):
        for v, value in enumerate(factor.values):
            attrs = {**typical, factor.name: factor.stored(value), FACTS.class_attribute: (k + v) % len(classes)}
            captions.append(FACTS.caption(attrs))
            for other in FACTS.factors:  # the same value beside every value of another factor
                if other.name != factor.name:
                    pick = other.values[(k + v) % len(other.values)]
                    captions.append(FACTS.caption({**attrs, other.name: other.stored(pick)}))
            if factor.distractor or not factor.editable or value == factor.typical:
                continue
            for shift in range(3):
                true, pred = (v + shift) % len(classes), (v + shift * 3 + 1) % len(classes)
                sample = SimpleNamespace(label=true, prediction=pred, attrs=attrs)
                edit = {"attribute": factor.name, "value": factor.typical_stored}
                sentence = hypothesis_sentence(sample, edit, FACTS.vocabulary, classes, FACTS.object_word)
                answers.append(format_answer(sentence, edit, FACTS.vocabulary))
    for true in range(len(classes)):
        names = {"true_name": classes[true], "pred_name": classes[(true + 3) % len(classes)]}
        prompts += [DISTILL_PROMPT.format(**names), DISTILL_CAM_PROMPT.format(**names)]
        prompts.append(DISTILL_CHANGE_PROMPT.format(**names, ref_name=names["pred_name"]))
    return [" ".join(words)] * 4 + captions + answers * 4 + prompts


def _corpus() -> list[str]:
    texts = [vocabulary.SYSTEM_PROMPT, vocabulary.SINGLE_IMAGE_PROMPT, vocabulary.PAIR_PROMPT, vocabulary.BIAS_PROMPT]
    texts += [e for variants in vocabulary.EXPLANATIONS.values() for e in variants]
    texts += [vocabulary.bias_explanation(c, 3, 8, [0, 1, 2, 3, 4]) for c in COLOR_NAMES]
    texts += ["system\n", "user\n", "assistant\n", "0 1 2 3 4 5 6 7 8 9"]
    return texts * 4 + _shift_texts()


def build_tiny_processor():
    """The tiny model's ``Qwen2VLProcessor`` (byte-level BPE of :data:`TINY_VOCAB` tokens, built deterministically)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=1024,
    )
    pixels = dict(min_pixels=32 * 32, max_pixels=128 * 128, patch_size=4, merge_size=2, temporal_patch_size=2)
    return Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(**pixels),
        video_processor=Qwen2VLVideoProcessor(**pixels),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def build_tiny_config(tokenizer):
    """A ``Qwen2VLConfig`` with 2 vision blocks (width 64) and 2 language layers (width 64).

    The vision width was 128 before :data:`TINY_VERSION` 4; 64 trains ~30% faster per step and, on the shifts
    student (``scripts/student_probe.py``), learns more in the same time."""
    ids = tokenizer.convert_tokens_to_ids
    return Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0},
            bos_token_id=ids("<|endoftext|>"),
            eos_token_id=ids("<|im_end|>"),
            pad_token_id=ids("<|endoftext|>"),
        ),
        vision_config=dict(
            depth=2,
            embed_dim=64,
            hidden_size=64,
            num_heads=4,
            mlp_ratio=2,
            patch_size=4,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


def cache_root() -> Path:
    """``$NEMO_TRAIN_CACHE`` or ``~/.cache/nemo-train``."""
    return Path(os.environ.get("NEMO_TRAIN_CACHE", Path.home() / ".cache" / "nemo-train"))


def materialize_tiny(root: str | Path | None = None) -> Path:
    """Write the tiny model and processor (seed 0) into ``root`` once; return the folder.

    The folder is named by :data:`TINY_VERSION` and a digest of the tokenizer corpus, so an edit of a text
    the corpus is made from (the shifts fact sheet, the structured sentences) builds a new tokenizer instead
    of reusing a stale one. Safe with several processes (DDP ranks): each writes into a private temporary
    folder and renames it into place; a rank that loses the race keeps the winner's identical copy.
    """
    digest = hashlib.sha256(json.dumps([TINY_VOCAB, _corpus()]).encode()).hexdigest()[:10]
    target = Path(root or cache_root()) / f"tiny-qwen2-vl-v{TINY_VERSION}-{digest}"
    if (target / "done.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
    processor = build_tiny_processor()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_config(build_tiny_config(processor.tokenizer))
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
    model.save_pretrained(scratch)
    processor.save_pretrained(scratch)
    (scratch / "done.json").write_text(json.dumps({"version": TINY_VERSION}))
    try:
        scratch.rename(target)
    except OSError:  # another process got there first
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def resolve_model_path(name_or_path: str) -> str:
    """Map :data:`TINY_MODEL` to its materialized folder; leave hub ids and local paths unchanged."""
    return str(materialize_tiny()) if name_or_path == TINY_MODEL else name_or_path


def is_explainer_folder(path: str | Path) -> bool:
    """Whether ``path`` is a saved explainer adapter (it holds :data:`EXPLAINER_META`)."""
    return (Path(path) / EXPLAINER_META).is_file()


def read_explainer_meta(path: str | Path) -> dict[str, Any]:
    """The metadata a saved explainer adapter keeps in :data:`EXPLAINER_META` (its base model, quantization,
    prompting, training data); the one place it is read. A missing or unreadable file is a one-line error."""
    meta_file = Path(path) / EXPLAINER_META
    if not meta_file.is_file():
        raise UserInputError(
            f"{str(path)!r} is not a saved explainer adapter (no {EXPLAINER_META}); expected a folder written by "
            "save_adapter"
        )
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"{str(meta_file)!r} is not readable JSON ({type(err).__name__})") from None
    if not isinstance(meta, dict):
        raise UserInputError(f"{str(meta_file)!r} holds a {type(meta).__name__}; expected an object")
    return meta


def load_vlm(model_name_or_path: str, **from_pretrained: Any) -> torch.nn.Module:
    """The multimodal model, for training (``ExplainerModule``) and serving (``HFLocalBackend``) alike:
    ``AutoModelForImageTextToText.from_pretrained`` with ``from_pretrained`` keyword arguments (``dtype``,
    ``attn_implementation``, ``quantization_config``, ``device_map``); the embedded tiny model is built on first
    use. A model that cannot be loaded is a one-line error."""
    try:
        return AutoModelForImageTextToText.from_pretrained(resolve_model_path(model_name_or_path), **from_pretrained)
    except OSError as err:
        raise UserInputError(f"cannot load model {model_name_or_path!r}: {err}") from None


def attach_adapter(model: torch.nn.Module, adapter: str | Path, trainable: bool) -> Any:
    """``model`` with the LoRA adapter saved in the folder ``adapter`` (peft's ``PeftModel.from_pretrained``);
    ``trainable`` for training on, off for serving. A folder without ``adapter_config.json`` is a one-line error."""
    if not (Path(adapter) / "adapter_config.json").is_file():
        raise UserInputError(
            f"adapter={str(adapter)!r} holds no adapter_config.json; expected a folder written by save_adapter"
        )
    # peft imports bitsandbytes, which prints a kernel banner on CPU machines: imported only for adapters
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(adapter), is_trainable=trainable)


def load_processor(model_name_or_path: str) -> Any:
    """The model's processor (``AutoProcessor``); the embedded tiny model is built on first use."""
    path = resolve_model_path(model_name_or_path)
    try:
        return AutoProcessor.from_pretrained(path)
    except OSError as err:
        raise UserInputError(f"cannot load a processor from {model_name_or_path!r}: {err}") from None
