"""``learner-env``: what to install in the learners' kernels during a graded term.

A wheel (or a folder for PYTHONPATH) holding ``tfcourse`` with its visible checks, plots, demos
and widgets, the reference code (``tfcourse.reference``) of the notebooks up to ``--through`` only
(later notebooks import earlier components from there), and no ``grader`` (the hidden cases).
The checkout's files are copied as they are, except ``tfcourse/reference/``: past ``--through``
its modules are left out and its ``NOTEBOOKS`` list names only those kept (importing a module
left out then raises a ModuleNotFoundError saying it is not released yet: grader/build.py's
``REFERENCE_INIT``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tomllib
import zipfile
from pathlib import Path

from . import InstructorError
from .course import course_notebooks

INFO = "tfcourse_learner.json"  # in the dist-info / next to the package: what this build holds


def _through(through: str, available: list[str]) -> list[str]:
    name = through.strip().removesuffix(".ipynb")
    match = [n for n in available if n == name or n.split("_", 1)[0] == name]
    if len(match) != 1:
        raise InstructorError(f"--through {through!r} is not a course notebook: give one of "
                              f"{', '.join(available)} (or its number, e.g. 01)")
    return available[: available.index(match[0]) + 1]


def package_files(keep: list[str]) -> dict[str, bytes]:
    """``{path in the wheel: content}`` of tfcourse with the reference of ``keep`` only."""
    from ..build import ROOT, module_name

    package = ROOT / "tfcourse"
    kept_modules = {f"{module_name(n)}.py" for n in keep}
    files: dict[str, bytes] = {}
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(ROOT)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if rel.parts[:2] == ("tfcourse", "reference") and len(rel.parts) == 3:
            if rel.name == "__init__.py":
                text = path.read_text()
                text, n = re.subn(r"(?m)^NOTEBOOKS = .*$", f"NOTEBOOKS = {json.dumps(keep)}", text)
                if n != 1:
                    raise InstructorError(f"{rel} has no NOTEBOOKS line: run `python -m grader.build`")
                files[rel.as_posix()] = text.encode()
                continue
            if rel.name not in kept_modules:
                continue
        files[rel.as_posix()] = path.read_bytes()
    missing = sorted(kept_modules - {Path(p).name for p in files if p.startswith("tfcourse/reference/")})
    if missing:
        raise InstructorError(f"tfcourse/reference lacks {', '.join(missing)}: run `python -m grader.build`")
    return files


def _project() -> dict:
    from ..build import ROOT

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def learner_requirements(project: dict) -> list[str]:
    """The wheel's Requires-Dist: the project's dependencies without torch. torch comes from the
    course's requirements.txt (pinned, installed from the CPU or the CUDA index as the hub needs):
    a ranged torch here would let pip replace it with a multi-GB CUDA build from PyPI."""
    return [d for d in project.get("dependencies", [])
            if re.split(r"[\s<>=!~;\[(]", d.strip(), maxsplit=1)[0].lower() != "torch"]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(through: str, out: Path, *, folder: bool = False) -> Path:
    keep = _through(through, course_notebooks())
    files = package_files(keep)
    info = json.dumps({"through": keep[-1], "reference": keep, "grader": False}, indent=1) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    if folder:
        target = out / "tfcourse"
        if target.exists():
            shutil.rmtree(target)
        for rel, data in files.items():
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        (target / INFO).write_text(info)
        return target
    project = _project()
    version = f"{project['version']}+through{keep[-1].split('_', 1)[0]}"
    dist_info = f"tfcourse-{version}.dist-info"
    metadata = "\n".join([
        "Metadata-Version: 2.1", "Name: tfcourse", f"Version: {version}",
        f"Summary: {project.get('description', '')} (learner environment: reference through {keep[-1]}, "
        "no grader)",
        f"Requires-Python: {project.get('requires-python', '>=3.11')}",
        *(f"Requires-Dist: {d}" for d in learner_requirements(project)), "", ""])
    wheel_meta = "Wheel-Version: 1.0\nGenerator: grader.instructor\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist_info}/METADATA"] = metadata.encode()
    files[f"{dist_info}/WHEEL"] = wheel_meta.encode()
    files[f"{dist_info}/top_level.txt"] = b"tfcourse\n"
    files[f"{dist_info}/{INFO}"] = info.encode()
    record = [f"{p},{_record_hash(d)},{len(d)}" for p, d in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out / f"tfcourse-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for rel, data in files.items():
            whl.writestr(zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0)), data,
                         compress_type=zipfile.ZIP_DEFLATED)
    return path
