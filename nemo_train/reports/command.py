"""``nemo-train report OUT_DIR``: the report page of a run folder, drawn from what the run stored.

The command only reads the run (it takes no lock and writes no provenance: the folder stays the run's) and
writes ``<out_dir>/report/index.html`` with its images and plots beside it.
"""

from __future__ import annotations

from pathlib import Path

from nemo_train.reports.build import write_report


def report(out_dir: str) -> Path:
    """Write the report page of a run folder (``nemo-eval``, ``distill-eval``, ``counterfactuals``, ``lbee``;
    the stored table and figures of any other run; the demo's folder links every step's page) and print its path.

    A static page: images and plots are PNG files beside it, no server or network is needed to read it. A run
    that was stopped early gets what it stored, marked partial. Nothing is re-run.

    Args:
        out_dir: the run's folder (the ``--out_dir`` it was run with); may be given without ``--out_dir``.

    Returns:
        the path of ``<out_dir>/report/index.html``.
    """
    path = write_report(out_dir)
    print(f"report: {path}")
    return path
