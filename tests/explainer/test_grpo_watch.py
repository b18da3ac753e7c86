"""A reinforcement run stops when its training reward rises while the held-out reward falls."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from nemo_train.errors import UserInputError
from nemo_train.explainer.grpo_watch import RewardGamingStop


def _trainer(**metrics) -> SimpleNamespace:
    values = {k.replace("__", "/"): torch.tensor(v) for k, v in metrics.items()}
    return SimpleNamespace(callback_metrics=values, sanity_checking=False, should_stop=False, global_step=7,
                           is_global_zero=True)  # fmt: skip


def test_it_stops_only_after_patience_validations_of_rise_and_fall():
    watch = RewardGamingStop(patience=2, tolerance=0.01)
    assert not watch.observe(0.2, 0.5)
    assert not watch.observe(0.3, 0.4)  # first strike
    assert not watch.observe(0.35, 0.45)  # the held-out reward recovered: strikes reset
    assert not watch.observe(0.4, 0.3)
    assert watch.observe(0.5, 0.2)  # second in a row
    calm = RewardGamingStop(patience=1, tolerance=0.05)
    calm.observe(0.2, 0.5)
    assert not calm.observe(0.22, 0.48)  # within the tolerance: no rise, no fall
    with pytest.raises(UserInputError, match="patience"):
        RewardGamingStop(patience=0)


def test_a_held_out_reward_that_falls_to_zero_and_stays_there_stops_the_run():
    # the collapse seen on the zoo: greedy answers left the answer format (held-out reward 0 from then on) while the
    # sampled answers the training reward scores kept it; compared with the previous validation only, the flat zeros
    # would reset the count at every validation
    watch = RewardGamingStop(patience=2, tolerance=0.01)
    assert not watch.observe(0.30, 0.30)
    assert not watch.observe(0.35, 0.0)  # first strike
    assert watch.observe(0.36, 0.0)  # flat under the best, the training reward still above its level there
    climbing = RewardGamingStop(patience=2, tolerance=0.01)
    for train, held_out in ((0.30, 0.30), (0.35, 0.10)):
        climbing.observe(train, held_out)
    assert not climbing.observe(0.36, 0.20)  # climbing back: no strike
    assert not climbing.observe(0.37, 0.20) and climbing.strikes == 1  # flat again under the best: a strike
    same_reward = RewardGamingStop(patience=1, tolerance=0.01)
    same_reward.observe(0.30, 0.30)
    assert not same_reward.observe(0.30, 0.0)  # the training reward did not rise: the policy got worse, not gamed


def test_the_training_reward_is_averaged_between_validations_and_the_trainer_told(capsys):
    watch = RewardGamingStop(patience=1)
    for reward, held_out in ((0.1, 0.6), (0.5, 0.3)):
        for _ in range(3):
            watch.on_train_batch_end(_trainer(train__reward=reward), None, None, None, 0)
        trainer = _trainer(val__reward=held_out)
        watch.on_validation_end(trainer, None)
    assert trainer.should_stop and watch.stopped_at == 7
    assert "rose while val/reward stayed under its best (0.600)" in capsys.readouterr().out
    restored = RewardGamingStop()
    restored.load_state_dict(watch.state_dict())
    assert restored.previous == pytest.approx((0.5, 0.3)) and restored.best == pytest.approx((0.1, 0.6))
    assert restored.strikes == 1
    legacy = RewardGamingStop()  # a state saved before the best was kept: the last validation stands for it
    legacy.load_state_dict({"previous": (0.5, 0.3), "strikes": 1})
    assert legacy.best == pytest.approx((0.5, 0.3))


class _Collapsing(L.LightningModule):
    """Logs a training reward that rises and a held-out reward of 0.3 before training and 0 from then on."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        self.log("train/reward", 0.1 + 0.01 * self.global_step)
        return (self.weight - batch[0]).pow(2).sum()

    def validation_step(self, batch, batch_idx) -> None:
        self.log("val/reward", 0.3 if self.global_step == 0 else 0.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("sanity_steps", [-1, 0])
def test_the_sanity_check_over_the_whole_held_out_set_is_the_baseline_a_collapse_is_seen_against(sanity_steps):
    data = DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=1)
    watch = RewardGamingStop(patience=2, tolerance=0.01)
    trainer = L.Trainer(
        max_steps=40, val_check_interval=4, num_sanity_val_steps=sanity_steps, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[watch], accelerator="cpu",
    )  # fmt: skip
    trainer.fit(_Collapsing(), data, data)
    if sanity_steps == -1:  # 0.3 before training, 0 at steps 4, 8, 12: strikes at 8 and 12 (at 4 the level is set)
        assert watch.stopped_at == 12 and watch.best[1] == pytest.approx(0.3)
    else:  # no baseline: the held-out reward is 0 from the first validation on and never falls
        assert watch.stopped_at is None and trainer.global_step == 40
