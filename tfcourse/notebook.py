"""Reading course notebooks and submissions: which cell is which exercise.

The grader uses this to take only the learner's solution cells out of a submission (matched by
their nbgrader ``grade_id``), and the build uses it to find setup and solution cells of the
source notebooks. Reading a notebook never executes anything.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "UnreadableNotebook",
    "SolutionCell",
    "read_notebook",
    "solution_cells",
    "added_cells",
    "bound_names",
    "demo_names",
    "setup_source",
    "grade_parts",
    "grade_points",
    "test_cell_id",
    "strip_solution_markers",
    "normalise_source",
]

MAX_NOTEBOOK_BYTES = 50 * 2**20
SOLUTION_BEGIN = "### BEGIN SOLUTION"
SOLUTION_END = "### END SOLUTION"
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"


class UnreadableNotebook(ValueError):
    """The file is not a notebook we can read (invalid JSON, not a notebook, too large...)."""


@dataclass
class SolutionCell:
    """The learner's cell for one exercise.

    source: the code. note: what the reader had to do to find it (shown in feedback), e.g.
    "2 cells carry grade_id 'softmax'; the last one counts". kind: "code" or another cell type
    (a solution cell turned into markdown cannot be graded).
    """

    grade_id: str
    source: str
    kind: str = "code"
    notes: list[str] = field(default_factory=list)
    index: int = -1  # its position among the notebook's cells


def read_notebook(path: str | Path) -> Any:
    """Read ``path`` as an nbformat-4 notebook (older versions are converted).

    Raises UnreadableNotebook with one clear line for anything else.
    """
    path = Path(path)
    if path.is_symlink():  # a link could point at the course's solutions or at system files
        raise UnreadableNotebook(f"{path.name} is a symbolic link; submit the notebook file itself")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UnreadableNotebook(f"cannot read {path.name}: {exc.strerror}") from None
    if size > MAX_NOTEBOOK_BYTES:
        raise UnreadableNotebook(f"{path.name} is {size / 2**20:.0f} MiB; notebooks over "
                                 f"{MAX_NOTEBOOK_BYTES // 2**20} MiB are not graded")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UnreadableNotebook(f"{path.name} is not UTF-8 text (is it a notebook?)") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:  # say where, without quoting the file
        raise UnreadableNotebook(f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                                 f"{exc.msg})") from None
    import nbformat  # here, not at the top: importing it costs about a second (its validator), and
    # the learner's kernel, the grader's children and the fast path's zygotes import this module
    # for its other helpers

    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several kinds for JSON and schema errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnreadableNotebook(f"{path.name} is not a valid notebook: {first[:200]}") from None
    if not isinstance(nb.get("cells"), list):
        raise UnreadableNotebook(f"{path.name} has no list of cells")
    return nb


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _nbgrader(cell: Any) -> dict:
    meta = cell.get("metadata", {}) or {}
    nbg = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return nbg if isinstance(nbg, dict) else {}


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        # fall back to the def/class lines so a cell with a syntax error is still found
        return set(re.findall(r"^(?:def|class)\s+([A-Za-z_]\w*)", source, flags=re.M))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)}


def bound_names(source: str) -> set[str]:
    """The names a cell binds at its top level (assignments, imports, defs, for/with targets)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _defined_names(source)
    names: set[str] = set()

    def targets(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                names.add(sub.id)

    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                targets(t)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets(node.target)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.For | ast.AsyncFor):
            targets(node.target)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    targets(item.optional_vars)
    return names


def demo_names(released: Any) -> set[str]:
    """Names that only the course's demo cells of a released notebook bind: not its setup cells
    (which the grader runs) nor its nbgrader cells. An answer must not depend on them."""
    demo: set[str] = set()
    setup: set[str] = set()
    for cell in released.cells:
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("tfcourse", {})
        if isinstance(meta, dict) and meta.get("setup"):
            setup |= bound_names(_source(cell))
        elif not _nbgrader(cell):
            demo |= bound_names(_source(cell))
    return demo - setup


def solution_cells(nb: Any, exercises: list[str]) -> dict[str, SolutionCell]:
    """The cell for each exercise in ``exercises`` that ``nb`` has.

    Matching is by nbgrader ``grade_id`` (the last cell wins when one is duplicated, and the
    note says so). When no cell carries the grade_id (metadata stripped by an editor), the last
    unlocked code cell that defines a function or class of that name is taken, with a note.
    Exercises with neither are absent from the result (the grader reports them ``missing``).
    """
    found: dict[str, SolutionCell] = {}
    counts: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        gid = _nbgrader(cell).get("grade_id")
        if gid in exercises:
            counts[gid] = counts.get(gid, 0) + 1
            found[gid] = SolutionCell(gid, _source(cell), cell.get("cell_type", "code"), index=index)
    for gid, n in counts.items():
        if n > 1:
            found[gid].notes.append(f"{n} cells carry grade_id '{gid}'; the last one counts")
    for name in exercises:
        if name in found:
            continue
        for index, cell in enumerate(nb.cells):
            nbg = _nbgrader(cell)
            if cell.get("cell_type") != "code" or nbg.get("grade") or nbg.get("locked"):
                continue
            src = _source(cell)
            if name in _defined_names(src):
                found[name] = SolutionCell(name, src, "code",
                                           [f"no cell carries grade_id '{name}' (nbgrader metadata was "
                                            f"removed?); graded the cell that defines `{name}`"], index)
    return found


def added_cells(nb: Any, released: Any, taken: Collection[int] = frozenset()) -> list[tuple[int, str]]:
    """The code cells a learner added to ``nb`` (a submission of the ``released`` notebook):
    ``[(index, source)]`` in notebook order.

    A code cell is the course's when it carries nbgrader metadata, keeps the id of a released
    cell (a demo cell the learner edited stays the course's) or has the source of a released
    code cell; cells at the indices in ``taken`` (the exercise cells found) are not added ones.
    The grader runs added cells in order with the exercise cells, as Run All would; it does not
    run the course's demo cells.
    """
    ids = {c.get("id") for c in released.cells if c.get("id")}
    sources = {normalise_source(_source(c)) for c in released.cells if c.get("cell_type") == "code"}
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code" or index in taken or _nbgrader(cell):
            continue
        source = _source(cell)
        if (cell.get("id") and cell.get("id") in ids) or normalise_source(source) in sources \
                or not normalise_source(source):
            continue
        found.append((index, source))
    return found


def setup_source(nb: Any) -> str:
    """The course's setup code: the cells with ``metadata.tfcourse.setup`` true, in order."""
    parts = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("tfcourse", {})
        if cell.get("cell_type") == "code" and isinstance(meta, dict) and meta.get("setup"):
            parts.append(_source(cell))
    return "\n\n".join(parts)


CORE_PART = "core"
PART_SEPARATOR = "__"


def test_cell_id(exercise: str, part: str = CORE_PART) -> str:
    """The grade_id of the test cell that scores ``part`` of ``exercise``: ``test_<exercise>``
    for the core part, ``test_<exercise>__<part>`` for another one."""
    return f"test_{exercise}" if part == CORE_PART else f"test_{exercise}{PART_SEPARATOR}{part}"


def grade_parts(nb: Any) -> dict[str, dict[str, float]]:
    """``{exercise: {part: points}}`` from the test cells of a source notebook, in notebook order.

    A test cell ``test_<exercise>`` scores the exercise's core part; ``test_<exercise>__<part>``
    scores another part (partial credit: an exercise's points split over several test cells).
    """
    parts: dict[str, dict[str, float]] = {}
    for cell in nb.cells:
        nbg = _nbgrader(cell)
        gid = nbg.get("grade_id", "")
        if nbg.get("grade") and gid.startswith("test_"):
            exercise, _, part = gid.removeprefix("test_").partition(PART_SEPARATOR)
            parts.setdefault(exercise, {})[part or CORE_PART] = float(nbg.get("points", 0))
    return parts


def grade_points(nb: Any) -> dict[str, float]:
    """``{exercise: points}``: the points of all the exercise's test cells together."""
    return {name: sum(parts.values()) for name, parts in grade_parts(nb).items()}


def strip_solution_markers(source: str) -> str:
    """The solution with nbgrader's ``### BEGIN/END SOLUTION`` lines removed."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (SOLUTION_BEGIN, SOLUTION_END)) + "\n"


def normalise_source(source: str) -> str:
    """Source with trailing spaces and blank lines removed: to compare a cell with its stub."""
    lines = [line.rstrip() for line in source.replace("\r\n", "\n").split("\n")]
    return "\n".join(line for line in lines if line)
