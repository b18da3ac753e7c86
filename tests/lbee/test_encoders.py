"""The failure-mode search's joint spaces over the one image-text encoder: an open_clip model (a tiny random
architecture registered offline) and its one-line errors, and our small CLIP trained once into a folder that
several runs share."""

from __future__ import annotations

import json
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import open_clip
import pytest
import torch
import torch.nn.functional as F

from nemo_train.errors import UserInputError
from nemo_train.lbee import encoders
from nemo_train.lbee.encoders import OpenCLIPEncoder, SyntheticCLIP
from tests.models.tiny_clip import TINY_CLIP

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
    from cli_errors import one_line_error

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # the preset names its sentence file relative to the repository
    err = one_line_error(
        capsys, ["lbee", "--config", "configs/lbee/imagenet_per_class.yaml", "--out_dir", str(tmp_path / "out")]
    )
    assert "ImageNet validation folder" in err and "does not exist" in err


def shared_clip(path) -> SyntheticCLIP:
    return SyntheticCLIP(str(path), train_missing=True, train_per_source=8, max_epochs=1, model=TINY_CLIP)


def test_two_runs_given_the_same_missing_joint_space_train_it_once(tmp_path, monkeypatch, caplog):
    """Two commands given one missing joint space (``train_missing``) at once: the second waits for the first to
    train it and loads what it saved (before: both trained, into the same folder at the same time)."""
    path = tmp_path / "shared" / "clip"
    second = threading.Event()  # the other run is training too (before) or waiting for the first (now)
    fits = []

    def fit(module, data, max_epochs, **kwargs):  # training is untouched: the first blocks until the other arrives
        fits.append(threading.current_thread().name)
        if len(fits) == 1:
            assert second.wait(timeout=120), "the other run neither trained nor waited"
        else:
            second.set()
        return SimpleNamespace(callback_metrics={"val/zeroshot_acc": torch.tensor(0.5)})

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting" in record.getMessage():
                second.set()

    monkeypatch.setattr(encoders, "fit_quietly", fit)
    caplog.set_level(logging.INFO, logger=encoders.__name__)
    handler = Waiting()
    logging.getLogger(encoders.__name__).addHandler(handler)
    runs = [shared_clip(path), shared_clip(path)]
    try:
        with ThreadPoolExecutor(2) as pool:
            loaded = list(pool.map(lambda run: run.encoder(), runs))
    finally:
        logging.getLogger(encoders.__name__).removeHandler(handler)
    assert len(fits) == 1
    assert [run.zero_shot for run in runs] == [{"val/zeroshot_acc": 0.5}] * 2  # the waiter read the saved record
    texts = ["a photo of a bird"]
    assert torch.equal(loaded[0].encode_text(texts), loaded[1].encode_text(texts))  # one model, saved once
    assert sorted(p.name for p in path.parent.iterdir()) == ["clip", "clip.lock"]  # the lock beside the folder


def test_training_cut_short_leaves_no_joint_space_a_later_run_would_load(tmp_path, monkeypatch):
    """A run that saw the shared folder would load it as trained: an export that fails halfway leaves none, and
    the next run trains it again."""
    path = tmp_path / "shared" / "clip"
    exports = []

    class Module:
        def export(self, folder):
            folder = Path(folder)
            folder.mkdir(parents=True)
            (folder / "config.json").write_text("{")  # half a model
            exports.append(folder)
            if len(exports) == 1:
                raise OSError("No space left on device")

    monkeypatch.setattr(encoders, "CLIPModule", lambda **kwargs: Module())
    monkeypatch.setattr(encoders, "fit_quietly", lambda *args, **kwargs: SimpleNamespace(callback_metrics={}))
    monkeypatch.setattr(encoders, "CLIPEncoder", lambda folder: folder)
    with pytest.raises(OSError, match="No space left"):
        shared_clip(path).encoder()
    assert not path.exists()
    assert shared_clip(path).encoder() == str(path) and len(exports) == 2
    assert (path / "config.json").is_file() and (path / "zero_shot.json").is_file()
