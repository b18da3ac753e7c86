"""The one image-text encoder: today's small-CLIP embeddings bit for bit, the preprocessing against
transformers' processors, logits against the models' own forward, and SigLIP 2 (NaFlex) as a target and a
joint space, on tiny random models built offline from transformers' config classes."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from training_seed import TRAINING_SEED
from transformers import (
    CLIPModel,
    CLIPTokenizer,
    Siglip2Config,
    Siglip2ImageProcessor,
    Siglip2Model,
    Siglip2Tokenizer,
    SiglipImageProcessor,
)

from nemo_train.errors import UserInputError
from nemo_train.models.clip import CLIP_MEAN, CLIP_STD, CLIPEncoder, CLIPModule
from nemo_train.models.image_text import ImageTextEncoder, PixelPreprocess
from nemo_train.models.zero_shot import ZeroShotTarget
from tests.models.tiny_clip import TINY_CLIP

TEXTS = ["a photo of a bird", "the digit three in a green box", "x", "a red digit one"]
MEAN = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(CLIP_STD).view(1, 3, 1, 1)


@pytest.fixture(scope="module")
def small_clip(tmp_path_factory) -> str:
    """The folder CLIPModule.export writes, of an untrained small CLIP."""
    L.seed_everything(TRAINING_SEED, verbose=False)
    return str(CLIPModule(**TINY_CLIP).export(tmp_path_factory.mktemp("clip") / "hf"))


def images(size: int, n: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def by_hand(folder: str, pixels: torch.Tensor, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings straight from the Hugging Face model and tokenizer, as the encoders computed them before."""
    model, tokenizer = CLIPModel.from_pretrained(folder).eval(), CLIPTokenizer.from_pretrained(folder)
    tok = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        image = F.normalize(model.get_image_features(pixel_values=pixels).pooler_output, dim=-1)
        text = model.get_text_features(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"])
    return image, F.normalize(text.pooler_output, dim=-1)


@pytest.mark.parametrize("size", [16, 24, 13])
def test_small_clip_embeddings_are_bitwise_unchanged(small_clip, size):
    x = images(size)
    # the failure-mode search's path: bilinear resize, CLIP mean / std
    resized = F.interpolate(x, size=(16, 16), mode="bilinear", antialias=True, align_corners=False)
    image, text = by_hand(small_clip, (resized - MEAN) / STD, TEXTS)
    encoder = CLIPEncoder(small_clip)
    assert torch.equal(encoder.encode_image(x), image) and torch.equal(encoder.encode_text(TEXTS), text)
    # the NEMO target's path (the processor's bicubic resize, clamped)
    resized = F.interpolate(x, size=(16, 16), mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
    image, _ = by_hand(small_clip, (resized - MEAN) / STD, TEXTS)
    target = ZeroShotTarget(small_clip, ["bird", "digit"])
    assert torch.equal(target.encode_image(x), image) and torch.equal(target.encode_text(TEXTS), text)


def test_clip_logits_and_zero_shot_follow_the_models_forward(small_clip):
    encoder = ImageTextEncoder.from_pretrained(small_clip)
    assert encoder.family == "clip" and encoder.pixels.size == (16, 16) and encoder.pixels.resample == "bicubic"
    x = images(16, n=3)
    tok = encoder.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = encoder.model(**tok, pixel_values=(x - MEAN) / STD).logits_per_image
        logits = encoder.zero_shot(TEXTS)(x)
    assert torch.allclose(logits, reference, atol=1e-5)
    assert torch.equal(encoder.zero_shot(TEXTS).predict(x), reference.argmax(-1))
    assert encoder.logit_bias() is None


def test_fixed_size_preprocessing_is_the_siglip_processors_but_clamped():
    processor = SiglipImageProcessor(size={"height": 32, "width": 32})
    pixels = PixelPreprocess(32, processor.image_mean, processor.image_std, "bicubic")
    for size in (20, 48):
        x = images(size, n=8)
        theirs = processor(images=list(x), do_rescale=False, return_tensors="pt")["pixel_values"]
        # the processor leaves bicubic overshoot of float images; we clamp it as on 8-bit images
        theirs = ((theirs * 0.5 + 0.5).clamp(0, 1) - 0.5) / 0.5
        assert torch.allclose(pixels(x)["pixel_values"], theirs, atol=1e-6)


def test_naflex_patches_equal_the_siglip2_processors():
    processor = Siglip2ImageProcessor(patch_size=8, max_num_patches=16)
    pixels = PixelPreprocess(None, processor.image_mean, processor.image_std, "bilinear", 8, 16)
    x = torch.rand(2, 3, 20, 36, generator=torch.Generator().manual_seed(0))
    theirs = processor(images=list(x), do_rescale=False, return_tensors="pt")
    ours = pixels(x)
    assert torch.allclose(ours["pixel_values"], theirs["pixel_values"], atol=1e-6)
    assert torch.equal(ours["pixel_attention_mask"], theirs["pixel_attention_mask"])
    assert torch.equal(ours["spatial_shapes"], theirs["spatial_shapes"]) and pixels.last_grid == (3, 5)
    with pytest.raises(UserInputError, match="shape"):
        pixels(torch.rand(3, 20, 36))


def tiny_siglip2(folder: Path) -> Path:
    """A random two-tower SigLIP 2 (NaFlex) in the hub layout: model, lowercasing tokenizer, patch processor."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "▁", *letters])}
    layers = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    torch.manual_seed(0)
    config = Siglip2Config(
        text_config=dict(vocab_size=len(vocab), max_position_embeddings=16, pad_token_id=0, eos_token_id=1, **layers),
        vision_config=dict(num_patches=16, patch_size=8, **layers),
    )
    Siglip2Model(config).save_pretrained(folder)
    Siglip2Tokenizer(vocab=vocab, merges=[], model_max_length=16).save_pretrained(folder)
    Siglip2ImageProcessor(patch_size=8, max_num_patches=16).save_pretrained(folder)
    return folder


def test_siglip2_is_a_zero_shot_target_with_scale_and_bias(tmp_path):
    from nemo_train.models.specs import ZeroShotModel
    from nemo_train.nemo.methods.cam_mllm import gradcam_overlay

    folder = tiny_siglip2(tmp_path / "siglip2")
    target = ZeroShotModel(str(folder), template="A photo of a {}").build(["cat", "dog", "fox"], None)
    assert target.encoder.family == "siglip2" and target.is_siglip and target.image_size is None
    x = torch.rand(2, 3, 20, 36, generator=torch.Generator().manual_seed(1))
    probs = target.predict_proba(x)
    # reference: the model's own forward on the processor's patches and the prompts padded to the full length
    processor, tokenizer = Siglip2ImageProcessor.from_pretrained(folder), Siglip2Tokenizer.from_pretrained(folder)
    pixels = processor(images=list(x), do_rescale=False, return_tensors="pt")
    prompts = ["a photo of a cat", "a photo of a dog", "a photo of a fox"]
    ids = tokenizer(prompts, padding="max_length", max_length=16, padding_side="right", return_tensors="pt")
    with torch.no_grad():
        reference = target.model(input_ids=ids["input_ids"], **pixels).logits_per_image
        logits = target.logits(x)
    assert torch.allclose(logits, reference, atol=1e-5)  # scale * cos + bias
    assert target.encoder.logit_bias() is not None
    assert torch.allclose(probs, reference.softmax(-1), atol=1e-5)
    heat, _ = gradcam_overlay(target, x[0], 1, target.gradcam_layer(), target.gradcam_reshape())
    assert heat.shape == (20, 36) and torch.isfinite(heat).all()


def test_siglip2_is_a_joint_space_for_the_failure_mode_search(tmp_path):
    from nemo_train.lbee.encoders import PretrainedEncoder

    folder = tiny_siglip2(tmp_path / "siglip2")
    space = PretrainedEncoder(str(folder), batch_size=3)
    x = torch.rand(7, 3, 24, 24, generator=torch.Generator().manual_seed(2))
    image, text = space.encode_image(x), space.encode_text(["A cat", "a dog"])
    assert image.shape == (7, 32) and text.shape == (2, 32)
    assert torch.allclose(image.norm(dim=-1), torch.ones(7), atol=1e-5)
    with torch.no_grad():  # three chunks give the embeddings of one pass
        assert torch.allclose(image, space.space.embed_image(x), atol=1e-5)
    assert torch.allclose(text[0], space.encode_text(["a cat"])[0], atol=1e-6)  # SigLIP 2 reads lowercased text
    tokens = space.space.tokens(["A Cat"])
    assert list(tokens) == ["input_ids"] and tokens["input_ids"].shape == (1, 16)  # padded in full, no mask


def test_a_folder_that_is_not_an_image_text_model_is_one_line(tmp_path):
    with pytest.raises(UserInputError, match="cannot load image-text model"):
        ImageTextEncoder.from_pretrained(str(tmp_path / "missing"))
