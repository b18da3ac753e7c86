"""Tiny random SigLIP and Stable Diffusion 3 folders built offline from transformers / diffusers
config classes (same architectures and loading code as the hub models, no download)."""

from __future__ import annotations

import json
from pathlib import Path

WORDS = "a photo of man woman boy girl with black blond hair reading in library riding bike the".split()


def tiny_siglip(folder: Path) -> Path:
    import sentencepiece as spm
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel, SiglipProcessor, SiglipTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    sentences = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 4
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_prefix=str(folder / "spiece"), vocab_size=20,
        model_type="word", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )  # fmt: skip
    tokenizer = SiglipTokenizer(str(folder / "spiece.model"), model_max_length=16)
    processor = SiglipProcessor(SiglipImageProcessor(size={"height": 32, "width": 32}), tokenizer)
    config = SiglipConfig(
        text_config={"vocab_size": 20, "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1,
                     "num_attention_heads": 4, "max_position_embeddings": 16},
        vision_config={"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 37,
                       "num_hidden_layers": 1, "num_attention_heads": 4},
    )  # fmt: skip
    SiglipModel(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def _clip_tokenizer(folder: Path):
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["<|startoftext|>", "<|endoftext|>", "!"] + letters + [f"{c}</w>" for c in letters]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=16)


def tiny_sd3(folder: Path) -> Path:
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(
        sample_size=16, patch_size=1, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=4,
        caption_projection_dim=32, joint_attention_dim=32, pooled_projection_dim=64, out_channels=4,
    )  # fmt: skip
    clip = CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=32, intermediate_size=37, num_attention_heads=4,
        num_hidden_layers=2, vocab_size=60, max_position_embeddings=16, projection_dim=32,
    )  # fmt: skip
    vae = AutoencoderKL(
        sample_size=16, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1, latent_channels=4,
        norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035,
    )  # fmt: skip
    pipe = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae,
        text_encoder=CLIPTextModelWithProjection(clip), tokenizer=_clip_tokenizer(folder / "tok1"),
        text_encoder_2=CLIPTextModelWithProjection(clip), tokenizer_2=_clip_tokenizer(folder / "tok2"),
        text_encoder_3=None, tokenizer_3=None,
    )  # fmt: skip
    pipe.save_pretrained(folder / "pipeline")
    return folder / "pipeline"
