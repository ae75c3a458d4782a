"""Every catalogue entry's verdicts, to compare before and after a refactor.

    python tests/tools/catalogue_rows.py before.json            # in-process feedback and grader rows
    python tests/tools/catalogue_rows.py before.json --in-process-only
    ... change the code ...
    python tests/tools/catalogue_rows.py after.json
    python tests/tools/catalogue_rows.py --compare before.json after.json

For each entry of tests/catalogue/ (the same items tests/test_catalogue.py runs) it records the
feedback of the notebook's check run in this process (torch's and Python's RNGs seeded before
each, so entries that draw random numbers give the same text every run), and the grader's row
for the solutions notebook with only that entry's cell replaced (status, score, parts, feedback
and case counts of every exercise). A refactor that claims "verdicts unchanged" shows 0
differences. The grader part grades ~500 submissions: about 7 minutes on 2 cores; don't edit the
checkout while it runs (each child gets a copy of tfcourse/).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("exercise", "status", "score", "parts", "feedback", "cases_passed", "cases_total")


def dump(out: Path, grader: bool) -> None:
    sys.path.insert(0, str(ROOT))
    import torch

    import tests.test_catalogue as tc
    from tfcourse.checks.case import CheckFailed

    warnings.simplefilter("ignore")
    rows: dict[str, dict] = {}
    items = tc._items()
    for item in items:
        torch.manual_seed(0)
        random.seed(0)
        printed = io.StringIO()
        try:
            with redirect_stdout(printed):
                tc._check(item)(tc._define(item))
            rows[item.id] = {"inprocess": "PASS " + printed.getvalue()}
        except CheckFailed as failure:
            rows[item.id] = {"inprocess": "FAIL " + str(failure)}
        except Exception as exc:  # a catalogue or check bug: recorded, so a comparison shows it
            rows[item.id] = {"inprocess": f"RAISE {type(exc).__name__}: {exc}"}
    if grader:
        from grader.grading import grade_submission

        with tempfile.TemporaryDirectory(prefix="catalogue-rows-") as tmp:
            def grade(item):
                report = grade_submission(tc._submission(item, Path(tmp)), notebooks=[item.notebook])
                (nb,) = report["notebooks"]
                return [{k: ex.get(k) for k in KEYS} for ex in nb["exercises"]]

            with ThreadPoolExecutor(max_workers=2) as pool:
                for item, row in zip(items, pool.map(grade, items), strict=True):
                    rows[item.id]["grader"] = row
    out.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"{len(rows)} entries written to {out}")


def compare(before: Path, after: Path) -> int:
    a = json.loads(before.read_text(encoding="utf-8"))
    b = json.loads(after.read_text(encoding="utf-8"))
    differences = sorted(set(a) ^ set(b))
    for key in sorted(set(a) & set(b)):
        for part in ("inprocess", "grader"):
            if part in a[key] and part in b[key] and a[key][part] != b[key][part]:
                differences.append(f"{key} ({part})")
    for line in differences[:20]:
        print("differs:", line)
    print(f"{len(set(a) | set(b))} entries, {len(differences)} differences")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="OUT.json, or with --compare BEFORE.json AFTER.json")
    parser.add_argument("--in-process-only", action="store_true", help="skip the grader rows (about 3 minutes)")
    parser.add_argument("--compare", action="store_true", help="compare two dumps; exit 1 when they differ")
    args = parser.parse_args()
    if args.compare:
        if len(args.files) != 2:
            parser.error("--compare takes BEFORE.json AFTER.json")
        return compare(*args.files)
    if len(args.files) != 1:
        parser.error("one output file")
    dump(args.files[0], grader=not args.in_process_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
