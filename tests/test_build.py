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
