"""``python -m grader --doctor``: the first thing to run on a new grading machine.

One screen: which sandbox the grader would use (for one submission and for a batch) and why,
whether CUDA is seen, the versions that matter, and whether the course files are consistent.
Grades nothing and starts no learner code. Exit status 0 when the grader can grade a batch here
as configured, 1 when something would stop it (the lines marked ✗ say what).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

from .isolation import sandbox


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cuda() -> tuple[str, bool]:
    """(one line about CUDA, whether it is usable)."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a requirement
        return f"torch cannot be imported ({exc})", False
    if not torch.cuda.is_available():
        return (f"not seen (torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}): "
                "--device cuda would stop with an error, --device auto runs on CPU"), False
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    return (f"seen: {torch.cuda.device_count()} device(s), {', '.join(names)} (CUDA {torch.version.cuda}); "
            "--device cuda or auto grades on it"), True


def _course() -> list[tuple[bool | None, str]]:
    """(ok, line) about the course files."""
    from .build import NOTEBOOKS, ROOT, SOLUTIONS
    from .course import CourseError, load_course

    lines: list[tuple[bool | None, str]] = []
    sources = sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    released = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    lines.append((bool(sources), f"checkout {ROOT}: {len(sources)} notebooks in solutions/, "
                                 f"{len(released)} in notebooks/"))
    if sources != released:
        lines.append((False, f"solutions/ and notebooks/ differ: {sorted(set(sources) ^ set(released))}"))
    try:
        course = load_course()
        exercises = sum(len(nb.exercises) for nb in course.values())
        points = sum(nb.max_score for nb in course.values())
        missing = []
        for nb in course.values():
            try:
                nb.cases_module()
            except ImportError:
                missing.append(nb.name)
        lines.append((not missing, f"course: {len(course)} notebooks, {exercises} exercises, {points:g} points"
                      + (f"; no hidden cases for {', '.join(missing)}" if missing else "; hidden cases for each")))
    except CourseError as exc:
        lines.append((False, f"course files: {exc}"))
    try:
        from .build import REFERENCE, outputs

        files = outputs()
    except Exception as exc:  # nbgrader missing or a broken source notebook: say so, don't crash
        return [*lines, (False, f"the build cannot run: {type(exc).__name__}: {exc}")]
    lines += _learner_notebooks(files)
    stale = [p.name for p, text in files.items() if p.parent == REFERENCE
             and (not p.exists() or p.read_text(encoding="utf-8") != text)]
    lines.append((not stale, "tfcourse/reference/ is up to date" if not stale else
                  f"tfcourse/reference/ is stale ({', '.join(stale)}): run `python -m grader.build`"))
    return lines


def _learner_notebooks(files: dict) -> list[tuple[bool | None, str]]:
    """(ok, line) about notebooks/: a learner's work there is theirs (never called stale, and no
    advice that would overwrite it); a notebook without work that differs from the build is stale."""
    from .build import notebook_states

    states = notebook_states(files)
    lines: list[tuple[bool | None, str]] = []
    stale = [p.stem for p, st in states.items() if st.status in ("stale", "missing", "unreadable")]
    for path, st in states.items():
        if st.has_work:
            text = (f"notebooks/{path.name} holds your work in {len(st.work)} cell"
                    f"{'s' * (len(st.work) != 1)}: graded as it is (`python -m grader`); "
                    "`python -m grader.build` leaves it alone")
            if st.course_changes:
                text += (f"; {st.course_changes} of the course's cells differ from solutions/ (cells you "
                         "changed or deleted, or an older copy of the course): grading uses the course's "
                         "own cells either way")
            lines.append((True if not st.course_changes else None, text))
    if stale:
        lines.append((False, f"notebooks/ is stale for {', '.join(stale)} (no work of yours in "
                             f"{'them' if len(stale) > 1 else 'it'}): run `python -m grader.build`"))
    elif not lines:
        lines.append((True, "notebooks/ is as the build writes it"))
    return lines


def report(device: str = "cpu") -> tuple[list[str], bool]:
    """The doctor's lines and whether everything needed is in order."""
    ok = True
    lines = ["tfcourse grader doctor", ""]

    def add(good: bool | None, label: str, text: str) -> None:
        nonlocal ok
        mark = {True: "✓", False: "✗", None: "!"}[good]
        ok &= good is not False
        lines.append(f"{mark} {label:<9} {text}")

    user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "?"
    add(None if user == "uid 0" else True, "python",
        f"{platform.python_version()} ({sys.executable}), {platform.system()} {platform.machine()}, {user}"
        + (" (root: docs/grading.md advises an ordinary user)" if user == "uid 0" else ""))
    if user == "uid 0":  # a warning, not a failure: the exit status stays as the checks decide
        add(None, "root", "running as root: never grade as root (docs/grading.md); learner code "
                          "escaping the sandbox would hold root's rights. Run as an ordinary user")
    add(True, "versions", f"torch {_version('torch')}, nbgrader {_version('nbgrader')}, "
                          f"safetensors {_version('safetensors')}")
    cuda, usable = _cuda()
    add(usable if device == "cuda" else (True if usable else None), "CUDA", cuda)

    works = {mode: sandbox._works(mode) for mode in sandbox.MODES}
    for mode in sandbox.MODES:
        add(True if works[mode] is None else None, "sandbox", f"{mode:<8}"
            + ("works" if works[mode] is None else f"unavailable: {works[mode]}"))
    asked = sandbox.requested()
    source = f"{sandbox.ENV_VAR}={asked}" if os.environ.get(sandbox.ENV_VAR) else "auto (default)"
    first = next(m for m in sandbox.MODES if works[m] is None)
    if asked not in ("auto", *sandbox.MODES):
        add(False, "will use", f"nothing: {sandbox.ENV_VAR}={asked!r} is not one of auto, {', '.join(sandbox.MODES)}")
    elif asked in sandbox.MODES:
        usable_mode = works[asked] is None
        add(usable_mode, "will use", f"{asked}, asked for by name ({source})" if usable_mode
            else f"nothing: {asked} was asked for ({source}) but {works[asked]}")
        if usable_mode and asked != "bwrap":
            add(None, "", f"every report row says sandbox {asked!r}: {sandbox.DESCRIPTIONS[asked]}")
    else:
        if first == "bwrap":
            add(True, "will use", f"bwrap for one submission and for a batch ({source}: the strongest that works)")
        else:
            add(None, "will use", f"{first} for one submission, with a warning ({source}; bwrap: {works['bwrap']})")
            add(False, "batch", f"a batch (or --strict) refuses to start: {sandbox.FIX}")
    if asked in ("auto", *sandbox.MODES):
        lines.append(f"  {'':<9} {sandbox.DESCRIPTIONS[asked if asked in sandbox.MODES else first]}")
    if asked in ("auto", *sandbox.MODES) and (asked == "auto" or works[asked] is None):
        from .isolation import fastpath

        mode = asked if asked in sandbox.MODES else first
        fast = fastpath.status(sandbox.Sandbox(mode, requested=asked))
        add(True if fast.startswith("on") else None, "fast path", fast)
    for good, text in _course():
        add(good, "course", text)
    lines += ["", "ready: a batch can be graded here as configured" if ok else
              "not ready: fix the lines marked ✗ (see docs/grading.md)"]
    return lines, ok


def doctor(device: str = "cpu") -> int:
    lines, ok = report(device)
    print("\n".join(lines))
    return 0 if ok else 1
