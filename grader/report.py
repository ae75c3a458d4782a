"""Reports: the readable table, the JSON report, the CSV gradebook and per-submission feedback.

No content can make a writer fail: every string passes :func:`clean` first (strings from learner
code were made safe where they entered the grading process; a submission's path can still hold
a file name that is not UTF-8), and every file is written to a temporary file beside it and then
moved into place, so a report is either the old one or the whole new one.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from tfcourse.checks.wire import safe_text

from .rows import Report, SubmissionRow

SYMBOL = {"passed": "✓", "failed": "✗", "error": "!", "timeout": "⏱", "not_attempted": "·", "missing": "?"}


def _pts(x: float) -> str:
    return f"{x:g}"


def table(report: Report) -> str:
    """submission × notebook × exercise, points and status, one line each, then totals."""
    report = clean(report)
    rows = [("submission", "notebook", "exercise", "points", "status")]
    for sub in report["submissions"]:
        for nb in sub["notebooks"]:
            for ex in nb["exercises"]:
                rows.append((sub["submission"], nb["notebook"], ex["exercise"],
                             f"{_pts(ex['score'])}/{_pts(ex['max_score'])}",
                             f"{SYMBOL.get(ex['status'], '')} {ex['status']}"))
            if nb["status"] != "graded":
                rows.append((sub["submission"], nb["notebook"], "(notebook)", "", nb["status"]))
        rows.append((sub["submission"], "TOTAL", "", f"{_pts(sub['score'])}/{_pts(sub['max_score'])}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# the limits a busy machine or a tight setting can make an honest answer hit (not "results": what a
# child sends back that is over its limits is the submission's doing)
LIMIT_NAMES = {"cpu_time": "the CPU time limit (--timeout)", "wall_time": "the wall-clock backstop",
               "startup": "the child's start-up time", "memory": "the memory limit (--memory)",
               "processes": "the process limit"}


def limited(report: Report) -> list[dict[str, str]]:
    """The exercises a time, memory or process limit stopped (their rows carry ``limit``): a verdict
    on the limit, not on the code, worth a regrade when the machine was busy or the limit tight."""
    return [{"submission": sub["submission"], "notebook": nb["notebook"], "exercise": ex["exercise"],
             "limit": ex["limit"]}
            for sub in report["submissions"] for nb in sub["notebooks"] for ex in nb["exercises"]
            if ex.get("limit") in LIMIT_NAMES]


def limited_summary(report: Report) -> str:
    """A few lines naming the exercises a limit stopped, for the table's reader; "" when none."""
    rows = report.get("limited") or limited(report)
    if not rows:
        return ""
    lines = [f"⏱ {len(rows)} exercise{'s' * (len(rows) != 1)} stopped by a limit, not judged (regrade "
             f"{'them' if len(rows) != 1 else 'it'} with a larger limit if the machine was busy):"]
    lines += [f"  {r['submission']}  {r['notebook']}  {r['exercise']}: {LIMIT_NAMES.get(r['limit'], r['limit'])}"
              for r in rows[:20]]
    if len(rows) > 20:
        lines.append(f"  … and {len(rows) - 20} more (the JSON report's \"limited\" lists them all)")
    return safe_text("\n".join(lines))


def clean(value: Any) -> Any:
    """``value`` (a report, a row) with every string, keys included, made safe (``safe_text``)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(report: Report, path: Path) -> None:
    write_atomic(path, json.dumps(clean(report), indent=2, ensure_ascii=False) + "\n")


def write_csv(report: Report, path: Path) -> None:
    """One row per submission: a column per exercise (``<notebook>:<exercise>``), notebook
    totals, then score, max_score and sandbox (the isolation its code ran in)."""
    report = clean(report)
    columns: list[str] = []
    for sub in report["submissions"]:
        for nb in sub["notebooks"]:
            for ex in nb["exercises"]:
                key = f"{nb['notebook']}:{ex['exercise']}"
                if key not in columns:
                    columns.append(key)
            if nb["notebook"] not in columns:
                columns.append(nb["notebook"])
    fh = io.StringIO()
    writer = csv.writer(fh)
    writer.writerow(["submission", *columns, "score", "max_score", "sandbox"])
    for sub in report["submissions"]:
        values: dict[str, float] = {}
        for nb in sub["notebooks"]:
            values[nb["notebook"]] = nb["score"]
            for ex in nb["exercises"]:
                values[f"{nb['notebook']}:{ex['exercise']}"] = ex["score"]
        writer.writerow([sub["submission"], *(_pts(values[c]) if c in values else "" for c in columns),
                         _pts(sub["score"]), _pts(sub["max_score"]),
                         sub.get("sandbox", report.get("sandbox", ""))])
    write_atomic(path, fh.getvalue())


def feedback_text(sub: SubmissionRow) -> str:
    sub = clean(sub)
    lines = [f"Feedback for {sub['submission']}", f"Score: {_pts(sub['score'])} / {_pts(sub['max_score'])}", ""]
    for nb in sub["notebooks"]:
        lines.append(f"== {nb['notebook']}: {_pts(nb['score'])} / {_pts(nb['max_score'])} ({nb['status']})")
        for ex in nb["exercises"]:
            lines.append(f"-- {ex['exercise']}: {ex['status']}, {_pts(ex['score'])} / {_pts(ex['max_score'])} points")
            lines += [f"   {line}" for line in ex["feedback"].splitlines()]
        if nb.get("output"):
            lines.append("   (your code printed output; the first lines:)")
            lines += [f"   | {line}" for line in nb["output"].splitlines()[:20]]
        lines.append("")
    return "\n".join(lines)


def write_feedback(report: Report, folder: Path) -> list[Path]:
    """One readable text file per submission; names come from the submission's folder name."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    used: set[str] = set()
    for sub in report["submissions"]:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(sub["submission"]).name.removesuffix(".ipynb")) or "submission"
        name, i = stem, 1
        while name in used:
            i += 1
            name = f"{stem}-{i}"
        used.add(name)
        path = folder / f"{name}.txt"
        write_atomic(path, feedback_text(sub))
        written.append(path)
    return written
