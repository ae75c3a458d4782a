"""What a ``grade`` run tells the instructor after the per-submission lines: the submissions
that are missing, the manual scores that now hide a higher automatic score (review them in
formgrader), and the feedback that the grading made stale (docs/instructor.md, section 4)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class RunReport:
    """What a grade run tells the instructor after the per-submission lines."""

    overridden: list[str] = dataclasses.field(default_factory=list)
    graded: list[Any] = dataclasses.field(default_factory=list)

    def lines(self, course: Path, coursedir, missing: dict[str, list[str]]) -> list[str]:
        out = [f"missing submission(s) of {name}: {', '.join(who)} (nothing in "
               f"{coursedir.submitted_directory}/<student>/{name}/: `nbgrader collect {name}` puts "
               "submissions there)" for name, who in missing.items()]
        out += [f"review: {line}: resolve it in formgrader (set the score again or clear it)"
                for line in self.overridden]
        stale: dict[str, list[str]] = {}
        for job in self.graded:
            if (course / coursedir.feedback_directory / job.student / job.assignment).exists():
                stale.setdefault(job.assignment, []).append(job.student)
        out += [f"feedback generated earlier is stale for {name} ({', '.join(sorted(who))}): run "
                f"`nbgrader generate_feedback {name} --force` (without --force nbgrader keeps the old "
                f"files), then `nbgrader release_feedback {name}`" for name, who in stale.items()]
        return out


def missing_submissions(course: Path, coursedir, assignments: list[str], student: str | None) -> dict[str, list[str]]:
    """Per assignment, the students (of the gradebook, and those who submitted something) with no
    ``submitted/<student>/<assignment>/`` folder and no submission in the gradebook."""
    from nbgrader.api import Gradebook

    submitted = course / coursedir.submitted_directory
    folders = {p.name for p in submitted.iterdir() if p.is_dir()} if submitted.is_dir() else set()
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        students = folders | {s.id for s in gb.students}
        have = {(s.assignment.name, s.student.id) for name in assignments
                for s in gb.find_assignment(name).submissions}
    missing: dict[str, list[str]] = {}
    for name in assignments:
        who = sorted(s for s in students if (student is None or s == student)
                     and not (submitted / s / name).is_dir() and (name, s) not in have)
        if who:
            missing[name] = who
    return missing
