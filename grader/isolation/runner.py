"""Run one submission notebook's code in a child process, with limits enforced from outside.

The grading process (this module's caller) never imports learner code. It writes a job for
``child.py`` into a fresh temporary folder (the learner's cells, the course's public
library without the reference solutions of this notebook and later ones, the inputs), starts the
child in the sandbox chosen by ``sandbox`` (its own session, and where the platform
allows it its own file view, network and PID namespace), reads its progress and results from a
pipe, and watches it: it kills the whole sandbox when an exercise runs past the wall-clock limit
or the child's processes/threads or memory pass theirs. If the child dies (timeout, memory,
``os._exit``, a segfault), what it was doing gets that status, and a new child is started for
the exercises still to grade, so one bad exercise never costs the others their grade. Results
come back as JSON and safetensors only, and only for the exercise the child announced.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save_file

from tfcourse.checks.case import Case
from tfcourse.checks.outcome import Outcome, out_of_memory
from tfcourse.checks.wire import call_to_json, outcome_from_json, safe_text

from . import fastpath, jobfolder, sandbox, views, watch
from .limits import Limits

# What a child may send back, checked before anything is read into memory or parsed (a child's
# learner code can write its own frames on the channel). Measured on the bundled solutions: the
# largest result of one exercise is 4.5 MB (sample_next_token's 20 000 draws), its JSON part at
# most 4.3 KB, one submission's results 14.6 MB together; these leave a margin of 3-60x.
MAX_RESULT_BYTES = 64 * 2**20  # all frames of one child together
MAX_FRAME_BYTES = 16 * 2**20  # one result frame
MAX_RECORD_BYTES = 256 * 2**10  # the JSON record of one result
MAX_HEADER_BYTES = 256 * 2**10  # the safetensors header of one result (names, dtypes, shapes)
MAX_PROGRESS_BYTES = 4096  # one progress line
MAX_PROGRESS_LINES = 10_000
WATCH_EVERY = 0.1  # seconds between two looks at the child's processes and memory
POLL = 0.02


@dataclass
class ExerciseRun:
    """What running one exercise produced, before judging.

    status: "ran" (outcomes hold one list of Outcome per case), "cell_error" (its cell raised
    while being defined), "timeout" or "crashed" (message says what happened); ``limit`` names
    the limit that stopped it ("timeout": CPU time, "wall": the wall-clock backstop, "startup",
    "memory", "tasks", "results": what it sent back could not be read) or is "".
    """

    status: str
    outcomes: list[list[Outcome]] = field(default_factory=list)
    cell_error: Outcome | None = None
    message: str = ""
    limit: str = ""


@dataclass
class NotebookRun:
    exercises: dict[str, ExerciseRun]
    output: str  # the learner code's stdout/stderr, capped
    restarts: int = 0
    sandbox: str = ""
    skipped_cells: list[str] = field(default_factory=list)  # cells that timed out or crashed the child


class _Drain(threading.Thread):
    """Read a pipe to the end, keeping the first ``cap`` bytes (an output flood is discarded)."""

    def __init__(self, pipe, cap: int):
        super().__init__(daemon=True)
        self.pipe, self.cap, self.kept, self.dropped = pipe, cap, bytearray(), 0

    def run(self) -> None:
        try:
            while chunk := self.pipe.read(65536):
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))
        except (OSError, ValueError):
            pass


class _Channel(threading.Thread):
    """Reads the child's frames (see child.py): progress lines and results.

    A result counts only for the exercise the child announced last, and only once the child has
    moved on (its next progress line): a result followed by the child's death is dropped, and a
    later result for the same exercise replaces an earlier one. A frame's length is checked before
    it is read (MAX_FRAME_BYTES, MAX_PROGRESS_BYTES; MAX_RESULT_BYTES in all); anything over a
    limit or malformed ends the reading (the rest is drained and dropped), so the exercise being
    graded gets an error that says which limit, and those still pending get no result."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.file = os.fdopen(fd, "rb", buffering=0)
        self.lock = threading.Lock()
        self.progress: list[str] = []
        self.results: dict[str, tuple[bytes, bytes]] = {}
        self.broken = ""
        self.size = 0

    def _read(self, n: int) -> bytes:
        parts, left = [], n
        while left:
            chunk = self.file.read(min(left, 1 << 20))
            if not chunk:
                raise EOFError
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def run(self) -> None:
        pending: tuple[str, bytes, bytes] | None = None
        try:
            while True:
                head = self.file.read(1)
                if not head:
                    return
                if head not in (b"P", b"R"):
                    raise ValueError("the channel holds something that is not a frame")
                rest = self._read(8)
                if not all(c in b"0123456789abcdef" for c in rest):
                    raise ValueError("the channel holds something that is not a frame")
                length = int(rest, 16)
                cap = MAX_PROGRESS_BYTES if head == b"P" else MAX_FRAME_BYTES
                if length > cap:
                    raise ValueError(f"a {'progress' if head == b'P' else 'result'} frame of {_size(length)}, "
                                     f"over the limit of {_size(cap)}")
                self.size += 9 + length
                if self.size > MAX_RESULT_BYTES:
                    raise ValueError(f"results larger than {MAX_RESULT_BYTES // 2**20} MiB")
                payload = self._read(length)
                if head == b"P":
                    if len(self.progress) >= MAX_PROGRESS_LINES:
                        raise ValueError("too many progress messages")
                    with self.lock:
                        if pending is not None:
                            self.results[pending[0]] = pending[1:]
                            pending = None
                        self.progress.append(payload[:1000].decode("utf-8", "replace"))
                    continue
                name, _, body = payload.partition(b"\n")
                meta_len = int(body[:8], 16)
                with self.lock:
                    kind, _, current = (self.progress[-1] if self.progress else "").partition(" ")
                if kind == "exercise" and name.decode("utf-8", "replace") == current:
                    pending = (current, body[8:8 + meta_len], body[8 + meta_len:])
        except EOFError:
            return
        except (ValueError, OSError) as exc:
            with self.lock:
                self.broken = str(exc)[:200]
            try:
                while self.file.read(1 << 16):
                    pass
            except OSError:
                pass

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.progress)


def _out_of_memory(o: Outcome | None) -> bool:
    return o is not None and out_of_memory(o.error_type, o.error_message)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _describe_death(code: int | None, limits: Limits, wrapped: bool = False) -> tuple[str, str]:
    """(message, limit) for a child that died on its own. ``wrapped``: the code comes from a
    sandbox tool (bwrap), which reports death by signal N as exit status 128 + N."""
    if code is None:
        return "the process did not finish", ""
    if wrapped and code > 128:
        try:
            code = -signal.Signals(code - 128).value
        except ValueError:
            pass
    if code < 0:
        name = _signal_name(code)
        if name == "SIGSEGV":
            return "the process crashed (segmentation fault)", ""
        if name == "SIGKILL":
            return (f"the process was killed (SIGKILL), probably for memory: memory limit exceeded? "
                    f"(--memory {limits.memory_mb} MiB)", "memory")
        return f"the process was killed by {name}", ""
    return f"the process exited with status {code} (os._exit, or a crash)", ""


def run_notebook(notebook: str, setup: str, cells: dict[str, str], cases: dict[str, list[Case]],
                 *, device: str, limits: Limits, seed: int,
                 stand_ins: dict[str, str] | None = None, then: dict[str, list[str]] | None = None) -> NotebookRun:
    """Run ``cells`` (grade_id -> source, in notebook order) and the calls of ``cases``.

    ``stand_ins`` (exercise -> the course's source of it) replace the learner's versions of those
    exercises just before an exercise of ``cases`` is graded; none of them
    may be graded in the same run (the course's code would be in reach of what is graded).
    ``then`` (cell grade_id -> exercises) grades those exercises right after that cell, where the
    notebook's check cell stands (Run All order); the others are graded after the last cell.

    Returns an ExerciseRun for every exercise in ``cases``. Raises sandbox.SandboxError when
    the sandbox asked for with TFCOURSE_SANDBOX cannot run here.
    """
    if stand_ins and set(stand_ins) & set(cases):
        raise ValueError(f"exercises graded with the course's code in reach: {sorted(set(stand_ins) & set(cases))}")
    box = sandbox.choose()
    runs: dict[str, ExerciseRun] = {}
    skip_cells: list[str] = []
    output = bytearray()
    dropped = 0
    restarts = 0
    cap = limits.output_kb * 1024
    with tempfile.TemporaryDirectory(prefix="tfcourse-grade-", dir=views.jobs_folder()) as tmp:
        job_dir = Path(tmp)
        jobfolder.fill_job(job_dir, notebook)
        exercises = _write_inputs(job_dir, cases)
        jobfolder.readable(job_dir)

        # Each legitimate restart uses up a cell or an exercise; more means forged progress lines.
        max_children = len(cells) + len(cases) + 1
        children = 0
        while pending := [n for n in cases if n not in runs]:
            if children == max_children:
                for name in pending:
                    runs[name] = ExerciseRun("crashed", message="the child kept dying without reporting "
                                             "progress (forged progress messages?)")
                break
            children += 1
            job = {
                "setup": setup,
                "cells": [{"grade_id": g, "source": s, "then": (then or {}).get(g, [])} for g, s in cells.items()],
                "exercises": exercises,
                "skip_cells": skip_cells,
                "skip_exercises": [n for n in cases if n in runs],
                "stand_ins": stand_ins or {},
                "device": device,
                "seed": seed,
                "limits": {"memory_mb": limits.memory_mb, "file_mb": limits.file_mb},
            }
            shutil.rmtree(job_dir / "work", ignore_errors=True)
            (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
            steps = len([c for c in cells if c not in skip_cells]) + len(pending)
            current, died, results = _supervise(job_dir, box, limits, output, cap - len(output), device, steps,
                                                notebook)
            dropped += died.pop("dropped", 0)
            _collect(results, cases, runs)
            if died.get("restart"):  # the child ran out of memory and asked for a fresh one
                restarts += 1
                skip_cells += [n for n, r in runs.items() if r.status == "cell_error" and n not in skip_cells
                               and _out_of_memory(r.cell_error)]
                continue
            if died.get("reason") is None:
                why = f" ({died['broken']})" if died.get("broken") else ""
                for name in pending:  # a clean exit must have sent every pending result
                    runs.setdefault(name, ExerciseRun("crashed", message=f"the child sent no result{why}"))
                break
            restarts += 1
            if not _blame(current, died, pending, cases, runs, skip_cells):
                break
    text = safe_text(output.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n"))
    if dropped:
        text += f"\n[… {dropped} more bytes of output discarded: output limit --output {limits.output_kb} KiB]"
    return NotebookRun(runs, text, restarts, box.mode, list(skip_cells))


def _write_inputs(job_dir: Path, cases: dict[str, list[Case]]) -> list[dict]:
    """Every exercise's calls encoded for the child (JSON), their tensors saved in
    ``inputs.safetensors``; the exercises of job.json."""
    tensors: dict[str, torch.Tensor] = {}
    exercises = []
    for name, ex_cases in cases.items():
        encoded = [[call_to_json(call, tensors, f"{name}_{i}_{k}") for k, call in enumerate(case.calls)]
                   for i, case in enumerate(ex_cases)]
        exercises.append({"name": name, "cases": encoded})
    save_file(tensors, str(job_dir / "inputs.safetensors"))
    return exercises


def _blame(current: tuple[str, str] | None, died: dict, pending: list[str], cases: dict[str, list[Case]],
           runs: dict[str, ExerciseRun], skip_cells: list[str]) -> bool:
    """A child died (or was stopped): what it was doing gets the status; whether a fresh child
    should go on with the exercises left (the next one skips a cell that killed this one)."""
    reason, limit = died["reason"], died.get("limit", "")
    if current is None:
        # died before any learner code ran: the course or the machine is at fault
        for name in pending:
            runs.setdefault(name, ExerciseRun("crashed", message=f"the grader's child failed to start: {reason}"))
        return False
    kind, what = current
    status = "timeout" if limit in ("timeout", "wall") else "crashed"
    if kind == "cell":
        skip_cells.append(what)
        if what in cases and what not in runs:
            runs[what] = ExerciseRun(status, message=f"while defining the cell: {reason}", limit=limit)
    elif kind == "exercise":
        runs.setdefault(what, ExerciseRun(status, message=reason, limit=limit))
    return kind != "done"


def _supervise(job_dir: Path, box: sandbox.Sandbox, limits: Limits, output: bytearray, cap: int,
               device: str, steps: int, notebook: str | None = None):
    """Run one child to the end or until a limit; return (what it was doing, death info, results).

    Each progress line gives the next step (a cell, an exercise) ``limits.timeout`` seconds; once
    ready, the whole child never gets more than that for ``steps`` steps (plus one), so progress
    lines forged by learner code cannot keep it running."""
    read_end, write_end = os.pipe()
    proc = _start_child(job_dir, box, limits, device, write_end, notebook)
    channel = _Channel(read_end)
    channel.start()
    drain = _Drain(proc.stdout, max(0, cap))
    drain.start()
    watcher = watch.Watch(proc.pid)
    current, seen, stop = _watch_child(proc, channel, watcher, limits, steps)
    watch.kill_tree(proc, watcher)
    if isinstance(proc, fastpath.ForkedChild):
        fastpath.release(proc)
    drain.join(timeout=2 if box.pid_namespace else 5)
    channel.join(timeout=2 if box.pid_namespace else 5)
    output += drain.kept
    info, results = _how_it_ended(proc, box, channel, drain, limits, stop, seen)
    return current, info, results


def _start_child(job_dir: Path, box: sandbox.Sandbox, limits: Limits, device: str, write_end: int,
                 notebook: str | None = None):
    """The child, started on the job: a fork of a warm zygote (fastpath.py) where that works,
    else a fresh process in the sandbox. ``write_end`` (the channel) is closed here once the
    child has it."""
    proc = None
    if fastpath.enabled(box):  # a fork of a warm zygote, in the same sandbox (fastpath.py)
        spec = views.launch(box.mode, job_dir, ["3"], device=device, scratch_mb=limits.file_mb)
        out_read, out_write = os.pipe()
        try:
            proc = fastpath.launch(box, job_dir, spec, write_end, out_write, device=device,
                                   scratch_mb=limits.file_mb, notebook=notebook,
                                   memory_mb=0 if device.startswith("cuda") else limits.memory_mb)
            proc.stdout = os.fdopen(out_read, "rb")
        except fastpath.ZygoteError:
            os.close(out_read)
        finally:
            os.close(out_write)
    if proc is None:
        spec = views.launch(box.mode, job_dir, [str(write_end)], device=device, scratch_mb=limits.file_mb)
        try:
            proc = subprocess.Popen(spec.argv, cwd=spec.cwd, env=spec.env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                    pass_fds=(write_end,))
        finally:
            os.close(write_end)
    else:
        os.close(write_end)
    return proc


class _Clock:
    """The time limits of one child: each step (a cell, an exercise: each progress line starts
    one) gets ``limits.timeout`` seconds of CPU time, measured on the child's whole process tree
    from outside, and ``wall_factor`` times that of wall-clock time as a backstop; once ready, the
    whole child never gets more than that for ``steps`` steps (plus one), so progress lines forged
    by learner code cannot keep it running. Before it is ready (importing torch): ``limits.startup``
    seconds of wall-clock time."""

    def __init__(self, limits: Limits, steps: int, watcher: watch.Watch) -> None:
        self.limits, self.steps, self.watcher = limits, steps, watcher
        now = time.monotonic()
        self.wall_deadline = now + limits.startup
        self.wall_overall = self.cpu_overall = float("inf")
        self.cpu_at_step = self.cpu_now = 0.0

    def step(self) -> None:
        """A progress line arrived: a new step starts now."""
        now, cpu = time.monotonic(), self.watcher.cpu_seconds()
        backstop = self.limits.timeout * self.limits.wall_factor
        if self.wall_overall == float("inf"):  # the child is ready
            self.wall_overall = now + backstop * (self.steps + 1)
            self.cpu_overall = cpu + self.limits.timeout * (self.steps + 1)
        self.cpu_at_step = cpu
        self.wall_deadline = min(now + backstop, self.wall_overall)

    def over(self, ready: bool, sample_cpu: bool) -> tuple[str, str] | None:
        """(reason, limit) when a time limit is passed, else None. ``sample_cpu``: read the child's
        CPU time now (every WATCH_EVERY)."""
        limits = self.limits
        if time.monotonic() > self.wall_deadline:
            if not ready:
                return f"the child did not start within {limits.startup:g} s", "startup"
            return (f"stopped after {limits.timeout * limits.wall_factor:g} s of wall-clock time, the backstop "
                    f"({limits.wall_factor:g}× --timeout), having used {self.cpu_now - self.cpu_at_step:.1f} s of "
                    "CPU time: was it waiting (sleep, a lock, input), or was the machine very busy?", "wall")
        if ready and sample_cpu:
            self.cpu_now = self.watcher.cpu_seconds()
            if self.cpu_now - self.cpu_at_step > limits.timeout or self.cpu_now > self.cpu_overall:
                return f"stopped after {limits.timeout:g} s of CPU time", "timeout"
        return None


def _watch_child(proc, channel: _Channel, watcher: watch.Watch, limits: Limits,
                 steps: int) -> tuple[tuple[str, str] | None, int, tuple[str, str] | None]:
    """Follow the child's progress until it exits or passes a limit: (what it was doing, how many
    progress lines it sent, (reason, limit) when it was stopped, else None). Results it sends
    that cannot be read (over a limit, malformed) stop it too: what it was doing gets the error,
    and a fresh child grades the exercises left."""
    seen = 0
    current: tuple[str, str] | None = None
    clock = _Clock(limits, steps, watcher)
    next_watch = time.monotonic() + WATCH_EVERY
    while True:
        code = proc.poll()
        lines = channel.snapshot()
        if len(lines) > seen:
            current = _last_step(lines[seen:], current)
            seen = len(lines)
            clock.step()
        if code is not None:
            return current, seen, None
        if channel.broken:
            return current, seen, (f"its results could not be read ({channel.broken})", "results")
        now = time.monotonic()
        watch_now = now > next_watch
        if watch_now:
            next_watch = now + WATCH_EVERY
            stop = _over_limits(watcher, limits)
            if stop is not None:
                return current, seen, stop
        stop = clock.over(bool(seen), watch_now)
        if stop is not None:
            return current, seen, stop
        time.sleep(POLL)


def _last_step(lines: list[str], current: tuple[str, str] | None) -> tuple[str, str] | None:
    """What the child is doing after the progress lines ``lines`` (None: ready, no step yet)."""
    for line in lines:
        kind, _, what = line.partition(" ")
        if kind in ("cell", "exercise", "done", "ready"):
            current = (kind, what) if kind != "ready" else None
    return current


def _over_limits(watcher: watch.Watch, limits: Limits) -> tuple[str, str] | None:
    """(reason, limit) when the child's processes/threads or their memory are past the limits."""
    memory = limits.memory_mb * 2**20
    tasks, rss = watcher.sample()
    if tasks > limits.tasks:
        return (f"process limit exceeded: it ran more than {limits.tasks} processes/threads "
                f"at once (fork loop?)", "tasks")
    if memory and rss > memory and watcher.pss() > memory:
        return (f"memory limit exceeded: its processes used more than {limits.memory_mb} MiB "
                f"together (--memory {limits.memory_mb} MiB)", "memory")
    return None


def _how_it_ended(proc, box: sandbox.Sandbox, channel: _Channel, drain: _Drain, limits: Limits,
                  stop: tuple[str, str] | None, seen: int) -> tuple[dict, dict[str, tuple[bytes, bytes]]]:
    """(death info, results) of a child that has ended. The info: "dropped" (output bytes
    discarded), "restart" (it asked for a fresh child), "reason" and "limit" (it was stopped, or
    died before it said done), "broken" (it finished, but its results could not all be read)."""
    info: dict = {"dropped": drain.dropped}
    lines = channel.snapshot()
    finished = bool(lines) and lines[-1] in ("done", "restart")
    if finished and lines[-1] == "restart" and stop is None:
        info["restart"] = True
    if stop is not None:
        info["reason"], info["limit"] = stop
    elif not finished:
        info["reason"], info["limit"] = _describe_death(
            proc.returncode, limits, box.mode == "bwrap" and not isinstance(proc, fastpath.ForkedChild))
        if channel.broken:
            info["reason"] = f"its results could not be read ({channel.broken})"
    with channel.lock:
        results = dict(channel.results)
    if channel.broken and finished:
        info["broken"] = channel.broken
    return info, results


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB" if n >= 2**10 else f"{n} bytes"


def _bounded(meta: bytes, data: bytes) -> None:
    """Refuse a result whose JSON record or safetensors header is over its limit, before parsing."""
    if len(meta) > MAX_RECORD_BYTES:
        raise ValueError(f"a result record of {_size(len(meta))}, over the limit of {_size(MAX_RECORD_BYTES)}")
    header = int.from_bytes(data[:8], "little") if len(data) >= 8 else 0
    if header > MAX_HEADER_BYTES:
        raise ValueError(f"a tensor header of {_size(header)}, over the limit of {_size(MAX_HEADER_BYTES)}")


def _collect(results: dict[str, tuple[bytes, bytes]], cases: dict[str, list[Case]],
             runs: dict[str, ExerciseRun]) -> None:
    """Judge nothing; rebuild what the child sent. Anything malformed is that exercise's crash."""
    for name, ex_cases in cases.items():
        if name in runs or name not in results:
            continue
        meta, data = results[name]
        try:
            _bounded(meta, data)
            record = json.loads(meta.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError("not a record")
            tensors = load_tensors(data)
            if record.get("run_error") is not None:
                o = outcome_from_json(record["run_error"], {})
                runs[name] = ExerciseRun("crashed", message=f"the checks could not run: {o.error_line()}",
                                         cell_error=o)
                continue
            if record.get("cell_error") is not None:
                runs[name] = ExerciseRun("cell_error", cell_error=outcome_from_json(record["cell_error"], tensors))
                continue
            cases_out = record.get("cases")
            if not isinstance(cases_out, list) or not all(isinstance(c, list) for c in cases_out):
                raise ValueError("malformed cases")
            outcomes = [[outcome_from_json(o, tensors) for o in case] for case in cases_out]
            if len(outcomes) != len(ex_cases) or any(len(o) != len(c.calls) for o, c in zip(outcomes, ex_cases, strict=True)):
                raise ValueError("wrong number of outcomes")
            runs[name] = ExerciseRun("ran", outcomes)
        except Exception as exc:  # a forged or truncated result: no verdict can come from it
            runs[name] = ExerciseRun("crashed", message=f"its results could not be read ({str(exc)[:200]})")
