"""Every language-model endpoint backend of every shipped preset sends one real request to an endpoint that
enforces its provider's rules (``provider_endpoint.ProviderEndpoint``), through the code that uses it, and
gets a usable reply.

A preset is parsed with its command's parser (as ``tests/test_configs.py`` does), each endpoint backend in it is
built from its parsed arguments with only ``base_url`` (the loopback endpoint) and ``cache`` (none) changed,
and the part that owns it asks what it asks in a run: a judge grades one explanation, the differences
evaluator picks an option within its small budget, the summariser and explorer ask for JSON at their
temperature, LBEE's VQA answers yes or no about an image, and the NEMO explainer or distillation teacher
writes ``m`` hypotheses about an image.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path

import pytest
import torch
from jsonargparse import auto_parser

from nemo_train.backends import OpenAICompatibleBackend, user_message
from nemo_train.cli import PIPELINE_COMMANDS, _load
from nemo_train.differences import prompts as differences_prompts
from nemo_train.differences.evaluators import parse_option
from nemo_train.nemo.methods.base import ask_causes_batch
from nemo_train.nemo.methods.scitx import MLLMHypothesizer
from nemo_train.scoring.judges import JudgeItem
from tests.backends.provider_endpoint import ProviderEndpoint, family

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "configs").rglob("*.yaml"))
LOCAL_BACKENDS = ("HFLocalBackend", "StudentBackend")  # local models: no endpoint, no request rules


def _runs() -> list[tuple[str, tuple[str, ...]]]:
    """Every ``nemo-train <command> --config a.yaml [--config b.yaml ...]`` the presets' comments show, for pipeline
    commands whose files name a backend (later files override earlier ones, as on the command line)."""
    runs = set()
    for preset in PRESETS:
        for line in preset.read_text().splitlines():
            for part in line.split("&&") if line.lstrip().startswith("#") else []:
                match = re.search(r"nemo-train\s+([\w-]+)(.*)", part)
                configs = (
                    tuple(c.strip("`'\",;)") for c in re.findall(r"--config[ =](\S+)", match.group(2))) if match else ()
                )
                if configs and match.group(1) in PIPELINE_COMMANDS:
                    if any("Backend" in (ROOT / c).read_text() for c in configs if (ROOT / c).is_file()):
                        runs.add((match.group(1), configs))
    return sorted(runs)


def _parsed(command: str, configs: tuple[str, ...]) -> dict:
    parser = auto_parser(_load(PIPELINE_COMMANDS[command].target), as_positional=False, exit_on_error=False)
    return parser.parse_args([arg for config in configs for arg in ("--config", str(ROOT / config))]).as_dict()


def _find(node, path=(), parents=()):
    """(path, backend node, owner nodes from the nearest up) of every backend in a parsed config."""
    if isinstance(node, dict):
        cp = node.get("class_path")
        if isinstance(cp, str) and cp.rsplit(".", 1)[-1].endswith("Backend"):
            yield path, node, parents
            return
        inner = (node, *parents) if isinstance(cp, str) else parents
        for key, value in node.items():
            yield from _find(value, (*path, key), inner)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _find(value, (*path, i), parents)


def _cases() -> list:
    cases, seen = [], set()
    for command, configs in _runs():
        cfg = _parsed(command, configs)
        for path, node, owners in _find(cfg):
            key = (json.dumps(node, sort_keys=True, default=str), path)
            if key in seen:  # the same backend in another composition of the same files
                continue
            seen.add(key)
            name = f"{'+'.join(Path(c).relative_to('configs').as_posix() for c in configs)}:{'.'.join(map(str, path))}"
            cases.append(pytest.param(command, cfg, path, node, owners, id=name))
    return cases


CASES = _cases()


def _import(class_path: str):
    module, name = class_path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def _owner(owners: tuple, init_args: dict, backend):
    """The object that holds the backend in a run, built from its parsed arguments with ``backend`` in place."""
    owner = owners[0]
    args = {**(owner.get("init_args") or {})}
    if "backends" in args:
        args["backends"] = [backend]
    else:
        args["backend"] = backend
    return _import(owner["class_path"])(**args)


def _image() -> torch.Tensor:
    return torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))


def _ask(command: str, cfg: dict, path: tuple, owners: tuple, backend: OpenAICompatibleBackend, endpoint) -> None:
    """One request as the backend's owner makes it in a run, checking its reply is usable there."""
    kind = owners[0]["class_path"].rsplit(".", 1)[-1] if owners else path[0]
    if kind == "LLMJudge":
        endpoint.answer = lambda body: {"reasoning": "It blames the colour.", "score": 1, "grounding": 1.0}
        judge = _owner(owners, {}, backend)
        item = JudgeItem("The red strokes made it look like a 3.", "5", "3", {"color": "red"}, "color")
        (verdict,) = judge.judge([item])
        assert verdict.score == 1.0, verdict
    elif kind == "LLMEvaluator":
        endpoint.answer = lambda body: "[1] Model A"
        evaluator = _owner(owners, {}, backend)
        prompt = differences_prompts.EVALUATOR.format(
            task="gender classification",
            example=evaluator.example,
            explanation="Model A is better on images of cowboys.",
            condition="a cowboy on a horse",
        )
        (reply,) = backend.chat([user_message(prompt)], temperature=0.0, max_tokens=evaluator.max_tokens)
        assert parse_option(reply) == 1, reply
    elif kind in ("LLMSummarizer", "LLMExplorer"):
        key, value = ("explanation", "Model A is worse on blond men.")
        if kind == "LLMExplorer":
            key, value = "conditions", [{"strategy": "contrast", "condition": "a blond man"}]
        endpoint.answer = lambda body: {key: value}
        owner = _owner(owners, {}, backend)
        prompt = f'Propose the next step. Answer with one JSON object and nothing else: {{"{key}": ...}}'
        (reply,) = backend.chat_json(
            [user_message(prompt)], temperature=owner.temperature, max_tokens=owner.max_tokens, seed=0
        )
        assert reply is not None and reply.get(key) == value, reply
    elif kind == "VQARelevance":
        endpoint.answer = lambda body: "Yes."
        relevance = _owner(owners, {}, backend)
        answers = relevance.answers(backend, _image()[None], ["a dog on grass"])
        assert answers.tolist() == [[True]]
    elif kind in ("explainer", "hypotheses"):  # SciTX's hypotheses (nemo-eval's explainer, the teacher's MLLM)
        if kind == "explainer":
            ms = [m.get("init_args", {}).get("m", 1) for m in cfg.get("methods", []) if isinstance(m, dict)]
            m = max(ms or [1])
        else:
            m = cfg["m"]
        temperature = inspect.signature(MLLMHypothesizer).parameters["temperature"].default
        endpoint.answer = lambda body: {"cause_of_error": "The drawing style hides the shape."}
        conversation = [
            user_message('Why was this image misclassified? Reply with JSON: {"cause_of_error": ...}', [_image()])
        ]
        (causes,) = ask_causes_batch(backend, [conversation], n=m, temperature=temperature if m > 1 else 0.0)
        assert causes == ["The drawing style hides the shape."]
    else:
        raise AssertionError(f"no request profile for the owner {kind!r} at {path}: add one")


def test_presets_name_endpoint_backends():
    assert len(CASES) >= 10
    nodes = [case.values[3] for case in CASES]
    families = {family(node["init_args"]["model"]) for node in nodes if node["init_args"].get("model")}
    assert {"openai_reasoning", "openai", "anthropic", "gemini", "vllm"} <= families


@pytest.mark.parametrize(("command", "cfg", "path", "node", "owners"), CASES)
def test_preset_backend_is_accepted_by_its_endpoint(command, cfg, path, node, owners):
    if node["class_path"].rsplit(".", 1)[-1] in LOCAL_BACKENDS:
        pytest.skip("a local model, no endpoint")
    with ProviderEndpoint() as endpoint:
        args = {**node["init_args"], "base_url": endpoint.base_url, "cache": None, "max_retries": 0}
        backend = _import(node["class_path"])(**args)
        try:
            _ask(command, cfg, path, owners, backend, endpoint)
        finally:
            backend.close()
    assert not endpoint.refused, endpoint.refused
    assert endpoint.accepted
    assert backend.stats.budget_retries == 0  # the first budget was enough
