"""Report pages opened in a real browser (headless Chromium, no Python driver): every image loads, the gallery's
filters change what is shown, and a screenshot of a small real ``nemo-eval`` run's page is saved.

Chromium runs the page with a few lines of checking script added after the page's own (a copy of the page beside
it, so its relative image paths hold) and prints the resulting DOM (``--dump-dom``), where the script left its
findings as JSON. Skipped, with the reason, where no Chromium is installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "disabled")

from nemo_train.nemo.components import BenchmarkArgs, DistractorMethod, KnownCauseMethod  # noqa: E402
from nemo_train.nemo.run import nemo_eval  # noqa: E402
from nemo_train.reports import write_report  # noqa: E402
from tests.reports.report_folders import nemo_eval_folder  # noqa: E402

BROWSER = next(
    (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: install it with `apt-get install -y chromium chromium-driver`"
)

#: Runs after the page's own script: which images loaded, and what each filter setting shows.
CHECK = """
<script>
window.addEventListener('load', function () {
  var out = {images: document.images.length, broken: [], filters: {}};
  Array.prototype.forEach.call(document.images, function (img) {
    if (!(img.complete && img.naturalWidth > 0)) { out.broken.push(img.getAttribute('src')); }
  });
  function shown() {
    var cards = Array.prototype.filter.call(document.querySelectorAll('.error-card'), function (c) { return !c.hidden; });
    var rows = 0;
    cards.forEach(function (c) {
      rows += Array.prototype.filter.call(c.querySelectorAll('.method-row'), function (r) { return !r.hidden; }).length;
    });
    return {cards: cards.length, rows: rows, count: document.getElementById('gallery-count').textContent};
  }
  function set(id, value) {
    var s = document.getElementById(id); s.value = value; s.dispatchEvent(new Event('change'));
  }
  SETTINGS.forEach(function (setting) {
    ['filter-method', 'filter-cause', 'filter-verdict'].forEach(function (id) { set(id, setting[id] || ''); });
    out.filters[JSON.stringify(setting)] = shown();
  });
  var pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium(*args: str, profile: Path) -> str:
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
    ]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def key(setting: dict[str, str]) -> str:
    """A filter setting as the check script names it (``JSON.stringify``)."""
    return json.dumps(setting, separators=(",", ":"))


def check_page(page: Path, settings: list[dict[str, str]], profile: Path) -> dict:
    """Open a copy of ``page`` (beside it) with :data:`CHECK` added; returns what the check found."""
    text = page.read_text(encoding="utf-8")
    probe = page.with_name("check.html")
    probe.write_text(text.replace("</body>", CHECK.replace("SETTINGS", json.dumps(settings)) + "</body>"))
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri(), profile=profile)
    found = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_a_small_real_run_page_loads_every_image_and_its_filters_work(model_a_checkpoint, tmp_path):
    out = tmp_path / "nemo_eval"
    methods = [KnownCauseMethod(), DistractorMethod()]
    nemo_eval(BenchmarkArgs(n=4, test_styles=1), [model_a_checkpoint], methods, out_dir=str(out))
    page = write_report(out)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    errors = {r["sample_id"] for r in records}
    distractor = next(r["method"] for r in records if r["method"].startswith("Distractor"))
    matches = sum(not r.get("failed") and r.get("consistent") is not False and r["llm_match"] >= 0.5 for r in records)
    settings = [{}, {"filter-method": distractor}, {"filter-verdict": "match"}]
    found = check_page(page, settings, tmp_path / "profile")
    # every error's image, every edited image, the two plots: all loaded
    assert found["images"] == len(errors) + sum(bool(r.get("edited_image_file")) for r in records) + 2
    assert found["broken"] == []
    everything, one_method, matched = (found["filters"][key(s)] for s in settings)
    assert everything == {
        "cards": len(errors),
        "rows": len(records),
        "count": f"{len(errors)} of {len(errors)} errors shown",
    }
    assert one_method["cards"] == len(errors) and one_method["rows"] == len(errors)  # one row per error
    assert 0 < matched["rows"] == matches < len(records)  # KnownCause matches, the distractor does not
    shot = tmp_path / "report.png"
    chromium("--window-size=1280,2200", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile")
    assert shot.stat().st_size > 10_000
    # the index of runs (as the demo writes it) shows the run's first errors with their edits and verdicts
    (tmp_path / "demo").mkdir()
    index = write_report(tmp_path / "demo", steps={"nemo_eval": out})
    first = sorted(errors)[:3]
    edited = sum(bool(r.get("edited_image_file")) for r in records if r["sample_id"] in first)
    found = check_page(index, [], tmp_path / "profile")
    assert found["broken"] == [] and found["images"] == len(first) + edited > 3
    chromium(
        "--window-size=1100,900", f"--screenshot={tmp_path / 'index.png'}", index.as_uri(), profile=tmp_path / "profile"
    )
    print(f"screenshots: {shot}, {tmp_path / 'index.png'}")


def test_the_cause_filter_shows_only_the_errors_of_that_cause(tmp_path):
    run = tmp_path / "run"
    nemo_eval_folder(run)  # errors e0 and e1 caused by colour, e2 by rotation
    settings = [{"filter-cause": "rotation"}, {"filter-cause": "color", "filter-verdict": "inconsistent"}]
    found = check_page(write_report(run), settings, tmp_path / "profile")
    assert found["broken"] == [] and found["images"] == 11
    rotation, inconsistent = (found["filters"][key(s)] for s in settings)
    assert rotation == {"cards": 1, "rows": 2, "count": "1 of 3 errors shown"}
    assert inconsistent == {"cards": 1, "rows": 1, "count": "1 of 3 errors shown"}  # the Distractor's reading of e1
