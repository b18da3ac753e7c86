"""CEI, LLM Match and the per-error score mean against hand-computed values and scripted judges."""

from __future__ import annotations

import math
import os
import random

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest
import torch

from nemo_train.backends import ScriptedBackend
from nemo_train.metrics.nemo import (
    CEI,
    LLMMatch,
    ScoreMean,
    cei,
    cei_points,
    judge_mean,
    llm_match,
    score_mean,
)
from nemo_train.scoring.judges import JudgeItem, JudgePanel, KeywordJudge, LLMJudge, PanelJudgement


def test_cei_hand_values_from_true_class_probabilities():
    # P(y|s_e) - P(y|s_o): 0.9-0.2, 0.3-0.5, 0.6-0.6 -> 70, -20, 0 points
    values = cei(torch.tensor([0.9, 0.3, 0.6]), torch.tensor([0.2, 0.5, 0.6]))
    assert values.tolist() == pytest.approx([70.0, -20.0, 0.0])


def test_cei_points_on_floats_and_tensors():
    # 100 * (7/8 - 1/4) = 62.5 exactly; floats stay floats, tensors keep their dtype
    assert cei_points(0.875, 0.25) == 62.5
    assert isinstance(cei_points(0.875, 0.25), float)
    value = cei_points(
        torch.tensor([0.875, 0.25], dtype=torch.float64), torch.tensor([0.25, 0.875], dtype=torch.float64)
    )
    assert value.dtype == torch.float64 and value.tolist() == [62.5, -62.5]
    # cei() computes in float64 whatever the input dtype: float32 0.1 is 0.100000001490116..., not 0.1
    p = torch.tensor([0.1], dtype=torch.float32)
    assert cei(p, torch.zeros(1)).item() == 100.0 * float(p)


def test_cei_gathers_true_class_from_probability_matrices():
    edited = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]])
    original = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1]])
    target = torch.tensor([1, 0])
    # sample 0: class 1, 0.7-0.3 = 40; sample 1: class 0, 0.5-0.2 = 30
    assert cei(edited, original, target).tolist() == pytest.approx([40.0, 30.0])
    with pytest.raises(ValueError, match="target"):
        cei(edited, original)


def test_cei_metric_mean_and_per_sample_over_updates():
    metric = CEI()
    metric.update(torch.tensor([0.9, 0.3]), torch.tensor([0.2, 0.5]))
    metric.update(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.9, 0.1]]), torch.tensor([0]))
    # 70, -20, -40 -> mean 10/3
    assert metric.compute().item() == pytest.approx(10 / 3)
    assert metric.per_sample().tolist() == pytest.approx([70.0, -20.0, -40.0])
    metric.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(metric.compute().item())
    assert metric.per_sample().numel() == 0


def test_cei_states_reduce_like_one_process():
    # merge_state applies each state's dist_reduce_fx: two "ranks" must equal one metric over all data
    a, b, whole = CEI(), CEI(), CEI()
    a.update(torch.tensor([0.9]), torch.tensor([0.2]))
    b.update(torch.tensor([0.3, 0.6]), torch.tensor([0.5, 0.1]))
    whole.update(torch.tensor([0.9, 0.3, 0.6]), torch.tensor([0.2, 0.5, 0.1]))
    a.merge_state(b)
    assert a.compute().item() == pytest.approx(whole.compute().item())
    assert sorted(a.per_sample().tolist()) == pytest.approx(sorted(whole.per_sample().tolist()))


def test_score_mean_skips_unscored_and_weights():
    # (1 + 0.5 + 0) / 3 with None left out; (2 * 3 + 4 * 1) / (3 + 1) = 2.5
    assert score_mean([1.0, None, 0.5, 0.0]) == pytest.approx(0.5)
    assert score_mean(0.25) == 0.25
    assert score_mean([2.0, 4.0], weights=[3, 1]) == 2.5
    assert math.isnan(score_mean([])) and math.isnan(score_mean([None]))
    with pytest.raises(ValueError, match="one weight per score"):
        score_mean([1.0, 2.0], weights=[1])


def test_score_mean_adds_left_to_right():
    # 1 + 1e-16 rounds back to 1 (half an ulp of 1 is 1.1e-16), twenty times: the sum is exactly 1, the mean
    # exactly 1/21, as a Python loop gets it; a tensor's vectorised sum keeps some of the small terms
    values = [1.0] + [1e-16] * 20
    assert score_mean(values) == 1.0 / 21
    metric = ScoreMean()
    metric.update(values[:7])
    metric.update(torch.tensor(values[7:], dtype=torch.float64))
    assert metric.compute().item() == 1.0 / 21 and metric.count.item() == 21
    # (1e16 + 1) rounds to 1e16 (ties to even), - 1e16 gives 0, + 1 gives 1: mean 1/4, not the exact 1/2
    assert score_mean([1e16, 1.0, -1e16, 1.0]) == 0.25


def test_score_mean_metric_over_updates_and_merge():
    a, b, whole = ScoreMean(), ScoreMean(), ScoreMean()
    a.update([0.5, None])
    b.update(1.0)
    b.update([None, 0.0])
    whole.update([0.5, None, 1.0, None, 0.0])
    a.merge_state(b)
    assert a.compute().item() == whole.compute().item() == pytest.approx(0.5)
    empty = ScoreMean()
    empty.update([None])
    assert math.isnan(empty.compute().item())


def test_llm_match_functional_averages_judges_then_samples():
    nan = float("nan")
    scores = torch.tensor([[1.0, 0.5, 0.0], [1.0, 1.0, nan], [nan, nan, nan]])
    # sample 0: 0.5; sample 1: 1.0; sample 2: no judge -> left out; mean 0.75
    assert llm_match(scores).item() == pytest.approx(0.75)
    assert math.isnan(llm_match(torch.full((2, 2), nan)).item())


def test_llm_match_metric_per_judge_and_failures():
    metric = LLMMatch(["gpt", "claude", "gemini"])
    metric.update([[1.0, 0.5, 0.0], [1.0, 1.0, None]])
    metric.update(torch.tensor([[float("nan")] * 3, [0.0, 0.5, 0.5]]))
    # samples: 0.5, 1.0, (failed), 1/3 -> mean (0.5 + 1 + 1/3) / 3
    assert metric.compute().item() == pytest.approx((0.5 + 1.0 + 1 / 3) / 3)
    assert metric.failures.item() == 1
    per_judge = metric.per_judge()
    assert per_judge["gpt"] == pytest.approx(2 / 3)  # 1, 1, 0
    assert per_judge["claude"] == pytest.approx(2 / 3)  # 0.5, 1, 0.5
    assert per_judge["gemini"] == pytest.approx(0.25)  # 0, 0.5
    with pytest.raises(ValueError, match="one column per judge"):
        metric.update(torch.zeros(2, 2))


def test_llm_match_merges_like_one_process():
    a, b, whole = (LLMMatch(["j1", "j2"]) for _ in range(3))
    rows = [[1.0, 0.5], [0.0, None], [0.5, 0.5]]
    a.update(rows[:1])
    b.update(rows[1:])
    whole.update(rows)
    a.merge_state(b)
    assert a.compute().item() == pytest.approx(whole.compute().item())
    assert a.per_judge() == pytest.approx(whole.per_judge())


def test_a_panels_mean_is_the_metrics_judge_mean_bit_for_bit():
    """A panel's per-explanation LLM Match and grounding come from ``metrics.nemo.judge_mean`` (no mean of its own):
    the numbers the hand-written mean gave (judge order, left to right), and LLMMatch's per-sample row."""
    rng = random.Random(0)
    for _ in range(2000):
        row = [rng.choice([None, 0.0, 0.5, 1.0, rng.random()]) for _ in range(rng.randint(0, 7))]
        valid = [s for s in row if s is not None]
        before = sum(valid) / len(valid) if valid else None  # the mean PanelJudgement wrote by hand
        verdict = PanelJudgement(dict(enumerate(row)), groundings=dict(enumerate(row)))
        assert judge_mean(row) == verdict.mean == verdict.grounding == before
    graded = [[1.0, None, 0.5], [None, None, None], [0.0, 0.5, 0.5]]
    per_sample = [PanelJudgement(dict(enumerate(row))).mean for row in graded]
    assert per_sample == [0.75, None, 1 / 3]
    metric = LLMMatch(["a", "b", "c"])
    metric.update(graded)
    assert metric.compute().item() == score_mean(per_sample) and metric.failures.item() == 1


def test_llm_match_with_scripted_llm_judges_and_keyword_judge():
    items = [
        JudgeItem("The model relied on the red colour of the digit.", "3", "1"),
        JudgeItem("The digit is rotated by 30 degrees.", "3", "8"),
    ]
    # two scripted LLM judges answering in JSON (one in a fenced block, one with prose around it)
    strict = ScriptedBackend(
        ['{"reasoning": "names colour", "score": 1}', '{"reasoning": "no", "score": 0}'], model="strict"
    )
    lenient = ScriptedBackend(
        [
            'Sure!\n```json\n{"reasoning": "colour", "score": 1}\n```',
            'Here it is: {"reasoning": "pose only", "score": 0.5} done',
        ],
        model="lenient",
    )
    panel = JudgePanel([LLMJudge(strict, "cmnist"), LLMJudge(lenient, "cmnist"), KeywordJudge("cmnist")])
    verdicts = panel.judge(items)
    assert [v.scores for v in verdicts] == [
        {"llm:strict": 1.0, "llm:lenient": 1.0, panel.names[2]: 1.0},
        {"llm:strict": 0.0, "llm:lenient": 0.5, panel.names[2]: 0.0},
    ]
    metric = LLMMatch(panel.names)
    metric.update([[v.scores[name] for name in panel.names] for v in verdicts])
    # sample 0: 1.0; sample 1: 0.5/3 -> mean (1 + 1/6) / 2
    assert metric.compute().item() == pytest.approx((1 + 1 / 6) / 2)
    assert verdicts[1].mean == pytest.approx(1 / 6)
    assert metric.per_judge()["llm:lenient"] == pytest.approx(0.75)


def _ddp_worker(rank: int, world_size: int, port: int, results) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        cei_metric, match = CEI(), LLMMatch(["a", "b"])
        if rank == 0:
            cei_metric.update(torch.tensor([0.9, 0.3]), torch.tensor([0.2, 0.5]))  # 70, -20
            match.update([[1.0, 0.5], [None, None]])
        else:
            cei_metric.update(torch.tensor([0.6]), torch.tensor([0.1]))  # 50
            match.update([[0.0, None]])
        results[rank] = (
            cei_metric.compute().item(),
            sorted(cei_metric.per_sample().tolist()),
            match.compute().item(),
            match.per_judge(),
            match.failures.item(),
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_metrics_sync_across_two_processes():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.start_processes(_ddp_worker, args=(2, port, results), nprocs=2, join=True, start_method="fork")
    for rank in (0, 1):
        mean, per_sample, match, per_judge, failures = results[rank]
        assert mean == pytest.approx(100 / 3)
        assert per_sample == pytest.approx([-20.0, 50.0, 70.0])
        assert match == pytest.approx((0.75 + 0.0) / 2)
        assert per_judge == pytest.approx({"a": 0.5, "b": 0.5})
    assert results[0][4] + results[1][4] == 1  # raw states stay local: rank 0 had the failed sample
