"""Every check is tried on wrong implementations it must catch and correct ones it must accept.

The implementations come from the catalogues in ``tests/catalogue/nbNN_topic.py`` (format in
``tests/catalogue/__init__.py``). Each entry runs two ways:

* in-process, as in the notebook: the course's setup cell, then the notebook's exercise cells
  (the reference solutions, with the entry in place of its exercise's cell), then
  ``check_<exercise>`` from ``tfcourse.checks.nbNN_topic``. A wrong entry must raise CheckFailed
  with at most 8 lines, whose ``  hint:`` line holds the entry's hint (no hint line when the
  entry's hint is None: a hint naming a mistake the learner did not make misleads); a correct
  entry must pass.
* through the real grader (``slow``): the solutions notebook with only that exercise's cell
  replaced by the entry. A wrong entry must lose that exercise's points and no other; a correct
  entry must get full marks.

The structural tests check that every exercise of the course has enough entries.
"""

from __future__ import annotations

import ast
import functools
import importlib
import io
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, NamedTuple

import nbformat
import pytest

from grader.build import NOTEBOOKS, SOLUTIONS, module_name
from grader.course import load_course
from grader.grading import grade_submission
from tests.catalogue import Entry, load_catalogues, variant, without_blocks
from tfcourse.checks.case import MAX_LINES, CheckFailed
from tfcourse.notebook import read_notebook, setup_source, solution_cells

CATALOGUES = load_catalogues()
MIN_WRONG, MIN_CORRECT = 4, 2
HINT_PREFIX = "  hint:"


class Item(NamedTuple):
    """One catalogue entry in context (hashable: it is the parameter of the tests)."""

    notebook: str
    exercise: str
    wrong: bool
    entry: Entry

    @property
    def id(self) -> str:
        return f"{self.notebook}::{self.exercise}::{'wrong' if self.wrong else 'correct'}::{self.entry.name}"


def _items() -> list[Item]:
    items = []
    for notebook, module in CATALOGUES.items():
        for wrong, table in ((True, module.WRONG), (False, module.CORRECT)):
            for exercise, entries in table.items():
                items.extend(Item(notebook, exercise, wrong, e) for e in entries)
    return items


def _params(*extra_marks: pytest.MarkDecorator) -> list[Any]:
    params = []
    for item in _items():
        marks = [getattr(pytest.mark, module_name(item.notebook)[:4]), *extra_marks]  # nb01, nb02, ...
        params.append(pytest.param(item, marks=marks, id=item.id))
    return params


def _grader_params() -> list[Any]:
    """Every entry, through the real grader: the first wrong and the first correct entry of each
    exercise in the fast tier (the inner loop sees each exercise graded once each way), the rest
    ``slow``."""
    first: set[tuple[str, str, bool]] = set()
    params = []
    for param in _params():
        item = param.values[0]
        key = (item.notebook, item.exercise, item.wrong)
        marks = list(param.marks) + ([] if key not in first else [pytest.mark.slow])
        first.add(key)
        params.append(pytest.param(item, marks=marks, id=param.id))
    return params


def _hint_lines(feedback: str) -> list[str]:
    return [line for line in feedback.splitlines() if line.startswith(HINT_PREFIX)]


def _assert_hint(feedback: str, hint: str | None) -> None:
    hints = _hint_lines(feedback)
    if hint is None:
        assert not hints, f"no hint expected, but the feedback gives one:\n{feedback}"
    else:
        assert any(hint in line for line in hints), f"expected a hint containing {hint!r}:\n{feedback}"


# ---------------------------------------------------------------------------------------------
# The catalogues themselves
# ---------------------------------------------------------------------------------------------
def test_every_exercise_of_the_course_is_catalogued():
    course = load_course()
    assert set(CATALOGUES) == set(course), (
        f"notebooks without a catalogue: {sorted(set(course) - set(CATALOGUES))}; "
        f"catalogues of unknown notebooks: {sorted(set(CATALOGUES) - set(course))}")
    for name, nb in course.items():
        module = CATALOGUES[name]
        exercises = {e.name for e in nb.exercises}
        for kind, table, least in (("WRONG", module.WRONG, MIN_WRONG), ("CORRECT", module.CORRECT, MIN_CORRECT)):
            assert set(table) <= exercises, f"{name} {kind} names unknown exercises {sorted(set(table) - exercises)}"
            short = {ex: len(table.get(ex, [])) for ex in sorted(exercises) if len(table.get(ex, [])) < least}
            assert not short, f"{name}: these exercises have fewer than {least} {kind} entries: {short}"


def test_without_blocks_drops_a_statement_and_what_is_indented_under_it():
    base = """
    def f(x, n):
        if n < 1:
            raise ValueError(
                "n must be >= 1")

        for i in range(n):
            x = x + i
        return x
    """
    assert without_blocks(base, "if n < 1:") == variant(base, ("    if n < 1:\n...\n            \"n must be >= 1\")", None))
    assert without_blocks(base, "if n < 1:", "for i in range(n):") == "def f(x, n):\n\n    return x\n"
    with pytest.raises(AssertionError, match="is not one line"):
        without_blocks(base, "if n < 2:")  # a head that is not there cannot silently leave the base
    with pytest.raises(AssertionError, match="2 found"):
        without_blocks(base + base, "if n < 1:")


@pytest.mark.parametrize("notebook", sorted(CATALOGUES))
def test_catalogue_entries_are_well_formed(notebook):
    module = CATALOGUES[notebook]
    assert module.NOTEBOOK == notebook
    for wrong, table in ((True, module.WRONG), (False, module.CORRECT)):
        for exercise, entries in table.items():
            names = [e.name for e in entries]
            assert len(names) == len(set(names)), f"{exercise}: duplicate entry names {names}"
            for e in entries:
                assert isinstance(e, Entry), f"{exercise}: {e!r} is not an Entry"
                tree = ast.parse(e.source)  # a SyntaxError here is a catalogue bug
                defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
                assert exercise in defined, f"{exercise}/{e.name}: the source does not define `{exercise}`"
                if wrong:
                    assert e.hint is None or (isinstance(e.hint, str) and e.hint.strip()), e
                else:
                    assert e.hint is None, f"{exercise}/{e.name}: a correct entry expects no hint"


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("notebook", [pytest.param(n, marks=getattr(pytest.mark, module_name(n)[:4]))
                                      for n in sorted(CATALOGUES)])
def test_most_wrong_entries_get_their_hint(notebook):
    """Hints are the point of the mistake catalogue: in each catalogue, the checks show the
    expected hint for at least half of the wrong entries."""
    wrong = [it for it in _items() if it.notebook == notebook and it.wrong]
    found = []
    for item in wrong:
        if item.entry.hint is None:
            continue
        try:
            with redirect_stdout(io.StringIO()):
                _check(item)(_define(item))
        except CheckFailed as failure:
            if any(item.entry.hint in line for line in _hint_lines(str(failure))):
                found.append(item.entry.name)
    assert 2 * len(found) >= len(wrong), f"{notebook}: the hint shows for {len(found)} of {len(wrong)} wrong entries"


# ---------------------------------------------------------------------------------------------
# In-process, as in the notebook
# ---------------------------------------------------------------------------------------------
@functools.cache
def _setup_code(notebook: str):
    source = setup_source(read_notebook(NOTEBOOKS / f"{notebook}.ipynb"))
    assert source.strip(), f"{notebook}: the released notebook has no setup cell"
    return compile(source, f"<{notebook} setup>", "exec")


@functools.cache
def _solution_cells(notebook: str) -> tuple[tuple[str, str], ...]:
    """(exercise, source) of the solutions notebook's exercise cells, in notebook order."""
    names = [e.name for e in load_course()[notebook].exercises]
    cells = solution_cells(read_notebook(SOLUTIONS / f"{notebook}.ipynb"), names)
    return tuple((name, cell.source) for name, cell in cells.items())


def _define(item: Item) -> Any:
    """Run the notebook as a learner would have it: the course's setup cell, then every exercise
    cell in order (the reference solutions, with ``item``'s cell replaced by the entry), in a
    fresh namespace; return the object the entry defines."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(_setup_code(item.notebook), namespace)
    for name, source in _solution_cells(item.notebook):
        if name == item.exercise:
            source, where = item.entry.source, f"<cell {name}: {item.entry.name}>"
        else:
            where = f"<cell {name}>"
        exec(compile(source, where, "exec"), namespace)
    return namespace[item.exercise]


def _check(item: Item) -> Callable[[Any], None]:
    module = importlib.import_module(f"tfcourse.checks.{module_name(item.notebook)}")
    return getattr(module, f"check_{item.exercise}")


@pytest.mark.filterwarnings("ignore::UserWarning")  # learner code may trigger torch's warnings
@pytest.mark.parametrize("item", _params())
def test_check_in_process(item: Item):
    obj, check = _define(item), _check(item)
    printed = io.StringIO()
    if item.wrong:
        with redirect_stdout(printed), pytest.raises(CheckFailed) as failure:
            check(obj)
        feedback = str(failure.value)
        lines = feedback.splitlines()
        assert 1 <= len(lines) <= MAX_LINES, f"{len(lines)} lines of feedback:\n{feedback}"
        assert lines[0].startswith("✗"), feedback
        _assert_hint(feedback, item.entry.hint)
    else:
        try:
            with redirect_stdout(printed):
                check(obj)
        except CheckFailed as failure:
            pytest.fail(f"a correct implementation was rejected:\n{failure}")
        assert printed.getvalue().startswith("✓"), printed.getvalue()


# ---------------------------------------------------------------------------------------------
# Through the grader
# ---------------------------------------------------------------------------------------------
def _submission(item: Item, root: Path) -> Path:
    """A folder holding the solutions notebook with only ``item``'s exercise cell replaced."""
    nb = nbformat.read(SOLUTIONS / f"{item.notebook}.ipynb", as_version=4)
    cells = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == item.exercise]
    assert len(cells) == 1, f"{item.notebook} has {len(cells)} cells with grade_id {item.exercise!r}"
    cells[0].source = item.entry.source
    slug = re.sub(r"[^A-Za-z0-9]+", "-", item.entry.name).strip("-")
    folder = root / item.notebook / f"{'wrong' if item.wrong else 'correct'}-{item.exercise}-{slug}"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{item.notebook}.ipynb")
    return folder


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory) -> Callable[[Item], dict]:
    """``graded(item)`` is the grader's report for ``item``'s submission.

    The first use grades, two at a time, every item the session selected for
    ``test_grader`` (each grading starts a child process that imports torch).
    """
    root = tmp_path_factory.mktemp("catalogue")
    reports: dict[Item, dict] = {}

    def grade(item: Item) -> dict:
        return grade_submission(_submission(item, root), notebooks=[item.notebook])

    selected = {it.callspec.params["item"] for it in request.session.items
                if getattr(it, "originalname", None) == "test_grader" and hasattr(it, "callspec")}
    # In the default sandbox, through the fast path (a warm zygote forks each notebook's child,
    # docs/scale.md), the catalogue's ~500 submissions are graded about 7x faster than with one
    # cold child each (55 nb04 entries: 15.6 s against 112 s, measured side by side).
    with ThreadPoolExecutor(max_workers=2) as pool:
        reports.update(zip(selected, pool.map(grade, selected), strict=True))

    def get(item: Item) -> dict:
        if item not in reports:
            reports[item] = grade(item)
        return reports[item]

    return get


@pytest.mark.parametrize("item", _grader_params())
def test_grader(item: Item, graded):
    report = graded(item)
    (nb_report,) = report["notebooks"]
    assert nb_report["status"] == "graded", nb_report
    points = {e.name: e.points for e in load_course()[item.notebook].exercises}
    results = {r["exercise"]: r for r in nb_report["exercises"]}
    assert set(results) == set(points)
    for name, r in results.items():
        if item.wrong and name == item.exercise:
            # partial credit: the entry loses the points of the test cells whose checks it fails
            assert r["status"] in ("failed", "error") and (r["score"] < r["max_score"] or r["max_score"] == 0), \
                f"the wrong entry was not caught ({r['status']}, {r['score']}):\n{r['feedback']}"
            assert r["score"] == sum(p["score"] for p in r["parts"]) and any(not p["passed"] for p in r["parts"])
            _assert_hint(r["feedback"], item.entry.hint)
        else:
            assert r["status"] == "passed" and r["score"] == r["max_score"] == points[name], \
                f"{name}: {r['status']} {r['score']}/{r['max_score']}\n{r['feedback']}"
    lost = points[item.exercise] - results[item.exercise]["score"] if item.wrong else 0.0
    assert nb_report["score"] == pytest.approx(sum(points.values()) - lost)
