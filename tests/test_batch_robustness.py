"""No submission costs another its row (docs/grading.md): not a string no writer accepts, not a
forged result frame, not a busy machine.

* A hostile batch (notebook 01, ``--jobs 2``: an honest submission, one whose exception text and
  output hold lone surrogates, NUL and terminal escapes, one that writes a 32 MiB result frame of
  its own on the results pipe) exits 0, writes JSON, CSV and feedback with all three rows, gives
  the honest row full marks and each hostile row 0 on its exercise only, and the grading process's
  peak memory stays within 1.5 times that of an honest batch.
* The solutions get full marks while busy processes load every core and memory is under pressure
  (the time limit is CPU time; the wall clock only a backstop).
* The time limits themselves: CPU time per step, the wall-clock backstop for code that waits.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader.build import ROOT, SOLUTIONS
from grader.isolation.runner import Limits, _Clock
from tests.adversarial import ATTACKS

pytestmark = pytest.mark.slow
NOTEBOOK = "01_attention"
HOSTILE = ("odd_strings", "big_frame")


def _peak_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _grade(folders: list[Path], out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, int]:
    """The CLI on ``folders`` (reports in ``out``), and the grading process's peak memory (KiB)."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "grader", *map(str, folders), "--notebooks", NOTEBOOK, "--jobs", "2", "--quiet",
            "--json", str(out / "r.json"), "--csv", str(out / "r.csv"), "--feedback", str(out / "fb"), *extra]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _peak_kib(proc.pid))
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), peak


def _with_cells(root: Path, name: str, cells: dict[str, str]) -> Path:
    """The solutions notebook with ``cells`` (grade_id -> source) replaced, in ``root / name``."""
    nb = nbformat.read(SOLUTIONS / f"{NOTEBOOK}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in cells:
            cell.source = cells[gid]
    folder = root / name
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{NOTEBOOK}.ipynb")
    return folder


def _honest(root: Path, name: str) -> Path:
    return _with_cells(root, name, {})


def test_a_hostile_batch_keeps_every_row_and_bounded_memory(tmp_path):
    from grader.isolation import sandbox

    named = [] if sandbox._works("bwrap") is None else ["--sandbox", sandbox.choose().mode]
    attacks = {a.name: a for a in ATTACKS}
    hostile = [_with_cells(tmp_path / "hostile", name, attacks[name].cells) for name in HOSTILE]
    batch = [_honest(tmp_path / "hostile", "honest"), *hostile]
    proc, peak = _grade(batch, tmp_path / "out", *named)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "r.json").read_text(encoding="utf-8"))
    rows = {Path(r["submission"]).name: r for r in report["submissions"]}
    assert sorted(rows) == sorted(p.name for p in batch)
    assert rows["honest"]["score"] == rows["honest"]["max_score"] == 10
    for name in HOSTILE:
        exercises = {e["exercise"]: e for e in rows[name]["notebooks"][0]["exercises"]}
        assert exercises["softmax"]["score"] == 0 and exercises["softmax"]["status"] == "error", exercises["softmax"]
        assert all(e["status"] == "passed" for n, e in exercises.items() if n != "softmax"), exercises
    assert "over the limit of 16.0 MiB" in rows["big_frame"]["notebooks"][0]["exercises"][0]["feedback"]
    assert len(list(csv.reader((tmp_path / "out" / "r.csv").open(encoding="utf-8")))) == 4
    assert len(list((tmp_path / "out" / "fb").glob("*.txt"))) == 3

    honest_batch = [_honest(tmp_path / "honest", f"h{i}") for i in range(3)]
    honest, honest_peak = _grade(honest_batch, tmp_path / "out-honest", *named)
    assert honest.returncode == 0, honest.stderr
    print(f"grading process peak memory: hostile batch {peak / 1024:.0f} MiB, honest batch {honest_peak / 1024:.0f} MiB")
    assert 0 < peak <= 1.5 * honest_peak, (peak, honest_peak)


class _Busy:
    """Busy loops on every core (two per core) and memory under pressure, until stopped."""

    def __init__(self, pressure_gib: float = 4.0) -> None:
        loop = "while True:\n    pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(2 * (os.cpu_count() or 2))]
        hog = (f"b = bytearray({int(pressure_gib * 2**30)})\n"
               "for i in range(0, len(b), 4096):\n    b[i] = 1\nimport time\ntime.sleep(3600)\n")
        self.procs.append(subprocess.Popen([sys.executable, "-c", hog]))

    def __enter__(self) -> _Busy:
        time.sleep(2)  # the memory is touched, the load is up
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def test_the_solutions_get_full_marks_on_a_busy_machine(tmp_path):
    from grader.course import load_course

    with _Busy():
        proc = subprocess.run([sys.executable, "-m", "grader", "solutions", "--quiet", "--json", str(tmp_path / "r.json")],
                              cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["submissions"]
    total = sum(nb.max_score for nb in load_course().values())
    lost = [(nb["notebook"], e["exercise"], e["status"], e.get("limit")) for nb in row["notebooks"]
            for e in nb["exercises"] if e["status"] != "passed"]
    assert row["score"] == total, lost


class _Watch:
    def __init__(self) -> None:
        self.cpu = 0.0

    def cpu_seconds(self) -> float:
        return self.cpu


def test_the_time_limit_is_cpu_time_with_a_wall_clock_backstop(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    watch = _Watch()
    clock = _Clock(Limits(timeout=10, wall_factor=4, startup=120), steps=3, watcher=watch)
    now[0] += 119
    assert clock.over(False, True) is None  # still starting (wall clock)
    now[0] += 2
    assert clock.over(False, True)[1] == "startup"
    clock.step()  # ready: the first step
    now[0] += 35  # a busy machine: 35 s on the clock, 9 s of CPU
    watch.cpu = 9.0
    assert clock.over(True, True) is None
    watch.cpu = 10.5
    assert clock.over(True, True)[1] == "timeout"
    clock.step()
    watch.cpu += 1.0
    now[0] += 41  # waits without computing: the backstop
    reason, limit = clock.over(True, True)
    assert limit == "wall" and "40 s of wall-clock time" in reason


def test_forged_progress_lines_cannot_buy_more_than_every_steps_time(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    watch = _Watch()
    clock = _Clock(Limits(timeout=10, wall_factor=4), steps=2, watcher=watch)
    clock.step()
    for _ in range(10):  # a step every 9 s of CPU: each step is within its limit
        watch.cpu += 9.0
        now[0] += 9.0
        if clock.over(True, True):
            break
        clock.step()
    assert clock.over(True, True)[1] == "timeout" and watch.cpu <= 10 * 3 + 9
