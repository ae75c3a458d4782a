"""The nbgrader route, end to end: generate_assignment, autograde and export with our config.

In a temporary course directory with ``grader/nbgrader_config.py`` copied in (what docs/nbgrader.md
tells instructors to do), nbgrader's own commands release ``solutions/01_attention.ipynb`` and
grade three submissions:

* ``correct``: the released notebook with the solution cells filled in from the source notebook
  (the reference code) -> full marks;
* ``untouched``: the released notebook as is -> 0;
* ``warns``: correct, but its ``softmax`` emits a harmless ``UserWarning`` while the test cell runs
  -> full marks thanks to the config's IgnorePattern; and 2 points short without it (the control
  that shows the warning does reach stderr in a graded cell).

The notebook nbgrader releases must also be the committed ``notebooks/01_attention.ipynb``, cell for
cell (source, metadata, checksums), so nbgrader and our grader accept the same learner notebook.

nbgrader runs as a subprocess (``sys.executable -m nbgrader``) with an environment of its own: a
``python3`` kernelspec that points at this interpreter (first on JUPYTER_PATH, so a user's own
``python3`` kernel cannot take its place), an empty Jupyter config dir (no ``~/.jupyter``
nbgrader config), this interpreter's bin/ first on PATH (nbgrader runs the ``alembic`` command),
and the checkout on PYTHONPATH (the hidden tests import ``grader.cases`` in the kernel).
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "01_attention"
SOURCE = ROOT / "solutions" / f"{ASSIGNMENT}.ipynb"
COMMITTED = ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb"
CONFIG = ROOT / "grader" / "nbgrader_config.py"
NBGRADER_TIMEOUT = 900  # seconds per nbgrader command: a hang fails the test instead of the CI job

# --------------------------------------------------------------------------------------------
# the config file itself (fast)


def _load_config():
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()


def _nbgrader_configurables() -> dict[str, type]:
    """Every configurable class nbgrader's apps know, by name."""
    import nbgrader.apps as apps
    import nbgrader.coursedir
    import nbgrader.exchange
    import nbgrader.exchange.default
    import nbgrader.preprocessors as pre
    from traitlets.config import Configurable

    classes: dict[str, type] = {}
    # the default (filesystem) exchange last: its Exchange, a subclass of the abstract one, has root
    for module in (apps, pre, nbgrader.coursedir, nbgrader.exchange, nbgrader.exchange.default):
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Configurable):
                classes[obj.__name__] = obj
    return classes


def test_config_names_exist_in_nbgrader() -> None:
    """traitlets ignores an unknown class or option with only a log line: check every name."""
    config = _load_config()
    classes = _nbgrader_configurables()
    assert config, "grader/nbgrader_config.py set nothing"
    for section, options in config.items():
        assert section in classes, f"nbgrader has no configurable class {section!r}"
        traits = classes[section].class_traits(config=True)
        for option in options:
            assert option in traits, f"{section} has no config option {option!r} in nbgrader"


def test_config_values() -> None:
    """The options the course relies on, with the values docs/nbgrader.md promises."""
    from nbgrader.preprocessors import ClearSolutions

    config = _load_config()
    for section, option in [("IgnorePattern", "enabled"), ("IgnorePattern", "pattern"),
                            ("Execute", "timeout"), ("ClearSolutions", "code_stub")]:
        assert option in config[section], f"grader/nbgrader_config.py does not set {section}.{option}"
    assert config.IgnorePattern.enabled is True, "IgnorePattern does nothing unless enabled = True"
    assert config.IgnorePattern.pattern, "IgnorePattern does nothing without a pattern"
    assert config.Execute.timeout >= 30
    # the stub grader/build.py writes (nbgrader's default ClearSolutions) is the stub nbgrader releases
    assert config.ClearSolutions.code_stub.get("python") == ClearSolutions().code_stub["python"], (
        "ClearSolutions.code_stub differs from the stub grader/build.py writes into notebooks/")
    # the course directory is wherever nbgrader runs (or set by the instructor), never baked in
    assert "root" not in config.CourseDirectory, "CourseDirectory.root must stay commented out (default: cwd)"


def _stderr_cell(text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("check_softmax(softmax)")
    cell.metadata.nbgrader = {"grade": True, "solution": False, "points": 2, "grade_id": "test_softmax"}
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=text)]
    return cell


@pytest.mark.parametrize("text, dropped", [
    ("/tmp/ipykernel_4242/3125.py:6: UserWarning: harmless\n  warnings.warn('harmless', UserWarning)\n", True),
    ("/work/venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1747: FutureWarning: `x` is "
     "deprecated\n  return forward_call(*args, **kwargs)\n", True),
    ("Traceback (most recent call last):\n  File \"<stdin>\", line 1\nValueError: boom\n", False),
    ("all tests passed? no: something went wrong\n", False),
])
def test_ignore_pattern(text: str, dropped: bool) -> None:
    """Warning lines on stderr no longer zero a test cell; other stderr still does."""
    from nbgrader.preprocessors import IgnorePattern
    from nbgrader.utils import determine_grade

    cell = _stderr_cell(text)
    assert determine_grade(cell)[0] == 0  # nbgrader's rule without IgnorePattern: any stderr -> 0
    cell, _ = IgnorePattern(config=_load_config()).preprocess_cell(cell, {}, 0)
    assert determine_grade(cell)[0] == (2 if dropped else 0)


# --------------------------------------------------------------------------------------------
# the round trip (slow: nbgrader executes the notebooks)


@dataclass
class Course:
    root: Path
    env: dict[str, str]
    source_nb: nbformat.NotebookNode

    def nbgrader(self, *args: str) -> subprocess.CompletedProcess:
        """Run ``python -m nbgrader ARGS`` in the course directory; fail the test on an error."""
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=NBGRADER_TIMEOUT)
        log = proc.stdout + proc.stderr
        errors = [line for line in log.splitlines() if "| ERROR]" in line]
        assert proc.returncode == 0 and not errors, (
            f"nbgrader {' '.join(args)} failed (exit {proc.returncode}):\n{log[-4000:]}")
        return proc

    @property
    def released(self) -> Path:
        return self.root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"

    def submit(self, student: str, nb: nbformat.NotebookNode) -> None:
        folder = self.root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")

    def cell_scores(self, student: str) -> dict[str, float]:
        """Per test cell scores from the gradebook (export has only the totals)."""
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}", _load_config().CourseDirectory.course_id) as gb:
            nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            return {grade.name: grade.score for grade in nb.grades}


def _environment(tmp: Path) -> dict[str, str]:
    kernel_dir = tmp / "jupyter-data" / "kernels" / "python3"
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }))
    (tmp / "jupyter-config").mkdir()
    env = dict(os.environ)
    env.update(
        JUPYTER_PATH=str(tmp / "jupyter-data"),
        JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "jupyter-runtime"),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p),
    )
    env.pop("MPLBACKEND", None)  # the kernel's own inline backend, as a learner's kernel has
    return env


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Course:
    """A course directory with our config, after ``nbgrader generate_assignment 01_attention``."""
    tmp = tmp_path_factory.mktemp("nbgrader")
    root = tmp / "course"
    (root / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(CONFIG, root / "nbgrader_config.py")
    shutil.copy(SOURCE, root / "source" / ASSIGNMENT / SOURCE.name)  # read now: solutions/ may change
    c = Course(root, _environment(tmp), nbformat.read(root / "source" / ASSIGNMENT / SOURCE.name, as_version=4))
    c.nbgrader("generate_assignment", ASSIGNMENT)
    assert c.released.exists()
    return c


def _solutions(source_nb) -> dict[str, str]:
    from tfcourse.notebook import strip_solution_markers

    return {cell.metadata.nbgrader["grade_id"]: strip_solution_markers(cell.source)
            for cell in source_nb.cells if cell.metadata.get("nbgrader", {}).get("solution")}


def _filled_in(released, source_nb):
    """The released notebook with every solution cell holding the reference code."""
    nb = copy.deepcopy(released)
    solutions = _solutions(source_nb)
    filled = 0
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = solutions[gid]
            filled += 1
    assert filled == len(solutions) >= 5
    return nb


WARNING_WRAPPER = '''

import warnings

_softmax_without_warning = softmax


def softmax(x, dim=-1):
    warnings.warn("a harmless warning, as torch or numpy sometimes print", UserWarning)
    return _softmax_without_warning(x, dim)
'''


def _warns(released, source_nb):
    """Correct, with softmax warning on every call (only the cells grading needs)."""
    softmax = _solutions(source_nb)["softmax"]
    return _with_cells(released, source_nb, {"softmax": softmax.rstrip("\n") + WARNING_WRAPPER})


INVERTED_MASK_SDPA = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))  # wrong: True means "may attend"
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return weights @ v, weights
'''

NAN_SOFTMAX = '''
def softmax(x, dim=-1):
    return torch.softmax(x, dim=dim)  # wrong: an all -inf slice gives NaN
'''

SDPA_ON_OWN_SOFTMAX = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # relies on softmax for fully masked rows
    return weights @ v, weights
'''


def _with_cells(released, source_nb, replaced: dict[str, str]):
    """Correct except the exercise cells in ``replaced``. Only the cells grading needs are kept
    (the setup cell, the cell importing the checks, every nbgrader cell): dropping the demos
    (unlocked cells a learner may delete) keeps each extra autograde run short."""
    nb = _filled_in(released, source_nb)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in replaced:
            cell.source = replaced[gid]
    nb.cells = [cell for cell in nb.cells if cell.cell_type == "code" and (
        "nbgrader" in cell.metadata or cell.metadata.get("tfcourse", {}).get("setup")
        or "tfcourse.checks" in cell.source)]
    return nb


def _max_score(source_nb) -> float:
    return sum(float(cell.metadata["nbgrader"]["points"]) for cell in source_nb.cells
               if cell.metadata.get("nbgrader", {}).get("grade"))


@pytest.fixture(scope="module")
def graded(course: Course) -> dict[str, dict[str, str]]:
    """Autograde the three submissions with our config, then export: {student: CSV row}."""
    released = nbformat.read(course.released, as_version=4)
    course.submit("correct", _filled_in(released, course.source_nb))
    course.submit("untouched", released)
    course.submit("warns", _warns(released, course.source_nb))
    course.submit("partial", _with_cells(released, course.source_nb,
                                         {"scaled_dot_product_attention": INVERTED_MASK_SDPA}))
    course.submit("one_bug", _with_cells(released, course.source_nb,
                                         {"softmax": NAN_SOFTMAX, "scaled_dot_product_attention": SDPA_ON_OWN_SOFTMAX}))
    course.nbgrader("autograde", ASSIGNMENT)
    course.nbgrader("export", "--to", "grades.csv")
    with open(course.root / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"correct", "untouched", "warns", "partial", "one_bug"}, rows
    return rows


def _assert_score(course: Course, row: dict[str, str], expected: float) -> None:
    assert float(row["max_score"]) == _max_score(course.source_nb) == 10
    assert float(row["score"]) == expected, (
        f"{row['student_id']}: nbgrader gave {row['score']}/{row['max_score']}, expected {expected}; "
        f"per test cell: {course.cell_scores(row['student_id'])}")


@pytest.mark.slow
def test_correct_submission_gets_full_marks(course: Course, graded) -> None:
    _assert_score(course, graded["correct"], 10)


@pytest.mark.slow
def test_untouched_submission_gets_zero(course: Course, graded) -> None:
    _assert_score(course, graded["untouched"], 0)


@pytest.mark.slow
def test_harmless_warning_keeps_full_marks(course: Course, graded) -> None:
    _assert_score(course, graded["warns"], 10)
    # Control: without IgnorePattern the same run zeroes softmax's two test cells (2 points), so the warning
    # does reach stderr inside a graded cell and the config is what saves the answer.
    course.nbgrader("autograde", ASSIGNMENT, "--student", "warns", "--force", "--IgnorePattern.enabled=False")
    scores = course.cell_scores("warns")
    assert scores["test_softmax"] == 0, scores
    assert sum(scores.values()) == 8, scores


@pytest.mark.slow
def test_partial_credit_per_test_cell(course: Course, graded) -> None:
    """A mask bug costs the masks test cell of scaled_dot_product_attention (2 of its 4 points) and
    its half cell (0.5: the float16 cases include masked ones), never the core cell."""
    _assert_score(course, graded["partial"], 7.5)
    scores = course.cell_scores("partial")
    assert scores["test_scaled_dot_product_attention"] == 1.5, scores
    assert scores["test_scaled_dot_product_attention__masks"] == 0, scores
    assert scores["test_scaled_dot_product_attention__half"] == 0, scores


@pytest.mark.slow
def test_one_bug_costs_points_once(course: Course, graded) -> None:
    """softmax's NaN rows cost softmax's 2 points, not also those of the attention that calls it."""
    _assert_score(course, graded["one_bug"], 8)
    scores = course.cell_scores("one_bug")
    assert scores["test_softmax"] == 0 and scores["test_scaled_dot_product_attention__masks"] == 2, scores


@pytest.mark.slow
def test_our_grader_agrees_with_nbgrader_per_test_cell(course: Course, graded) -> None:
    """Every submitted notebook gets the same score per test cell from both graders. ("warns" is
    left out: its control above re-grades it with IgnorePattern off.)"""
    from grader.grading import grade_submission

    for student in ("correct", "untouched", "partial", "one_bug"):
        path = course.root / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        (report,) = grade_submission(path, notebooks=[ASSIGNMENT])["notebooks"]
        ours = {p["test_cell"]: p["score"] for ex in report["exercises"] for p in ex["parts"]}
        theirs = course.cell_scores(student)
        assert ours == pytest.approx(theirs), f"{student}: ours {ours}, nbgrader's {theirs}"


def _cells(nb) -> list[dict]:
    """What a learner's notebook is made of: type, source, metadata (nbgrader's incl. checksum)."""
    return [{"cell_type": c.cell_type, "source": c.source, "metadata": c.metadata} for c in nb.cells]


def _first_difference(a: list[dict], b: list[dict]) -> str:
    if len(a) != len(b):
        return f"{len(a)} cells vs {len(b)} cells"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for key in ("cell_type", "source", "metadata"):
            if x[key] != y[key]:
                return f"cell {i} {key}: {x[key]!r:.300} vs {y[key]!r:.300}"
    return "no difference"


@pytest.mark.slow
def test_nbgrader_release_is_our_build(course: Course) -> None:
    """grader/build.py's release() is what nbgrader's generate_assignment writes, cell for cell."""
    from grader.build import release

    ours = _cells(release(course.source_nb))
    nbgraders = _cells(nbformat.read(course.released, as_version=4))
    assert ours == nbgraders, "grader.build.release() differs from nbgrader: " + _first_difference(ours, nbgraders)


@pytest.mark.slow
def test_nbgrader_release_is_committed_notebook(course: Course) -> None:
    """The committed notebooks/01_attention.ipynb is the notebook nbgrader would release."""
    committed = _cells(nbformat.read(COMMITTED, as_version=4))
    nbgraders = _cells(nbformat.read(course.released, as_version=4))
    checksums = [c["metadata"].get("nbgrader", {}).get("checksum") for c in nbgraders]
    assert any(checksums), "nbgrader wrote no checksums"
    assert committed == nbgraders, (
        "notebooks/01_attention.ipynb is not what nbgrader releases from solutions/01_attention.ipynb "
        "(stale? run `python -m grader.build`): " + _first_difference(committed, nbgraders))
