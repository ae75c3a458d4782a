"""What a job folder holds before its job, written in one place: the program that runs there
(``child.py`` in a child's job folder, ``zygote.py`` in a bwrap zygote's folder), ``linux.py``
next to it (the Linux calls both import) and ``lib/tfcourse``, the course's public library
without reference solutions: a child's copy lacks those of the graded notebook and of the later
ones (earlier notebooks' components stay importable), a zygote's copy lacks them all (each
fork's own job brings its copy).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import tfcourse

from ..names import module_name

CHILD = Path(__file__).with_name("child.py")
ZYGOTE = Path(__file__).with_name("zygote.py")
LINUX = Path(__file__).with_name("linux.py")
LIBRARY = Path(tfcourse.__file__).resolve().parent


def copy_library(lib: Path, notebook: str | None) -> None:
    """``lib/tfcourse``: the course's public code without the reference solutions of ``notebook``
    and the later notebooks (of every notebook when ``notebook`` is None)."""
    shutil.copytree(LIBRARY, lib / "tfcourse", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    own = module_name(notebook) if notebook is not None else ""
    for path in (lib / "tfcourse" / "reference").glob("nb*.py"):
        if path.stem >= own:
            path.unlink()


def fill_job(folder: Path, notebook: str) -> None:
    """A child's job folder, before the job itself (job.json, inputs) is written."""
    copy_library(folder / "lib", notebook)
    shutil.copy(CHILD, folder / "child.py")
    shutil.copy(LINUX, folder / "linux.py")


def fill_zygote(folder: Path) -> None:
    """What a bwrap zygote sees at /job (readable: it is complete)."""
    shutil.copy(ZYGOTE, folder / "zygote.py")
    shutil.copy(LINUX, folder / "linux.py")
    copy_library(folder / "lib", None)
    readable(folder)


def readable(folder: Path) -> None:
    """Every file and folder under ``folder`` readable by the child, whatever its user."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
