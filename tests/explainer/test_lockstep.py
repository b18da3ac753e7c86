"""The lockstep batching of generation on one process: batches in order, no padding without sharding.

(Two ranks with uneven shares: tests/callbacks/test_explanation_accuracy.py and tests/explainer/test_fsdp.py.)
"""

from __future__ import annotations

from nemo_train.explainer.lockstep import max_over_ranks, padded_batches, run_in_lockstep


def test_without_a_process_group_nothing_is_padded():
    assert max_over_ranks(3) == 3
    assert padded_batches(list("abcde"), 2, synced=True) == [["a", "b"], ["c", "d"], ["e"]]
    assert padded_batches([], 2, synced=False) == []


def test_answers_follow_the_images_and_counterfactuals_stay_paired():
    calls = []

    def generate(images, prompts, counterfactuals):
        calls.append((images, prompts, counterfactuals))
        return [f"{i}|{p}|{c}" for i, p, c in zip(images, prompts, counterfactuals or [None] * len(images))]

    answers = run_in_lockstep(
        ["i0", "i1", "i2"], ["p0", "p1", "p2"], generate, 2, True, ("dummy", "?"), counterfactuals=["c0", "c1", "c2"]
    )
    assert answers == ["i0|p0|c0", "i1|p1|c1", "i2|p2|c2"]
    assert [c[0] for c in calls] == [["i0", "i1"], ["i2"]]  # one process: no dummy batch
    assert run_in_lockstep([], [], generate, 2, False, ("dummy", "?")) == [] and len(calls) == 2
