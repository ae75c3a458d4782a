"""The notebooks run top to bottom on a CPU: the solutions cleanly, the learner version with errors
only in the exercise cells (a learner who is stuck still sees every demo and plot)."""

from __future__ import annotations

import time

import nbclient
import nbformat
import pytest

from grader.build import NOTEBOOKS, SOLUTIONS

pytestmark = pytest.mark.slow
SOURCES = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))


def _execute(path, allow_errors: bool):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=allow_errors,
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_solution_notebook_executes(source, record_property):
    nb, seconds = _execute(source, allow_errors=False)
    record_property("seconds", round(seconds, 1))  # reported, not asserted (see docs/benchmarks.md)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "all" in printed and "checks passed" in printed
    figures = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if "image/png" in o.get("data", {}))
    assert figures >= 2, "the notebook should draw its plots when executed headless"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_untouched_learner_notebook_fails_only_in_exercise_cells(source):
    nb, _ = _execute(NOTEBOOKS / source.name, allow_errors=True)
    failing = []
    for cell in nb.cells:
        if cell.cell_type != "code" or not any(o.output_type == "error" for o in cell.outputs):
            continue
        meta = cell.metadata.get("nbgrader", {})
        if not (meta.get("grade") or meta.get("solution")):
            failing.append(cell.source.splitlines()[0] if cell.source else "<empty>")
    assert not failing, f"demo cells that need a learner's answer: {failing}"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors, "an untouched notebook must not pass its checks"
    not_attempted = [e for e in errors if e.get("ename") == "CheckFailed"]
    assert not_attempted and all("not attempted yet" in "\n".join(e["traceback"]) for e in not_attempted)
