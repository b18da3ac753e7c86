"""``nemo-train competency-explanations``: the competency-counterfactuals paper's Tables 3-4.

How often an explanation of low competency names its true cause (spatial, brightness, contrast, saturation,
noise, pixelation), with no counterfactual image and with the counterfactual each generator made (Reco, LGD,
LNN; IGD and FGD as extra rows), for (a) a model not trained on competency explanations and (b) that model
fine-tuned on image-explanation pairs whose counterfactual came from the same generator.

It combines three capabilities (competency counterfactuals, the LoRA explainer, the NEMO judges), so it sits
above them, next to the demo. Its parts:

* :func:`nemo_train.competency.explanation_pairs.build_explanation_pairs` draws the six-cause set, splits it into
  fine-tuning and evaluation images and writes one pair file per condition whose counterfactuals are the
  generator's images, never the clean original;
* the model not trained on competency explanations is a chat backend: by default the captions-stage tiny VLM
  (``configs/explainer/captions_shifts.yaml``'s adapter, served by
  :class:`~nemo_train.backends.student.StudentBackend`),
  by configuration any served MLLM (``OpenAICompatBackend``, ``HFLocalBackend``);
* the fine-tuned explainer is :class:`~nemo_train.explainer.ExplainerModule` started from that model (default: the
  captions-stage adapter) and trained per condition, then served from its saved adapter;
* every explanation is graded by the keyword rule (:func:`nemo_train.vocabulary.is_correct`) and by each judge
  (default: the grounded judge over the six-cause fact sheet, an attribute parser and not a model; LLM judges by
  configuration), beside a Constant row and a row that names every cause.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import lightning as L

from datamodules.explanations import ExplanationDataModule, read_records, side_by_side, to_pil
from datamodules.six_cause_facts import FACTS as SIX_CAUSE_FACTS
from datamodules.six_cause_facts import cause_attributes
from nemo_train.backends.base import ChatBackend
from nemo_train.backends.messages import system_message, user_message
from nemo_train.backends.student import StudentBackend, check_adapter_folder
from nemo_train.competency.autoencoder import CompetencyAutoencoder
from nemo_train.competency.counterfactuals import (
    CounterfactualGenerator,
    LatentNearestNeighbor,
    ReconstructionCounterfactual,
)
from nemo_train.competency.explanation_pairs import (
    NO_COUNTERFACTUAL,
    PairArgs,
    build_explanation_pairs,
    loaded_classifier,
    prepared_estimator,
)
from nemo_train.competency.explanation_table import print_accuracy_tables, row_summary
from nemo_train.competency.gradient_counterfactuals import (
    FeatureGradientDescent,
    ImageGradientDescent,
    LatentGradientDescent,
)
from nemo_train.competency.settings import EstimatorArgs, TrainArgs
from nemo_train.errors import UserInputError
from nemo_train.explainer import ExplainerModule
from nemo_train.models.specs import ClassifierSpec
from nemo_train.models.trainer import fit_quietly
from nemo_train.models.vlm import load_processor, read_explainer_meta
from nemo_train.runs import Device, OutDir, Seed, run_command
from nemo_train.scoring.judges import GroundedJudge, Judge, JudgeItem
from nemo_train.store import write_json_atomic
from nemo_train.vocabulary import CAUSES, PAIR_PROMPT, SINGLE_IMAGE_PROMPT, SYSTEM_PROMPT, is_correct

#: The command that trains the default model not trained on competency explanations.
CAPTIONS_FIT = "nemo-train fit --config configs/explainer/captions_shifts.yaml"
#: The Constant row's explanation: one cause for every image (its average is 1/6 under every grader).
CONSTANT_TEXT = "The image is pixelated."
#: The row that names every cause: no grader may credit it.
EVERY_CAUSE_TEXT = (
    "The image may contain an unfamiliar object, or be too bright, low in contrast, under-saturated, noisy or "
    "pixelated."
)
KEYWORD_RULE = "keyword rule"


@dataclass
class FineTuneArgs:
    """Fine-tuning of the explainer on each condition's pairs, and how both models are asked.

    Args:
        steps: optimiser steps per condition (the paper: 10 epochs of 3,000 pairs).
        batch_size: pairs per step.
        max_length: token limit of a pair (longer ones are dropped with a counted warning).
        max_new_tokens: length limit of an explanation.
        generation_batch_size: explanations per ``generate`` call of a local model.
        system_prompt: context turn of every question (default: the CMNIST classifier and its estimator).
    """

    steps: int = 400
    batch_size: int = 16
    max_length: int = 256
    max_new_tokens: int = 24
    generation_batch_size: int = 32
    system_prompt: str | None = SYSTEM_PROMPT

    def __post_init__(self) -> None:
        small = {k: v for k, v in asdict(self).items() if isinstance(v, int) and v < 1}
        if small:
            raise UserInputError(", ".join(f"finetune.{k}={v}" for k, v in small.items()) + "; expected at least 1")


@dataclass
class ExplanationRun:
    """What a ``competency-explanations`` run measured: ``tables[grader][block][row]`` cells (``mean``,
    ``ci_low``, ``ci_high``, ``n`` per cause and ``average``), each generator's success rate on the evaluation
    images, the image counts, and where everything was written."""

    out_dir: Path
    tables: dict[str, dict[str, dict[str, dict]]]
    success: dict[str, float]
    counts: dict[str, dict[str, int]]
    files: dict[str, Path] = field(default_factory=dict)


def explanation_stand_ins(arguments: dict) -> list[str]:
    """The non-model parts of a run (for its provenance)."""
    named = [f"{KEYWORD_RULE}: the cause an explanation names by keywords (standing in for manual grading)"]
    if not arguments.get("judges"):
        named.append("grounded-judge: an attribute parser over the six-cause fact sheet, not a language model")
    if isinstance(arguments.get("pretrained"), str):
        named.append("pre-trained model: the captions-stage tiny VLM (random-init, trained on captions only)")
    return named


@run_command("competency-explanations", explanation_stand_ins)
def competency_explanations(
    classifier: str | ClassifierSpec = "checkpoints/cmnist_model_a/checkpoints/best.ckpt",
    pretrained: str | ChatBackend = "checkpoints/captions_shifts/adapter",
    explainer: ExplainerModule | None = None,
    datamodule: L.LightningDataModule | None = None,
    autoencoder: CompetencyAutoencoder | None = None,
    methods: list[CounterfactualGenerator] | None = None,
    judges: list[Judge] | None = None,
    estimator: EstimatorArgs = EstimatorArgs(),
    pairs: PairArgs = PairArgs(),
    train: TrainArgs = TrainArgs(),
    finetune: FineTuneArgs = FineTuneArgs(),
    out_dir: OutDir = "checkpoints/competency_explanations",
    device: Device = "auto",
    seed: Seed = 0,
    wandb: bool = False,
) -> ExplanationRun:
    """Print the accuracy of competency explanations per cause (the paper's Tables 3-4) with and without the
    counterfactual of each generator, for a pre-trained and a fine-tuned model, with bootstrap intervals.

    Args:
        classifier: the ``nemo-train fit`` checkpoint whose competency is explained (default: CMNIST Model A).
        pretrained: the model not trained on competency explanations: an explainer adapter folder (default: the
            captions-stage tiny VLM that ``nemo-train fit --config configs/explainer/captions_shifts.yaml``
            writes) or a chat backend (``class_path`` / ``init_args``, e.g. a served Llama-3.2-Vision).
        explainer: the explainer fine-tuned per condition (default: ``ExplainerModule`` on the ``pretrained``
            adapter, lr 2e-3, vision tower 5e-4, 10 warm-up steps); needed when ``pretrained`` is a backend.
        datamodule: the classifier's training data (default: embedded CMNIST, Model-A bias).
        autoencoder: the competency autoencoder to train (default: one sized for the data's images).
        methods: the counterfactual generators (default: Reco, LGD, LNN, IGD, FGD with the settings of
            ``configs/competency/counterfactuals_cmnist.yaml``).
        judges: graders besides the keyword rule (default: the grounded judge over the six-cause fact sheet).
        estimator: autoencoder checkpoint, saved-estimator folder, threshold, loss scale.
        pairs: fine-tuning and evaluation images per cause, severities, directions.
        train: epochs of the competency autoencoder when no saved one is given.
        finetune: fine-tuning steps and generation settings.

    Writes ``results.json``, ``table.txt``, the pairs (``pairs/``), every explanation (``explanations.jsonl``)
    and each fine-tuned adapter (``finetuned/<condition>/adapter``) under ``out_dir``.
    """
    loaded = loaded_classifier(classifier)  # a missing or damaged checkpoint: one line before any work
    backend = _pretrained_backend(pretrained, device, finetune)
    template = _explainer_template(explainer, pretrained)
    methods = list(methods) if methods is not None else _table_methods()
    judges = list(judges) if judges is not None else [GroundedJudge(facts=SIX_CAUSE_FACTS)]
    for judge in judges:
        judge.for_benchmark(SIX_CAUSE_FACTS.name, SIX_CAUSE_FACTS)
    out = Path(out_dir)
    parce, data = prepared_estimator(loaded, datamodule, autoencoder, estimator, train, device, out, seed)
    built = build_explanation_pairs(parce, data, methods, pairs, out / "pairs", seed)
    rows: dict[str, dict[str, list[dict]]] = {"pre-trained": {}, "fine-tuned": {}}
    for condition in built.conditions:
        records = read_records(built.files[condition]["eval"])
        rows["pre-trained"][condition] = _explain(backend, records, finetune, seed)
        adapter = _fine_tune(template, built.files[condition]["train"], condition, out, finetune, device, seed)
        tuned = StudentBackend(
            model_name_or_path=str(adapter), device=device, batch_size=finetune.generation_batch_size
        )
        rows["fine-tuned"][condition] = _explain(tuned, records, finetune, seed)
    records = read_records(built.files[NO_COUNTERFACTUAL]["eval"])
    rows["trivial"] = {
        "Constant": _constant(records, CONSTANT_TEXT),
        "Names every cause": _constant(records, EVERY_CAUSE_TEXT),
    }
    graded = _grade(rows, [KEYWORD_RULE, *judges], built.directions)
    tables = {name: {b: {r: row_summary(g, seed) for r, g in block.items()} for b, block in by.items()}
              for name, by in graded.items()}  # fmt: skip
    text = _print(tables, built.success, pairs)
    files = _write(out, rows, tables, built, text)
    return ExplanationRun(out, tables, built.success, built.counts, files)


def _table_methods() -> list[CounterfactualGenerator]:
    """The paper's three explanation methods first (Reco, LGD, LNN), then IGD and FGD as extra rows; LGD as in
    ``configs/competency/counterfactuals_cmnist.yaml`` (-log score, lr 0.1: the paper's -score and lr 1e-3 leave
    most CMNIST counterfactuals below the threshold)."""
    return [
        ReconstructionCounterfactual(),
        LatentGradientDescent(lr=0.1, objective="log_score"),
        LatentNearestNeighbor(),
        ImageGradientDescent(),
        FeatureGradientDescent(),
    ]


def _pretrained_backend(pretrained: str | ChatBackend, device: str, finetune: FineTuneArgs) -> ChatBackend:
    """The model not trained on competency explanations, as a chat backend; a missing adapter names its fit."""
    if isinstance(pretrained, ChatBackend):
        return pretrained
    if not Path(pretrained).exists():
        raise UserInputError(
            f"pretrained {pretrained!r} does not exist; train the captions-stage VLM with `{CAPTIONS_FIT}` "
            "(or give an adapter folder or a chat backend)"
        )
    check_adapter_folder(pretrained, "pretrained")
    return StudentBackend(model_name_or_path=pretrained, device=device, batch_size=finetune.generation_batch_size)


def _explainer_template(explainer: ExplainerModule | None, pretrained: str | ChatBackend) -> ExplainerModule:
    """The explainer each condition fine-tunes a copy of (built, not loaded: its weights load in each fit)."""
    if explainer is not None:
        return explainer
    if not isinstance(pretrained, str):
        raise UserInputError(
            "pretrained is a chat backend: give --explainer, the same model to fine-tune (an ExplainerModule "
            "class_path / init_args with its model_name_or_path)"
        )
    base = read_explainer_meta(pretrained)["model_name_or_path"]
    return ExplainerModule(model_name_or_path=base, adapter=pretrained, lr=2e-3, visual_lr=5e-4, warmup_steps=10)


def _fine_tune(template: ExplainerModule, train_jsonl: Path, condition: str, out: Path, finetune: FineTuneArgs,
               device: str, seed: int) -> Path:  # fmt: skip
    """Fine-tune a fresh copy of ``template`` on one condition's pairs; returns the saved adapter folder."""
    L.seed_everything(seed, verbose=False)
    module = copy.deepcopy(template)
    data = ExplanationDataModule(
        model_name_or_path=module.hparams.adapter or module.hparams.model_name_or_path,
        processor_loader=load_processor,
        train_jsonl=str(train_jsonl),
        use_counterfactual=condition != NO_COUNTERFACTUAL,
        system_prompt=finetune.system_prompt,
        max_length=finetune.max_length,
        batch_size=finetune.batch_size,
    )
    accelerator = "gpu" if device == "cuda" else "cpu"
    fit_quietly(module, data, max_epochs=None, accelerator=accelerator, max_steps=finetune.steps, limit_val_batches=0)
    return module.save_adapter(out / "finetuned" / condition / "adapter")


def _explain(backend: ChatBackend, records: list, finetune: FineTuneArgs, seed: int) -> list[dict]:
    """One greedy explanation per evaluation record (the counterfactual beside the image where it has one)."""
    conversations = []
    for record in records:
        picture = to_pil(record.image)
        if record.counterfactual:
            picture = side_by_side(picture, to_pil(record.counterfactual))
        question = PAIR_PROMPT if record.counterfactual else SINGLE_IMAGE_PROMPT
        system = [system_message(finetune.system_prompt)] if finetune.system_prompt else []
        conversations.append([*system, user_message(question, [picture])])
    replies = backend.chat_batch(conversations, n=1, temperature=0.0, max_tokens=finetune.max_new_tokens, seed=seed)
    return [{"image": r.image, "counterfactual": r.counterfactual, "cause": r.cause, "explanation": reply[0]}
            for r, reply in zip(records, replies)]  # fmt: skip


def _constant(records: list, text: str) -> list[dict]:
    return [{"image": r.image, "counterfactual": None, "cause": r.cause, "explanation": text} for r in records]


def _grade(rows: dict, graders: list, directions: dict) -> dict[str, dict[str, dict[str, dict[str, list]]]]:
    """``{grader: {block: {row: {cause: grades}}}}``; each explanation's grades are also stored in its row."""
    out: dict = {}
    for grader in graders:
        name = grader if isinstance(grader, str) else grader.name
        out[name] = {}
        for block, by_row in rows.items():
            out[name][block] = {}
            for row, explained in by_row.items():
                scores = _scores(grader, explained, directions)
                for item, score in zip(explained, scores):
                    item.setdefault("grades", {})[name] = score
                grades: dict[str, list] = {c: [] for c in CAUSES}
                for item, score in zip(explained, scores):
                    grades[item["cause"]].append(score)
                out[name][block][row] = grades
    return out


def _scores(grader: str | Judge, explained: list[dict], directions: dict) -> list[float | None]:
    if isinstance(grader, str):
        return [float(is_correct(e["explanation"], e["cause"])) for e in explained]
    items = [
        JudgeItem(e["explanation"], cause=e["cause"], attributes=cause_attributes(e["cause"], directions[e["cause"]]))
        for e in explained
    ]
    return [j.score for j in grader.judge(items)]


def _print(tables: dict, success: dict[str, float], pairs: PairArgs) -> str:
    rates = ", ".join(f"{name} {rate:.2f}" for name, rate in success.items())
    caption = (
        f"accuracy [bootstrap 95 % interval over the explanations]; {pairs.eval_per_cause} evaluation images per "
        f"cause; counterfactual success rate on them: {rates}"
    )
    text = ""
    for grader, blocks in tables.items():
        text += print_accuracy_tables(blocks, title=f"Competency explanations, graded by the {grader}", caption=caption)
    return text


def _write(out: Path, rows: dict, tables: dict, built, text: str) -> dict[str, Path]:
    files = {"results": out / "results.json", "table": out / "table.txt", "explanations": out / "explanations.jsonl"}
    results = {"tables": tables, "success": built.success, "counts": built.counts, "directions": built.directions}
    write_json_atomic(files["results"], results)
    files["table"].write_text(text, encoding="utf-8")
    lines = [json.dumps({"block": b, "row": r, **e}) for b, by in rows.items() for r, ex in by.items() for e in ex]
    files["explanations"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    files["pairs"] = built.root
    return files
