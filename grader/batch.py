"""Grade many submissions: on this machine (a thread per job slot, each grading one submission
at a time) or on a Dask distributed cluster (``scheduler``: one task per submission).

``grade_batch`` returns one row per submission, in order, each exactly what
``grading.grade_submission`` returns; the CLI (``python -m grader``) and the instructor tools
build their reports from these rows.

On a cluster the submission's notebooks travel with the task (the workers need no shared file
system), each worker grades them with the same sandboxed grading as here (the sandbox mode this
process chose is asked for by name, so a worker without it refuses instead of grading with less),
and the row names the submission as given here. A task whose worker dies is run again on another
worker by the scheduler; one that kills its workers more often than the scheduler allows
(``distributed.scheduler.allowed-failures``, see docs/scale.md) gets an ``error`` row, as does
one that raises on the worker: a batch always ends with a row for every submission.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import as_completed as as_completed_here
from pathlib import Path
from typing import Any

from .cases import DEFAULT_SEED
from .isolation.runner import Limits
from .rows import NotebookRow, SubmissionRow

MAX_PACKED_BYTES = 256 * 2**20  # notebooks of one submission sent to a worker
TEST_CRASH_ENV = "TFCOURSE_TEST_CRASH_WORKER"  # tests only: a worker dies on this submission name


def _progress(total: int, quiet: bool):
    from tqdm import tqdm

    # disable=None: off when stderr is not a terminal
    return tqdm(total=total, desc="grading", unit="submission", file=sys.stderr,
                disable=True if quiet else None)


def error_row(submission: str, course_notebooks: list[str] | None, why: str) -> SubmissionRow:
    """The row of a submission the batch could not grade: every exercise ``error``, with ``why``."""
    from .course import load_course
    from .grading import _exercise, _with_parts

    course = load_course()
    chosen = {n: course[n] for n in (course_notebooks or course)}
    notebooks: list[NotebookRow] = [{"notebook": name, "status": "unreadable", "score": 0.0, "max_score": nb.max_score,
                                     "exercises": [_with_parts(_exercise(e.name, "error", e.points,
                                                                         f"✗ {e.name}: {why}"), e)
                                                   for e in nb.exercises], "output": ""}
                                    for name, nb in chosen.items()]
    return {"submission": submission, "score": 0.0,
            "max_score": round(sum(n["max_score"] for n in notebooks), 4), "notebooks": notebooks}


def pack(submission: str) -> dict[str, Any]:
    """A submission's notebooks as data ({relative path: bytes}), for a worker without the files.
    Only .ipynb files (not links), as find_notebooks would see them."""
    path = Path(submission)
    if path.is_file() or path.is_symlink():
        files = {path.name: path.read_bytes()} if path.is_file() and not path.is_symlink() else {}
        return {"kind": "file", "name": path.name, "files": files}
    files, size = {}, 0
    if path.is_dir():
        for p in sorted(path.rglob("*.ipynb")):
            if p.is_file() and not p.is_symlink() and p.resolve().is_relative_to(path.resolve()):
                size += p.stat().st_size
                if size > MAX_PACKED_BYTES:
                    break
                files[str(p.relative_to(path))] = p.read_bytes()
    return {"kind": "dir" if path.is_dir() else "missing", "name": path.name or "submission", "files": files}


def _hide_worker_files() -> None:
    """A Dask worker puts its local directory (uploaded files, spilled results of other tasks:
    other learners' notebooks) on sys.path; the sandbox keeps what is on sys.path visible. Take
    it off and cover it."""
    from .isolation import views

    try:
        from distributed import get_worker

        # dask-scratch-space/ holds every worker's and the scheduler's folders: all of it goes
        scratch = os.path.dirname(os.path.realpath(get_worker().local_directory))
    except (ImportError, ValueError):
        return
    cwd = os.path.realpath(os.getcwd())  # `dask worker` puts its working directory on sys.path too

    def worker_own(p: str) -> bool:
        real = os.path.realpath(p or ".")
        return real == cwd or real == scratch or real.startswith(scratch.rstrip("/") + "/")

    sys.path[:] = [p for p in sys.path if not worker_own(p)]
    views.protect([scratch])


def grade_packed(submission: str, packed: dict[str, Any], options: dict[str, Any]) -> SubmissionRow:
    """Run on a worker: unpack, grade with the sandbox mode asked for, name the row as given."""
    from .grading import grade_submission
    from .isolation import sandbox, views

    if os.environ.get(TEST_CRASH_ENV) and os.environ[TEST_CRASH_ENV] == packed["name"]:
        os._exit(13)
    os.environ[sandbox.ENV_VAR] = options["sandbox"]
    _hide_worker_files()
    tmp = Path(tempfile.mkdtemp(prefix="tfcourse-submission-"))
    try:
        views.protect([tmp])
        where = tmp / packed["name"]
        if packed["kind"] == "dir":
            where.mkdir()
        for rel, data in packed["files"].items():
            target = (where if packed["kind"] == "dir" else tmp) / rel
            if packed["kind"] == "dir" and not target.resolve().is_relative_to(where.resolve()):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if packed["kind"] == "missing":
            where = tmp / "missing" / packed["name"]
        sandbox.choose(strict=True)
        limits = Limits(**options["limits"])
        row = grade_submission(where, notebooks=options["notebooks"], device=options["device"],
                               limits=limits, seed=options["seed"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    row["submission"] = submission
    return row


def grade_batch(submissions: list[str], *, notebooks: list[str] | None = None, device: str = "cpu",
                limits: Limits | None = None, seed: int = DEFAULT_SEED, jobs: int = 1,
                scheduler: str | None = None, quiet: bool = False, retries: int = 1,
                on_row: Callable[[int, SubmissionRow], None] | None = None) -> list[SubmissionRow]:
    """One row per submission, in order. ``scheduler``: a Dask scheduler's address (or a
    ``distributed.Client``); None grades here with ``jobs`` submissions at a time.

    ``on_row(index, row)``: called in this thread as soon as a submission's row is back (in the
    order they finish), e.g. to save each one at once so that an interrupted batch keeps what it
    finished. With it, a local grading that raises (other than a ``SandboxError``) gets an
    ``error`` row, as on a cluster, and an exception from ``on_row`` itself (or Ctrl-C) cancels
    the submissions not started yet and propagates."""
    from .grading import grade_submission

    limits = limits or Limits()
    if scheduler is None:
        # one submission: its notebooks side by side; more: the submissions side by side
        per_submission = jobs if len(submissions) == 1 else 1

        def grade(s: str) -> SubmissionRow:
            return grade_submission(s, notebooks=notebooks, device=device, limits=limits, seed=seed,
                                    jobs=per_submission)

        from .isolation import fastpath, sandbox

        # the zygotes import torch while this process draws the cases and runs the reference
        fastpath.prestart(fastpath.zygotes_for(jobs, len(submissions)), sandbox.choose(), device)
        if on_row is not None:
            return _grade_here_each(submissions, grade, notebooks, jobs, quiet, on_row)
        if len(submissions) == 1:
            return [grade(submissions[0])]
        with ThreadPoolExecutor(max_workers=jobs) as pool, _progress(len(submissions), quiet) as bar:
            futures = [pool.submit(grade, s) for s in submissions]
            rows = []
            for f in futures:
                rows.append(f.result())
                bar.update(1)
            return rows
    return _grade_on_cluster(submissions, scheduler, notebooks=notebooks, device=device, limits=limits,
                             seed=seed, quiet=quiet, retries=retries, on_row=on_row)


def _grade_here_each(submissions: list[str], grade: Callable[[str], SubmissionRow], notebooks: list[str] | None,
                     jobs: int, quiet: bool, on_row: Callable[[int, SubmissionRow], None]) -> list[SubmissionRow]:
    """grade_batch on this machine with ``on_row``: rows handed over as they finish."""
    from .isolation import sandbox

    def guarded(s: str) -> SubmissionRow:
        try:
            return grade(s)
        except sandbox.SandboxError:
            raise
        except Exception as exc:  # a bug met on this submission must not stop the others
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            return error_row(s, notebooks, f"the grader failed on this submission "
                                           f"({type(exc).__name__}: {first}); please report it")

    rows: list[SubmissionRow | None] = [None] * len(submissions)
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        with _progress(len(submissions), quiet) as bar:
            futures = {pool.submit(guarded, s): i for i, s in enumerate(submissions)}
            for f in as_completed_here(futures):
                i = futures[f]
                row = rows[i] = f.result()
                on_row(i, row)
                bar.update(1)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return rows  # type: ignore[return-value]


def _grade_on_cluster(submissions: list[str], scheduler: Any, *, notebooks, device, limits: Limits, seed: int,
                      quiet: bool, retries: int, on_row: Callable[[int, SubmissionRow], None] | None = None
                      ) -> list[SubmissionRow]:
    from distributed import Client, as_completed

    from .isolation import sandbox

    options = {"notebooks": notebooks, "device": device, "seed": seed, "sandbox": sandbox.choose().mode,
               "limits": {"timeout": limits.timeout, "startup": limits.startup, "memory_mb": limits.memory_mb,
                          "output_kb": limits.output_kb, "file_mb": limits.file_mb, "tasks": limits.tasks}}
    client = scheduler if isinstance(scheduler, Client) else Client(scheduler, timeout="60s")
    try:
        futures: dict[Any, int] = {}
        for i, s in enumerate(submissions):
            f = client.submit(grade_packed, s, pack(s), options, key=f"grade-{i}-{os.getpid()}-{id(futures)}",
                              retries=retries, pure=False)
            futures[f] = i
        rows: list[SubmissionRow | None] = [None] * len(submissions)
        with _progress(len(submissions), quiet) as bar:
            for f in as_completed(futures):
                i = futures[f]
                try:
                    row = f.result()
                except Exception as exc:  # KilledWorker, or the grading raised on the worker
                    name = type(exc).__name__
                    why = ("its grading kept killing the cluster's workers" if name == "KilledWorker"
                           else f"the grading failed on the cluster ({name}: {str(exc).strip()[:200]})")
                    row = error_row(submissions[i], notebooks, f"{why}; please report it")
                rows[i] = row
                if on_row is not None:
                    on_row(i, row)
                bar.update(1)
        return rows  # type: ignore[return-value]
    finally:
        if not isinstance(scheduler, Client):
            client.close()
