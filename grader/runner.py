"""Run one submission notebook's code in a child process, with limits enforced from outside.

The grading process (this module's caller) never imports learner code. It writes a job for
``grader/child.py`` into a fresh temporary folder, starts the child in a new session (its own
process group), watches its progress file, and kills the whole group when an exercise runs past
the wall-clock limit. If the child dies (timeout, memory, ``os._exit``, a segfault), what it was
doing gets that status, and a new child is started for the exercises still to grade, so one bad
exercise never costs the others their grade. Results come back as JSON and safetensors only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import tfcourse
from tfcourse.checks._calls import Outcome, call_to_json, outcome_from_json
from tfcourse.checks._core import Case

from . import sandbox
from .build import REFERENCE, module_name

CHILD = Path(__file__).with_name("child.py")
LIBRARY = Path(tfcourse.__file__).resolve().parent
MAX_RESULT_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Limits:
    """Per-notebook limits, enforced from outside the learner's process.

    timeout: wall-clock seconds for each exercise (its cells' definitions and all its cases).
    startup: seconds the child may take to start (importing torch) before learner code runs.
    memory_mb: address-space limit of the child (RLIMIT_AS), MiB; 0 for none (CUDA needs none).
    output_kb: learner output kept per notebook (stdout + stderr); the rest is discarded.
    file_mb: the largest file the child may write (RLIMIT_FSIZE).
    """

    timeout: float = 30.0
    startup: float = 120.0
    memory_mb: int = 4096
    output_kb: int = 64
    file_mb: int = 256


@dataclass
class ExerciseRun:
    """What running one exercise produced, before judging.

    status: "ran" (outcomes hold one list of Outcome per case), "cell_error" (its cell raised
    while being defined), "timeout" or "crashed" (message says what happened).
    """

    status: str
    outcomes: list[list[Outcome]] = field(default_factory=list)
    cell_error: Outcome | None = None
    message: str = ""


@dataclass
class NotebookRun:
    exercises: dict[str, ExerciseRun]
    output: str  # the learner code's stdout/stderr, capped
    restarts: int = 0


class _Drain(threading.Thread):
    """Read a pipe to the end, keeping the first ``cap`` bytes (an output flood is discarded)."""

    def __init__(self, pipe, cap: int):
        super().__init__(daemon=True)
        self.pipe, self.cap, self.kept, self.dropped = pipe, cap, bytearray(), 0

    def run(self) -> None:
        while chunk := self.pipe.read(65536):
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            self.dropped += max(0, len(chunk) - max(room, 0))


def _library_copy(dest: Path, notebook: str) -> None:
    """The course's public code for the child: tfcourse without the reference solutions of this
    notebook and later ones (earlier notebooks' components stay importable)."""
    shutil.copytree(LIBRARY, dest / "tfcourse", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    own = module_name(notebook)
    for path in (dest / "tfcourse" / "reference").glob("nb*.py"):
        if path.stem >= own:
            path.unlink()
    assert REFERENCE.exists()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _describe_death(code: int | None, memory_mb: int) -> str:
    if code is None:
        return "the process did not finish"
    if code < 0:
        name = _signal_name(code)
        if name == "SIGSEGV":
            return "the process crashed (segmentation fault)"
        if name == "SIGKILL":
            return f"the process was killed (SIGKILL; out of memory? the limit is {memory_mb} MiB)"
        return f"the process was killed by {name}"
    return f"the process exited with status {code} (os._exit, sys.exit in a thread, or a crash)"


def run_notebook(notebook: str, setup: str, cells: dict[str, str], cases: dict[str, list[Case]],
                 *, device: str, limits: Limits, seed: int) -> NotebookRun:
    """Run ``cells`` (grade_id -> source, in notebook order) and the calls of ``cases``.

    Returns an ExerciseRun for every exercise in ``cases``.
    """
    runs: dict[str, ExerciseRun] = {}
    skip_cells: list[str] = []
    output = bytearray()
    dropped = 0
    restarts = 0
    with tempfile.TemporaryDirectory(prefix="tfcourse-grade-") as tmp:
        job_dir = Path(tmp)
        _library_copy(job_dir / "lib", notebook)
        shutil.copy(CHILD, job_dir / "child.py")
        tensors: dict[str, torch.Tensor] = {}
        exercises = []
        for name, ex_cases in cases.items():
            encoded = [[call_to_json(call, tensors, f"{name}_{i}_{k}") for k, call in enumerate(case.calls)]
                       for i, case in enumerate(ex_cases)]
            exercises.append({"name": name, "cases": encoded})
        save_file(tensors, str(job_dir / "inputs.safetensors"))

        while True:
            pending = [n for n in cases if n not in runs]
            if not pending:
                break
            job = {
                "setup": setup,
                "cells": [{"grade_id": g, "source": s} for g, s in cells.items()],
                "exercises": exercises,
                "skip_cells": skip_cells,
                "skip_exercises": [n for n in cases if n in runs],
                "device": device,
                "seed": seed,
                "limits": {"memory_mb": limits.memory_mb, "file_mb": limits.file_mb},
            }
            for stale in ("progress", "results", "work"):
                shutil.rmtree(job_dir / stale, ignore_errors=True) if (job_dir / stale).is_dir() \
                    else (job_dir / stale).unlink(missing_ok=True)
            (job_dir / "work").mkdir()
            (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
            current, died, code = _supervise(job_dir, limits, output, cap=limits.output_kb * 1024)
            dropped += died.pop("dropped", 0)
            _collect(job_dir, cases, runs)
            if died.get("reason") is None:
                for name in pending:  # a clean exit must have written every pending result
                    runs.setdefault(name, ExerciseRun("crashed", message="the child wrote no result"))
                break
            restarts += 1
            reason = died["reason"]
            if current is None:
                # died before any learner code ran: the course or the machine is at fault
                for name in pending:
                    runs.setdefault(name, ExerciseRun("crashed", message=f"the grader's child failed to start: {reason}"))
                break
            kind, what = current
            status = "timeout" if died.get("timeout") else "crashed"
            if kind == "cell":
                skip_cells.append(what)
                if what in cases and what not in runs:
                    runs[what] = ExerciseRun(status, message=f"while defining the cell: {reason}")
            elif kind == "exercise":
                runs.setdefault(what, ExerciseRun(status, message=reason))
            elif kind == "done":
                break
    text = output.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[… {dropped} more bytes of output discarded]"
    return NotebookRun(runs, text, restarts)


def _supervise(job_dir: Path, limits: Limits, output: bytearray, cap: int):
    """Run one child to the end or until a limit; return (what it was doing, death info, code)."""
    cmd = sandbox.wrap([sys.executable, "-I", str(job_dir / "child.py"), str(job_dir)])
    proc = subprocess.Popen(cmd, cwd=job_dir / "work", env=sandbox.child_env(job_dir),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    drain = _Drain(proc.stdout, max(0, cap - len(output)))
    drain.start()
    progress = job_dir / "progress"
    seen = 0
    current: tuple[str, str] | None = None
    deadline = time.monotonic() + limits.startup
    timed_out = False
    while True:
        code = proc.poll()
        lines = _read_progress(progress)
        if len(lines) > seen:
            for line in lines[seen:]:
                kind, _, what = line.partition(" ")
                if kind in ("cell", "exercise", "done", "ready"):
                    current = (kind, what) if kind != "ready" else None
            seen = len(lines)
            deadline = time.monotonic() + limits.timeout
        if code is not None:
            break
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(0.02)
    sandbox.kill_group(proc)
    drain.join(timeout=5)
    output += drain.kept
    info: dict = {"dropped": drain.dropped}
    lines = _read_progress(progress)
    finished = bool(lines) and lines[-1] == "done"
    if timed_out:
        limit = limits.timeout if current else limits.startup
        info["reason"] = f"stopped after the {limit:g} s time limit"
        info["timeout"] = True
    elif not finished:
        info["reason"] = _describe_death(proc.returncode, limits.memory_mb)
    if current is None and timed_out:
        info["reason"] = f"the child did not start within {limits.startup:g} s"
    return current, info, proc.returncode


def _read_progress(path: Path) -> list[str]:
    try:
        data = path.read_bytes()[: 2**20]
    except OSError:
        return []
    return [line for line in data.decode("utf-8", "replace").split("\n") if line]


def _collect(job_dir: Path, cases: dict[str, list[Case]], runs: dict[str, ExerciseRun]) -> None:
    """Read the results the child wrote; anything malformed is that exercise's crash."""
    for name, ex_cases in cases.items():
        if name in runs:
            continue
        meta, data = job_dir / "results" / f"{name}.json", job_dir / "results" / f"{name}.safetensors"
        if not (meta.exists() and data.exists()):
            continue
        try:
            if meta.stat().st_size > MAX_RESULT_BYTES or data.stat().st_size > MAX_RESULT_BYTES:
                raise ValueError("results too large")
            record = json.loads(meta.read_text(encoding="utf-8"))
            tensors = load_file(str(data))
            if record.get("cell_error") is not None:
                runs[name] = ExerciseRun("cell_error", cell_error=outcome_from_json(record["cell_error"], tensors))
                continue
            outcomes = [[outcome_from_json(o, tensors) for o in case] for case in record["cases"]]
            if len(outcomes) != len(ex_cases) or any(len(o) != len(c.calls) for o, c in zip(outcomes, ex_cases)):
                raise ValueError("wrong number of outcomes")
            runs[name] = ExerciseRun("ran", outcomes)
        except Exception as exc:  # a forged or truncated file: no verdict can come from it
            runs[name] = ExerciseRun("crashed", message=f"its results could not be read ({exc})")
