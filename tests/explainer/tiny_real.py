"""Tiny random checkpoints of the real explainer architectures, built offline in seconds.

Qwen2.5-VL (``Qwen2_5_VLConfig`` + ``Qwen2_5_VLProcessor`` with Qwen's chat template), Qwen3-VL
(``Qwen3VLConfig``: 16-pixel patches, interleaved multimodal rotary positions, deepstack features) and
Llama-3.2-Vision (``MllamaConfig`` + ``MllamaProcessor`` with the Llama 3 header / ``<|image|>``
template layout), each with a small byte-level BPE tokenizer holding the family's special tokens.
Written with ``save_pretrained`` so tests load them through ``from_pretrained`` like hub models.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    MllamaConfig,
    MllamaForConditionalGeneration,
    MllamaImageProcessor,
    MllamaProcessor,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from nemo_train import vocabulary
from nemo_train.models.vlm import SPECIAL_TOKENS

QWEN_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA_TEMPLATE = (
    "{{- bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|image|>{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
LLAMA_SPECIAL = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|image|>", "<|finetune_right_pad_id|>", "<|python_tag|>",
]  # fmt: skip


def _tokenizer(special: list[str], **tokens) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    corpus = [vocabulary.SYSTEM_PROMPT, vocabulary.SINGLE_IMAGE_PROMPT, vocabulary.PAIR_PROMPT]
    corpus += [e for variants in vocabulary.EXPLANATIONS.values() for e in variants] + ["system user assistant"]
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=2048, **tokens)


def build_tiny_qwen2_5_vl(folder: Path) -> Path:
    tok = _tokenizer(
        SPECIAL_TOKENS, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=SPECIAL_TOKENS[1:]
    )
    pixels = dict(min_pixels=32 * 32, max_pixels=64 * 64, patch_size=4, merge_size=2, temporal_patch_size=2)
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**pixels),
        video_processor=Qwen2VLVideoProcessor(**pixels),
        tokenizer=tok,
        chat_template=QWEN_TEMPLATE,
    )
    ids = tok.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2048,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0},
            bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"),
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
            spatial_merge_size=2, temporal_patch_size=2, window_size=16, fullatt_block_indexes=[1],
        ),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )  # fmt: skip
    return _save(Qwen2_5_VLForConditionalGeneration(config), processor, folder)


def build_tiny_qwen3_vl(folder: Path) -> Path:
    tok = _tokenizer(
        SPECIAL_TOKENS, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=SPECIAL_TOKENS[1:]
    )
    pixels = dict(patch_size=16, merge_size=2, temporal_patch_size=2)
    size = {"shortest_edge": 32 * 32, "longest_edge": 64 * 64}
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size, **pixels),
        video_processor=Qwen3VLVideoProcessor(size=size, **pixels),
        tokenizer=tok,
        chat_template=QWEN_TEMPLATE,
    )
    ids = tok.convert_tokens_to_ids
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True,
                             "rope_theta": 10000.0},
            bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"),
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
            spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16, deepstack_visual_indexes=[0],
        ),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )  # fmt: skip
    return _save(Qwen3VLForConditionalGeneration(config), processor, folder)


def build_tiny_mllama(folder: Path) -> Path:
    tok = _tokenizer(
        LLAMA_SPECIAL,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
        additional_special_tokens=LLAMA_SPECIAL,
    )
    processor = MllamaProcessor(
        image_processor=MllamaImageProcessor(size={"height": 32, "width": 32}, max_image_tiles=2),
        tokenizer=tok,
        chat_template=LLAMA_TEMPLATE,
    )
    ids = tok.convert_tokens_to_ids
    config = MllamaConfig(
        vision_config=dict(
            image_size=32, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_global_layers=1, attention_heads=2, max_num_tiles=2, intermediate_layers_indices=[0],
            vision_output_dim=64, supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]],
        ),
        text_config=dict(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3, cross_attention_layers=[1],
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            bos_token_id=ids("<|begin_of_text|>"), eos_token_id=ids("<|eot_id|>"),
            pad_token_id=ids("<|finetune_right_pad_id|>"),
        ),
        image_token_index=ids("<|image|>"),
    )  # fmt: skip
    return _save(MllamaForConditionalGeneration(config), processor, folder)


def _save(model, processor, folder: Path) -> Path:
    tok = processor.tokenizer
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def build(family: str, folder: Path) -> Path:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        builders = {"qwen2_5_vl": build_tiny_qwen2_5_vl, "qwen3_vl": build_tiny_qwen3_vl, "mllama": build_tiny_mllama}
        return builders[family](folder)
