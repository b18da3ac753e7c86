"""The ``nemo-train`` console script.

``fit / validate / test / predict`` are LightningCLI subcommands driven by YAML configs
(``class_path`` / ``init_args``). Every other first word names a pipeline command from
:data:`PIPELINE_COMMANDS`, whose typed function signature becomes its command line.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

from jsonargparse import ArgumentError

from nemo_train.errors import UserInputError

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")

#: Pipeline commands: name -> "module:function". The function is run with ``jsonargparse.CLI``.
PIPELINE_COMMANDS: dict[str, str] = {
    "demo": "nemo_train.demo:demo",
    "counterfactuals": "nemo_train.competency.pipeline:counterfactuals",
    "explain": "nemo_train.explainer.generation:explain",
    "nemo-eval": "nemo_train.nemo.run:nemo_eval",
    "distill-teacher": "nemo_train.nemo.distill:distill_teacher",
    "distill-eval": "nemo_train.nemo.distill_eval:distill_eval",
    "lbee": "nemo_train.lbee.pipeline:lbee",
    "differences": "nemo_train.differences.pipeline:differences",
}


_NOISE = re.compile(
    r"^(errors:|expected a |given value|problem with given class_path|subclass types expected|"
    r"does not validate against any of the union subtypes|subtypes: )",
    re.IGNORECASE,
)


def summarize_parser_error(message: str) -> str:
    """Reduce a jsonargparse error (often a nested list of every type it tried) to one line."""
    lines = [line.strip().lstrip("- ").strip() for line in str(message).splitlines()]
    kept = [line for line in lines if line and not _NOISE.match(line)]
    return " ".join(dict.fromkeys(kept)).replace(": ;", ":") or str(message).strip()


def _load(target: str) -> Callable[..., Any]:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def _usage() -> str:
    lines = [f"usage: nemo-train {{fit,validate,test,predict,{','.join(PIPELINE_COMMANDS)}}} [--config FILE] ..."]
    lines.append("  fit/validate/test/predict   LightningCLI (see `nemo-train fit --help`)")
    for name, target in PIPELINE_COMMANDS.items():
        doc = (_load(target).__doc__ or "").strip().splitlines()
        lines.append(f"  {name:<27} {doc[0] if doc else ''}")
    return "\n".join(lines)


def run_lightning_cli(args: list[str]) -> None:
    """Run LightningCLI on ``args`` (the subcommand first)."""
    from nemo_train.lightning_cli import NemoLightningCLI

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python.*")
        NemoLightningCLI(args=args)


def run_pipeline(name: str, args: list[str]) -> Any:
    """Run the pipeline command ``name`` with its own arguments."""
    from jsonargparse import CLI

    func = _load(PIPELINE_COMMANDS[name])
    return CLI(func, args=args, prog=f"nemo-train {name}", as_positional=False)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``nemo-train`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return
    command = argv[0]
    try:
        if command in LIGHTNING_SUBCOMMANDS:
            run_lightning_cli(argv)
        elif command in PIPELINE_COMMANDS:
            run_pipeline(command, argv[1:])
        else:
            raise UserInputError(
                f"unknown command {command!r}; expected one of {', '.join(LIGHTNING_SUBCOMMANDS + tuple(PIPELINE_COMMANDS))}"
            )
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
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def _fail(message: str) -> None:
    print(f"nemo-train: error: {message}", file=sys.stderr)
    raise SystemExit(2)


if __name__ == "__main__":
    main()
