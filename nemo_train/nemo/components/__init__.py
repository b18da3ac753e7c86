"""Typed, configurable parts of a NEMO evaluation (``class_path`` / ``init_args`` in YAML).

Each builds its runtime objects for one benchmark and target, and reports the settings that change its
results (they go into every stored result, so a rerun with other settings recomputes).
"""

from nemo_train.nemo.components.editors import DiffusersEdit, EditorSpec, ExactEdit, PromptEdit
from nemo_train.nemo.components.method_specs import (
    BuildContext,
    CamMLLMMethod,
    ChangeMLLMMethod,
    DistractorMethod,
    ErrorRetrievalMethod,
    KnownCauseMethod,
    MethodSpec,
    SciTXMethod,
    default_methods,
)
from nemo_train.nemo.components.settings import SYNTHETIC_BENCHMARKS, BenchmarkArgs, BenchmarkName, EvalOptions
from nemo_train.nemo.components.trivial_specs import (
    ClassFreeConstantMethod,
    ClassPriorMethod,
    EverythingMethod,
    OddOneOutMethod,
)

__all__ = [
    "SYNTHETIC_BENCHMARKS",
    "BenchmarkArgs",
    "BenchmarkName",
    "BuildContext",
    "CamMLLMMethod",
    "ClassFreeConstantMethod",
    "ClassPriorMethod",
    "ChangeMLLMMethod",
    "DiffusersEdit",
    "DistractorMethod",
    "EditorSpec",
    "ErrorRetrievalMethod",
    "EverythingMethod",
    "ExactEdit",
    "KnownCauseMethod",
    "MethodSpec",
    "OddOneOutMethod",
    "PromptEdit",
    "EvalOptions",
    "SciTXMethod",
    "default_methods",
]
