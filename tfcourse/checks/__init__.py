"""The checks learners run under each exercise, and that the grader reuses.

``tfcourse.checks.nbNN_<topic>`` holds notebook NN's ``check_<exercise>`` functions, its visible
cases and its catalogue of known mistakes; ``_core`` the shared judging and feedback.
"""

from ._calls import Call, Instance, Outcome, Step, TorchModule, run_call
from ._core import Case, CaseResult, CheckFailed, Judge, Mistake, judge_case, run_checks

__all__ = [
    "Call", "Case", "CaseResult", "CheckFailed", "Instance", "Judge", "Mistake", "Outcome", "Step", "TorchModule",
    "judge_case", "run_call", "run_checks",
]
