"""The GRPO stage of the explainer: group-relative advantages, a step that makes rewarded answers more likely, the
frozen reference, and a run of the preset on a tiny random model with the tables' scoring as its reward.

The errors are constructed (:func:`tests.explainer.test_grpo_reward.constructed_zoo`: each error its own hand-made
classifier that fails on one known factor), written as a teacher's pair file would be; nothing depends on which
errors a trained model happens to make.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from datamodules.explanations import ExplanationRecord, to_pil
from datamodules.explanations.error_prompts import ErrorPromptsDataModule, ErrorPromptsDataset
from datamodules.explanations.records import read_records, write_records
from datamodules.shifts import ShiftsDataModule
from nemo_train.callbacks.adapter_checkpoint import AdapterCheckpoint
from nemo_train.errors import UserInputError
from nemo_train.explainer.grpo import GRPOModule
from nemo_train.explainer.module import ExplainerModule
from nemo_train.loggers import WandbLogger
from nemo_train.nemo.reward import VerifiedEditReward
from tests.explainer.test_grpo_reward import constructed_zoo

PRESET = Path(__file__).resolve().parents[2] / "configs" / "explainer" / "grpo_shifts.yaml"


def _zoo():
    dm = ShiftsDataModule(gaps="gaps_a", train_size=40, test_size=10)
    dm.setup("fit")
    return constructed_zoo(dm.renderer)[0]


class ConstructedZooReward(VerifiedEditReward):
    """The verified-edit reward over the constructed zoo (a ``class_path`` the CLI test gives the preset)."""

    def __init__(self) -> None:
        super().__init__()
        for name, bench, oracle in _zoo():
            self.add(name, bench, oracle)


class PayFirst:
    """Pays the first answer of every group of ``group_size`` and nothing else."""

    def __init__(self, group_size: int = 4) -> None:
        self.group_size = group_size

    def __call__(self, errors, texts):
        rewards = [1.0 if i % self.group_size == 0 else 0.0 for i in range(len(texts))]
        return rewards, {"first": rewards}


def write_pairs(out: Path, classifiers) -> dict[str, Path]:
    """The constructed errors as a teacher's pair files (error image, question, provenance), 4 held out."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for name, bench, _ in classifiers:
        for sample in bench.errors:
            path = out / "images" / f"{name}-{sample.sample_id}.png"
            to_pil(sample.image).save(path)
            records.append(
                ExplanationRecord(
                    image=str(path.resolve()),
                    explanation="unused by the reinforcement stage",
                    prompt=f'The classifier called this "{sample.label}" a "{sample.prediction}". Why?',
                    cause=sample.cause,
                    label=sample.label,
                    prediction=sample.prediction,
                    provenance={"classifier": name, "sample_id": sample.sample_id, "view": "error"},
                )
            )
    return {
        "train": write_records(records[4:], out / "train.jsonl"),
        "val": write_records(records[:4], out / "val.jsonl"),
    }


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return write_pairs(tmp_path_factory.mktemp("grpo_pairs"), _zoo())


def test_advantages_are_relative_to_each_group():
    module = GRPOModule(reward=PayFirst(3), group_size=3)
    advantages, std = module.group_advantages(torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0, 2.0]), 3)
    std_first = (1 / 3) ** 0.5  # the sample std of (1, 0, 0)
    expected = [(r - 1 / 3) / (std_first + 1e-4) for r in (1.0, 0.0, 0.0)]
    assert advantages[:3].tolist() == pytest.approx(expected, abs=1e-5)
    assert advantages[3:].tolist() == [0.0, 0.0, 0.0] and std.tolist() == pytest.approx([std_first, 0.0], abs=1e-6)
    with pytest.raises(UserInputError, match="group_size"):
        GRPOModule(reward=PayFirst(), group_size=1)


def test_the_data_is_the_teachers_errors_with_what_the_reward_needs(pairs):
    data = ErrorPromptsDataModule(str(pairs["train"]), str(pairs["val"]), use_counterfactual=False, batch_size=3)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert len(batch) == 3 and {"picture", "prompt", "system", "error"} <= set(batch[0])
    assert {"classifier", "sample_id", "label", "prediction", "cause"} <= set(batch[0]["error"])
    bare = read_records(pairs["val"])[0]
    bare.provenance = None
    with pytest.raises(UserInputError, match="provenance"):
        ErrorPromptsDataset([bare])


def test_a_step_makes_the_rewarded_answers_more_likely_and_keeps_the_reference(pairs, explainer_cache):
    torch.manual_seed(0)
    module = GRPOModule(reward=PayFirst(4), group_size=4, kl_coef=0.0, max_new_tokens=8, modules_to_save=["lm_head"])
    module.configure_model()
    items = [ErrorPromptsDataset(read_records(pairs["val"]), use_counterfactual=False)[i] for i in range(2)]
    sampled = module.sample_groups(items)
    inputs, answer, mask = sampled["inputs"], sampled["answer"], sampled["mask"]

    def answer_logp() -> torch.Tensor:
        with torch.no_grad():
            logp = module.token_logprobs(module.answer_logits(inputs, answer, mask), answer)
        return (logp * mask).sum(1)

    before = answer_logp()
    media = module.media_token_ids()  # never sampled: the scoring forward pass would read them as images
    assert module.model.config.image_token_id in media and not torch.isin(answer, torch.tensor(media)).any()
    optimizer = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=0.5)
    loss, stats = module.grpo_loss(inputs, answer, mask, sampled["rewards"])
    loss.backward()
    optimizer.step()
    change = answer_logp() - before
    paid = torch.arange(len(change)) % 4 == 0
    assert (change[paid] > 0).all() and change[paid].min() > change[~paid].max()
    assert stats["train/reward"] == pytest.approx(0.25) and stats["train/kl"] == 0.0
    trained = {n: p.detach().clone() for n, p in module.model.named_parameters() if p.requires_grad}
    with module.reference_weights():  # the starting weights, swapped in
        assert all(torch.equal(p, module.reference[n]) for n, p in module.model.named_parameters() if n in trained)
        assert answer_logp() == pytest.approx(before.tolist(), abs=1e-4)
    assert any(not torch.equal(trained[n], module.reference[n]) for n in trained)  # the step changed the policy
    assert all(torch.equal(p, trained[n]) for n, p in module.model.named_parameters() if n in trained)


def test_a_step_with_the_tables_scoring_logs_and_writes_an_adapter(pairs, explainer_cache, tmp_path):
    torch.manual_seed(0)
    reward = ConstructedZooReward()
    module = GRPOModule(reward=reward, group_size=2, max_new_tokens=12, table_every_n_steps=1)
    data = ErrorPromptsDataModule(str(pairs["train"]), str(pairs["val"]), use_counterfactual=False, batch_size=2)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        val_check_interval=1,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=WandbLogger(save_dir=str(tmp_path), mode="disabled"),  # the table of sampled answers too
        default_root_dir=tmp_path,
        callbacks=[AdapterCheckpoint()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, data)
    metrics = trainer.callback_metrics
    for key in ("train/reward", "train/kl", "train/entropy", "train/answer_tokens", "train/reward/cei", "val/reward"):
        assert key in metrics and torch.isfinite(metrics[key]), key
    adapter = tmp_path / "adapter"
    loaded = ExplainerModule.from_adapter(adapter)
    assert loaded.prompting["use_counterfactual"] is False


def test_the_preset_runs_with_fast_dev_run(pairs, explainer_cache, tmp_path):
    from nemo_train.lightning_cli import NemoLightningCLI

    NemoLightningCLI(
        args=[
            "fit",
            "--config",
            str(PRESET),
            "--trainer.fast_dev_run=true",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
            "--model.init_args.adapter=null",
            f"--model.init_args.reward={{class_path: {__name__}.ConstructedZooReward}}",
            "--model.init_args.group_size=2",
            "--model.init_args.max_new_tokens=8",
            f"--data.init_args.train_jsonl={pairs['train']}",
            f"--data.init_args.val_jsonl={pairs['val']}",
            "--data.init_args.use_counterfactual=false",
            "--data.init_args.batch_size=2",
        ]
    )
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()


def test_an_answer_out_of_the_tables_format_is_rewarded_as_no_explanation():
    """The tables read ``cause_of_error`` from an answer's JSON; a policy that drifts out of the format (a misspelt
    key, broken JSON) must not be paid for the sentence inside it."""
    module = GRPOModule(reward=PayFirst(4), group_size=4)
    answers = [
        '{"cause_of_error": " The digit is red. Edit: color -> white "}',
        '{"cause_error": "The digit is red. Edit: color -> white"}',
        '{"cause__error 5 because of the small size. Edit: angle -> normal_of_error"}',
        "The digit is red. Edit: color -> white",
        '{"cause_of_error": 3}',
    ]
    assert module.explanations(answers) == ["The digit is red. Edit: color -> white", "", "", "", ""]
    raw = GRPOModule(reward=PayFirst(4), group_size=4, answer_key=None)
    assert raw.explanations(answers) == answers
