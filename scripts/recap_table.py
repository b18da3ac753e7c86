"""Print the demo table of docs/RESULTS.md from a demo's ``recap.json`` (Markdown, one line per step and method).

python scripts/recap_table.py checkpoints/demo/recap.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nemo_train.demo import recap_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recap", type=Path, help="recap.json written by `nemo-train demo`")
    rows = json.loads(parser.parse_args().recap.read_text())
    print("| step | method | numbers |\n| --- | --- | --- |")
    for step, method, numbers in recap_lines(rows, per_line=99):
        print(f"| {step} | {method} | {numbers} |")


if __name__ == "__main__":
    main()
