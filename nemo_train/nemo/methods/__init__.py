"""Explanation methods of a NEMO evaluation: SciTX and the baselines of the NEMO paper (Sec. 3.2, 4.1.3).

Every method has ``name`` and ``explain(sample, benchmark) -> Explanation``. Import from the modules.
"""
