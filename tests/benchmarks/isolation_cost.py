"""What the grader's isolation costs: wall time to grade the solutions, side by side.

    python tests/benchmarks/isolation_cost.py                  # 4 submissions, 3 repeats
    python tests/benchmarks/isolation_cost.py --copies 6 --repeats 5

A batch of ``--copies`` identical submissions (copies of ``solutions/01_attention.ipynb``, so every
run must give full marks) is graded by the real CLI, ``python -m grader SUB... --notebooks
01_attention --quiet``, in four configurations:

* sandbox ``bwrap`` (bubblewrap: private file view, no network, PID namespace) or ``none``
  (process group and rlimits only), chosen with the ``TFCOURSE_SANDBOX`` environment variable;
* ``--jobs 1`` (one submission after the other) or ``--jobs 2`` (two at once).

Plus one submission alone with each sandbox, the case of a learner checking their own work.
Every repeat runs all configurations in an order that rotates from repeat to repeat, so drift in
the machine's load hits them alike. The wall clock of the whole command is measured (process
start, importing torch in the grader and in every child, running and judging; CPU time is not
reported: processes in a PID namespace that are killed are not accounted to the command). The
output is a markdown table of medians and min-max. This is a script, not a test: it asserts no
timings. It checks that every run gave full marks in the sandbox asked for.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "01_attention"
SOURCE = ROOT / "solutions" / f"{NOTEBOOK}.ipynb"


def grade(subs: list[Path], jobs: int, mode: str, out: Path) -> float:
    """Wall seconds of one CLI run; raises if any submission lost a point or ran elsewhere."""
    env = {**os.environ, "TFCOURSE_SANDBOX": mode}
    cmd = [sys.executable, "-m", "grader", *map(str, subs), "--notebooks", NOTEBOOK, "--jobs", str(jobs),
           "--quiet", "--json", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"grader failed ({mode}, --jobs {jobs}):\n{proc.stderr[-2000:]}")
    rows = json.loads(out.read_text())["submissions"]
    if len(rows) != len(subs) or any(r["score"] != r["max_score"] or r["sandbox"] != mode for r in rows):
        raise SystemExit(f"not full marks or wrong sandbox ({mode}, --jobs {jobs}): "
                         f"{[(r['score'], r['sandbox']) for r in rows]}")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=4, help="submissions in the batch (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    parser.add_argument("--modes", default="bwrap,none", help="sandboxes to compare (default bwrap,none)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    configs = [(f"1 submission, {m}", 1, 1, m) for m in modes]
    configs += [(f"{args.copies} submissions, --jobs {j}, {m}", args.copies, j, m) for m in modes for j in (1, 2)]
    with tempfile.TemporaryDirectory(prefix="tfcourse-bench-") as tmp:
        base = Path(tmp)
        subs = []
        for i in range(args.copies):
            (base / f"s{i}").mkdir()
            shutil.copy(SOURCE, base / f"s{i}" / f"{NOTEBOOK}.ipynb")
            subs.append(base / f"s{i}")
        for _, n, jobs, mode in configs:  # warm-up: disk cache, and every sandbox works
            grade(subs[:n], jobs, mode, base / "warm.json")
        times: dict[str, list[float]] = {c[0]: [] for c in configs}
        for r in range(args.repeats):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for label, n, jobs, mode in order:
                times[label].append(grade(subs[:n], jobs, mode, base / "r.json"))
                print(f"repeat {r + 1}: {label}: {times[label][-1]:.1f} s", file=sys.stderr)

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.1f}"

    print(f"Grading copies of solutions/{NOTEBOOK}.ipynb with `python -m grader` "
          f"({args.repeats} repeats, medians; {datetime.date.today()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}).\n")
    print("| run | wall s (median) | wall min-max | wall per submission |")
    print("|---|---|---|---|")
    for label, n, _, _ in configs:
        walls = times[label]
        print(f"| {label} | {med(walls)} | {min(walls):.1f}-{max(walls):.1f} | {statistics.median(walls) / n:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
