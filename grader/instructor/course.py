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


DEFAULT_EXCHANGE = "/usr/local/share/nbgrader/exchange"  # nbgrader's own default for Exchange.root


def _set_line(text: str, old: str, new: str) -> str:
    if old not in text:
        raise InstructorError(f"{CONFIG_TEMPLATE} no longer has the line {old!r}; please report it")
    return text.replace(old, new)


def write_config(course: Path, course_id: str | None, exchange: str | None = None) -> str:
    """Write the course's nbgrader_config.py unless one is there (the instructor's own edits
    win); returns what was done, for the log. It sets the exchange explicitly (``exchange`` or
    nbgrader's default): ``nbgrader release_assignment`` and formgrader need one that exists."""
    path = course / CONFIG_NAME
    if path.exists():
        cfg = load_config(course)
        if course_id and cfg.CourseDirectory.get("course_id") != course_id:
            raise InstructorError(f"{path} sets another course_id; edit it there (init never "
                                  "overwrites an existing nbgrader_config.py)")
        if exchange and cfg.Exchange.get("root") != str(Path(exchange).absolute()):
            raise InstructorError(f"{path} sets another exchange (c.Exchange.root); edit it there "
                                  "(init never overwrites an existing nbgrader_config.py)")
        return f"kept {path}"
    text = CONFIG_TEMPLATE.read_text()
    if course_id:
        text = _set_line(text, 'c.CourseDirectory.course_id = "tfcourse"',
                         f"c.CourseDirectory.course_id = {course_id!r}")
    if exchange:
        text = _set_line(text, f'c.Exchange.root = "{DEFAULT_EXCHANGE}"',
                         f"c.Exchange.root = {str(Path(exchange).absolute())!r}")
    path.write_text(text)
    return f"wrote {path}"


def prepare_exchange(course: Path, create: bool) -> list[str]:
    """The exchange folder of the course's config, created when ``create`` (``--exchange`` named
    it) and it is missing (mode 777, as ``nbgrader release_assignment`` creates it; init never
    creates nbgrader's default system folder by itself); the log lines, a warning with the fix
    when the folder cannot be used."""
    cfg = load_config(course)
    root = cfg.Exchange.get("root")
    course_id = cfg.CourseDirectory.get("course_id", "")
    if not root:
        return [f"warning: {course / CONFIG_NAME} sets no exchange (c.Exchange.root): nbgrader then uses "
                f"{DEFAULT_EXCHANGE}; add the line `c.Exchange.root = \"{DEFAULT_EXCHANGE}\"` (or another "
                "folder) so that release, collect and formgrader all use the same one"]
    folder = Path(root)
    if not folder.is_dir():
        try:
            if not create:
                raise FileNotFoundError(root)
            folder.mkdir(parents=True)
            folder.chmod(0o777)
        except OSError as exc:
            why = f"cannot be created here ({type(exc).__name__})" if create else "was not created"
            return [f"warning: the exchange {folder} does not exist and {why}: create it with "
                    f"`sudo mkdir -p {folder} && sudo chmod 777 "
                    f"{folder}` (or `init --exchange DIR` on a new course, which creates it), or set "
                    f"another folder in {course / CONFIG_NAME} (c.Exchange.root); "
                    "until then `nbgrader release_assignment` fails and formgrader lists the "
                    "assignments as draft"]
    elif not os.access(folder, os.W_OK | os.X_OK):
        return [f"warning: the exchange {folder} is not writable by you: `sudo chmod 777 {folder}`"]
    return [f"exchange {folder} (course {course_id}); the learners' nbgrader needs the same two lines "
            f"(on JupyterHub in /etc/jupyter/nbgrader_config.py): c.Exchange.root = {root!r} and "
            f"c.CourseDirectory.course_id = {course_id!r}"]


def init(course: Path, assignments: str | None, course_id: str | None, log=print,
         exchange: str | None = None) -> int:
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
    log(write_config(course, course_id, exchange))
    for line in prepare_exchange(course, create=bool(exchange)):
        log(line)
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
    log(f"{course}: {len(names)} assignment(s); gradebook {coursedir.db_url}; release one with "
        f"`cd {course} && nbgrader release_assignment {names[0] if names else 'NAME'}`")
    return 0
