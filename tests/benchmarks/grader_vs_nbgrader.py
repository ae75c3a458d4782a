"""Time `python -m grader` against `nbgrader autograde` on the same notebook-01 submission.

    python tests/benchmarks/grader_vs_nbgrader.py              # 5 repeats
    python tests/benchmarks/grader_vs_nbgrader.py --repeats 9

In a temporary nbgrader course directory (our grader/nbgrader_config.py, solutions/01_attention.ipynb
as the source, `nbgrader generate_assignment` run once, untimed) one correct submission is put
under submitted/student/01_attention/: the released notebook with the reference code in its
solution cells. Then, in one run and alternating (the order flips every repeat, so drift in the
machine's load hits both alike), each repeat times the wall clock of the whole command:

* ``python -m grader submitted/student --notebooks 01_attention --quiet``: learner cells in a fresh
  child process, visible and hidden cases, verdict in the parent;
* ``nbgrader autograde 01_attention --student student --force``: the whole notebook (demos
  included) executed in a kernel, tests in the learner's kernel, scores into the gradebook;
* ``nbgrader autograde`` of the same submission with its demo cells deleted (a learner may delete
  them; only the setup cell, the check imports and the nbgrader cells stay), to show how much of
  nbgrader's time is the demos and how much is nbgrader itself.

Every timed run must give 10/10 (checked from the grader's JSON report and nbgrader's gradebook),
or the benchmark stops. One untimed warm-up of each comes first (disk cache, .pyc files). The
output is a markdown table: wall-clock and CPU medians, min-max, the ratios to the grader, and the
machine. CPU time (of the command and the processes it waited for) is less sensitive than wall
time to other work on the machine. This is a script, not a test: it asserts no timings.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tfcourse, for strip_solution_markers (also when not installed)
ASSIGNMENT = "01_attention"
SOURCE = ROOT / "solutions" / f"{ASSIGNMENT}.ipynb"
CONFIG = ROOT / "grader" / "nbgrader_config.py"
MAX_SCORE = 10.0


def environment(tmp: Path) -> dict[str, str]:
    """nbgrader's environment: a python3 kernel that is this interpreter, no ~/.jupyter config,
    this interpreter's bin/ on PATH (nbgrader runs `alembic`), the checkout importable."""
    kernel_dir = tmp / "jupyter-data" / "kernels" / "python3"
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}))
    (tmp / "jupyter-config").mkdir()
    env = dict(os.environ)
    env.update(JUPYTER_PATH=str(tmp / "jupyter-data"), JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"),
               JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p))
    env.pop("MPLBACKEND", None)
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of ``cmd`` (CPU: user + system of it and every process it
    waited for: nbgrader's kernel, the grader's child); exits with its log if it fails."""
    cpu = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or "| ERROR]" in proc.stderr:
        sys.exit(f"failed: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-4000:]}")
    return elapsed, _children_cpu() - cpu


def alternate(names: list[str], repeats: int,
              measure: Callable[[str], tuple[float, float]]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``measure(name)`` -> (wall s, CPU s) for every name, ``repeats`` + 1 rounds in alternating
    order (round 0 is the warm-up and is not kept); the kept (wall, CPU) times per name."""
    times: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(repeats + 1):
        for name in (names if rep % 2 else names[::-1]):
            wall, cpu_seconds = measure(name)
            if rep:
                times[name].append(wall)
                cpu[name].append(cpu_seconds)
            print(f"{'warm-up' if rep == 0 else f'repeat {rep}'}: {name}: {wall:.1f} s wall, "
                  f"{cpu_seconds:.1f} s CPU", file=sys.stderr)
    return times, cpu


def timing_table(intro: str, times: dict[str, list[float]], cpu: dict[str, list[float]], base: str,
                 headers: Sequence[str] = (), cells: Callable[[str, list[float]], list[str]] = lambda *_: []) -> None:
    """Print the machine, ``intro`` (what was timed, how often), then a Markdown table, one row per
    command: its wall median and min–max, its CPU median, the ratios of its wall and CPU medians to
    those of the command ``base``, then the columns ``headers`` with ``cells(name, wall times)``."""
    print(f"Machine: {machine()}\n")
    print(intro + "\n")
    print("| " + " | ".join(["command", "wall median (s)", "wall min–max (s)", "CPU median (s)",
                             f"wall ratio to `{base}`", "CPU ratio", *headers]) + " |")
    print("|---|" + "---:|" * (5 + len(headers)))
    base_wall, base_cpu = statistics.median(times[base]), statistics.median(cpu[base])
    for name, wall in times.items():
        row = [f"`{name}`", f"{statistics.median(wall):.1f}", f"{min(wall):.1f}–{max(wall):.1f}",
               f"{statistics.median(cpu[name]):.1f}", f"{statistics.median(wall) / base_wall:.2f}",
               f"{statistics.median(cpu[name]) / base_cpu:.2f}", *cells(name, wall)]
        print("| " + " | ".join(row) + " |")


def filled_in(released, source_nb):
    """The released notebook with the reference code in every solution cell."""
    from tfcourse.notebook import strip_solution_markers

    solutions = {c.metadata.nbgrader["grade_id"]: strip_solution_markers(c.source)
                 for c in source_nb.cells if c.metadata.get("nbgrader", {}).get("solution")}
    nb = copy.deepcopy(released)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = solutions[cell.metadata.nbgrader["grade_id"]]
    return nb


def without_demos(nb):
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if c.cell_type == "code" and (
        "nbgrader" in c.metadata or c.metadata.get("tfcourse", {}).get("setup") or "tfcourse.checks" in c.source)]
    return nb


def nbgrader_score(course: Path, student: str) -> float:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "tfcourse") as gb:
        return gb.find_submission(ASSIGNMENT, student).score


def grader_score(report: Path) -> float:
    return json.loads(report.read_text())["submissions"][0]["score"]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"{os.cpu_count()} cores ({cpu}), load average at start {load}; "
            f"{datetime.date.today().isoformat()}; Python {platform.python_version()}, "
            f"torch {version('torch')}, nbgrader {version('nbgrader')}, nbclient {version('nbclient')}, "
            f"ipykernel {version('ipykernel')}; {platform.system()} {platform.release()}")


def repeats_option(parser: argparse.ArgumentParser, default: int) -> None:
    """Add ``--repeats``: how many timed runs of each command, a whole number >= 1."""
    def at_least_one(text: str) -> int:
        n = int(text) if text.isdigit() else 0
        if n < 1:
            raise argparse.ArgumentTypeError(f"{text} is not a whole number >= 1")
        return n

    parser.add_argument("--repeats", type=at_least_one, default=default,
                        help=f"timed runs of each command (default: {default})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    repeats_option(parser, 5)
    parser.add_argument("--keep", type=Path, help="build the course directory here and keep it")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="grader-vs-nbgrader-"))
    try:
        env = environment(tmp)
        course = args.keep.resolve() if args.keep else tmp / "course"
        if course.exists():
            sys.exit(f"{course} exists; give a new folder to --keep")
        (course / "source" / ASSIGNMENT).mkdir(parents=True)
        shutil.copy(CONFIG, course / "nbgrader_config.py")
        shutil.copy(SOURCE, course / "source" / ASSIGNMENT / SOURCE.name)
        source_nb = nbformat.read(SOURCE, as_version=4)
        nbgrader = [sys.executable, "-m", "nbgrader"]
        print("nbgrader generate_assignment (untimed) ...", file=sys.stderr)
        run([*nbgrader, "generate_assignment", ASSIGNMENT], course, env)
        released = nbformat.read(course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
        correct = filled_in(released, source_nb)
        submissions = {"student": correct, "student_nodemos": without_demos(correct)}
        for student, nb in submissions.items():
            folder = course / "submitted" / student / ASSIGNMENT
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")

        report = tmp / "report.json"
        commands = {
            "python -m grader": ([sys.executable, "-m", "grader", "submitted/student",
                                  "--notebooks", ASSIGNMENT, "--quiet", "--json", str(report)],
                                 lambda: grader_score(report)),
            "nbgrader autograde": ([*nbgrader, "autograde", ASSIGNMENT, "--student", "student", "--force"],
                                   lambda: nbgrader_score(course, "student")),
            "nbgrader autograde, demo cells deleted": (
                [*nbgrader, "autograde", ASSIGNMENT, "--student", "student_nodemos", "--force"],
                lambda: nbgrader_score(course, "student_nodemos")),
        }
        def measure(name: str) -> tuple[float, float]:
            cmd, score = commands[name]
            seconds, cpu_seconds = run(cmd, course, env)
            if score() != MAX_SCORE:
                sys.exit(f"{name} gave {score()} instead of {MAX_SCORE}: not timing a wrong result")
            return seconds, cpu_seconds

        times, cpu = alternate(list(commands), args.repeats, measure)

        base = times["python -m grader"]
        timing_table(f"One correct notebook-01 submission, {args.repeats} timed runs of each command after "
                     "one warm-up, alternating. Wall: wall clock of the whole command; CPU: user + system "
                     "time of the command and the processes it started. Ratios: of the medians, and the "
                     "median of the per-repeat ratios (each pair ran back to back).",
                     times, cpu, "python -m grader", ["wall ratio, median per repeat"],
                     lambda name, ts: [f"{statistics.median(t / b for t, b in zip(ts, base, strict=True)):.2f}"])
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
