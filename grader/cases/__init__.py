"""Grading cases per notebook: the visible checks from ``tfcourse.checks`` plus hidden cases.

``grader.cases.nbNN_topic.cases(exercise, seed)`` returns every case the grader runs for one
exercise. Hidden cases are generated from the grader's seed and judged against the reference
solution, which the grading process computes itself; the learner's child process never sees
this package.
"""

from __future__ import annotations

import importlib
from typing import Any

from tfcourse.checks._calls import run_call
from tfcourse.checks._core import Case, CheckFailed, judge_case, not_attempted

from ..names import module_name

DEFAULT_SEED = 0


def cases_for(notebook: str, exercise: str, seed: int = DEFAULT_SEED) -> list[Case]:
    return importlib.import_module(f"grader.cases.{module_name(notebook)}").cases(exercise, seed)


def reference_outcomes(notebook: str, case: Case, device: str = "cpu"):
    """Run ``case`` on the reference solution (trusted code, in this process)."""
    ref = importlib.import_module(f"tfcourse.reference.{module_name(notebook)}")
    return [run_call(call, vars(ref), device) for call in case.calls]


def check_hidden(notebook: str, exercise: str, obj: Any, seed: int = DEFAULT_SEED) -> None:
    """Run the hidden cases of one exercise in this process (nbgrader's hidden test regions).

    Raises CheckFailed like the visible checks, so nbgrader scores the test cell 0.
    """
    for case in cases_for(notebook, exercise, seed):
        if not case.hidden:
            continue
        outcomes = [run_call(call, {exercise: obj}) for call in case.calls]
        if not_attempted(outcomes):
            raise CheckFailed(f"✗ {exercise}: not attempted yet")
        result = judge_case(case, outcomes, reference_outcomes(notebook, case))
        if result.status != "passed":
            raise CheckFailed(result.message)
