"""The course as the grader sees it: notebooks, exercises, points, stubs, setup code, cases.

Everything here comes from the course's own files: points from the test cells of ``solutions/``
(one source), stubs and setup code from the learner notebook that ``grader.build.release`` makes
of it (nbgrader's own preprocessors), cases from ``tfcourse.checks.nbNN_*`` (visible) and
``grader.cases.nbNN_*`` (hidden).

The stubs never come from ``notebooks/``: learners solve those files in place, and a solved cell
read as "the stub" would make every solved exercise ``not_attempted``. Releasing a notebook takes
nbgrader's import (about 1.5 s) and 0.05 s per notebook, so the released notebooks are kept in
the grader's cache (tfcourse/cache.py), keyed by the source notebook's bytes, the build code and
nbgrader's version.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache as cache_once
from pathlib import Path
from types import ModuleType
from typing import Any

from tfcourse import cache
from tfcourse.notebook import (
    grade_parts,
    read_notebook,
    setup_source,
    solution_cells,
    strip_solution_markers,
)

from .build import SOLUTIONS, module_name


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
    released: Any = field(default=None, compare=False, repr=False)  # the pristine learner notebook

    def solution(self, exercise: str) -> str:
        return dict(self.solutions)[exercise]

    @property
    def max_score(self) -> float:
        return sum(e.points for e in self.exercises)

    def cases_module(self) -> ModuleType:
        return importlib.import_module(f"grader.cases.{module_name(self.name)}")

    def reference_module(self) -> ModuleType:
        return importlib.import_module(f"tfcourse.reference.{module_name(self.name)}")


def _release_key(source: bytes) -> str:
    from importlib import metadata

    from . import build

    try:
        nbgrader = metadata.version("nbgrader")
    except metadata.PackageNotFoundError:
        nbgrader = "?"
    return cache.key(source, Path(build.__file__).read_bytes(), nbgrader)


def released_notebook(source_path: Path) -> Any:
    """The learner notebook the build makes of ``solutions/NN_topic.ipynb``: stubs, setup cell,
    locked test cells without hidden tests (nbformat, version 4), from the cache when it holds it."""
    import nbformat

    from .build import jupyterlab_text, release

    source = source_path.read_bytes()
    digest = _release_key(source)
    hit = cache.read("released", digest)
    if hit is not None:
        try:
            return nbformat.reads(hit.decode("utf-8"), as_version=4)
        except Exception:  # a damaged entry: release again
            pass
    try:
        nb = release(nbformat.reads(source.decode("utf-8"), as_version=4))
    except ImportError as exc:
        raise CourseError(f"releasing {source_path.name} needs nbgrader ({exc}): install requirements.txt") from None
    cache.write("released", digest, jupyterlab_text(nb).encode("utf-8"))
    return nb


@cache_once
def load_course() -> dict[str, Notebook]:
    """``{notebook name: Notebook}`` in course order. Raises CourseError if files are missing."""
    sources = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    if not sources:
        raise CourseError(f"no solution notebooks in {SOLUTIONS}: run the grader from a course checkout")
    course = {}
    for src in sources:
        source_nb = read_notebook(src)
        released = released_notebook(src)
        parts = grade_parts(source_nb)
        stubs = solution_cells(released, list(parts))
        missing = [name for name in parts if name not in stubs]
        if missing:  # pragma: no cover - release() keeps every solution cell
            raise CourseError(f"the release of {src.name} lacks cells for {missing}")
        exercises = tuple(Exercise(name, sum(pts.values()), stubs[name].source, tuple(pts.items()))
                          for name, pts in parts.items())
        solved = solution_cells(source_nb, list(parts))
        solutions = tuple((name, strip_solution_markers(solved[name].source)) for name in parts if name in solved)
        course[src.stem] = Notebook(src.stem, exercises, setup_source(released), solutions, released)
    return course
