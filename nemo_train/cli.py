"""The ``nemo-train`` console script.

``fit / validate / test / predict`` are LightningCLI subcommands driven by YAML configs
(``class_path`` / ``init_args``). Every other first word names a pipeline command from
:data:`PIPELINE_COMMANDS`, whose typed function signature becomes its command line.
``nemo-train --help`` reads only the static table below, so it imports no pipeline.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from jsonargparse import ArgumentError, auto_cli

from nemo_train.console import print_table
from nemo_train.errors import UserInputError
from nemo_train.quiet import set_output
from nemo_train.store import disk_error


class Command(NamedTuple):
    """A pipeline command: the function that runs it (``module:function``) and one line for ``--help``."""

    target: str
    summary: str
    #: the option a first argument without ``--`` stands for (``nemo-train report OUT_DIR``)
    positional: str | None = None


LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")

#: Pipeline commands: name -> Command. The function is run with ``jsonargparse.CLI`` (its signature is the
#: command line) and imported only when its command runs.
PIPELINE_COMMANDS: dict[str, Command] = {
    "demo": Command("nemo_train.demo:demo", "run every capability once on the embedded data, then recap"),
    "counterfactuals": Command(
        "nemo_train.competency.pipeline:counterfactuals", "PaRCE competency + counterfactuals of six causes"
    ),
    "competency-explanations": Command(
        "nemo_train.competency_explanations:competency_explanations",
        "accuracy of competency explanations with generated counterfactuals, pre-trained and fine-tuned",
    ),
    "explain": Command(
        "nemo_train.explainer.explain_command:explain", "explain image pairs with a fine-tuned explainer"
    ),
    "export": Command(
        "nemo_train.explainer.export:export", "write a fine-tuned explainer as a merged model folder to load or serve"
    ),
    "nemo-eval": Command("nemo_train.nemo.run:nemo_eval", "NEMO benchmark: SciTX and baselines on a model's errors"),
    "distill-teacher": Command(
        "nemo_train.nemo.distill.labelling:distill_teacher",
        "label a classifier's errors with a teacher: student training pairs",
    ),
    "distill-eval": Command(
        "nemo_train.nemo.distill.student_eval:distill_eval", "NEMO scores of a distilled explainer next to its teacher"
    ),
    "lbee": Command("nemo_train.lbee.pipeline:lbee", "find and describe a classifier's failure modes with sentences"),
    "differences": Command(
        "nemo_train.differences.pipeline:differences", "explain how two vision models differ, and score it"
    ),
    "judge": Command(
        "nemo_train.nemo.judge_command:judge", "grade explanations with a judge panel; agreement with hand labels"
    ),
    "prepare": Command("datamodules.prepare:prepare", "check a data folder for a dataset and list what is missing"),
    "zoo": Command(
        "nemo_train.models.zoo_run:zoo", "train a zoo of biased shifts classifiers together (drawn gaps, held-out zoo)"
    ),
    "report": Command(
        "nemo_train.reports.command:report", "a run folder's results as a static HTML page", positional="out_dir"
    ),
}

#: Lines of a jsonargparse error that list what it tried rather than what is wrong.
_NOISE = (
    "does not validate against any of the union subtypes",
    "subtypes:",
    "errors:",
    "given value type:",
    "problem with given class_path",
    "subclass types expected",
    "expected a <class 'nonetype'>",
)


def summarize_parser_error(message: str) -> str:
    """Reduce a jsonargparse error (often a nested list of every type it tried) to one line.

    Keeps the option and the "Expected a <type>. Got value: ..." part; drops the list of union subtypes tried.
    """
    text = str(message)
    kept, given = [], None
    for line in (line.strip().lstrip("- ").strip() for line in text.splitlines()):
        lowered = line.lower()
        if not line or lowered.startswith(_NOISE):
            continue
        if lowered.startswith("given value:"):
            given = line.split(":", 1)[1].strip()
            continue
        kept.append(line)
    summary = " ".join(dict.fromkeys(kept)).replace(": ;", ":")
    if given is not None and "expected" in summary.lower() and "got value" not in summary.lower():
        summary = f"{summary.rstrip('.')}. Got value: {given}"
    return summary or text.strip()


def _load(target: str) -> Callable[..., Any]:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def print_usage() -> None:
    """The command table (no pipeline is imported)."""
    print("usage: nemo-train [--verbose] COMMAND [--config FILE] [--option value ...]   (COMMAND --help for options)")
    rows = [("fit / validate / test / predict", "LightningCLI: train or evaluate a model from a YAML preset")]
    rows += [(name, command.summary) for name, command in PIPELINE_COMMANDS.items()]
    print_table(["command", "what it does"], rows)


def run_lightning_cli(args: list[str]) -> None:
    """Run LightningCLI on ``args`` (the subcommand first)."""
    # imported here: lightning takes seconds to import and `nemo-train --help` must not wait for it
    from nemo_train.lightning_cli import NemoLightningCLI, check_strategy_packages

    check_strategy_packages(args)
    NemoLightningCLI(args=args)


def run_pipeline(name: str, args: list[str]) -> Any:
    """Run the pipeline command ``name`` with its own arguments."""
    check_config_files(args)
    positional = PIPELINE_COMMANDS[name].positional
    if positional and args and not args[0].startswith("-"):
        args = [f"--{positional}", *args]
    func = _load(PIPELINE_COMMANDS[name].target)
    # options are matched exactly: a prefix such as ``--n`` would otherwise silently mean ``--num_nodes``
    return auto_cli(
        func, args=args, prog=f"nemo-train {name}", as_positional=False, exit_on_error=False, allow_abbrev=False
    )


def check_config_files(args: list[str]) -> None:
    """Every ``--config FILE`` holds a YAML mapping (jsonargparse's message for an empty file names nothing)."""
    for flag, value in zip(args, args[1:]):
        path = Path(value)
        if flag != "--config" or not path.is_file():
            continue
        try:
            content = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise UserInputError(f"config file {value} is not valid YAML: {' '.join(str(err).split())}") from None
        if content is None:
            raise UserInputError(f"config file {value} is empty; expected a YAML mapping of options")
        if not isinstance(content, dict):
            raise UserInputError(
                f"config file {value} holds a {type(content).__name__}; expected a YAML mapping of options"
            )


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``nemo-train`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    argv = [arg for arg in argv if arg != "--verbose"]
    if not argv or argv[0] in ("-h", "--help"):
        print_usage()
        return
    set_output(verbose=verbose)
    # a log file that cannot be written (W&B's debug log on a full disk) drops its records instead of printing a
    # traceback for each: the run's own write that the disk refuses ends the command with one line naming the folder
    logging.raiseExceptions = False
    command = argv[0]
    try:
        if command in LIGHTNING_SUBCOMMANDS:
            check_config_files(argv[1:])
            run_lightning_cli(argv)
        elif command in PIPELINE_COMMANDS:
            run_pipeline(command, argv[1:])
        else:
            known = ", ".join(LIGHTNING_SUBCOMMANDS + tuple(PIPELINE_COMMANDS))
            raise UserInputError(f"unknown command {command!r}; expected one of {known}")
    except ArgumentError as err:
        _fail(summarize_parser_error(err))
    except Exception as err:
        user_error = find_user_error(err)
        if user_error is None:
            raise
        _fail(str(user_error))


def find_user_error(err: BaseException) -> BaseException | None:
    """The ``UserInputError`` / ``FileNotFoundError`` behind ``err`` (libraries like jsonargparse wrap them)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (UserInputError, FileNotFoundError)):
            return err
        if disk_error(err) is not None:  # a full disk, a read-only folder (also as SQLite's or safetensors' error)
            return disk_error(err)
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def _fail(message: str) -> None:
    print(f"nemo-train: error: {message}", file=sys.stderr)
    raise SystemExit(2)


if __name__ == "__main__":
    main()
