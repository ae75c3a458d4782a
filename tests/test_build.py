"""The single-source build: notebooks/ and tfcourse/reference/ come from solutions/."""

from __future__ import annotations

import importlib
import subprocess
import sys

import nbformat
import pytest

from grader.build import NOTEBOOKS, ROOT, SOLUTIONS, module_name, outputs, release
from tfcourse.notebook import grade_points, setup_source, solution_cells

SOURCES = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))


def test_generated_files_are_up_to_date():
    """Fails when someone edited solutions/ and forgot `python -m grader.build`."""
    proc = subprocess.run([sys.executable, "-m", "grader.build", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_check_notices_a_stale_notebook(tmp_path, monkeypatch):
    import grader.build as build

    stale = tmp_path / "notebooks"
    stale.mkdir()
    monkeypatch.setattr(build, "NOTEBOOKS", stale)
    monkeypatch.setattr(build, "REFERENCE", tmp_path / "reference")
    assert build.main(["--check"]) == 1
    assert build.main([]) == 0 and build.main(["--check"]) == 0


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_released_notebook_hides_solutions_and_hidden_tests(source):
    released = nbformat.read(NOTEBOOKS / source.name, as_version=4)
    text = nbformat.writes(released)
    for marker in ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "check_hidden"):
        assert marker not in text
    assert all(not c.get("outputs") for c in released.cells if c.cell_type == "code")
    points = grade_points(nbformat.read(source, as_version=4))
    cells = solution_cells(released, list(points))
    assert set(cells) == set(points) and points, "every exercise has a stub"
    for name, cell in cells.items():
        assert "raise NotImplementedError()" in cell.source, name
    for cell in released.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") or meta.get("solution"):
            assert meta.get("checksum") and meta.get("schema_version") == 3
        if meta.get("grade"):
            assert meta.get("locked") and meta["grade_id"] == "test_" + meta["grade_id"][5:]
    assert setup_source(released).strip(), "one setup cell (metadata.tfcourse.setup) is required"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_reference_module_is_importable_and_complete(source):
    points = grade_points(nbformat.read(source, as_version=4))
    module = importlib.import_module(f"tfcourse.reference.{module_name(source.stem)}")
    for name in points:
        assert callable(getattr(module, name)), name
    assert list(points) == module.__all__


def test_release_is_pure():
    """Building twice gives the same text (no timestamps, no random ids)."""
    assert outputs() == outputs()
    nb = nbformat.read(SOURCES[0], as_version=4)
    before = nbformat.writes(nb)
    release(nb)
    assert nbformat.writes(nb) == before, "release() must not modify its input"
    assert (ROOT / "tfcourse" / "reference" / "__init__.py").exists()


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_every_check_cell_lets_run_all_go_on(source):
    """Each test cell carries the ``raises-exception`` tag in the source itself, so that nbgrader's
    own generate_assignment releases it too (the build adds it where missing, which would make the
    two releases differ), and Run All goes on past an unsolved check in JupyterLab and nbclient."""
    from grader.build import RAISES

    for nb in (nbformat.read(source, as_version=4), nbformat.read(NOTEBOOKS / source.name, as_version=4)):
        untagged = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                    if c.metadata.get("nbgrader", {}).get("grade") and RAISES not in c.metadata.get("tags", [])]
        assert not untagged, f"test cells without the {RAISES!r} tag: {untagged}"


def test_learner_notebook_is_in_the_form_jupyterlab_saves():
    """nbformat 4.5 with cell ids, written as jupyter_server writes it, with the kernel's language_info
    (JupyterLab marks a notebook modified on open when any of that differs)."""
    from grader.build import LANGUAGE_INFO, jupyterlab_text

    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        text = path.read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        assert (nb.nbformat, nb.nbformat_minor) == (4, 5) and all(c.get("id") for c in nb.cells), path.name
        assert text == jupyterlab_text(nb) and text.endswith("}\n"), path.name
        assert nb.metadata.language_info == LANGUAGE_INFO


def _learner_copy(tmp_path, edit) -> tuple:
    """A copy of notebooks/01_attention.ipynb changed by ``edit(nb)``, and the build's text."""
    from grader.build import jupyterlab_text, notebook_state

    text = (NOTEBOOKS / "01_attention.ipynb").read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=4)
    edit(nb)
    path = tmp_path / "01_attention.ipynb"
    path.write_text(jupyterlab_text(nb), encoding="utf-8")
    return notebook_state(path, text)


def _stub(nb):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))


def test_notebook_state_tells_work_from_a_stale_build(tmp_path):
    """What the doctor and the build rely on: a solved stub or an added code cell is the learner's
    work; a changed course cell without work is a stale build; outputs alone are neither."""
    def solve(nb):
        _stub(nb).source = "def softmax(x, dim=-1):\n    return x.softmax(dim)\n"

    def run(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader"))
        cell.outputs = [nbformat.v4.new_output("stream", text="hello\n")]
        cell.execution_count = 3

    def add(nb):
        nb.cells.insert(3, nbformat.v4.new_code_cell("def helper():\n    return 1\n"))

    def reword(nb):
        next(c for c in nb.cells if c.cell_type == "markdown").source += "\nOlder text."

    def both(nb):
        solve(nb)
        reword(nb)

    assert _learner_copy(tmp_path, lambda nb: None).status == "current"
    assert _learner_copy(tmp_path, run).status == "ran"
    assert _learner_copy(tmp_path, reword).status == "stale"
    solved = _learner_copy(tmp_path, solve)
    assert (solved.status, solved.work, solved.course_changes) == ("edited", ["softmax"], 0)
    added = _learner_copy(tmp_path, add)
    assert added.status == "edited" and "added" in added.work[0]
    mixed = _learner_copy(tmp_path, both)
    assert (mixed.status, mixed.work, mixed.course_changes) == ("edited", ["softmax"], 1)


def test_build_never_overwrites_work_unasked(tmp_path, monkeypatch):
    import grader.build as build

    learner = tmp_path / "notebooks"
    learner.mkdir()
    monkeypatch.setattr(build, "NOTEBOOKS", learner)
    monkeypatch.setattr(build, "REFERENCE", tmp_path / "reference")
    assert build.main([]) == 0
    path = learner / "01_attention.ipynb"
    nb = nbformat.read(path, as_version=4)
    _stub(nb).source = "def softmax(x, dim=-1):\n    return x.softmax(dim)\n"
    mine = build.jupyterlab_text(nb)
    path.write_text(mine, encoding="utf-8")
    assert build.main([]) == 1 and path.read_text(encoding="utf-8") == mine
    assert build.main(["--check"]) == 1
    assert build.main(["--force"]) == 0 and path.read_text(encoding="utf-8") != mine
    assert [p.read_text(encoding="utf-8") for p in (learner / "backups").iterdir()] == [mine]


def test_the_grader_releases_solutions_itself_and_caches_it(tmp_path, monkeypatch):
    """The stubs the grader compares with come from release(solutions/), not from notebooks/; the
    cached copy is the same notebook, and a damaged cache entry is released again."""
    from grader.course import released_notebook
    from tfcourse import cache

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "cache"))
    source = SOURCES[0]
    fresh = release(nbformat.read(source, as_version=4))
    first = released_notebook(source)
    entries = list((tmp_path / "cache" / "released").iterdir())
    assert len(entries) == 1 and nbformat.writes(first) == nbformat.writes(fresh)
    import grader.build as build

    def no_release(nb):
        raise AssertionError("released again although the cache holds it")

    with monkeypatch.context() as m:
        m.setattr(build, "release", no_release)
        assert nbformat.writes(released_notebook(source)) == nbformat.writes(fresh)
    entries[0].write_bytes(b"{not json")
    assert nbformat.writes(released_notebook(source)) == nbformat.writes(fresh)
    monkeypatch.setenv(cache.ENV_VAR, "off")
    assert cache.folder() is None and nbformat.writes(released_notebook(source)) == nbformat.writes(fresh)
