"""A reinforcement run stops when its training reward rises while the held-out reward falls."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

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


def test_the_training_reward_is_averaged_between_validations_and_the_trainer_told(capsys):
    watch = RewardGamingStop(patience=1)
    for reward, held_out in ((0.1, 0.6), (0.5, 0.3)):
        for _ in range(3):
            watch.on_train_batch_end(_trainer(train__reward=reward), None, None, None, 0)
        trainer = _trainer(val__reward=held_out)
        watch.on_validation_end(trainer, None)
    assert trainer.should_stop and watch.stopped_at == 7
    assert "rose while val/reward fell" in capsys.readouterr().out
    restored = RewardGamingStop()
    restored.load_state_dict(watch.state_dict())
    assert restored.previous == pytest.approx((0.5, 0.3)) and restored.strikes == 1
