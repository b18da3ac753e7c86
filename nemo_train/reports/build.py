"""Write a run folder's report page (``<out_dir>/report/index.html``, its images and plots beside it) from what
the run stored, and an index page linking several runs' pages (the demo's).

Each command with stored results has a section function in :data:`SECTIONS` (``(folder, page) -> None``: it adds
its sections and facts, and marks the page partial when the run stopped early); a folder of any other command
gets its stored table and figures; a folder of several runs (the demo's) links each run's page. Nothing is
re-run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nemo_train.errors import UserInputError
from nemo_train.quiet import warn_once
from nemo_train.reports.explanations import explanation_report
from nemo_train.reports.folder import PAGE, REPORT_DIR, RunFolder
from nemo_train.reports.gallery import preview
from nemo_train.reports.html import Markup, Page, Section, esc, table, with_interval
from nemo_train.reports.stored_runs import counterfactual_report, files_report, lbee_report
from nemo_train.store import write_bytes_atomic

#: command -> the function that adds its sections to a page.
SECTIONS: dict[str, Callable[[RunFolder, Page], None]] = {
    "nemo-eval": explanation_report,
    "distill-eval": explanation_report,
    "counterfactuals": counterfactual_report,
    "lbee": lbee_report,
}
#: Commands whose first errors the index of several runs shows.
PREVIEWED = ("nemo-eval", "distill-eval")
#: What a page says of a run that did not finish (:func:`~nemo_train.reports.folder.run_state`).
UNFINISHED = {
    "stopped": "the run stopped before it finished (killed or failed); this is what it stored",
    "running": "the run is still going; this is what it stored so far",
}
INTERVAL_NOTE = "mean [bootstrap 95 % interval over the errors / items] where a number is a mean over them"


def run_facts(folder: RunFolder) -> list[tuple[str, str]]:
    """The run's command, when, source commit and stand-ins, from its provenance."""
    record = folder.provenance or {}
    facts = [("run folder", str(folder.path)), ("command", record.get("command", "unknown (no provenance.json)"))]
    if record.get("created"):
        facts.append(("started", record["created"]))
    git = record.get("git") or {}
    if git.get("commit"):
        facts.append(("commit", git["commit"][:12] + (" (uncommitted changes)" if git.get("dirty") else "")))
    for stand_in in record.get("stand_ins") or []:
        facts.append(("stand-in", stand_in))
    return facts


def build_page(run_dir: str | Path, steps: Mapping[str, str | Path] | None = None) -> tuple[Page, RunFolder]:
    """The page of ``run_dir`` (its images already copied into the report folder); with ``steps`` (name -> run
    folder) the page of a folder of several runs, linking each one's page (:func:`steps_report`)."""
    folder = RunFolder(Path(run_dir))
    if not folder.path.is_dir():
        raise UserInputError(f"run folder {str(folder.path)!r} does not exist; expected the out_dir of a run")
    if (folder.out / PAGE).is_file():  # the page is drawn anew: nothing of an earlier page is kept
        shutil.rmtree(folder.out)
    elif folder.out.exists():
        raise UserInputError(f"{str(folder.out)!r} exists and holds no report page; move it away to write the report")
    command = folder.command
    page = Page(f"nemo-train {command or 'run'}: {folder.path.name}", run_facts(folder))
    if steps is not None:
        steps_report(folder, page, steps)
    else:
        SECTIONS.get(command or "", files_report)(folder, page)
    state = folder.state  # a run still going says so over a section's "stopped before ..."
    if state == "running" or (state in UNFINISHED and not page.partial):
        page.partial = UNFINISHED[state]
    return page, folder


def write_report(run_dir: str | Path, steps: Mapping[str, str | Path] | None = None) -> Path:
    """Write ``<run_dir>/report/index.html`` (images and plots beside it) and return its path; ``steps`` (name ->
    run folder, e.g. the demo's) makes it the index of those runs' pages, each written too."""
    page, folder = build_page(run_dir, steps)
    folder.out.mkdir(parents=True, exist_ok=True)
    return write_bytes_atomic(folder.out / PAGE, page.render().encode("utf-8"))


def close_run(run_dir: str | Path, wandb_run: Any = None) -> Path:
    """The end of a run with results (called by the run floor, :data:`nemo_train.runs.REPORT_WRITER`): write its
    page and, with a W&B run, log its stored results and the page there (:mod:`nemo_train.reports.wandb_run`; a
    failure there is one warning line). Returns the page's path."""
    page = write_report(run_dir)
    if wandb_run is not None:
        from nemo_train.reports.wandb_run import log_run  # wandb: imported only when logging

        try:
            log_run(wandb_run, run_dir, page)
        except Exception as err:  # noqa: BLE001 - the results and the page stand without W&B
            warn_once(f"the results could not be logged to W&B ({type(err).__name__}: {err})")
    return page


def step_folders(folder: RunFolder) -> dict[str, Path]:
    """The run folders under ``folder`` (each holds a ``provenance.json``), in the order they were started, named
    by their path under ``folder``."""
    found = []
    for record in folder.path.rglob("provenance.json"):
        parts = record.relative_to(folder.path).parts[:-1]
        if parts and REPORT_DIR not in parts and "wandb" not in parts:
            found.append(RunFolder(record.parent))
    found.sort(key=lambda f: ((f.provenance or {}).get("created") or "", str(f.path)))
    return {f.path.relative_to(folder.path).as_posix(): f.path for f in found}


def steps_report(folder: RunFolder, page: Page, steps: Mapping[str, str | Path] | None = None) -> None:
    """A folder of several runs (the demo's): its recap (``recap.json``) and a link to each run's page (``steps``:
    name -> folder; default: the run folders found under it), each page written anew; a run that stopped early is
    marked partial here too, a step without a folder said so."""
    recap = folder.json("recap.json")
    if isinstance(recap, list) and recap:
        rows = [[r.get("step"), r.get("method"), r.get("metric"), with_interval(r.get("value"), r.get("ci_low"),
                 r.get("ci_high"))] for r in recap if isinstance(r, dict)]  # fmt: skip
        page.sections.append(Section("Recap", table(["step", "method", "metric", "value"], rows), INTERVAL_NOTE))
    else:
        page.partial = "no recap.json: the runs below are those stored so far"
    rows, previews = [], []
    for name, run_dir in (step_folders(folder) if steps is None else steps).items():
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            rows.append([name, None, "no folder: the step did not run"])
            continue
        step, step_folder = build_page(run_dir)
        written = write_bytes_atomic(run_dir / REPORT_DIR / PAGE, step.render().encode("utf-8"))
        link = Path(os.path.relpath(written, folder.out)).as_posix()
        if step_folder.command in PREVIEWED:  # a glimpse of its errors, edits and verdicts on the index itself
            strip = preview(step_folder, Path(os.path.relpath(step_folder.out, folder.out)).as_posix())
            previews.append(Section(f"{name}: its first errors", strip, "each method's edited image and verdict"))
        status = f"partial: {step.partial}" if step.partial else "complete"
        rows.append([Markup(f'<a href="{esc(link)}">{esc(name)}</a>'), dict(step.facts).get("command"), status])
    page.sections.append(Section("Runs", table(["run", "command", "results"], rows, "index"), f"{len(rows)} runs"))
    page.sections += previews


SECTIONS["demo"] = steps_report
