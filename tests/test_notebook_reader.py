"""Reading submissions: cells by grade_id, and the odd notebooks learners hand in."""

from __future__ import annotations

import nbformat
import pytest

from tfcourse.notebook import (
    UnreadableNotebook,
    grade_points,
    normalise_source,
    read_notebook,
    solution_cells,
    strip_solution_markers,
)


def _cell(source, grade_id=None, kind="code", **meta):
    cell = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    if grade_id:
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "solution": True, "grade": False, "locked": False,
                                     "schema_version": 3, **meta}
    return cell


def test_last_duplicate_counts_and_says_so():
    nb = nbformat.v4.new_notebook(cells=[_cell("def f(): return 1", "f"), _cell("def f(): return 2", "f")])
    (cell,) = solution_cells(nb, ["f"]).values()
    assert "return 2" in cell.source and "last one counts" in cell.notes[0]


def test_stripped_metadata_falls_back_to_the_definition():
    nb = nbformat.v4.new_notebook(cells=[_cell("import torch"), _cell("def f(x):\n    return x")])
    cells = solution_cells(nb, ["f", "g"])
    assert list(cells) == ["f"] and "metadata was removed" in cells["f"].notes[0]


def test_locked_test_cells_are_never_taken_as_answers():
    test = nbformat.v4.new_code_cell("def f(x): return x  # defined in a test cell")
    test.metadata["nbgrader"] = {"grade_id": "test_f", "grade": True, "locked": True, "points": 1}
    assert solution_cells(nbformat.v4.new_notebook(cells=[test]), ["f"]) == {}


def test_markdown_solution_cell_is_reported_as_such():
    nb = nbformat.v4.new_notebook(cells=[_cell("def f(): pass", "f", kind="markdown")])
    assert solution_cells(nb, ["f"])["f"].kind == "markdown"


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not valid JSON \\(line 1, column 2"),
    ('{"hello": 1}', "not a valid notebook"),
    ("\udcff", None),
])
def test_unreadable_files_give_one_clear_line(tmp_path, content, needle):
    path = tmp_path / "01_attention.ipynb"
    if content == "\udcff":
        path.write_bytes(b"\xff\xfe\x00garbage")
        needle = "not UTF-8"
    else:
        path.write_text(content)
    with pytest.raises(UnreadableNotebook, match=needle):
        read_notebook(path)


def test_nbformat3_is_upgraded(tmp_path):
    v3 = nbformat.v3.new_notebook(worksheets=[nbformat.v3.new_worksheet(cells=[nbformat.v3.new_code_cell("x = 1")])])
    path = tmp_path / "old.ipynb"
    path.write_text(nbformat.writes(v3, version=3))
    assert read_notebook(path).cells[0].source == "x = 1"


def test_points_markers_and_normalisation():
    test = nbformat.v4.new_code_cell("check_f(f)")
    test.metadata["nbgrader"] = {"grade_id": "test_f", "grade": True, "points": 3, "locked": True}
    assert grade_points(nbformat.v4.new_notebook(cells=[test])) == {"f": 3.0}
    assert strip_solution_markers("a\n    ### BEGIN SOLUTION\nb\n    ### END SOLUTION\n") == "a\nb\n"
    assert normalise_source("x = 1   \r\n\n\ny\n") == normalise_source("x = 1\ny")
