"""A learner solves notebooks/ in place and grades it with the README's learner command.

The grader takes the stubs and the setup code from the release of ``solutions/`` (never from the
folder it grades), so a solved cell in notebooks/ is graded as the learner's answer; the doctor
tells a learner's work apart from a stale build and advises nothing that would overwrite it; the
build leaves such a notebook alone unless given ``--force``, and then keeps a copy.

Each test works on a copy of the checkout (its tracked and untracked files, as a fresh clone would
have them, plus what is not committed yet), never on the checkout's own notebooks/.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.build import ROOT, jupyterlab_text
from grader.course import load_course
from tfcourse.notebook import strip_solution_markers

pytestmark = pytest.mark.slow

HALF = "03_positional_encodings"


def _clone(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _solve_in_place(clone: Path, notebook: str, count: int | None = None) -> list[str]:
    """Paste the course's solutions into the first ``count`` exercise cells of the learner
    notebook (all when None) and save it as JupyterLab does. Returns the exercises solved."""
    source = nbformat.read(ROOT / "solutions" / f"{notebook}.ipynb", as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: strip_solution_markers(c.source) for c in source.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    path = clone / "notebooks" / f"{notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    solved = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and meta["grade_id"] in answers and (count is None or len(solved) < count):
            cell.source = answers[meta["grade_id"]]
            solved.append(meta["grade_id"])
    path.write_text(jupyterlab_text(nb), encoding="utf-8")
    return solved


def _run(clone: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=clone, capture_output=True, text=True, timeout=900)


def _total(table: str) -> tuple[float, float]:
    got, top = re.search(r"^notebooks\s+TOTAL\s+([\d.]+)/([\d.]+)", table, flags=re.M).groups()
    return float(got), float(top)


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> Path:
    """A copy of the checkout with every notebook of notebooks/ solved in place."""
    clone = _clone(tmp_path_factory.mktemp("learner"))
    for notebook in load_course():
        _solve_in_place(clone, notebook)
    return clone


def test_notebooks_solved_in_place_get_full_marks(solved):
    """The README's learner command, `python -m grader`, from the repository root."""
    proc = _run(solved, "grader")
    assert proc.returncode == 0, proc.stderr
    course = load_course()
    assert _total(proc.stdout) == (sum(nb.max_score for nb in course.values()),) * 2, proc.stdout
    assert "not_attempted" not in proc.stdout


def test_doctor_and_build_leave_the_learners_work_alone(solved):
    before = {p.name: p.read_bytes() for p in (solved / "notebooks").glob("*.ipynb")}
    doctor = _run(solved, "grader", "--doctor")
    assert "stale" not in doctor.stdout and "grader.build`" in doctor.stdout, doctor.stdout
    assert "holds your work" in doctor.stdout
    assert doctor.returncode == 0 or "✗ course" not in doctor.stdout, doctor.stdout
    build = _run(solved, "grader.build")
    assert build.returncode == 1 and "holds your work" in build.stderr and "--force" in build.stderr
    assert {p.name: p.read_bytes() for p in (solved / "notebooks").glob("*.ipynb")} == before
    check = _run(solved, "grader.build", "--check")
    assert check.returncode == 1  # an author's checkout must not hold answers in notebooks/


def test_build_force_keeps_a_copy(tmp_path):
    clone = _clone(tmp_path)
    _solve_in_place(clone, "01_attention")
    mine = (clone / "notebooks" / "01_attention.ipynb").read_bytes()
    proc = _run(clone, "grader.build", "--force")
    assert proc.returncode == 0, proc.stderr
    copies = list((clone / "notebooks" / "backups").glob("01_attention-*.ipynb"))
    assert [c.read_bytes() for c in copies] == [mine] and str(copies[0].relative_to(clone)) in proc.stderr
    assert (clone / "notebooks" / "01_attention.ipynb").read_bytes() == (ROOT / "notebooks" / "01_attention.ipynb").read_bytes()
    assert _run(clone, "grader.build", "--check").returncode == 0  # the copy is not a course notebook


def test_half_a_notebook_solved_gets_exactly_those_points(tmp_path):
    clone = _clone(tmp_path)
    nb = load_course()[HALF]
    solved = _solve_in_place(clone, HALF, count=len(nb.exercises) // 2)
    proc = _run(clone, "grader", "--notebooks", HALF)
    assert proc.returncode == 0, proc.stderr
    points = {e.name: e.points for e in nb.exercises}
    assert _total(proc.stdout) == (sum(points[n] for n in solved), nb.max_score), proc.stdout
    for name in points:
        status = re.search(rf"^notebooks\s+{HALF}\s+{name}\s+\S+\s+. (\w+)", proc.stdout, flags=re.M).group(1)
        assert status == ("passed" if name in solved else "not_attempted"), (name, proc.stdout)


def test_a_stale_notebook_without_work_is_called_stale(tmp_path):
    """The doctor still catches what it is for: a notebook the build would change, holding no work."""
    clone = _clone(tmp_path)
    path = clone / "notebooks" / "02_multi_head_attention.ipynb"
    nb = nbformat.read(path, as_version=4)
    markdown = next(c for c in nb.cells if c.cell_type == "markdown")
    markdown.source += "\n\nAn older sentence."
    path.write_text(jupyterlab_text(nb), encoding="utf-8")
    doctor = _run(clone, "grader", "--doctor")
    assert "stale for 02_multi_head_attention" in doctor.stdout and doctor.returncode == 1, doctor.stdout
    assert _run(clone, "grader.build").returncode == 0
    assert path.read_bytes() == (ROOT / "notebooks" / path.name).read_bytes()
