"""``competency-explanations``: the six-cause fact sheet grades explanations, and the command prints the paper's
Tables 3-4 layout end to end on a tiny configuration."""

import json
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from datamodules.six_cause_facts import FACTS, cause_attributes  # noqa: E402
from nemo_train.cli import run_pipeline  # noqa: E402
from nemo_train.competency.explanation_table import row_summary  # noqa: E402
from nemo_train.competency_explanations import CONSTANT_TEXT, EVERY_CAUSE_TEXT, ExplanationRun  # noqa: E402
from nemo_train.scoring.judges import GroundedJudge, JudgeItem  # noqa: E402
from nemo_train.vocabulary import CAUSES, EXPLANATIONS, is_correct  # noqa: E402

GROUNDED = "grounded-judge (attribute parser, not a model)"


def _grade(text: str, cause: str, direction: str | None = None) -> float:
    judge = GroundedJudge(facts=FACTS)
    return judge.judge([JudgeItem(text, cause=cause, attributes=cause_attributes(cause, direction))])[0].score


def test_the_fact_sheet_names_the_six_causes_and_grades_like_the_keyword_rule():
    assert FACTS.factor_names == list(CAUSES)
    for cause in CAUSES:
        for text in EXPLANATIONS[cause]:  # every reference sentence names its cause alone, by both graders
            assert _grade(text, cause) == 1.0 and is_correct(text, cause), (cause, text)
        assert _grade(CONSTANT_TEXT, cause) == float(cause == "pixelation")
        assert _grade(EVERY_CAUSE_TEXT, cause) == 0.0 and not is_correct(EVERY_CAUSE_TEXT, cause)
    # a claim that inverts the cause is false: the keyword rule credits it, the grounded judge does not
    inverted = "The image is too dark."
    assert is_correct(inverted, "brightness") and _grade(inverted, "brightness") == 0.0
    assert _grade(inverted, "brightness", direction="down") == 1.0
    assert _grade("The image has low contrast and is pixelated.", "contrast") == 0.5
    assert cause_attributes("saturation", "up") == {"saturation": "over-saturated"}


def test_row_summary_gives_each_cause_and_the_average_an_interval():
    grades = {cause: [1.0, 0.0] if cause == "noise" else [0.0, 0.0] for cause in CAUSES}
    summary = row_summary(grades)
    assert summary["noise"]["mean"] == 0.5 and summary["noise"]["ci_low"] <= 0.5 <= summary["noise"]["ci_high"]
    assert summary["average"]["mean"] == pytest.approx(1 / 12) and summary["average"]["n"] == 12
    assert summary["spatial"]["ci_low"] == summary["spatial"]["ci_high"] == 0.0


@pytest.fixture
def captions_adapter(tmp_path, monkeypatch):
    """An untrained adapter folder of the tiny VLM (what the captions stage writes, before any step)."""
    from nemo_train.explainer import ExplainerModule

    monkeypatch.setenv("NEMO_TRAIN_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    module = ExplainerModule(modules_to_save=["visual", "lm_head", "embed_tokens"])
    module.configure_model()
    return str(module.save_adapter(tmp_path / "captions" / "adapter"))


@pytest.mark.slow
def test_command_prints_the_table_with_generated_counterfactuals(
    tmp_path, capsys, model_a_checkpoint, captions_adapter
):
    torch.set_num_threads(1)
    config = {
        "classifier": model_a_checkpoint,
        "pretrained": captions_adapter,
        "datamodule": {
            "class_path": "datamodules.cmnist.CMNISTDataModule",
            "init_args": {"train_size": 600, "test_styles": 1, "batch_size": 64},
        },
        "autoencoder": {
            "class_path": "nemo_train.competency.autoencoder.CompetencyAutoencoder",
            "init_args": {"image_size": 28, "widths": [8, 16], "latent_dim": 16},
        },
        "methods": [{"class_path": "nemo_train.competency.counterfactuals.ReconstructionCounterfactual"}],
        "estimator": {"threshold": 0.1},
        "train": {"autoencoder_epochs": 1},
        "pairs": {"train_per_cause": 1, "eval_per_cause": 1},
        "finetune": {"steps": 1, "batch_size": 6, "max_new_tokens": 3},
        "out_dir": str(tmp_path / "out"),
        "device": "cpu",
    }
    path = tmp_path / "ce.yaml"
    path.write_text(yaml.safe_dump(config))
    run = run_pipeline("competency-explanations", ["--config", str(path)])
    out = capsys.readouterr().out
    assert isinstance(run, ExplanationRun)
    for title in ("graded by the keyword rule: pre-trained", f"graded by the {GROUNDED}: fine-tuned", "trivial"):
        assert title in out
    for column in ("Spatial", "Pixelation", "Average"):
        assert column in out
    assert set(run.tables) == {"keyword rule", GROUNDED}
    for tables in run.tables.values():
        assert set(tables) == {"pre-trained", "fine-tuned", "trivial"}
        assert set(tables["pre-trained"]) == set(tables["fine-tuned"]) == {"None", "Reco"}
        counts = [tables["trivial"]["Constant"][c]["n"] for c in CAUSES]
        present = [c for c, n in zip(CAUSES, counts) if n]
        assert tables["trivial"]["Names every cause"]["average"]["mean"] == 0.0
        assert tables["trivial"]["Constant"]["average"]["mean"] == pytest.approx(
            ("pixelation" in present) * counts[-1] / sum(counts)
        )
        cell = tables["fine-tuned"]["Reco"]["average"]
        assert cell["ci_low"] <= cell["mean"] <= cell["ci_high"] and cell["n"] == sum(counts)
    assert set(run.success) == {"Reco"} and 0.0 <= run.success["Reco"] <= 1.0
    # the Reco pairs show the image Reco made, never the clean original; the None pairs show none
    reco = [json.loads(line) for line in (tmp_path / "out" / "pairs" / "Reco_train.jsonl").read_text().splitlines()]
    none = [json.loads(line) for line in (tmp_path / "out" / "pairs" / "None_eval.jsonl").read_text().splitlines()]
    assert reco and all(r["counterfactual"].endswith("_Reco.png") for r in reco)
    assert none and all("counterfactual" not in r for r in none)
    for condition in ("None", "Reco"):
        assert (tmp_path / "out" / "finetuned" / condition / "adapter" / "adapter_config.json").is_file()
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["tables"] == json.loads(json.dumps(run.tables)) and written["success"] == run.success
    rows = [json.loads(line) for line in (tmp_path / "out" / "explanations.jsonl").read_text().splitlines()]
    assert {(r["block"], r["row"]) for r in rows} >= {("pre-trained", "None"), ("fine-tuned", "Reco")}
    assert all(set(r["grades"]) == {"keyword rule", GROUNDED} for r in rows)
    assert "Competency explanations" in (tmp_path / "out" / "table.txt").read_text()


def test_a_served_mllm_and_llm_judges_are_configured_not_coded():
    from jsonargparse import auto_parser

    from nemo_train.competency_explanations import competency_explanations

    served = {"class_path": "nemo_train.backends.openai_compat.OpenAICompatibleBackend",
              "init_args": {"base_url": "http://localhost:8000/v1", "model": "some/vlm", "api_key_env": None}}  # fmt: skip
    args = [
        f"--pretrained={json.dumps(served)}",
        '--explainer={"class_path": "nemo_train.explainer.ExplainerModule", '
        '"init_args": {"model_name_or_path": "some/vlm", "load_in_4bit": true}}',
        f'--judges=[{{"class_path": "nemo_train.scoring.judges.LLMJudge", "init_args": {{"backend": {json.dumps(served)}}}}}]',
    ]
    parser = auto_parser(competency_explanations, as_positional=False, exit_on_error=False)
    config = parser.instantiate_classes(parser.parse_args(args))
    assert type(config.pretrained).__name__ == "OpenAICompatibleBackend" and config.pretrained.model == "some/vlm"
    assert config.explainer.hparams.load_in_4bit and config.explainer.model is None  # built, not loaded
    assert type(config.judges[0]).__name__ == "LLMJudge"
