"""NEMO evaluation: SciTX and the baselines, reference retrieval, ``nemo-eval``, ``nemo-train judge`` and distillation.

What the tables score with (benchmarks, judges, grounding, edits derived from text, CEI) is the floor below,
:mod:`nemo_train.scoring`. Import from the modules: this package file imports nothing heavy so that
``import nemo_train.nemo`` stays cheap.
"""
