"""pytest entry point: ``pytest grader --submission DIR`` runs one test per exercise.

Test ids look like ``01_attention::softmax``; a test fails with the exercise's feedback when it
does not pass, so CI systems and pytest-based autograders can use the course directly. The
grading itself is ``grader.grading.grade_submission``, the same as ``python -m grader``.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tfcourse grader")
    group.addoption("--submission", default="notebooks", help="folder or .ipynb to grade (default: notebooks/)")
    group.addoption("--grade-device", default="cpu", choices=("cpu", "cuda", "auto"),
                    help="where learner code runs (default: cpu)")
    group.addoption("--grade-timeout", type=float, default=None, help="seconds per exercise")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "exercise_id" in metafunc.fixturenames:
        from grader.course import load_course

        ids = [f"{nb.name}::{ex.name}" for nb in load_course().values() for ex in nb.exercises]
        metafunc.parametrize("exercise_id", ids, ids=ids)
