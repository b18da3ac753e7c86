"""NEMO evaluation: language-model backends, judges, metrics, retrieval, SciTX and baselines.

Import from the modules (``nemo_train.backends``, ``nemo_train.nemo.judges``, ...): this
package file imports nothing heavy so that ``import nemo_train.nemo`` stays cheap.
"""
