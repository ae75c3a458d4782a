"""Whole-notebook executions for the slow tests, run in the background on the second core.

Three test modules execute every notebook's demos: ``test_demo_cells`` (each demo cell after the
setup cells), ``test_notebooks_execute`` (the solutions top to bottom, and Run All of each
untouched learner notebook) and ``test_text_numbers`` (the executed solutions' printed numbers).
Executed one after another in the foreground they were about half of the suite's time, while the
other tests of the suite run on one core (``tests/conftest.py`` sets one torch thread) and leave
the second idle.

So, once collection is over, ``start(items)`` queues every execution that the selected tests
need (in the order the tests will ask for them) on one background thread, which executes them
one at a time, each in a fresh kernel with one torch thread (``OMP_NUM_THREADS=1``), while the
suite goes on. A test then calls ``result(kind, path)``: it waits for that execution only, and
gets the executed notebook and the seconds it took (or the exception it raised). Nothing is
asserted here; the tests assert on what comes back. With no such test selected nothing starts.

Kinds: ``"solution"`` (a ``solutions/`` notebook, errors stop the run), ``"learner"`` (a
``notebooks/`` notebook as Run All executes it: the check cells carry ``raises-exception``, so
errors do not stop the run unless a cell lacks the tag), ``"demos"`` (the demo-cell notebook
that ``test_demo_cells.demo_run`` builds from a learner notebook, errors recorded).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

CELL_TIMEOUT_S = 600  # per cell; the busiest cell (notebook 08's) takes well under a minute alone
_LOCK = threading.Lock()
_FUTURES: dict[tuple[str, Path], Future] = {}
_QUEUE: list[tuple[str, Path]] = []
_WORKING = [False]  # a worker is taking jobs (set and cleared under _LOCK)


_ENV: dict[str, str] = {}


def _kernel_env() -> dict[str, str]:
    """The environment of the session's start (taken once: a foreground test may have changed
    ``os.environ`` for a moment, with monkeypatch, when a kernel starts), one torch thread."""
    with _LOCK:
        if not _ENV:
            _ENV.update(os.environ)
            _ENV["OMP_NUM_THREADS"] = "1"  # the foreground tests use the other core
        return dict(_ENV)


def _notebook(kind: str, path: Path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    if kind == "demos":
        from tests.test_demo_cells import demo_run

        nb = demo_run(nb)
    return nb


async def _execute(kind: str, path: Path) -> tuple[Any, float]:
    import nbclient

    nb = _notebook(kind, path)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     allow_errors=(kind == "demos"),
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    await client.async_execute(env=_kernel_env())
    return nb, time.perf_counter() - start


def _work() -> None:
    async def main() -> None:
        while True:
            with _LOCK:
                if not _QUEUE:
                    _WORKING[0] = False  # decided under the lock: _ensure starts a new worker after this
                    return
                job = _QUEUE.pop(0)
                future = _FUTURES[job]
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(await _execute(*job))
            except BaseException as error:  # handed to the test that asks for it
                future.set_exception(error)

    asyncio.run(main())


def _ensure(jobs: list[tuple[str, Path]]) -> None:
    with _LOCK:
        for job in jobs:
            if job not in _FUTURES:
                _FUTURES[job] = Future()
                _QUEUE.append(job)
        if _QUEUE and not _WORKING[0]:
            _WORKING[0] = True
            threading.Thread(target=_work, name="notebook-runs", daemon=True).start()


def result(kind: str, path: Path) -> tuple[Any, float]:
    """The executed notebook of kind ``kind`` for ``path`` and its seconds (waits for it; queues it
    first when ``start`` did not, e.g. a test selected in an unusual way)."""
    job = (kind, Path(path).resolve())
    _ensure([job])
    with _LOCK:
        queued = job in _QUEUE
        if queued:  # wanted now: next in line
            _QUEUE.remove(job)
            _QUEUE.insert(0, job)
    return _FUTURES[job].result()


def _jobs_of(item) -> list[tuple[str, Path]]:
    """The executions a collected test item needs (see the modules named in the docstring)."""
    from grader.build import NOTEBOOKS

    module = Path(str(item.fspath)).stem
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = getattr(item, "originalname", item.name)
    if module == "test_demo_cells" and "path" in params:
        return [("demos", Path(params["path"]).resolve())]
    if module in ("test_notebooks_execute", "test_text_numbers") and "source" in params:
        source = Path(params["source"]).resolve()
        if name.startswith("test_untouched_learner_notebook"):
            return [("learner", (NOTEBOOKS / source.name).resolve())]
        return [("solution", source)]
    return []


def start(items) -> None:
    """Queue, in test order, every execution the collected ``items`` need, and start the worker."""
    jobs: list[tuple[str, Path]] = []
    for item in items:
        for job in _jobs_of(item):
            if job not in jobs:
                jobs.append(job)
    if jobs:
        _kernel_env()  # the environment as it is now, before any test runs
        _ensure(jobs)
