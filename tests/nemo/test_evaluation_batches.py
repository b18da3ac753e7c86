"""The evaluation loop explains a method's pending errors in chunks and isolates a failing one."""

from __future__ import annotations

from nemo_toys import VOCAB, RedGreenTarget, SolidRenderer, solid

from nemo_train.backends.base import BackendError
from nemo_train.nemo.evaluation import Progress, TargetJob, run_target
from nemo_train.nemo.methods.base import Explanation
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark
from nemo_train.scoring.interventions import CounterfactualScorer, ExactAttributeEditor, KeywordAttributeDeriver
from nemo_train.scoring.judges import JudgePanel, KeywordJudge
from nemo_train.store import ResultStore


class FlakyBatcher:
    """Names the colour; any request that includes error ``e2`` fails for good."""

    name = "Flaky"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def explain(self, sample, benchmark):
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples, benchmark):
        self.batches.append([s.sample_id for s in samples])
        if any(s.sample_id == "e2" for s in samples):
            raise BackendError("HTTP 500 after 1 retries")
        return [Explanation("The green colour made it look like another class; it would be right in red.")] * len(
            samples
        )


def test_pending_errors_are_explained_in_chunks_and_only_the_failing_one_is_recorded_failed(tmp_path):
    target = RedGreenTarget()
    errors = [ErrorSample(f"e{i}", solid(1), 0, 1, {"digit": 3, "color": 1, "angle": 0, "style": 0}) for i in range(5)]
    bench = NemoBenchmark("toy", target.class_names, "cmnist", errors, None, SolidRenderer(), VOCAB)
    scorer = CounterfactualScorer(target, KeywordAttributeDeriver(VOCAB), ExactAttributeEditor(SolidRenderer()))
    method, store = FlakyBatcher(), ResultStore(tmp_path / "results.jsonl")
    job = TargetJob("toy", bench, scorer, JudgePanel([KeywordJudge("cmnist")]), [(method, {"v": 1})])
    store.append({"key": "toy|Flaky|e0", "failed": False, "cei": 1.0}, {"v": 1})  # resumed, never re-explained
    progress = Progress()
    run_target(job, store, progress, show_bar=False, batch_size=3)
    assert method.batches == [["e1", "e2", "e3"], ["e1"], ["e2"], ["e3"], ["e4"]]
    assert (progress.resumed, progress.computed, progress.failed) == (1, 3, 1)
    assert store.get("toy|Flaky|e2")["failed"] and "HTTP 500" in store.get("toy|Flaky|e2")["reason"]
    # the colour edit (green -> red) flips the toy classifier back: a positive CEI
    assert all(store.get(f"toy|Flaky|e{i}")["cei"] > 0 for i in (1, 3, 4))
