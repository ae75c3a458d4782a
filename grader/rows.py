"""The shapes of the grader's report (docs/grading.md): what ``grade_submission`` returns per
submission and what the JSON report holds. Scripts and the instructor tools build on these keys,
so changes are additive."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

__all__ = ["EXERCISE_STATUSES", "ROW_LIMITS", "ExerciseRow", "ExerciseStatus", "NotebookRow", "NotebookStatus", "PartRow",
           "Report", "SubmissionRow"]

ExerciseStatus = Literal["passed", "failed", "error", "timeout", "not_attempted", "missing"]
EXERCISE_STATUSES: tuple[ExerciseStatus, ...] = ("passed", "failed", "error", "timeout", "not_attempted",
                                                 "missing")
NotebookStatus = Literal["graded", "missing", "unreadable"]
# the limits an exercise's row can name (``limit``): the run was stopped, not judged
ROW_LIMITS = {"timeout": "cpu_time", "wall": "wall_time", "startup": "startup", "memory": "memory",
              "tasks": "processes", "results": "results"}


class PartRow(TypedDict):
    """One test cell of an exercise: what it scored, and what its own checks found."""

    test_cell: str
    passed: bool
    score: float
    max_score: float
    feedback: str


class ExerciseRow(TypedDict):
    exercise: str
    status: ExerciseStatus
    score: float
    max_score: float
    feedback: str
    parts: NotRequired[list[PartRow]]  # always there in a finished row
    cases_passed: NotRequired[int]  # when its cases ran
    cases_total: NotRequired[int]
    limit: NotRequired[str]  # when a limit, not a verdict on the code, stopped it (ROW_LIMITS)


class NotebookRow(TypedDict):
    notebook: str
    status: NotebookStatus
    score: float
    max_score: float
    exercises: list[ExerciseRow]
    output: str  # what the learner's code printed, capped by --output


class SubmissionRow(TypedDict):
    submission: str
    score: float
    max_score: float
    notebooks: list[NotebookRow]
    sandbox: NotRequired[str]  # the isolation its code ran in


class Report(TypedDict):
    submissions: list[SubmissionRow]
    seed: int
    device: str
    sandbox: str
    limits: dict[str, float]
    limited: NotRequired[list[dict[str, str]]]  # the rows a limit stopped: worth a regrade on a busy machine
    interrupted: NotRequired[str]  # only when the batch did not finish (Ctrl-C, or it stopped)
    not_graded: NotRequired[list[str]]
