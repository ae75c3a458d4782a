"""Reports: the readable table, the JSON report, the CSV gradebook and per-submission feedback."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

SYMBOL = {"passed": "✓", "failed": "✗", "error": "!", "timeout": "⏱", "not_attempted": "·", "missing": "?"}


def _pts(x: float) -> str:
    return f"{x:g}"


def table(report: dict[str, Any]) -> str:
    """submission × notebook × exercise, points and status, one line each, then totals."""
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


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_csv(report: dict[str, Any], path: Path) -> None:
    """One row per submission: a column per exercise (``<notebook>:<exercise>``), notebook
    totals, then score, max_score and sandbox (the isolation its code ran in)."""
    columns: list[str] = []
    for sub in report["submissions"]:
        for nb in sub["notebooks"]:
            for ex in nb["exercises"]:
                key = f"{nb['notebook']}:{ex['exercise']}"
                if key not in columns:
                    columns.append(key)
            if nb["notebook"] not in columns:
                columns.append(nb["notebook"])
    with path.open("w", newline="", encoding="utf-8") as fh:
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


def feedback_text(sub: dict[str, Any]) -> str:
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


def write_feedback(report: dict[str, Any], folder: Path) -> list[Path]:
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
        path.write_text(feedback_text(sub), encoding="utf-8")
        written.append(path)
    return written
