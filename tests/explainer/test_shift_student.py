"""The shifts student: stage 1 (captions) and stage 2 (distillation from the stage-1 adapter) fit through their
configs; the vision tower's own learning rate; the caption accuracy callback's metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nemo_train.lightning_cli import NemoLightningCLI

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "explainer"
FAST = [
    "--trainer.accelerator=cpu",
    "--trainer.logger=false",
    "--trainer.max_steps=2",
    "--trainer.val_check_interval=2",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.batch_size=4",
]


def _fit(config: str, root: Path, *args: str) -> NemoLightningCLI:
    return NemoLightningCLI(
        args=["fit", "--config", str(CONFIGS / config), *FAST, f"--trainer.default_root_dir={root}", *args]
    )


@pytest.fixture(scope="module")
def stage1(tmp_path_factory, explainer_cache):
    """A 2-step stage-1 fit on 24 caption pairs (3 held out, captioned by the config's accuracy callback):
    ``(cli, root)``."""
    root = tmp_path_factory.mktemp("captions_shifts")
    cli = _fit("captions_shifts.yaml", root, "--data.init_args.caption_pairs=24")
    return cli, root


def test_captions_config_writes_pairs_an_adapter_and_caption_accuracy(stage1):
    cli, root = stage1
    assert (root / "pairs" / "train.jsonl").is_file() and (root / "pairs" / "recipe.json").is_file()
    assert (root / "adapter" / "adapter_model.safetensors").is_file()
    metrics = cli.trainer.callback_metrics
    factors = ["color", "style", "angle", "background", "scale", "position"]
    for name in ["val/caption_acc", "val/caption_acc/digit", *(f"val/caption_acc/{f}" for f in factors)]:
        assert 0.0 <= float(metrics[name]) <= 1.0, name
    per_factor = [float(metrics[f"val/caption_acc/{f}"]) for f in factors]
    assert float(metrics["val/caption_acc"]) == pytest.approx(sum(per_factor) / len(per_factor))
    trained = cli.model.trainable_parameter_names()
    assert any("embed_tokens" in n for n in trained) and any(".visual." in f".{n}" for n in trained)


def test_distill_config_fits_from_the_stage1_adapter(stage1, tmp_path):
    from datamodules.explanations.shift_pairs import build_known_shift_pairs

    _, stage1_root = stage1
    pairs = build_known_shift_pairs(tmp_path / "pairs", size=10, seed=0, val_fraction=0.2)
    root = tmp_path / "run"
    cli = _fit(
        "distill_shifts.yaml",
        root,
        f"--model.init_args.adapter={stage1_root / 'adapter'}",
        f"--data.init_args.train_jsonl={pairs['train']}",
        f"--data.init_args.val_jsonl={pairs['val']}",
    )
    assert (root / "adapter" / "adapter_model.safetensors").is_file()
    metrics = cli.trainer.callback_metrics
    assert "val/loss" in metrics
    for name in ["val/answer_acc", *(f"val/answer_acc/{g}" for g in ("factor", "value", "classes", "exact"))]:
        assert 0.0 <= float(metrics[name]) <= 1.0, name
    # the stage-1 adapter's fully trained modules are trained again
    assert any("embed_tokens" in n for n in cli.model.trainable_parameter_names())
    # served as NEMO serves a student (merged adapter), it answers as the trained module does
    from datamodules.explanations import read_records, to_pil
    from nemo_train.backends.messages import user_message
    from nemo_train.backends.student import StudentBackend
    from nemo_train.explainer.generation import generate_explanations

    records = read_records(pairs["val"])
    trained = generate_explanations(
        cli.model, [r.image for r in records], [r.prompt for r in records], max_new_tokens=12
    )
    backend = StudentBackend(root / "adapter", max_new_tokens=12)
    served = [backend.chat([user_message(r.prompt, [to_pil(r.image)])], temperature=0.0)[0] for r in records]
    assert served == [t[0] for t in trained]


def test_visual_lr_gives_the_vision_tower_its_own_group(explainer_cache):
    from nemo_train.explainer import ExplainerModule

    module = ExplainerModule(modules_to_save=["visual", "lm_head"], lr=6e-3, visual_lr=1e-3)
    module.configure_model()
    optimizer = module.configure_optimizers()["optimizer"]
    rest, visual = optimizer.param_groups
    assert (rest["lr"], visual["lr"]) == pytest.approx((6e-3, 1e-3))
    names = {id(p): n for n, p in module.model.named_parameters()}
    assert all(".visual." in names[id(p)] for p in visual["params"])
    assert not any(".visual." in names[id(p)] for p in rest["params"])
    trained = sum(p.numel() for p in module.model.parameters() if p.requires_grad)
    assert trained == sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    with pytest.raises(Exception, match="positive learning rates"):
        ExplainerModule(visual_lr=0.0)


def test_shift_captions_recipe_is_rebuilt_when_it_changes(tmp_path, explainer_cache):
    from datamodules.explanations import ExplanationDataModule, read_records
    from nemo_train.errors import UserInputError
    from nemo_train.models.vlm import load_processor

    def data(size: int) -> ExplanationDataModule:
        return ExplanationDataModule(
            "embedded:tiny-qwen2-vl",
            processor_loader=load_processor,
            data_dir=str(tmp_path),
            recipe="shift_captions",
            caption_pairs=size,
            max_length=128,
        )

    first = data(10)
    first.setup()
    assert first.group_names == ["caption"] and len(first.train_set) == 9 and len(first.val_records) == 1
    second = data(20)
    second.setup()
    assert len(read_records(tmp_path / "train.jsonl")) == 18
    batch = next(iter(second.train_dataloader()))
    assert batch["input_ids"].shape[0] == 8 and torch.all(batch["labels"][:, 0] == -100)
    with pytest.raises(UserInputError, match="recipe"):
        ExplanationDataModule("embedded:tiny-qwen2-vl", recipe="captions")  # type: ignore[arg-type]
    with pytest.raises(UserInputError, match="caption_pairs"):
        ExplanationDataModule("embedded:tiny-qwen2-vl", recipe="shift_captions", caption_pairs=1)


def test_the_tokenizer_knows_the_shifts_words(explainer_cache):
    from datamodules.explanations.caption_pairs import CAPTION_PROMPT
    from datamodules.shifts import FACTS
    from nemo_train.models.vlm import load_processor
    from nemo_train.scoring.structured import DISTILL_PROMPT

    tokenizer = load_processor("embedded:tiny-qwen2-vl").tokenizer
    answer = (
        '{"cause_of_error": "The classifier read this 3 as a 8 because of the -45 degree rotation. Edit: angle -> 0"}'
    )
    caption = FACTS.caption(dict(digit=3, color=2, style=2, angle=-45, background=2, scale=1, position=1))
    words = {f"the {v}" for f in FACTS.factors for v in f.values} | {f"the {f.word}" for f in FACTS.factors}
    lengths = {text: len(tokenizer(text)["input_ids"]) for text in [answer, caption, *words]}
    assert lengths[answer] <= 30 and lengths[caption] <= len(caption.split()) + 6
    assert all(n <= 3 for text, n in lengths.items() if text in words), lengths  # "the -45": "the", " -", "45"
    assert len(tokenizer(DISTILL_PROMPT.format(true_name="3", pred_name="8"))["input_ids"]) <= 36
    assert len(tokenizer(CAPTION_PROMPT.format(class_name="3"))["input_ids"]) <= 10
