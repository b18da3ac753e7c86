"""The shipped prompt-intervention presets end to end on a tiny random CLIP folder (tmp_path only), the
caption-style zero-shot target, the explainer rewriting its prompts when one is configured, and the one-line
error when the CLIP folder is missing."""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch
import yaml
from loopback_openai_server import LoopbackOpenAIServer, completion
from transformers import CLIPImageProcessor

from datamodules.captions import VOCABULARIES
from datamodules.cmnist import ANGLES, COLOR_NAMES
from nemo_train.cli import main, run_pipeline
from nemo_train.errors import UserInputError
from nemo_train.models.specs import CaptionZeroShotModel
from nemo_train.models.zero_shot import ZeroShotTarget, tiny_random_clip
from nemo_train.scoring.prompt_rule import CaptionPromptRule

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "nemo" / "cmnist_clip_prompt.yaml"
PRESETS = {"cmnist": PRESET, "clevr": ROOT / "configs" / "nemo" / "clevr_clip_prompt.yaml"}
#: what the distractor of each preset names, and the class attribute of its caption prompts
DISTRACTOR = {"cmnist": ("Distractor(rotation)", "digit"), "clevr": ("Distractor(size)", "shape")}
PATTERNS = {"cmnist": r"a digit {word} (tilted left|upright|tilted right)", "clevr": r"a (small|medium|large) {word}"}
CLIP_PATH = "checkpoints/clip_synthetic/hf"


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory) -> Path:
    """A random two-layer CLIP saved as a Hugging Face folder (model, tokenizer, image processor)."""
    folder = tmp_path_factory.mktemp("clip") / "hf"
    clip = tiny_random_clip(["x"], seed=0)
    clip.model.save_pretrained(folder)
    clip.tokenizer.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def test_caption_target_uses_the_training_caption_prompts(clip_folder):
    spec = CaptionZeroShotModel(clip_model=str(clip_folder), captions="cmnist")
    target = spec.build(None, None)
    assert isinstance(target, ZeroShotTarget)
    assert target.prompts == VOCABULARIES["cmnist"].zero_shot_prompts("digit")
    assert target.prompts[3] == "the digit three" and target.prompt_for(3) == "the digit three"
    images = torch.rand(2, 3, 28, 28, generator=torch.Generator().manual_seed(0))
    texts = target.encode_text(target.prompts)
    expected = (target.model.logit_scale.exp() * target.encode_image(images) @ texts.T).softmax(-1)
    assert torch.allclose(target.predict_proba(images), expected, atol=1e-6)
    identity = spec.identity()
    assert identity["zero_shot"] == str(clip_folder.resolve()) and len(identity["sha256"]) == 64
    assert spec.label == "zero-shot clip" + clip_folder.parent.name.removeprefix("clip")
    clevr = CaptionZeroShotModel(clip_model=str(clip_folder), captions="clevr").build(None, None)
    assert clevr.prompts == ["a render of a cube", "a render of a cylinder", "a render of a sphere"]


def test_class_prompts_must_match_the_classes():
    clip = tiny_random_clip(["a", "b"])
    with pytest.raises(UserInputError, match="1 class prompts for 2 classes"):
        ZeroShotTarget(clip.model, ["a", "b"], tokenizer=clip.tokenizer, class_prompts=["only one"])


@pytest.mark.parametrize("generator", sorted(PRESETS))
def test_shipped_preset_end_to_end_on_a_tiny_clip(generator, clip_folder, tmp_path, capsys):
    config = yaml.safe_load(PRESETS[generator].read_text())
    text = json.dumps(config).replace(CLIP_PATH, str(clip_folder))
    config = json.loads(text)
    config["benchmark"].update(n=3, test_styles=1)
    config["out_dir"] = str(tmp_path / "out")
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(config))
    summary = run_pipeline("nemo-eval", ["--config", str(path)])
    out = capsys.readouterr().out
    assert "class prompts rewritten by the caption rule, not a model" in out
    methods = [c.method for c in summary.cells]
    assert methods[:3] == ["SciTX", "ErrorRetrieval", "ErrorRetrieval+validation"]
    distractor_name, class_attribute = DISTRACTOR[generator]
    assert distractor_name in methods and "KnownCause" not in methods
    assert all(c.n == 3 and c.failed == 0 for c in summary.cells)
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    words = VOCABULARIES[generator].words[class_attribute]
    distractor = [r for r in records if r["method"] == distractor_name]
    for r in distractor:  # the distractor (rotation / size) becomes a prompt of the true class in caption words
        pattern = PATTERNS[generator].format(word=words[r["label"]])
        assert re.fullmatch(pattern, r["instruction"]), r["instruction"]
        assert r["settings"]["editor.deriver"] == "auto"
    rewritten = [r for r in records if isinstance(r["instruction"], str)]
    assert len(rewritten) > len(distractor)
    for r in rewritten:
        assert r["cei"] == pytest.approx(100 * (r["p_edited"] - r["p_original"]), abs=1e-6)


@pytest.mark.fault
def test_missing_clip_folder_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["nemo-eval", "--config", str(PRESET), "--out_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nemo-train: error:") and "\n" not in err
    assert CLIP_PATH in err and "nemo-train fit --config configs/clip/synthetic.yaml" in err
    assert not any(tmp_path.iterdir())


def test_with_an_explainer_the_prompts_are_rewritten_by_it(clip_folder, tmp_path, capsys):
    """An explainer on loopback: PromptEdit(auto) asks it to rewrite the caption-style prompt of the true class."""
    rewrites = []

    def responder(request):
        text = request["body"]["messages"][-1]["content"]
        text = text if isinstance(text, str) else " ".join(p.get("text", "") for p in text)
        if "Rewrite the prompt" in text:
            rewrites.append(text)
            return completion('{"reasoning": "names the colour", "solution": "a green handwritten digit"}')
        n = request["body"].get("n", 1)
        return completion(*['{"cause_of_error": "The stroke colour is unusual for this digit."}'] * n)

    with LoopbackOpenAIServer(responder) as server:
        config = tmp_path / "eval.yaml"
        config.write_text(
            "benchmark: {n: 2, test_styles: 1}\n"
            f"targets: [{{class_path: CaptionZeroShotModel, init_args: {{clip_model: {clip_folder}}}}}]\n"
            "methods: [{class_path: SciTXMethod, init_args: {m: 2}}]\n"
            f"editor: PromptEdit\nout_dir: {tmp_path / 'out'}\n"
            "explainer:\n  class_path: OpenAICompatibleBackend\n"
            f"  init_args: {{base_url: {server.base_url}, model: tiny, api_key_env: null, max_retries: 0}}\n"
        )
        summary = run_pipeline("nemo-eval", ["--config", str(config)])
    assert summary.computed == 2 and rewrites
    assert "caption rule" not in capsys.readouterr().out
    words = VOCABULARIES["cmnist"].words["digit"]
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert all(r["instruction"] == "a green handwritten digit" for r in records)
    # the explainer saw the target's own prompt of the true class ("the digit three"), not "a photo of a 3"
    assert all(any(f'"the digit {words[r["label"]]}"' in text for text in rewrites) for r in records)


def test_control_rewrites_script(clip_folder, monkeypatch, capsys):
    """``scripts/prompt_cei_controls.py`` rewrites each error's prompt with its own and another value."""
    script = runpy.run_path(str(ROOT / "scripts" / "prompt_cei_controls.py"))
    rule = CaptionPromptRule("cmnist", {"digit": list(range(10)), "color": COLOR_NAMES, "angle": ANGLES})
    attrs = {"digit": 3, "color": COLOR_NAMES.index("green"), "angle": -20}
    controls = script["statements"](rule, attrs, "digit")
    prompts = {name: rule.rewrite(text, 3, attrs) for name, text in controls.items()}
    assert prompts == {
        "color: the image's value": "a green digit three",
        "color: another value": f"a {COLOR_NAMES[COLOR_NAMES.index('green') + 1]} digit three",
        "tilt: the image's value": "a digit three tilted right",
        "tilt: another value": "a digit three upright",
        "every attribute: the image's values": "a green digit three tilted right",
    }
    argv = ["prompt_cei_controls.py", "--clip_model", str(clip_folder), "--n", "2", "--test_styles", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    script["main"]()
    out = capsys.readouterr().out
    assert "Prompt CEI of control rewrites (cmnist, 2 errors" in out
    assert all(name in out for name in controls)
