"""Every demo cell of every learner notebook runs right after the setup cells alone.

The notebooks promise: run the cells under the title first, then any demo cell works, in any
order, with every exercise still unsolved. This test keeps that promise for each notebook in
``notebooks/`` (later notebooks inherit it without a change here):

* **setup cells**: the code cells before the notebook's first section heading (the first
  markdown cell with a ``## `` heading); they must include the cell marked
  ``metadata.tfcourse.setup``;
* **demo cells**: every later code cell that is not an nbgrader cell (not an exercise stub, not a
  check).

For speed, one kernel per notebook (executed in the background, tests/notebook_runs.py): before each demo cell the namespace is wiped (``%reset -f``,
figures closed) and the setup cells run again (their imports are cached, so this takes
milliseconds); then the demo cell runs. A name another demo cell defined is therefore gone, as
in a fresh kernel; what only a fresh process would undo (a module-level setting a demo changed,
e.g. ``torch.set_default_dtype``) is not covered. One test per demo cell, so a failure names it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import nbformat
import pytest

from tests import notebook_runs

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RESET = ("get_ipython().run_line_magic('reset', '-f')\n"
         "import matplotlib.pyplot as _plt\n_plt.close('all')\ndel _plt")

pytestmark = pytest.mark.slow


def split(nb) -> tuple[list, list[tuple[int, object]]]:
    """(setup cells, [(index among code cells, demo cell), ...]) of a learner notebook."""
    setup, demos, in_setup = [], [], True
    code_index = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("## "):
            in_setup = False
        if cell.cell_type != "code":
            continue
        if in_setup:
            setup.append(cell)
        elif "nbgrader" not in cell.metadata:
            demos.append((code_index, cell))
        code_index += 1
    if not any(c.metadata.get("tfcourse", {}).get("setup") for c in setup):
        raise ValueError("the setup cells (code before the first '## ' heading) lack the cell marked "
                         "metadata.tfcourse.setup")
    return setup, demos


def _first_line(cell) -> str:
    return next((line for line in cell.source.splitlines() if line.strip()), "<empty>")


def _cases():
    for path in NOTEBOOKS:
        _, demos = split(nbformat.read(path, as_version=4))
        for index, _cell in demos:
            yield pytest.param(path, index, id=f"{path.stem}::code{index}")


def demo_run(nb):
    """The notebook that runs every demo cell of learner notebook ``nb`` after a reset and the
    setup cells; ``metadata.demo_run`` maps each demo's code index to its cell in it and lists
    the setup cells' places. Executed in the background by tests/notebook_runs.py."""
    setup, demos = split(nb)
    cells, where, setup_runs = [], {}, []
    for index, demo in demos:
        cells.append(nbformat.v4.new_code_cell(RESET))
        for c in setup:
            setup_runs.append(len(cells))
            cells.append(nbformat.v4.new_code_cell(c.source))
        where[str(index)] = len(cells)
        cells.append(nbformat.v4.new_code_cell(demo.source))
    metadata = dict(nb.metadata)
    metadata["demo_run"] = {"where": where, "setup_runs": setup_runs}
    return nbformat.v4.new_notebook(cells=cells, metadata=metadata)


@functools.cache
def _run(path: Path) -> dict[int, list]:
    """Every demo cell of ``path`` run after a reset and the setup cells: {code index: outputs}."""
    run, _ = notebook_runs.result("demos", path)
    where, setup_runs = run.metadata["demo_run"]["where"], run.metadata["demo_run"]["setup_runs"]
    setup_errors = [o for i in [0, *setup_runs] for o in run.cells[i].outputs if o.output_type == "error"]
    if setup_errors:
        raise AssertionError(f"{path.name}: a setup cell fails: {setup_errors[0].ename}: {setup_errors[0].evalue}")
    return {int(index): run.cells[i].outputs for index, i in where.items()}


@pytest.mark.parametrize("path, index", list(_cases()))
def test_demo_cell_runs_after_setup_alone(path, index):
    nb = nbformat.read(path, as_version=4)
    cell = [c for c in nb.cells if c.cell_type == "code"][index]
    errors = [o for o in _run(path)[index] if o.output_type == "error"]
    assert not errors, (
        f"{path.name}, code cell {index} ({_first_line(cell)!r}) fails when run right after the setup "
        f"cells: {errors[0].ename}: {errors[0].evalue}. Build what it uses in the cell itself, or say "
        "in the text which cell to run first.")


def test_split_finds_setup_and_demos():
    """The split on a small notebook: setup before the first section, nbgrader cells left out."""
    new = nbformat.v4
    nb = new.new_notebook(cells=[
        new.new_markdown_cell("# Title"),
        new.new_code_cell("import torch", metadata={"tfcourse": {"setup": True}}),
        new.new_code_cell("from checks import check_f"),
        new.new_markdown_cell("## 1. Section"),
        new.new_code_cell("x = torch.ones(2)"),
        new.new_code_cell("def f(): raise NotImplementedError()", metadata={"nbgrader": {"solution": True}}),
        new.new_code_cell("check_f(f)", metadata={"nbgrader": {"grade": True}}),
        new.new_code_cell("print(x)"),
    ])
    setup, demos = split(nb)
    assert [c.source for c in setup] == ["import torch", "from checks import check_f"]
    assert [(i, c.source) for i, c in demos] == [(2, "x = torch.ones(2)"), (5, "print(x)")]
    nb.cells[1].metadata = {}
    with pytest.raises(ValueError, match="tfcourse.setup"):
        split(nb)
