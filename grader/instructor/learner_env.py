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


#: what the learners' kernels need besides the course's own dependencies: the kernel itself
#: (`python -m ipykernel install --sys-prefix` registers the environment as a Jupyter kernel)
KERNEL_REQUIREMENTS = ["ipykernel>=6"]
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _notebook(option: str, given: str, available: list[str]) -> str:
    name = given.strip().removesuffix(".ipynb")
    match = [n for n in available if n == name or n.split("_", 1)[0] == name]
    if len(match) != 1:
        raise InstructorError(f"{option} {given!r} is not a course notebook: give one of "
                              f"{', '.join(available)} (or its number, e.g. 01)")
    return match[0]


def _through(through: str, available: list[str]) -> list[str]:
    return available[: available.index(_notebook("--through", through, available)) + 1]


def imports_of(notebook: str) -> list[str]:
    """The notebooks whose reference the imports cell of ``notebook`` imports."""
    import nbformat

    from ..build import SOLUTIONS, setup_imports

    return setup_imports(nbformat.read(SOLUTIONS / f"{notebook}.ipynb", as_version=4))


def reference_for(opening: str, available: list[str]) -> list[str]:
    """``--for NN``: the reference of every notebook before NN (what NN's imports cell needs, and
    the earlier exercises), never NN's own."""
    name = _notebook("--for", opening, available)
    keep = available[: available.index(name)]
    needs = imports_of(name)
    if name in needs:
        raise InstructorError(f"the imports cell of {name} imports its own reference (the answer key): "
                              "fix the notebook in solutions/ and run `python -m grader.build`")
    if not keep:
        raise InstructorError(f"{name} is the course's first notebook: build with --through {name} once it "
                              "is due, or hand out the package without any reference (--through is the "
                              "last notebook whose reference the learners may have)")
    return keep


def opens(keep: list[str], available: list[str]) -> list[str]:
    """The notebooks whose imports cell works with the reference of ``keep``."""
    return [n for n in available if set(imports_of(n)) <= set(keep)]


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
            if re.split(r"[\s<>=!~;\[(]", d.strip(), maxsplit=1)[0].lower() != "torch"] + KERNEL_REQUIREMENTS


def torch_requirement() -> str:
    """The course's torch pin (requirements.txt), e.g. ``torch==2.13.0``."""
    from ..build import ROOT

    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if re.match(r"torch\s*==", line.strip()):
            return line.split("#", 1)[0].strip().replace(" ", "")
    raise InstructorError("requirements.txt pins no torch (torch==X.Y.Z): please report it")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(through: str | None, out: Path, *, folder: bool = False, opening: str | None = None) -> Path:
    """The wheel (or folder) with the reference of the notebooks through ``through``, or of those
    before ``opening`` (``--for``: exactly one of the two)."""
    available = course_notebooks()
    if (through is None) == (opening is None):
        raise InstructorError("give --for NN (the notebook the learners open next) or --through NN "
                              "(the last notebook whose reference they may have), not both")
    keep = _through(through, available) if through else reference_for(opening or "", available)
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


def download(wheel: Path, out: Path, *, torch_index: str | None, run=None) -> list[str]:
    """Everything an offline ``pip install --no-index --find-links OUT`` needs, into ``out``: the
    wheel's dependencies (pip's own index or mirror: your pip configuration, PIP_INDEX_URL), and
    torch at the course's pin from ``torch_index`` (None: leave torch out, the kernels have one).
    Returns the pip commands run; a one-line error when pip fails."""
    import subprocess
    import sys

    run = run or (lambda cmd: subprocess.run(cmd, capture_output=True, text=True))
    pip = [sys.executable, "-m", "pip", "download", "--dest", str(out), "--only-binary=:all:"]
    commands = [pip + [str(wheel)]]
    if torch_index:
        commands.append(pip + [torch_requirement(), "--index-url", torch_index])
    for cmd in commands:
        proc = run(cmd)
        if proc.returncode != 0:
            lines = [line for line in (proc.stderr or proc.stdout or "").splitlines() if line.strip()]
            detail = next((line for line in reversed(lines) if "ERROR" in line), lines[-1] if lines else "")
            raise InstructorError(f"`{' '.join(cmd[2:])}` failed ({detail.strip()[:300]}): check the index "
                                  "(pip's configuration or PIP_INDEX_URL for a mirror; --torch-index for "
                                  "torch), or leave torch out with --torch-index none")
    return [" ".join(cmd[2:]) for cmd in commands]
