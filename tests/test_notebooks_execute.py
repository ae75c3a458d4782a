"""The notebooks run top to bottom on a CPU: the solutions cleanly, the learner version through every
cell (Run All goes on past a failing check) with errors only in the check cells (a learner who is
stuck still sees every demo and plot)."""

from __future__ import annotations

import time

import nbclient
import nbformat
import pytest

from grader.build import NOTEBOOKS, SOLUTIONS
from tests import notebook_runs

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
    nb, seconds = notebook_runs.result("solution", source)  # once per session, in the background
    record_property("seconds", round(seconds, 1))  # reported, not asserted (see docs/benchmarks.md)
    printed = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                      for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "all" in printed and "checks passed" in printed
    passes = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.get("data", {}).get("text/plain", "").startswith("✓")]
    assert passes and all("tfcourse-pass" in o["data"]["text/html"] for o in passes)  # the green box
    figures = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if "image/png" in o.get("data", {}))
    assert figures >= 2, "the notebook should draw its plots when executed headless"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_untouched_learner_notebook_runs_every_cell_and_fails_only_in_checks(source):
    """Run All on an untouched notebook, as JupyterLab does it: without allow_errors, every cell still
    runs (each check cell carries the ``raises-exception`` tag), and only the checks fail."""
    nb, _ = notebook_runs.result("learner", NOTEBOOKS / source.name)  # raises CellExecutionError otherwise
    code = [c for c in nb.cells if c.cell_type == "code"]
    not_run = [c.source.splitlines()[0] for c in code if c.execution_count is None]
    assert not not_run, f"cells Run All did not reach: {not_run}"
    failing = [c for c in code if any(o.output_type == "error" for o in c.outputs)]
    not_checks = [c.source.splitlines()[0] if c.source else "<empty>" for c in failing
                  if not c.metadata.get("nbgrader", {}).get("grade")]
    assert not not_checks, f"cells other than checks that fail on an untouched notebook: {not_checks}"
    grade_cells = [c for c in code if c.metadata.get("nbgrader", {}).get("grade")]
    assert grade_cells and all("raises-exception" in c.metadata.get("tags", []) for c in grade_cells)
    errors = [o for c in failing for o in c.outputs if o.output_type == "error"]
    assert errors, "an untouched notebook must not pass its checks"
    not_attempted = [e for e in errors if e.get("ename") == "CheckFailed"]
    assert not_attempted and all("not attempted yet" in "\n".join(e["traceback"]) for e in not_attempted)


def test_a_failing_untagged_cell_still_stops_run_all(tmp_path):
    """Control: without the tag, the first failing check aborts the run (what learners saw before)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise ValueError('unsolved')"),
                                         nbformat.v4.new_code_cell("print('after')")])
    path = tmp_path / "control.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        _execute(path, allow_errors=False)
    nb.cells[0].metadata["tags"] = ["raises-exception"]
    nbformat.write(nb, path)
    ran, _ = _execute(path, allow_errors=False)
    assert ran.cells[1].outputs[0]["text"] == "after\n"
