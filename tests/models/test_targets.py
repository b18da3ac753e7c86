"""Target classifiers: class mappings by hand, timm / zero-shot / checkpoint targets on tiny models."""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.errors import UserInputError  # noqa: E402
from nemo_train.models.targets import (  # noqa: E402
    ClassifierTarget,
    ClassMapping,
    TimmTarget,
    load_checkpoint_target,
)
from nemo_train.models.zero_shot import ZeroShotTarget, tiny_random_clip  # noqa: E402


def test_imagenet_r_style_mask_equals_softmax_over_the_subset():
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(0))
    mapping = ClassMapping(["c", "a", "b"], [[3], [7], [1]], num_source_classes=10)
    assert torch.allclose(mapping.probs(logits), logits[:, [3, 7, 1]].softmax(-1), atol=1e-6)
    assert torch.equal(mapping.predict(logits), logits[:, [3, 7, 1]].argmax(-1))


def test_objectnet_style_any_mapped_id_counts():
    mapping = ClassMapping(["bottle", "cup"], [[0, 1], [2]], num_source_classes=5)
    logits = torch.tensor([[0.0, 2.0, 1.0, 9.0, 0.0], [0.0, 0.0, 3.0, 0.0, 9.0]])
    # id 3 and 4 are unmapped: they are masked out; row 0's best mapped id is 1 -> "bottle"
    assert mapping.predict(logits).tolist() == [0, 1]
    e = torch.tensor([0.0, 2.0, 1.0]).exp()
    expected = torch.stack([(e[0] + e[1]) / e.sum(), e[2] / e.sum()])
    assert torch.allclose(mapping.probs(logits)[0], expected, atol=1e-6)
    assert torch.allclose(mapping.probs(logits).sum(-1), torch.ones(2))


def test_mapping_files_and_bad_input(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"bottle": [0, 1], "cup": 2}))
    mapping = ClassMapping.from_json(path, num_source_classes=5)
    assert mapping.class_names == ["bottle", "cup"] and mapping.ids == [[0, 1], [2]]
    with pytest.raises(UserInputError, match="does not exist"):
        ClassMapping.from_json(tmp_path / "missing.json")
    with pytest.raises(UserInputError, match="id 7"):
        ClassMapping(["x"], [[7]], num_source_classes=5)
    with pytest.raises(UserInputError, match="no ImageNet id"):
        ClassMapping(["x"], [[]], num_source_classes=5)
    wnids = ClassMapping.from_wnids(["n01443537", "n01440764"])
    assert wnids.class_names == ["goldfish", "tench"] and wnids.ids == [[1], [0]]
    with pytest.raises(UserInputError, match="n99"):
        ClassMapping.from_wnids(["n99"])


def test_timm_target_with_mapping():
    mapping = ClassMapping(["goldfish", "tench", "shark"], [[1], [0], [2, 3]])
    target = TimmTarget("resnet10t", mapping=mapping, pretrained=False)
    images = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))  # resized inside
    probs = target.predict_proba(images)
    raw = target.raw_logits(images)
    assert probs.shape == (2, 3) and torch.allclose(probs, mapping.probs(raw), atol=1e-5)
    assert torch.equal(target.predict(images), mapping.predict(raw))
    assert target.features(images).shape == (2, target.model.num_features)
    with pytest.raises(UserInputError, match="unknown timm model"):
        TimmTarget("not_a_model_xyz", pretrained=False)


def test_zero_shot_target_probabilities():
    target = tiny_random_clip(["cat", "dog", "fox"], seed=1)
    images = torch.rand(2, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    probs = target.predict_proba(images)
    assert probs.shape == (2, 3) and torch.allclose(probs.sum(-1), torch.ones(2), atol=1e-6)
    # swapping in the class's own prompt changes nothing
    same = target.proba_with_prompts(images, 2, ["a photo of a fox", "a fox in the snow"])
    assert torch.allclose(same[:, 0], probs[:, 2], atol=1e-6)
    assert target.prompts == ["a photo of a cat", "a photo of a dog", "a photo of a fox"]
    with pytest.raises(UserInputError, match="template"):
        type(target)(target.model, ["a"], tokenizer=target.tokenizer, template="a photo")


def test_checkpoint_target_round_trip(tmp_path):
    import lightning

    from nemo_train.models import ClassifierModule

    torch.manual_seed(0)
    module = ClassifierModule(backbone="bias_cnn", num_classes=10)
    path = tmp_path / "m.ckpt"
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": lightning.__version__,
        },
        path,
    )
    target = load_checkpoint_target(path)
    images = torch.rand(3, 3, 28, 28)
    assert isinstance(target, ClassifierTarget) and target.class_names == [str(i) for i in range(10)]
    with torch.no_grad():
        assert torch.allclose(target.predict_proba(images), module.eval().predict_proba(images), atol=1e-6)
        assert torch.allclose(target.features(images), module.features(images), atol=1e-6)
    assert isinstance(target.gradcam_layer(), torch.nn.Conv2d)
    with pytest.raises(UserInputError, match="does not exist"):
        load_checkpoint_target(tmp_path / "none.ckpt")


@pytest.mark.parametrize("kind", ["vit", "clip"])
def test_gradcam_on_transformer_targets(kind):
    from nemo_train.nemo.methods.cam_mllm import gradcam_overlay

    if kind == "vit":
        target = TimmTarget(
            "vit_tiny_patch16_224", pretrained=False, model_kwargs={"img_size": 32, "patch_size": 8, "depth": 2}
        )
    else:
        target = tiny_random_clip(["cat", "dog"], seed=0)
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))
    heat, overlay = gradcam_overlay(target, image, 1, target.gradcam_layer(), target.gradcam_reshape())
    assert heat.shape == (32, 32) and overlay.shape == (3, 32, 32)
    assert torch.isfinite(heat).all() and heat.max() <= 1


def test_timm_target_from_a_local_weights_file_and_a_missing_hub_model(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    from nemo_train.errors import UserInputError
    from nemo_train.models.specs import TimmModel

    kwargs = dict(img_size=32, patch_size=16, embed_dim=32, depth=1, num_heads=2)
    source = TimmTarget("vit_tiny_patch16_224", pretrained=False, model_kwargs=kwargs)
    weights = tmp_path / "vit.safetensors"
    save_file({k: v.contiguous() for k, v in source.model.state_dict().items()}, str(weights))
    loaded = TimmTarget("vit_tiny_patch16_224", model_kwargs=kwargs, weights_file=weights)
    for (name, a), b in zip(source.model.state_dict().items(), loaded.model.state_dict().values()):
        assert torch.equal(a, b), name
    spec = TimmModel("vit_tiny_patch16_224", weights_file=str(weights))
    assert spec.identity()["sha256"] and spec.default_name() == "vit_tiny_patch16_224"
    with pytest.raises(UserInputError, match="does not exist"):
        TimmModel("vit_tiny_patch16_224", weights_file=str(tmp_path / "missing.pth")).check()
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network here either way
    with pytest.raises(UserInputError, match="cannot load weights of timm model .* from the hub"):
        TimmTarget("vit_tiny_patch16_224.augreg_in21k_ft_in1k", model_kwargs=kwargs)
    with pytest.raises(UserInputError, match="cannot load image-text model .no-such-org/no-such-clip."):
        ZeroShotTarget("no-such-org/no-such-clip", ["a", "b"])


def test_siglip_target_loads_from_a_hub_layout_folder(tmp_path):
    """A tiny random SigLIP saved in the hub layout (config, weights, spiece.model, processor) loads offline."""
    import sentencepiece as spm
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel, SiglipTokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"a photo of a {w}" for w in ["cat", "dog", "bird", "red square", "green circle"] * 20))
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(tmp_path / "spiece"),
        vocab_size=24,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    tokenizer = SiglipTokenizer(str(tmp_path / "spiece.model"), model_max_length=16)
    layers = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    torch.manual_seed(0)
    config = SiglipConfig(
        text_config=dict(vocab_size=24, max_position_embeddings=16, pad_token_id=0, eos_token_id=1, **layers),
        vision_config=dict(image_size=32, patch_size=8, **layers),
    )
    folder = tmp_path / "siglip-tiny"
    SiglipModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)

    target = ZeroShotTarget(str(folder), ["cat", "dog", "bird"])
    assert target.is_siglip and target.image_size == 32
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    probs = target.predict_proba(images)
    tokens = tokenizer(target.prompts, padding="max_length", truncation=True, return_tensors="pt")
    with torch.no_grad():
        reference = target.model(input_ids=tokens["input_ids"], pixel_values=(images - target.mean) / target.std)
    assert torch.allclose(probs, reference.logits_per_image.softmax(-1), atol=1e-5)  # the bias cancels


@pytest.mark.parametrize("backbone", ["bias_cnn", "resnet18"])
def test_one_forward_gives_the_predictions_and_features_of_two(backbone):
    """The benchmark classifies its grid with one pass per batch; the numbers are those of two separate passes."""
    from nemo_train.models import ClassifierModule

    torch.manual_seed(0)
    module = ClassifierModule(backbone=backbone, num_classes=5).eval()
    target = ClassifierTarget(module, [str(i) for i in range(5)], image_size=32)
    images = torch.rand(6, 3, 40, 40)
    predicted, features = target.predict_and_features(images)
    assert torch.equal(predicted, target.predict(images)) and torch.equal(features, target.features(images))
    logits = module.model.get_classifier()(features)
    assert torch.equal(logits, target.logits(images))  # bit for bit: the same operations
