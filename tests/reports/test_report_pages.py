"""Report pages of run folders built by hand: what each section shows, a killed run's page, the index of runs."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image
from report_folders import counterfactuals_folder, lbee_folder, nemo_eval_folder, provenance

from nemo_train.cli import main
from nemo_train.errors import UserInputError
from nemo_train.reports import write_report
from nemo_train.reports.build import build_page


class Parsed(HTMLParser):
    """The page's images, links, table cells and error cards."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.images, self.links, self.cells, self.cards, self._cell = [], [], [], [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        elif tag == "a":
            self.links.append(attrs["href"])
        elif tag == "td":
            self._cell = ""
        elif tag == "div" and attrs.get("class") == "error-card":
            self.cards.append(attrs["data-cause"])

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def page_of(folder: Path) -> tuple[str, Parsed]:
    text = write_report(folder).read_text(encoding="utf-8")
    return text, Parsed(text)


def test_nemo_eval_page_shows_the_table_gallery_confusion_and_plots(tmp_path):
    run = tmp_path / "run"
    nemo_eval_folder(run)
    text, page = page_of(run)
    assert 'id="partial"' not in text
    # the table: KnownCause's CEI over (40, 30, 0) is 23.33 with its interval; the Distractor's inconsistent
    # record of e1 scores 0 (mean of 0, 0, 20) and 2 of 3 of its records are consistent
    assert "23.33" in text and "6.67" in text and "0.667" in text
    assert re.search(r"23\.33 <span class=\"ci\">\[0\.00, 40\.00\]</span>", text)
    # the gallery: one card per error, in sample order, each naming its established cause
    assert page.cards == ["color", "color", "rotation"]
    assert text.count('class="method-row') == 6
    assert text.count('data-verdict="inconsistent"') == 1 and text.count('data-verdict="match"') == 3
    assert "true class 3" in text and "predicted 5" in text
    # every image the page shows is a PNG next to it: 3 error images, 6 edited ones, 2 plots
    assert len(page.images) == 11 and all((run / "report" / src).is_file() for src in page.images)
    assert Image.open(run / "report" / "images/model_a/e0.png").getpixel((0, 0)) == (255, 0, 0)
    assert {"cause_shares.png", "cei.png"} <= set(page.images)
    # the confusion: KnownCause names colour for all three errors, two of which have colour as their cause
    assert "KnownCause: names the established cause for 2 of 3 errors" in text
    assert "Distractor: names the established cause for 1 of 3 errors" in text


def test_a_killed_run_renders_what_it_stored_and_is_marked_partial(tmp_path):
    run = tmp_path / "killed"
    nemo_eval_folder(run, summary=False, torn_tail=True)
    before = (run / "results.jsonl").read_bytes()
    text, page = page_of(run)
    assert 'id="partial"' in text and "stopped before writing summary.json" in text
    assert "23.33" in text  # the same table, computed from the stored records
    assert len(page.cards) == 3 and "1 unreadable line(s)" in text
    assert (run / "results.jsonl").read_bytes() == before  # the torn line is skipped, not cut: nothing is written


def test_a_run_without_stored_images_says_so_and_shows_no_broken_image(tmp_path):
    run = tmp_path / "run"
    nemo_eval_folder(run, images=False)
    text, page = page_of(run)
    assert set(page.images) == {"cause_shares.png", "cei.png"}
    assert "this run stored no images" in text and text.count("not stored</span>") == 9


def test_distill_eval_summary_is_read_from_its_own_layout(tmp_path):
    run = tmp_path / "distill"
    records = nemo_eval_folder(run, summary=False)
    provenance(run, "distill-eval")
    stored = {"KnownCause|model_a": {"llm_match": 0.5, "llm_match_ci_low": 0.1, "llm_match_ci_high": 0.9}}
    (run / "summary.json").write_text(json.dumps({"summary": stored}))
    text, page = page_of(run)
    assert 'id="partial"' not in text and len(page.cards) == len({r["sample_id"] for r in records})
    assert re.search(r"0\.500 <span class=\"ci\">\[0\.100, 0\.900\]</span>", text)  # the stored mean, not 0.667


def test_counterfactuals_and_lbee_pages(tmp_path):
    counterfactuals_folder(tmp_path / "cf")
    text, page = page_of(tmp_path / "cf")
    assert "75.00% [50.0, 100.0]" in text and "grid.png" in page.images
    assert "not stored: each image" in text and 'id="partial"' not in text
    lbee_folder(tmp_path / "lbee")
    text, page = page_of(tmp_path / "lbee")
    assert "0.500 <span" in text and "a dog on snow<br>a dog in water" in text and "hard_clusters.png" in page.images


def test_a_counterfactual_run_killed_before_its_results_shows_its_figures_as_partial(tmp_path):
    counterfactuals_folder(tmp_path / "cf", results=False)
    text, page = page_of(tmp_path / "cf")
    assert "stopped before writing results.json" in text and page.images == ["grid.png"]


def test_another_command_gets_its_stored_table_and_figures(tmp_path):
    run = tmp_path / "diff"
    provenance(run, "differences")
    (run / "table.txt").write_text("method  completeness\nA  <0.5>\n")
    Image.new("RGB", (4, 4)).save(run / "heatmap.png")
    text, page = page_of(run)
    assert "&lt;0.5&gt;" in text and page.images == ["heatmap.png"]


def test_index_links_every_step_page_and_marks_a_partial_one(tmp_path):
    demo = tmp_path / "demo"
    provenance(demo, "demo")
    nemo_eval_folder(demo / "nemo_eval", summary=True)
    nemo_eval_folder(demo / "nested" / "killed", summary=False)
    counterfactuals_folder(demo / "counterfactuals")
    (demo / "recap.json").write_text(json.dumps([{"step": "nemo_eval", "method": "KnownCause", "metric": "cei",
                                                  "value": 23.3, "ci_low": 0.0, "ci_high": 40.0}]))  # fmt: skip
    steps = {"nemo_eval": demo / "nemo_eval", "killed": demo / "nested" / "killed", "lbee": demo / "lbee"}
    index = write_report(demo, steps=steps)
    page = Parsed(index.read_text())
    assert page.links == ["../nemo_eval/report/index.html", "../nested/killed/report/index.html"]
    assert all((index.parent / link).is_file() for link in page.links)
    # each explanation run's first errors on the index itself: 3 error images and 6 edited ones per run
    assert len(page.images) == 18 and all((index.parent / src).is_file() for src in page.images)
    assert any(c.startswith("partial: the run stopped before writing summary.json") for c in page.cells)
    assert "no folder: the step did not run" in page.cells and "23.300" in index.read_text()
    # the same folder given to the command: the runs found under it, in the order they started
    main(["report", str(demo)])
    found = Parsed((demo / "report" / "index.html").read_text()).links
    assert sorted(found) == sorted(page.links + ["../counterfactuals/report/index.html"])


def test_the_command_takes_the_folder_with_or_without_the_option(tmp_path, capsys):
    nemo_eval_folder(tmp_path / "run")
    main(["report", str(tmp_path / "run")])
    assert capsys.readouterr().out.strip() == f"report: {tmp_path / 'run' / 'report' / 'index.html'}"
    main(["report", "--out_dir", str(tmp_path / "run")])  # drawn anew over the earlier page
    assert (tmp_path / "run" / "report" / "index.html").is_file()


def test_a_missing_folder_or_a_foreign_report_folder_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2 and "does not exist" in capsys.readouterr().err
    (tmp_path / "run" / "report").mkdir(parents=True)
    with pytest.raises(UserInputError, match="holds no report page"):
        build_page(tmp_path / "run")


def test_only_the_run_folders_own_files_are_copied_next_to_the_page(tmp_path):
    run = tmp_path / "run"
    records = nemo_eval_folder(run)
    (tmp_path / "outside.png").write_bytes((run / records[0]["image_file"]).read_bytes())
    records[0]["image_file"] = "../outside.png"
    records[1]["image_file"] = str(tmp_path / "outside.png")
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    _, page = page_of(run)
    assert not any("outside" in src for src in page.images) and not (run / "outside.png").exists()
