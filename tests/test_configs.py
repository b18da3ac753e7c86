"""Every YAML preset under configs/ parses, alone or in the compositions its usage comments show.

A preset's usage comment (``# nemo-train <command> --config configs/a.yaml [--config configs/b.yaml ...]``) names the
command and the files loaded together (later ones override earlier ones), so every composition a comment shows is
parsed with the parser of its command, and a preset whose comment and keys disagree fails here. Fit presets go
through ``nemo-train fit``'s LightningCLI parser (nothing instantiated) and must put every output under
``trainer.default_root_dir``; pipeline presets through their function's jsonargparse parser. The demo's steps
(tests/test_demo.py) and the README's commands (tests/test_readme.py) are parsed the same way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonargparse import auto_parser

from nemo_train.cli import PIPELINE_COMMANDS, _load
from nemo_train.lightning_cli import NemoLightningCLI

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "configs").rglob("*.yaml"))
LIGHTNING = ("fit", "validate", "test", "predict")


class ParseOnlyCLI(NemoLightningCLI):
    """``nemo-train fit``'s parser and path derivation, without building the model, data or trainer."""

    def instantiate_classes(self) -> None:
        pass


def usages(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The ``(command, config files)`` of every ``nemo-train <command> --config ...`` in ``path``'s comments."""
    found = []
    for line in path.read_text().splitlines():
        if not line.lstrip().startswith("#"):
            continue
        for part in line.split("&&"):
            match = re.search(r"nemo-train\s+([\w-]+)(.*)", part)
            configs = re.findall(r"--config[ =](\S+)", match.group(2)) if match else []
            if configs:
                found.append((match.group(1), tuple(c.strip("`'\",;)") for c in configs)))
    return found


def preset_runs() -> list[tuple[str, tuple[str, ...]]]:
    """Every composition the presets' comments show, and each bare Lightning preset alone (as ``fit``)."""
    runs = {run for path in PRESETS for run in usages(path)}
    named = {config for _, configs in runs for config in configs}
    for path in PRESETS:
        rel = path.relative_to(ROOT).as_posix()
        if rel not in named and "trainer" in (yaml.safe_load(path.read_text()) or {}):
            runs.add(("fit", (rel,)))
    return sorted(runs)


RUNS = preset_runs()


def parse(command: str, args: list[str], root: Path | None = None) -> Any:
    """``args`` parsed by ``command``'s parser (a LightningCLI subcommand or a pipeline function); nothing built."""
    if command in LIGHTNING:
        root_args = ["--trainer.default_root_dir", str(root)] if root is not None else []
        return ParseOnlyCLI(args=[*args, *root_args], run=False).config
    assert command in PIPELINE_COMMANDS, f"unregistered command {command!r}"
    parser = auto_parser(_load(PIPELINE_COMMANDS[command].target), as_positional=False, exit_on_error=False)
    return parser.parse_args(args)


def config_args(configs: tuple[str, ...] | list[str]) -> list[str]:
    return [arg for config in configs for arg in ("--config", str(ROOT / config))]


def test_presets_exist():
    assert len(PRESETS) >= 20


def test_every_preset_is_run_by_a_usage_comment_and_every_named_preset_exists():
    named = {config for _, configs in RUNS for config in configs}
    assert {p.relative_to(ROOT).as_posix() for p in PRESETS} <= named
    missing = sorted(config for config in named if not (ROOT / config).is_file())
    assert not missing, f"usage comments name presets that do not exist: {missing}"


@pytest.mark.parametrize("command,configs", RUNS, ids=lambda v: v if isinstance(v, str) else "+".join(v))
def test_preset_run_parses(command, configs, tmp_path):
    config = parse(command, config_args(configs), root=tmp_path / "run")
    if command in LIGHTNING:
        trainer = config.trainer
        for callback in trainer.callbacks or []:
            if callback.class_path.endswith("ModelCheckpoint"):
                assert callback.init_args.dirpath == str(tmp_path / "run" / "checkpoints")
        logger = trainer.logger
        if getattr(logger, "class_path", "").endswith("WandbLogger"):
            assert logger.init_args.save_dir == str(tmp_path / "run")


#: The names of our classes (what a bare name in a preset would stand for).
CLASS_NAMES = {
    name
    for folder in ("nemo_train", "datamodules")
    for source in (ROOT / folder).rglob("*.py")
    for name in re.findall(r"^class (\w+)", source.read_text(), re.M)
}


def _walk(node: Any, where: str = ""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{where}.{key}".lstrip("."), value
            yield from _walk(value, f"{where}.{key}".lstrip("."))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield f"{where}.{i}", value
            yield from _walk(value, f"{where}.{i}")


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.relative_to(ROOT / "configs").as_posix())
def test_one_class_path_style_and_no_value_said_twice(path):
    config = yaml.safe_load(path.read_text()) or {}
    for key, value in _walk(config):
        if key.endswith("class_path"):
            assert re.fullmatch(r"[a-z_][\w]*(\.\w+)+", value), f"{key}: {value!r} is not a full dotted path"
        elif isinstance(value, str):  # a class given by its bare name (`- CamMLLMMethod`, `editor: ExactEdit`)
            assert value not in CLASS_NAMES, f"{key}: {value!r}; write class_path: <module>.{value}"
    # linked by the CLI (nemo_train.lightning_cli.link_shared_arguments): given once, on the model or the data
    data = (config.get("data") or {}).get("init_args") or {}
    model = (config.get("model") or {}).get("init_args") or {}
    assert not {"model_name_or_path", "processor_loader"} & set(data), "the data's model id comes from the model"
    assert "num_classes" not in model, "the classifier's num_classes comes from the datamodule"


def test_the_explainer_model_id_reaches_the_data_with_its_processor_loader():
    from nemo_train.models.vlm import load_processor

    args = config_args(["configs/explainer/tiny.yaml"]) + ["--model.init_args.model_name_or_path", "some/model"]
    config = parse("fit", args)
    assert config.model.init_args.model_name_or_path == config.data.init_args.model_name_or_path == "some/model"
    assert config.data.init_args.processor_loader is load_processor


#: configs/lbee/nico85_per_class.yaml as one file said it before the NICO-like presets were split into fragments.
NICO85_PER_CLASS = """
data:
  class_path: datamodules.nico.NICODataModule
  init_args: {correlation: 0.85, image_size: 32, train_size: 1800, test_per_pair: 20, batch_size: 64, seed: 0}
classifier: checkpoints/nico85_cnn/checkpoints/best.ckpt
encoder:
  class_path: nemo_train.lbee.encoders.SyntheticCLIP
  init_args:
    path: checkpoints/lbee/clip_nico_12k
    sources: [nico]
    train_per_source: 12000
    max_epochs: 32
    batch_size: 64
    group_size: 4
    model: {lr: 0.001, attribute_head_weight: 3.0}
sentences:
  class_path: nemo_train.lbee.sentences.AttributeSentences
  init_args: {source: nico}
relevance:
  class_path: nemo_train.lbee.relevance.AttributeRelevance
search:
  split:
    class_path: nemo_train.lbee.split.ClassProbabilitySplit
    init_args: {a: 0.2}
  clustering: {n_clusters: 5}
  methods: [TopS, SetDiff, PDiff, FPDiff]
  k: 3
  tau: 1.0
  tau_scale: sentence_z
  per_class: true
evaluation: {o: 0.2, target_split: test}
out_dir: checkpoints/lbee/nico85_per_class
wandb: false
seed: 0
"""


def test_composed_lbee_preset_equals_the_single_file_it_replaced(tmp_path):
    old = tmp_path / "nico85_per_class.yaml"
    old.write_text(NICO85_PER_CLASS)
    fragments = ("configs/lbee/nico_base.yaml", "configs/lbee/nico85.yaml", "configs/lbee/per_class.yaml")
    composed = parse("lbee", [*config_args(fragments), "--out_dir", "checkpoints/lbee/nico85_per_class"])
    single = parse("lbee", ["--config", str(old)])
    composed.pop("config"), single.pop("config")
    assert single.encoder.init_args.path == "checkpoints/lbee/clip_nico_12k"
    single.encoder.init_args.path = None  # since then the joint space is trained under out_dir, not in a shared folder
    assert composed == single
    assert composed.search.init_args.per_class and composed.data.init_args.correlation == 0.85  # not defaults
