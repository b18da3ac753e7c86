"""Report pages of runs: one static HTML page per run folder, drawn from what the run stored (see
:mod:`nemo_train.reports.build`)."""

from nemo_train.reports.build import SECTIONS, build_page, write_report

__all__ = ["SECTIONS", "build_page", "write_report"]
