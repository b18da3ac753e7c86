"""The small CLIP: offline CLIP tokenizer, training / validation metrics, Trainer.predict embeddings, and
the exported Hugging Face folder serving the NEMO zero-shot target and ErrorRetrieval."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import open_clip
import pytest
import torch
from training_seed import TRAINING_SEED

from datamodules.captions import CaptionDataModule
from nemo_train.models.clip import CLIPEncoder, CLIPModule, clip_tokenizer, recall_at_k
from nemo_train.models.trainer import quiet_trainer
from nemo_train.models.zero_shot import ZeroShotTarget
from nemo_train.nemo.methods.error_retrieval import ErrorRetrieval
from tests.models.tiny_clip import TINY_CLIP


def test_tokenizer_matches_open_clip_ids():
    text = "a photo of a bird in autumn leaves"
    ours = clip_tokenizer()(text)["input_ids"]
    theirs = open_clip.get_tokenizer("ViT-B-32")([text])[0]
    assert ours == theirs[: len(ours)].tolist()
    assert len(clip_tokenizer()) == 49408


def test_recall_at_k_by_hand():
    sim = torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.5, 0.1], [0.0, 0.3, 0.2]])
    # row 0: own column first; row 1: own (0.5) second; row 2: own (0.2) second
    assert recall_at_k(sim, 1) == pytest.approx(1 / 3)
    assert recall_at_k(sim, 2) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    L.seed_everything(TRAINING_SEED, verbose=False)
    data = CaptionDataModule(sources=["nico"], image_size=16, train_per_source=64, val_per_source=24, batch_size=16)
    module = CLIPModule(**TINY_CLIP, export_subdir="hf")
    trainer = quiet_trainer(default_root_dir=tmp_path_factory.mktemp("clip"))
    trainer.fit(module, datamodule=data)
    return module, data, trainer


def test_fit_logs_zero_shot_per_attribute_and_recall(trained):
    module, data, trainer = trained
    metrics = trainer.callback_metrics
    for key in (
        "val/zeroshot/nico/object",
        "val/zeroshot/nico/context",
        "val/recall@1_image_to_text",
        "val/recall@5_text_to_image",
        "val/zeroshot_mean",
    ):
        assert key in metrics and 0.0 <= float(metrics[key]) <= 1.0, key


def test_zero_shot_accuracy_counts_prompt_argmax(trained):
    module, data, _ = trained
    prompts = module.zero_shot["nico/object"]
    text = module.encode_text(prompts).detach()
    image = text[[2, 0, 5]]  # "images" that coincide with the prompts of classes 2, 0, 5
    attrs = torch.tensor([[2, 0], [1, 0], [5, 0]])  # second one labelled 1: wrong
    acc = module.zero_shot_accuracy(image, attrs)
    assert acc["val/zeroshot/nico/object"] == pytest.approx(2 / 3)


def test_predict_extracts_the_image_embeddings(trained):
    module, data, _ = trained
    trainer = quiet_trainer()
    batches = trainer.predict(module, dataloaders=data.predict_dataloader())
    embeds = torch.cat(batches)
    module.eval()
    with torch.no_grad():
        direct = module.encode_image(torch.stack([data.val_set[i]["image"] for i in range(len(data.val_set))]))
    assert embeds.shape == (len(data.val_set), 16)
    assert torch.allclose(embeds, direct, atol=1e-5)
    assert torch.allclose(embeds.norm(dim=-1), torch.ones(len(embeds)), atol=1e-5)


def test_exported_folder_serves_zero_shot_target_and_error_retrieval(trained):
    module, data, trainer = trained
    folder = str(Path(trainer.default_root_dir) / "hf")
    images = torch.stack([data.val_set[i]["image"] for i in range(4)])
    encoder = CLIPEncoder(folder)
    target = ZeroShotTarget(folder, ["mammal", "bird", "plant", "plane", "boat", "car"])
    assert target.image_size == 16
    assert torch.allclose(target.encode_image(images), encoder.encode_image(images), atol=1e-4)
    assert torch.allclose(target.encode_text(["a bird"]), encoder.encode_text(["a bird"]), atol=1e-5)
    probs = target.predict_proba(images)
    assert probs.shape == (4, 6) and torch.allclose(probs.sum(-1), torch.ones(4), atol=1e-5)
    module.eval()
    with torch.no_grad():
        assert torch.allclose(encoder.encode_text(["a bird"]), module.encode_text(["a bird"]), atol=1e-5)
    corpus = ["a photo of a bird", "a photo taken in water", "a photo of a car"]
    retrieval = ErrorRetrieval(target, corpus)
    sample = type("Sample", (), {"image": images[0]})()
    ranking = retrieval.ranking(sample)
    expected = (encoder.encode_image(images[:1]) @ encoder.encode_text(corpus).T)[0].argsort(descending=True)
    assert ranking == expected.tolist()


def test_checkpoint_loads_as_encoder(trained, tmp_path):
    module, _, trainer = trained
    path = tmp_path / "clip.ckpt"
    trainer.save_checkpoint(str(path), weights_only=True)
    encoder = CLIPEncoder(str(path))
    module.eval()
    with torch.no_grad():
        assert torch.allclose(encoder.encode_text(["a boat"]), module.encode_text(["a boat"]), atol=1e-5)


def test_attribute_heads_train_both_towers_and_stay_out_of_the_export(tmp_path):
    L.seed_everything(TRAINING_SEED, verbose=False)
    data = CaptionDataModule(sources=["cmnist"], image_size=16, train_per_source=32, val_per_source=8, batch_size=16)
    module = CLIPModule(**TINY_CLIP, attribute_head_weight=1.0, export_subdir="hf")
    trainer = quiet_trainer(max_epochs=None, default_root_dir=tmp_path, max_steps=2, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    assert list(module.heads) == ["cmnist_digit", "cmnist_color", "cmnist_tilt"]
    assert [h.out_features for h in module.heads.values()] == [10, len(data.zero_shot_prompts()["cmnist/color"]), 3]
    assert "train/attribute_loss" in trainer.callback_metrics
    # the loss by hand: images of the batch and each slot's prompts, through the shared head
    module.eval()
    with torch.no_grad():
        images = torch.stack([data.train_set[i]["image"] for i in range(4)])
        attrs = data.train_set.attrs[:4]
        image, scale = module.encode_image(images), module.model.logit_scale.exp()
        expected = []
        for column, (slot, prompts) in enumerate(module.zero_shot.items()):
            head = module.heads[slot.replace("/", "_")]
            expected.append(torch.nn.functional.cross_entropy(head(scale * image), attrs[:, column]))
            words = head(scale * module.encode_text(prompts))
            expected.append(torch.nn.functional.cross_entropy(words, torch.arange(len(prompts))))
        assert torch.allclose(module.attribute_loss(image, attrs), torch.stack(expected).mean(), atol=1e-5)
    exported = CLIPEncoder(str(tmp_path / "hf"))
    assert not any("head" in name for name, _ in exported.model.named_parameters())
    path = tmp_path / "clip.ckpt"
    trainer.save_checkpoint(str(path), weights_only=True)
    assert torch.allclose(
        CLIPEncoder(str(path)).encode_text(["a red digit"]), exported.encode_text(["a red digit"]), atol=1e-5
    )
