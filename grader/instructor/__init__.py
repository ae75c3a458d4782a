"""An nbgrader course from this repository, graded by the sandboxed grader.

``python -m grader.instructor init|grade|learner-env``; docs/instructor.md walks through a term.
"""

from __future__ import annotations


class InstructorError(RuntimeError):
    """Bad input or a course directory we cannot work with: one line that names the fix."""
