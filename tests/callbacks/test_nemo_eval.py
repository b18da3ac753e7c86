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
from nemo_train.models.targets import Target  # noqa: E402
from nemo_train.models.trainer import quiet_trainer  # noqa: E402
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark  # noqa: E402
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver  # noqa: E402
from nemo_train.scoring.judges import JudgePanel, KeywordJudge  # noqa: E402

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

    def explain_fn(module, errors, class_names):
        calls.append(len(errors))
        return ["The green colour misled it; correct ones are red.", "The digit is rotated 10 degrees."]

    callback = NemoEvalCallback(benchmark=bench, scorer=scorer, panel=panel, explain_fn=explain_fn)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = quiet_trainer(max_epochs=2, num_sanity_val_steps=1, callbacks=[callback])
    trainer.fit(TinyModule(), data, data)
    assert calls == [2, 2]  # once per validation epoch, never in the sanity check
    cei_colour = 100 * (p_true(1, 0) - p_true(0, 1))  # green -> red
    expected_cei = (cei_colour + 0.0) / 2  # rotation edit leaves the toy image unchanged
    assert callback.last_result["nemo/cei"] == pytest.approx(expected_cei)
    low, high = callback.last_result["nemo/cei_ci_low"], callback.last_result["nemo/cei_ci_high"]
    assert low <= expected_cei <= high and (low, high) != (expected_cei, expected_cei)  # two different errors
    # colour named once out of two; the keyword judge is no language model, so the metric says "rule_match"
    assert callback.last_result["nemo/rule_match"] == pytest.approx(0.5)
    assert not any("llm_match" in key for key in callback.last_result)
    assert trainer.callback_metrics["nemo/cei"].item() == pytest.approx(expected_cei, rel=1e-5)


def test_wandb_table_only_with_a_wandb_logger(table_loggers):
    bench, scorer, panel = toy_setup()

    other, wandb_logger = table_loggers
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
        benchmark=bench,
        scorer=scorer,
        panel=panel,
        explain_fn=lambda m, errors, names: ["colour green, correct ones are red"] * len(errors),
    )
    callback.on_validation_epoch_end(trainer, module)
    ((key, columns, rows),) = wandb_logger.tables
    assert key == "nemo/explanations" and columns[3] == "explanation" and len(rows) == 2
    assert rows[0][4] == '{"attribute": "color", "value": 0}' and rows[0][7] == 1.0
    assert columns[7] == "rule_match [keyword-judge (closed-vocabulary synthetic only), not a model]"
    assert columns[8:] == ["reason", "consistent", "cause"]
    assert rows[0][8]  # the judge's reason
    assert rows[0][9] is None  # no fact sheet to read the sentence against


def test_needs_error_sets_or_ready_objects():
    bench, scorer, panel = toy_setup()
    with pytest.raises(ValueError, match="either errors"):
        NemoEvalCallback()
    with pytest.raises(ValueError, match="either errors"):
        NemoEvalCallback(benchmark=bench, scorer=scorer)


def test_trained_student_beats_an_untrained_one_on_cei(tmp_path):
    """A tiny explainer fitted for a few steps on structured answers ("Edit: color -> red") states the edit
    that fixes the toy errors; the same model untrained does not (CEI measured by the callback both times)."""
    from datamodules.explanations import ExplanationDataModule, ExplanationRecord, to_pil, write_records
    from nemo_train.explainer import ExplainerModule
    from nemo_train.models.vlm import TINY_MODEL, load_processor
    from nemo_train.scoring.structured import StructuredEditDeriver

    target = RedGreenTarget()
    records = []
    for i in range(16):
        path = tmp_path / f"{i}.png"
        to_pil(PALETTE[1 + i % 2][:, None, None].expand(3, 32, 32).clone()).save(path)
        records.append(ExplanationRecord(image=str(path), explanation="Edit: color -> red", prompt="Why?"))
    write_records(records[:12], tmp_path / "train.jsonl")
    write_records(records[12:], tmp_path / "val.jsonl")
    errors = [
        ErrorSample(
            f"e{c}", PALETTE[c][:, None, None].expand(3, 4, 4).clone(), 0, 1, {"digit": 0, "color": c, "angle": 0}
        )
        for c in (1, 2)
    ]
    bench = NemoBenchmark("toy", target.class_names, "cmnist", errors, None, SolidRenderer(), VOCAB)
    scorer = CounterfactualScorer(target, StructuredEditDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    callback = NemoEvalCallback(
        benchmark=bench, scorer=scorer, panel=JudgePanel([KeywordJudge("cmnist")]), prompt="Why?", max_new_tokens=12
    )
    torch.manual_seed(0)
    data = ExplanationDataModule(
        TINY_MODEL,
        processor_loader=load_processor,
        train_jsonl=str(tmp_path / "train.jsonl"),
        val_jsonl=str(tmp_path / "val.jsonl"),
        batch_size=4,
        max_length=128,
    )
    module = ExplainerModule(modules_to_save=["visual", "lm_head"], lr=0.01)
    trainer = quiet_trainer(
        max_epochs=12,
        check_val_every_n_epoch=12,
        callbacks=[callback],
        default_root_dir=str(tmp_path),
    )
    trainer.validate(module, data)
    untrained = callback.last_result["nemo/cei"]
    trainer.fit(module, data)
    trained = callback.last_result["nemo/cei"]
    best = sum(100 * (p_true(1, 0) - p_true(*[(0, 1), (0, 0)][i])) for i in range(2)) / 2  # both edits to red
    assert untrained == pytest.approx(0.0)
    assert trained == pytest.approx(best, rel=1e-4)


def test_a_rank_without_errors_still_joins_sharded_generation(monkeypatch):
    import nemo_train.callbacks.nemo_eval as nemo_eval

    bench, scorer, panel = toy_setup()
    calls = []

    def explain_fn(module, errors, class_names):
        calls.append(len(errors))
        return ["colour green, correct ones are red"] * len(errors)

    callback = NemoEvalCallback(benchmark=bench, scorer=scorer, panel=panel, explain_fn=explain_fn)
    module = TinyModule()
    module.log_dict = lambda *a, **k: None
    # rank 2 of 3 gets none of the 2 errors
    trainer = SimpleNamespace(
        sanity_checking=False, current_epoch=0, global_rank=2, world_size=3, is_global_zero=False, loggers=[]
    )
    callback.on_validation_epoch_end(trainer, module)
    assert calls == []  # DDP / one device: nothing to generate, no call
    monkeypatch.setattr(nemo_eval, "lockstep", lambda trainer: True)  # as under FSDP / ZeRO-3
    callback.on_validation_epoch_end(trainer, module)
    assert calls == [0]  # called with no errors, so that it can take part in the other ranks' generate calls
