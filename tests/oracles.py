"""Shared by the tests/test_nbNN_oracles.py modules: a public implementation, used as a learner's
answer, passes an exercise's visible check and every hidden case."""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import redirect_stdout

from grader.cases import cases_for, reference_outcomes
from tfcourse.checks.call import run_call
from tfcourse.checks.case import judge_case

__all__ = ["assert_passes_every_case"]


def assert_passes_every_case(notebook: str, exercise: str, check: Callable[[object], None],
                             learner: object) -> None:
    """``check(learner)`` prints a pass, and every case of ``cases_for(notebook, exercise)``
    judged on ``learner`` (standing in for the exercise's name) passes."""
    with redirect_stdout(io.StringIO()) as printed:
        check(learner)
    assert printed.getvalue().startswith("✓")
    for case in cases_for(notebook, exercise):
        outcomes = [run_call(c, {exercise: learner}) for c in case.calls]
        expected = reference_outcomes(notebook, case) if case.reference else None
        result = judge_case(case, outcomes, expected)
        assert result.status == "passed", result.message
