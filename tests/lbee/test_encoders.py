"""The failure-mode search's joint spaces over the one image-text encoder: an open_clip model (a tiny random
architecture registered offline) and its one-line errors."""

from __future__ import annotations

import json
import sys

import open_clip
import pytest
import torch
import torch.nn.functional as F

from nemo_train.errors import UserInputError
from nemo_train.lbee.encoders import OpenCLIPEncoder

TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def tiny_open_clip(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("open_clip") / "nemo-tiny-clip.json"
    path.write_text(json.dumps(TINY))
    open_clip.add_model_config(path)
    return "nemo-tiny-clip"


def test_open_clip_encoder_embeds_as_open_clip_does(tiny_open_clip):
    torch.manual_seed(0)
    encoder = OpenCLIPEncoder(tiny_open_clip, pretrained=None, batch_size=2)
    model = encoder.space.model
    x = torch.rand(5, 3, 20, 20, generator=torch.Generator().manual_seed(0))
    texts = ["a photo of a bird", "a dog on grass", "x"]
    mean = torch.tensor(open_clip.OPENAI_DATASET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(open_clip.OPENAI_DATASET_STD).view(1, 3, 1, 1)
    resized = F.interpolate(x, size=(32, 32), mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
    with torch.no_grad():
        image = F.normalize(model.encode_image((resized - mean) / std), dim=-1)
        text = F.normalize(model.encode_text(open_clip.get_tokenizer(tiny_open_clip)(texts)), dim=-1)
        logits = encoder.space.zero_shot(texts)(x)
    assert torch.allclose(encoder.encode_image(x), image, atol=1e-6)  # in chunks of two
    assert torch.allclose(encoder.encode_text(texts), text, atol=1e-6)
    assert torch.allclose(logits, model.logit_scale.exp() * image @ text.T, atol=1e-5)


def test_open_clip_errors_are_one_line(tiny_open_clip, monkeypatch):
    with pytest.raises(UserInputError, match="unknown Open-CLIP model 'no-such-model'"):
        OpenCLIPEncoder("no-such-model", pretrained=None)
    monkeypatch.setitem(sys.modules, "open_clip", None)  # as if the package were not installed
    with pytest.raises(UserInputError, match="pip install open_clip_torch"):
        OpenCLIPEncoder(tiny_open_clip, pretrained=None)


def test_weights_load_on_first_use_and_unreachable_weights_are_one_line(tiny_open_clip, monkeypatch):
    calls = []

    def offline(name, pretrained=None, **kwargs):
        calls.append((name, pretrained))
        raise RuntimeError(f"Failed to download weights for tag {pretrained!r}\nmore lines")

    monkeypatch.setattr(open_clip, "create_model_and_transforms", offline)
    encoder = OpenCLIPEncoder(tiny_open_clip, pretrained="laion2b_s34b_b79k")  # a preset parses: nothing loaded
    assert calls == []
    with pytest.raises(UserInputError, match=r"cannot load Open-CLIP weights 'nemo-tiny-clip' / 'laion2b_s34b_b79k'"):
        encoder.encode_text(["a photo of a bird"])
    assert calls == [(tiny_open_clip, "laion2b_s34b_b79k")]


def test_the_imagenet_preset_offline_is_one_line(capsys, tmp_path, monkeypatch):
    """The LBEE ImageNet preset on a machine without its data or weights: one line naming the missing folder
    (before: the config parser's multi-line error, since the weights were loaded while parsing)."""
    from pathlib import Path

    from cli_errors import one_line_error

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # the preset names its sentence file relative to the repository
    err = one_line_error(
        capsys, ["lbee", "--config", "configs/lbee/imagenet_per_class.yaml", "--out_dir", str(tmp_path / "out")]
    )
    assert "ImageNet validation folder" in err and "does not exist" in err
