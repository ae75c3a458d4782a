"""Grading at scale (issue 14): the fast path, --jobs, and a local Dask cluster, side by side.

    python tests/benchmarks/scale.py                 # default: about 10 minutes on 2 cores
    python tests/benchmarks/scale.py --repeats 3 --class-size 32 --nbgrader
    python tests/benchmarks/scale.py --tables t --repeats 1  # issue 30's targets: about 25 minutes

Three tables, every command timed as a whole (wall clock), in one run, alternating:

1. One full course submission (every notebook, the reference code in each solution cell):
   ``python -m grader SUB`` with the fast path (warm zygote, a fork per notebook) and the cold
   path (``TFCOURSE_FAST=0``: a fresh interpreter that imports torch per notebook), each in
   bubblewrap (the default sandbox) and in the unshare sandbox, and with ``--nbgrader``
   ``nbgrader autograde`` of the same notebooks (one assignment per notebook, run one after
   another, in a temporary course built as in grader_vs_nbgrader.py), in the same alternation.
2. A class of ``--class-size`` copies of the notebook-01 submission, ``--notebooks 01_attention``:
   ``--jobs 2`` vs ``--jobs 1`` (fast path, default sandbox).
3. The same class through a Dask cluster started here (``dask scheduler`` + 2 ``dask worker``
   processes with one thread each, on 127.0.0.1; started once, untimed) vs the local pool
   ``--jobs 2``.

4. ``--tables t``: the speed targets of issue 30, one row each, side by side in one run: one full
   submission quiet and with the machine loaded (two busy loops per core, started by the script),
   each against ``nbgrader autograde`` of the same notebooks under the same load; a class of
   ``--class-size`` full submissions with ``--jobs 2`` (the cost of each submission beyond the
   first); the learner's first check cell in a fresh kernel after the setup cell; the memory of
   one job slot (the largest resident set of any process of a one-submission command).

Every timed run must give full marks to every submission, or the script stops. Each table gives
medians, min–max and the ratios of medians; the machine's load average before each table (the
figures are noisy on a shared machine). This is a script, not a test: it asserts no timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
import grader_vs_nbgrader as gvn  # noqa: E402

SOLUTIONS = ROOT / "solutions"
NBG = "`nbgrader autograde`, one assignment per notebook, one after another"


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def timed(cmd, env: dict[str, str], report=None, cwd: Path = ROOT) -> float:
    """Seconds ``cmd`` took: a command line (``report``: its JSON report, checked for full marks
    after the clock stops), or a function (``report``: a function that checks its work, called
    after the clock stops)."""
    start = time.perf_counter()
    if callable(cmd):
        cmd()
        seconds = time.perf_counter() - start
        report()
        return seconds
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-4000:]}")
    if report is not None:
        rows = json.loads(report.read_text())["submissions"]
        bad = [r["submission"] for r in rows if r["score"] != r["max_score"]]
        if bad:
            sys.exit(f"{' '.join(cmd[:4])}: not full marks for {bad[:3]}: not timing a wrong result")
    return seconds


def table(title: str, times: dict[str, list[float]], base: str) -> None:
    print(f"\n{title}\n\n| command | median (s) | min–max (s) | ratio to `{base}` |\n|---|---:|---:|---:|")
    ref = statistics.median(times[base])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.1f} | {min(ts):.1f}–{max(ts):.1f} | {med / ref:.2f} |")


def alternate(commands: dict[str, tuple[list[str], dict[str, str], Path | None]], repeats: int,
              warm_up: bool = True) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {n: [] for n in commands}
    order = list(commands)
    for rep in range(repeats + (1 if warm_up else 0)):
        for name in (order if rep % 2 else order[::-1]):
            cmd, env, report = commands[name]
            t = timed(cmd, env, report)
            if rep or not warm_up:
                times[name].append(t)
            print(f"  {'warm-up' if warm_up and rep == 0 else 'run'}: {name}: {t:.1f} s (load {load()})",
                  file=sys.stderr)
    return times


def nbgrader_full(tmp: Path, notebooks: list[str]) -> tuple[list[list[str]], Path, dict[str, str]]:
    """A temporary nbgrader course with every notebook as an assignment and one correct
    submission; returns the autograde commands (one per notebook), the course, its env."""
    env = gvn.environment(tmp)
    course = tmp / "course"
    nbg = [sys.executable, "-m", "nbgrader"]
    (course / "source").mkdir(parents=True)
    shutil.copy(gvn.CONFIG, course / "nbgrader_config.py")
    cmds = []
    for name in notebooks:
        (course / "source" / name).mkdir()
        shutil.copy(SOLUTIONS / f"{name}.ipynb", course / "source" / name)
        gvn.run([*nbg, "generate_assignment", name], course, env)
        released = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
        correct = gvn.filled_in(released, nbformat.read(SOLUTIONS / f"{name}.ipynb", as_version=4))
        folder = course / "submitted" / "student" / name
        folder.mkdir(parents=True)
        nbformat.write(correct, folder / f"{name}.ipynb")
        cmds.append([*nbg, "autograde", name, "--student", "student", "--force"])
    return cmds, course, env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gvn.repeats_option(p, 2)
    p.add_argument("--class-size", type=int, default=32, help="submissions in tables 2 and 3 (default: 32)")
    p.add_argument("--tables", default="123",
                   help="which tables to run: 1, 2, 3 (default: 123); n: only the nbgrader row of table 1; "
                        "t: the speed targets (issue 30)")
    p.add_argument("--nbgrader", action="store_true",
                   help="add nbgrader autograde of the full submission to table 1 (several minutes)")
    p.add_argument("--rows", default="qcfml",
                   help="with --tables t, which target rows (default: qcfml): q one submission on the quiet "
                        "machine, c the class (needs q), f the learner's first check, m memory per job slot, "
                        "l one submission with the machine loaded")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    py = [sys.executable, "-m", "grader"]
    notebooks = sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    tmp = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        full = tmp / "full"
        full.mkdir()
        for n in notebooks:
            shutil.copy(SOLUTIONS / f"{n}.ipynb", full)
        report = tmp / "report.json"
        fast = _env("bwrap")
        print(f"Machine: {gvn.machine()}")
        if "t" in args.tables:
            _targets(args, tmp, [*py, str(full), "--quiet", "--json", str(report)], notebooks, report)
        if not set(args.tables) & set("123n"):
            return 0
        print(f"\nload average before table 1: {load()}")
        _table_1(args, tmp, [*py, str(full), "--quiet", "--json", str(report)], notebooks, report)
        if "2" not in args.tables and "3" not in args.tables:
            return 0

        batch = [*py, *_class(tmp, args.class_size), "--notebooks", "01_attention", "--quiet", "--json", str(report)]
        print(f"\nload average before table 2: {load()}")
        times = {} if "2" not in args.tables else alternate({"--jobs 1": ([*batch, "--jobs", "1"], fast, report),
                           "--jobs 2": ([*batch, "--jobs", "2"], fast, report)}, args.repeats, warm_up=False)
        if times:
            table(f"Table 2: {args.class_size} notebook-01 submissions, fast path", times, "--jobs 1")

        address = _dask_cluster(tmp, fast, procs)
        print(f"\nload average before table 3: {load()}")
        times = alternate({"local pool, --jobs 2": ([*batch, "--jobs", "2"], fast, report),
                           "Dask, 2 local workers": ([*batch, "--scheduler", address], fast, report)},
                          args.repeats)
        table(f"Table 3: {args.class_size} notebook-01 submissions, local pool vs a Dask cluster on this "
              "machine (scheduler + 2 workers, started before, untimed; the first Dask run starts the "
              "workers' zygotes and is the warm-up)", times, "local pool, --jobs 2")
        print(f"\nload average at the end: {load()}")
        return 0
    finally:
        _stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


def _env(sandbox: str, *, fast: bool = True) -> dict[str, str]:
    """This environment with TFCOURSE_SANDBOX=``sandbox``; ``fast=False``: the cold path too."""
    env = {**os.environ, "TFCOURSE_SANDBOX": sandbox}
    return env if fast else {**env, "TFCOURSE_FAST": "0"}


def _table_1(args: argparse.Namespace, tmp: Path, one: list[str], notebooks: list[str], report: Path) -> None:
    """One full submission: fast and cold path, bwrap and unshare (and nbgrader autograde)."""
    commands = {}
    if "1" in args.tables:
        commands = {"fast path (bwrap, the default)": (one, _env("bwrap"), report),
                    "cold path (bwrap, TFCOURSE_FAST=0)": (one, _env("bwrap", fast=False), report),
                    "fast path (unshare)": (one, _env("unshare"), report),
                    "cold path (unshare, TFCOURSE_FAST=0)": (one, _env("unshare", fast=False), report)}
    if args.nbgrader or "n" in args.tables:
        commands[NBG] = _nbgrader_command(tmp, notebooks)
    times = alternate(commands, args.repeats) if commands else {}
    if times:
        table(f"Table 1: one full submission ({len(notebooks)} notebooks), {args.repeats} timed runs after a "
              "warm-up", times, next(iter(times)))


def _busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` processes that spin forever (each a core's worth of other work)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(n)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _peak_rss_mib(cmd: list[str], env: dict[str, str]) -> float:
    """The largest resident set (MiB) of any one process of ``cmd`` (the command itself, the zygote,
    the sandboxed children), read from a wrapper's RUSAGE_CHILDREN after it waited for all of them."""
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[-1]) / 1024


def _first_check_seconds() -> tuple[float, float]:
    """The learner's loop: notebooks/01_attention.ipynb with the reference code in its solution
    cells, in a fresh kernel; (seconds of the setup cells, the code cells under the title up to the
    one that imports the notebook's checks; seconds of the first check cell after them). Cells in
    between (the first exercise's answer, any demo) run untimed."""
    from nbclient import NotebookClient

    released = nbformat.read(ROOT / "notebooks" / "01_attention.ipynb", as_version=4)
    nb = gvn.filled_in(released, nbformat.read(SOLUTIONS / "01_attention.ipynb", as_version=4))
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}})
    setup, set_up, check = 0.0, False, None
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            start = time.perf_counter()
            client.execute_cell(cell, index)
            seconds = time.perf_counter() - start
            if not set_up:
                setup += seconds
                set_up = "from tfcourse.checks." in cell.source
            elif cell.source.lstrip().startswith("check_"):
                errors = [o for o in cell.outputs if o.get("output_type") == "error"]
                if errors:
                    sys.exit(f"the first check cell failed: {errors[0].get('evalue')}")
                check = seconds
                break
    if not set_up or check is None:
        sys.exit("notebook 01 has no cell importing its checks, or no check cell after it")
    return setup, check


def _targets(args: argparse.Namespace, tmp: Path, one: list[str], notebooks: list[str], report: Path) -> None:
    """Issue 30's rows, side by side in one run (medians of ``--repeats`` after a warm-up)."""
    env = _env("bwrap")
    (tmp / "targets").mkdir()
    nbgrader = _nbgrader_command(tmp / "targets", notebooks)
    busy = 2 * (os.cpu_count() or 1)
    rows: list[tuple[str, str]] = []

    def row(name: str, value: str) -> None:
        # Printed as soon as measured, so a row that is stopped (the loaded nbgrader runs can take
        # many minutes on a shared machine) does not lose the rows before it.
        rows.append((name, value))
        print(f"row: | {name} | {value} |", file=sys.stderr, flush=True)

    def one_submission(loaded: bool) -> tuple[float, float]:
        procs = _busy_loops(busy) if loaded else []
        try:
            time.sleep(5 if loaded else 0)
            state = f"{busy} busy loops" if loaded else "no extra load"
            print(f"\nload average before the {state} rows: {load()}", file=sys.stderr)
            times = alternate({"grader": (one, env, report), "grader --jobs 2": ([*one, "--jobs", "2"], env, report),
                               "nbgrader": nbgrader}, args.repeats)
        finally:
            _stop(procs)
        g, g2, n = (statistics.median(times[k]) for k in ("grader", "grader --jobs 2", "nbgrader"))
        row(f"one full submission, {state} (load at the end {load()})",
            f"grader {g:.1f} s (min–max {min(times['grader']):.1f}–{max(times['grader']):.1f}), with --jobs 2 "
            f"(two notebooks at a time) {g2:.1f} s; nbgrader {n:.1f} s; ratio {n / g:.1f}×, {n / g2:.1f}× with --jobs 2")
        return g, n

    if "c" in args.rows and "q" not in args.rows:
        sys.exit("--rows c needs q: the class row's cost per submission is beyond the quiet one")
    if "q" in args.rows:
        quiet_one, quiet_nbg = one_submission(loaded=False)
    if "c" in args.rows:
        _class_row(args, tmp, env, report, quiet_one, quiet_nbg, row)
    if "f" in args.rows:
        firsts = [_first_check_seconds() for _ in range(max(args.repeats, 1) + 1)][1:]
        row(f"the learner's first check in a fresh kernel, notebook 01 (load {load()})",
            f"first check cell {statistics.median(c for _, c in firsts):.1f} s after the setup cells "
            f"({statistics.median(s for s, _ in firsts):.1f} s)")
    if "m" in args.rows:
        row("memory of one job slot", f"largest process {_peak_rss_mib(one, env):.0f} MiB resident "
            "(one full submission; each slot of --jobs N runs one such command's processes)")
    # The loaded rows last: on a shared machine they are the slowest and the likeliest to be stopped.
    if "l" in args.rows:
        one_submission(loaded=True)
    print(f"\nTargets (issue 30), {args.repeats} timed runs after a warm-up\n\n| row | measured |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


def _class_row(args: argparse.Namespace, tmp: Path, env: dict[str, str], report: Path, quiet_one: float,
               quiet_nbg: float, row: Callable[[str, str], None]) -> None:
    """A class of ``--class-size`` copies of the full submission, ``--jobs 2``: the cost of each
    submission beyond the first (the quiet single submission's time), against nbgrader's."""
    klass = tmp / "full-class"
    for i in range(args.class_size):
        shutil.copytree(tmp / "full", klass / f"s{i:03d}")
    batch = [sys.executable, "-m", "grader", *sorted(str(s) for s in klass.iterdir()), "--jobs", "2",
             "--quiet", "--json", str(report)]
    seconds = timed(batch, env, report)
    per = (seconds - quiet_one) / max(args.class_size - 1, 1)
    row(f"a class of {args.class_size} full submissions, --jobs 2 (load {load()})",
        f"{seconds:.1f} s in all, {per:.1f} s per submission beyond the first; "
        f"nbgrader one after another {quiet_nbg:.1f} s per submission, ratio {quiet_nbg / per:.0f}×")


def _nbgrader_command(tmp: Path, notebooks: list[str]):
    """nbgrader autograde of every notebook, one after another, in a temporary course: (the
    function to time, its environment, the function checking it gave full marks)."""
    cmds, course, env = nbgrader_full(tmp / "nbg", notebooks)

    def nbgrader() -> None:
        for c in cmds:
            gvn.run(c, course, env)

    def full_marks() -> None:
        score, max_score = _nbgrader_totals(course, notebooks)
        if score != max_score:
            sys.exit(f"nbgrader autograde gave {score} of {max_score}: not timing a wrong result")

    return nbgrader, env, full_marks


def _class(tmp: Path, size: int) -> list[str]:
    """A class of ``size`` copies of the notebook-01 submission: their folders."""
    klass = tmp / "class"
    for i in range(size):
        (klass / f"s{i:03d}").mkdir(parents=True)
        shutil.copy(SOLUTIONS / "01_attention.ipynb", klass / f"s{i:03d}")
    return sorted(str(s) for s in klass.iterdir())


def _dask_cluster(tmp: Path, env: dict[str, str], procs: list[subprocess.Popen]) -> str:
    """A Dask scheduler and 2 workers (one thread each) on 127.0.0.1, their processes added to
    ``procs``; the scheduler's address, once both workers are there."""
    sched_file = tmp / "scheduler.json"
    dask = str(Path(sys.executable).parent / "dask")
    procs.append(subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(sched_file)], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True))
    while not sched_file.exists():
        time.sleep(0.2)
    address = json.loads(sched_file.read_text())["address"]
    for _ in range(2):
        procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                                       "--no-dashboard"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
    from distributed import Client

    with Client(address, timeout="120s") as c:
        c.wait_for_workers(2, timeout=300)
    return address


def _nbgrader_totals(course: Path, assignments: list[str]) -> tuple[float, float]:
    """(score, max score) of the student's submissions of ``assignments`` in nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "tfcourse") as gb:
        return (sum(gb.find_submission(a, "student").score for a in assignments),
                sum(gb.find_assignment(a).max_score for a in assignments))


if __name__ == "__main__":
    sys.exit(main())
