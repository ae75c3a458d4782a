"""``init``: an nbgrader course directory from the course's ``solutions/``, and what ``grade``
needs to open it (config, course directory, gradebook) with nbgrader's own classes."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from . import InstructorError

CONFIG_TEMPLATE = Path(__file__).resolve().parent.parent / "nbgrader_config.py"
CONFIG_NAME = "nbgrader_config.py"


def course_notebooks() -> list[str]:
    """The course's notebooks, in course order (from ``solutions/`` via grader.course)."""
    from ..course import CourseError, load_course

    try:
        return list(load_course())
    except CourseError as exc:
        raise InstructorError(str(exc)) from None


def chosen_assignments(text: str | None, available: list[str], where: str) -> list[str]:
    """``--assignments a,b`` checked against ``available``; None: all of them."""
    if not text:
        return list(available)
    names = [n.strip().removesuffix(".ipynb") for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in available]
    if unknown:
        raise InstructorError(f"unknown assignment(s) {', '.join(unknown)}: {where} has "
                              f"{', '.join(available) or 'none'}")
    return names


def refuse_checkout(course: Path) -> None:
    """COURSE_DIR is an nbgrader course folder of its own, never this repository's checkout."""
    from ..build import ROOT

    if course.resolve() == ROOT.resolve():
        raise InstructorError(f"{course} is this repository's checkout; COURSE_DIR is a new folder "
                              f"outside it (nbgrader's course directory), e.g. "
                              f"`python -m grader.instructor init {ROOT.parent / 'tfcourse-term'}`")


def nbgrader_on_path() -> None:
    """nbgrader runs the ``alembic`` command from PATH when it creates a gradebook: put this
    interpreter's bin/ first, as an activated environment would."""
    bindir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])


def load_config(course: Path):
    """The course's nbgrader_config.py as nbgrader would read it (traitlets)."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    path = course / CONFIG_NAME
    if not path.exists():
        return Config()
    return PyFileConfigLoader(CONFIG_NAME, path=str(course)).load_config()


def course_directory(course: Path):
    """nbgrader's CourseDirectory for ``course`` (root set explicitly: we may run elsewhere)."""
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=load_config(course), root=str(course))


def existing_assignments(course: Path) -> list[str] | None:
    """The assignments of an existing course's gradebook; None when ``course`` has no gradebook."""
    coursedir = course_directory(course)
    url = coursedir.db_url
    if not url.startswith("sqlite:///") or not Path(url.removeprefix("sqlite:///")).exists():
        return None
    from nbgrader.api import Gradebook

    with Gradebook(url, coursedir.course_id) as gb:
        return [a.name for a in gb.assignments]


def write_config(course: Path, course_id: str | None) -> str:
    """Write the course's nbgrader_config.py unless one is there (the instructor's own edits
    win); returns what was done, for the log."""
    path = course / CONFIG_NAME
    if path.exists():
        if course_id:
            cfg = load_config(course)
            if cfg.CourseDirectory.get("course_id") != course_id:
                raise InstructorError(f"{path} sets another course_id; edit it there (init never "
                                      "overwrites an existing nbgrader_config.py)")
        return f"kept {path}"
    text = CONFIG_TEMPLATE.read_text()
    if course_id:
        old = 'c.CourseDirectory.course_id = "tfcourse"'
        if old not in text:
            raise InstructorError(f"{CONFIG_TEMPLATE} no longer sets course_id as expected; please report it")
        text = text.replace(old, f"c.CourseDirectory.course_id = {course_id!r}")
    path.write_text(text)
    return f"wrote {path}"


def init(course: Path, assignments: str | None, course_id: str | None, log=print) -> int:
    from ..build import SOLUTIONS

    nbgrader_on_path()
    refuse_checkout(course)
    available = course_notebooks()
    names = chosen_assignments(assignments, available, "the course")
    if course.exists() and not course.is_dir():
        raise InstructorError(f"{course} is a file; give a folder (new or an nbgrader course)")
    existing = existing_assignments(course) if course.is_dir() else None
    if existing is not None and not assignments:
        # an existing course keeps its assignments: releasing every notebook needs asking for
        names = [n for n in available if n in existing]
        log(f"{course} is an existing course: updating its assignments "
            f"({', '.join(names) or 'none of the course notebooks'}); add one with "
            f"`python -m grader.instructor init {course} --assignments NAME`")
    course.mkdir(parents=True, exist_ok=True)
    log(write_config(course, course_id))
    from nbgrader.apps import NbGraderAPI

    coursedir = course_directory(course)
    api = NbGraderAPI(coursedir=coursedir, config=load_config(course))
    for name in names:
        folder = course / coursedir.source_directory / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOLUTIONS / f"{name}.ipynb", folder / f"{name}.ipynb")
        result = api.generate_assignment(name, force=True, create=True)
        if not result.get("success"):
            error = (result.get("error") or result.get("log") or "").strip().splitlines()
            detail = next((line for line in reversed(error) if line.strip()), "unknown error")
            raise InstructorError(f"nbgrader generate_assignment {name} failed: {detail[:300]}")
        log(f"released {coursedir.release_directory}/{name}/{name}.ipynb (nbgrader generate_assignment)")
    log(f"{course}: {len(names)} assignment(s); gradebook {coursedir.db_url}")
    return 0
