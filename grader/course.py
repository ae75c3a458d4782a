"""The course as the grader sees it: notebooks, exercises, points, stubs, setup code, cases.

Everything here comes from the course's own files: points from the test cells of ``solutions/``
(one source), stubs and setup code from the released ``notebooks/``, cases from
``tfcourse.checks.nbNN_*`` (visible) and ``grader.cases.nbNN_*`` (hidden).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import Any

from tfcourse.notebook import (
    grade_parts,
    read_notebook,
    setup_source,
    solution_cells,
    strip_solution_markers,
)

from .build import NOTEBOOKS, SOLUTIONS, module_name


class CourseError(RuntimeError):
    """The course's own files are missing or inconsistent (not the submission's fault)."""


@dataclass(frozen=True)
class Exercise:
    name: str
    points: float  # all its test cells together
    stub: str  # the released cell's source, to tell an untouched stub
    parts: tuple[tuple[str, float], ...] = ()  # (part, points) per test cell, in notebook order


@dataclass(frozen=True)
class Notebook:
    name: str  # "01_attention"
    exercises: tuple[Exercise, ...]
    setup: str  # the course's setup code, run in the child before the learner's cells
    # the reference solution cells (exercise, source), in notebook order: they stand in for a
    # learner's failed exercise while another exercise that calls it is graded (grading.py)
    solutions: tuple[tuple[str, str], ...] = ()
    released: Any = field(default=None, compare=False, repr=False)  # the learner notebook (nbformat)

    def solution(self, exercise: str) -> str:
        return dict(self.solutions)[exercise]

    @property
    def max_score(self) -> float:
        return sum(e.points for e in self.exercises)

    def cases_module(self) -> ModuleType:
        return importlib.import_module(f"grader.cases.{module_name(self.name)}")

    def reference_module(self) -> ModuleType:
        return importlib.import_module(f"tfcourse.reference.{module_name(self.name)}")


@cache
def load_course() -> dict[str, Notebook]:
    """``{notebook name: Notebook}`` in course order. Raises CourseError if files are missing."""
    sources = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    if not sources:
        raise CourseError(f"no solution notebooks in {SOLUTIONS}: run the grader from a course checkout")
    course = {}
    for src in sources:
        released_path = NOTEBOOKS / src.name
        if not released_path.exists():
            raise CourseError(f"{released_path} is missing: run `python -m grader.build`")
        source_nb = read_notebook(src)
        released = read_notebook(released_path)
        parts = grade_parts(source_nb)
        stubs = solution_cells(released, list(parts))
        missing = [name for name in parts if name not in stubs]
        if missing:
            raise CourseError(f"{released_path.name} lacks cells for {missing}: run `python -m grader.build`")
        exercises = tuple(Exercise(name, sum(pts.values()), stubs[name].source, tuple(pts.items()))
                          for name, pts in parts.items())
        solved = solution_cells(source_nb, list(parts))
        solutions = tuple((name, strip_solution_markers(solved[name].source)) for name in parts if name in solved)
        course[src.stem] = Notebook(src.stem, exercises, setup_source(released), solutions, released)
    return course
