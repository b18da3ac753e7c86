"""The explainer's demo step trains, scores and records its adapter for the NEMO step."""

from __future__ import annotations

import math

from nemo_train.demo import DemoContext
from nemo_train.explainer.demo import demo_step
from nemo_train.explainer.generation import generate_explanations


def test_demo_step_records_a_loadable_adapter(tmp_path, explainer_cache, capsys):
    ctx = DemoContext(out_dir=tmp_path, fast=True)
    demo_step(ctx)
    adapter = ctx.artifacts["explainer"]
    assert (adapter / "adapter_model.safetensors").is_file() and ctx.artifacts["explainer_pairs"].is_file()
    result = ctx.results["explainer"]
    assert set(result) == {"spatial", "brightness", "contrast", "saturation", "noise", "pixelation", "average"}
    assert all(0.0 <= v <= 1.0 and not math.isnan(v) for v in result.values())
    assert "Saturation" in capsys.readouterr().out
    texts = generate_explanations(
        str(adapter), [tmp_path / "explainer_tiny" / "pairs" / "images" / "000000.png"], max_new_tokens=4
    )
    assert len(texts) == 1 and len(texts[0]) == 1
