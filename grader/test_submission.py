"""One pytest test per exercise of the submission given with ``--submission`` (see conftest.py)."""

from __future__ import annotations

import pytest

from grader.grading import grade_submission
from grader.isolation.runner import Limits
from tfcourse.device import get_device


@pytest.fixture(scope="session")
def graded(request: pytest.FixtureRequest) -> dict[str, dict]:
    """Grade the submission once; map "notebook::exercise" to its verdict."""
    opts = request.config.option
    limits = Limits(timeout=opts.grade_timeout) if opts.grade_timeout else Limits()
    device = str(get_device(opts.grade_device))
    if device.startswith("cuda"):
        limits = Limits(timeout=limits.timeout, memory_mb=0)
    row = grade_submission(opts.submission, device=device, limits=limits)
    return {f"{nb['notebook']}::{ex['exercise']}": ex for nb in row["notebooks"] for ex in nb["exercises"]}


def test_exercise(graded: dict[str, dict], exercise_id: str) -> None:
    verdict = graded[exercise_id]
    if verdict["status"] != "passed":
        pytest.fail(f"{verdict['status']}: {verdict['feedback']}", pytrace=False)
