"""Submissions that are odd rather than hostile: links, and names reused across cells."""

from __future__ import annotations

import os

import nbformat
import pytest

from grader.build import SOLUTIONS
from grader.grading import grade_submission

pytestmark = pytest.mark.slow
NB = "01_attention"


def _statuses(row: dict) -> dict[str, str]:
    (nb,) = row["notebooks"]
    return {ex["exercise"]: ex["status"] for ex in nb["exercises"]}


def test_links_to_notebooks_outside_the_submission_are_not_graded(tmp_path):
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(SOLUTIONS / f"{NB}.ipynb", linked / f"{NB}.ipynb")
    row = grade_submission(linked, notebooks=[NB])
    assert row["score"] == 0 and row["notebooks"][0]["status"] == "unreadable"
    assert "symbolic link" in row["notebooks"][0]["exercises"][0]["feedback"]
    via_folder = tmp_path / "via_folder"
    via_folder.mkdir()
    os.symlink(SOLUTIONS, via_folder / "nested")  # a linked folder holding the solutions
    row = grade_submission(via_folder, notebooks=[NB])
    assert row["score"] == 0 and row["notebooks"][0]["status"] == "missing"


def test_unreadable_json_says_where_without_quoting_the_file(tmp_path):
    (tmp_path / f"{NB}.ipynb").write_text('{"cells": [SECRET-TEXT')
    row = grade_submission(tmp_path, notebooks=[NB])
    feedback = row["notebooks"][0]["exercises"][0]["feedback"]
    assert "line 1, column" in feedback and "SECRET" not in feedback


def test_each_exercise_is_graded_as_its_own_cell_defined_it(tmp_path):
    nb = nbformat.read(SOLUTIONS / f"{NB}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "scaled_dot_product_attention":
            # a helper that reuses the name `softmax`, as a learner might, in a later cell
            cell.source = "def softmax(x):\n    return torch.softmax(x, dim=-1)\n\n" + cell.source
    nbformat.write(nb, tmp_path / f"{NB}.ipynb")
    assert set(_statuses(grade_submission(tmp_path, notebooks=[NB])).values()) == {"passed"}
