"""Typed, configurable parts of a NEMO evaluation (``class_path`` / ``init_args`` in YAML).

Each builds its runtime objects for one benchmark and target, and reports the settings that change its
results (they go into every stored result, so a rerun with other settings recomputes). The editors (how an
explanation becomes a counterfactual) are :mod:`nemo_train.scoring.editors`.
"""

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
    "DistractorMethod",
    "ErrorRetrievalMethod",
    "EverythingMethod",
    "KnownCauseMethod",
    "MethodSpec",
    "OddOneOutMethod",
    "EvalOptions",
    "SciTXMethod",
    "default_methods",
]
