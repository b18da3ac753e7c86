"""NemoEvalCallback: CEI and LLM Match of a module's explanations at validation end, checked by hand."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import lightning as L
import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.callbacks.nemo_eval import NemoEvalCallback  # noqa: E402
from nemo_train.nemo.benchmark import ErrorSample, NemoBenchmark  # noqa: E402
from nemo_train.nemo.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver  # noqa: E402
from nemo_train.nemo.judges import JudgePanel, KeywordJudge  # noqa: E402
from nemo_train.nemo.targets import Target  # noqa: E402

COLORS = ["red", "green", "blue"]
VOCAB = {"digit": list(range(10)), "color": COLORS, "angle": list(range(-30, 31, 5))}
PALETTE = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])


class SolidRenderer:
    attributes = VOCAB

    def render_batch(self, digit, color, angle, style=None):
        return PALETTE[color.long()][:, :, None, None].expand(-1, 3, 4, 4).clone()


class RedGreenTarget(Target):
    def __init__(self) -> None:
        super().__init__()
        self.class_names = ["reddish", "greenish"]
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def logits(self, images):
        return 3.0 * images.mean((2, 3))[:, :2]

    def features(self, images):
        return images.mean((2, 3))


class TinyModule(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def toy_setup():
    target = RedGreenTarget()
    errors = [
        ErrorSample(
            f"e{i}",
            PALETTE[1][:, None, None].expand(3, 4, 4).clone(),
            0,
            1,
            {"digit": 3, "color": 1, "angle": 10, "style": 0},
        )
        for i in range(2)
    ]
    bench = NemoBenchmark("toy", target.class_names, "cmnist", errors, None, SolidRenderer(), VOCAB)
    scorer = CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    return bench, scorer, JudgePanel([KeywordJudge("cmnist")])


def p_true(red: float, green: float) -> float:
    return math.exp(3 * red) / (math.exp(3 * red) + math.exp(3 * green))


def test_logs_hand_computed_cei_and_llm_match_and_skips_sanity_check():
    bench, scorer, panel = toy_setup()
    calls = []

    def explain_fn(module, images):
        calls.append(len(images))
        return ["The green colour misled it; correct ones are red.", "The digit is rotated 10 degrees."]

    callback = NemoEvalCallback(bench, scorer, panel, explain_fn=explain_fn)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        callbacks=[callback],
    )
    trainer.fit(TinyModule(), data, data)
    assert calls == [2, 2]  # once per validation epoch, never in the sanity check
    cei_colour = 100 * (p_true(1, 0) - p_true(0, 1))  # green -> red
    expected_cei = (cei_colour + 0.0) / 2  # rotation edit leaves the toy image unchanged
    assert callback.last_result["nemo/cei"] == pytest.approx(expected_cei)
    assert callback.last_result["nemo/llm_match"] == pytest.approx(0.5)  # colour named once out of two
    assert trainer.callback_metrics["nemo/cei"].item() == pytest.approx(expected_cei, rel=1e-5)


def test_wandb_table_only_with_a_wandb_logger():
    from lightning.pytorch.loggers import WandbLogger

    bench, scorer, panel = toy_setup()

    class FakeWandb(WandbLogger):
        def __init__(self):  # no run is started
            self.tables = []

        def log_table(self, key, columns=None, data=None, **kwargs):
            self.tables.append((key, columns, data))

    other = SimpleNamespace(log_table=lambda *a, **k: pytest.fail("a non-W&B logger got a table"))
    wandb_logger = FakeWandb()
    trainer = SimpleNamespace(
        sanity_checking=False,
        current_epoch=0,
        global_rank=0,
        world_size=1,
        is_global_zero=True,
        loggers=[other, wandb_logger],
        global_step=7,
    )
    module = TinyModule()
    module.log_dict = lambda *a, **k: None
    callback = NemoEvalCallback(
        bench, scorer, panel, explain_fn=lambda m, images: ["colour green, correct ones are red"] * len(images)
    )
    callback.on_validation_epoch_end(trainer, module)
    ((key, columns, rows),) = wandb_logger.tables
    assert key == "nemo/explanations" and columns[3] == "explanation" and len(rows) == 2
    assert rows[0][4] == '{"attribute": "color", "value": 0}' and rows[0][7] == 1.0
