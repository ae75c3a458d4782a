"""Running the checks in this process, as a notebook's check cell does: ``run_checks`` with the
notebook's rules (a name only a demo cell defines, the hidden reference, one bug costs once:
:func:`with_stand_ins`). The grader judges the same cases from its sandboxed child's outcomes.
"""

from __future__ import annotations

import builtins
import dis
import functools
import importlib
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..notebook import bound_names, demo_names, normalise_source
from .call import globals_of, run_call
from .case import Case, CheckFailed, judge_case
from .outcome import Outcome
from .show import checks_passed, show_success

if TYPE_CHECKING:
    from .protocol import NotebookChecks

__all__ = ["demo_dependencies", "failing_dependencies", "not_attempted", "passed_here",
           "reference_dependencies", "run_checks", "with_stand_ins"]

# (notebook, exercise, part) -> the object whose checks of that part (test cell) last passed in this
# process:
# a demo that runs the learner's own code (notebook 08's showcase) need not run them again
_PASSED: dict[tuple[str, str, str | None], Any] = {}


def passed_here(notebook: str, exercise: str, part: str | None, obj: Any) -> bool:
    """Whether ``obj`` itself passed ``exercise``'s checks of ``part`` in this process, last time
    they ran (a check cell run, then the function redefined: False)."""
    return _PASSED.get((notebook, exercise, part)) is obj


def not_attempted(outcomes: list[Outcome]) -> bool:
    return any(o.kind == "error" and o.error_type == "NotImplementedError" for o in outcomes)


def _stub_owner(outcomes: list[Outcome]) -> str:
    """The name of the function (or class) whose stub raised NotImplementedError."""
    raised = next(o for o in outcomes if o.kind == "error" and o.error_type == "NotImplementedError")
    return raised.error_function.split(".")[0]


def _not_attempted_message(exercise: str, outcomes: list[Outcome], names: set[str]) -> str:
    owner = _stub_owner(outcomes)
    if owner in names and owner != exercise:
        return (f"✗ {exercise}: not attempted yet — it uses `{owner}`, which still raises "
                "NotImplementedError: implement that one first")
    return (f"✗ {exercise}: not attempted yet — replace `raise NotImplementedError()` with your code, "
            "then run this cell again")


def _released_notebook(name: str) -> Any:
    """The course's released notebook (a checkout or editable install has notebooks/), or None."""
    path = Path(__file__).resolve().parents[2] / "notebooks" / name
    if not name or not path.is_file():
        return None
    return _read_released(str(path), path.stat().st_mtime_ns)


@functools.cache
def _read_released(path: str, mtime: int) -> Any:
    import nbformat

    return nbformat.read(path, as_version=4)


def _globals_read(obj: Any) -> set[str]:
    """The global names ``obj``'s code reads (a function, or every method of a class)."""
    codes = []
    if isinstance(obj, type):
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if hasattr(value, "__code__"):
                codes.append(value.__code__)
    elif hasattr(obj, "__code__"):
        codes.append(obj.__code__)
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names |= {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return names


def _defined_by_learner(names: set[str], released: Any) -> set[str]:
    """Of ``names``, those a cell the learner ran binds, when that cell is not the course's own
    (IPython's input history; empty outside IPython)."""
    try:
        shell = get_ipython()  # type: ignore[name-defined]  # noqa: F821 - defined in IPython only
    except NameError:
        return set()
    course = {normalise_source(c.source) for c in released.cells if c.cell_type == "code"}
    found: set[str] = set()
    for source in shell.user_ns.get("In", []):
        if isinstance(source, str) and normalise_source(source) not in course:
            found |= bound_names(source) & names
    return found


def demo_dependencies(exercise: str, obj: Any, notebook: NotebookChecks | None) -> list[str]:
    """Names ``obj`` reads that only the course's demo cells define (the grader does not run them,
    so the answer would fail there): the notebook check refuses them too."""
    if notebook is None:
        return []
    released = _released_notebook(notebook.released)
    if released is None:
        return []
    used = _globals_read(obj) & demo_names(released)
    used -= set(notebook.exercises) | set(dir(builtins))
    used -= _defined_by_learner(used, released)
    return sorted(used)


def reference_dependencies(exercise: str, obj: Any, notebook: NotebookChecks | None) -> list[str]:
    """Names ``obj`` reads (or ``obj`` itself) that come from the notebook's OWN reference module,
    which the grader hides (importing it there raises ModuleNotFoundError): the notebook check
    refuses them too. Earlier notebooks' reference modules, imported by the setup cell, are fine;
    another exercise's name is left to that exercise's own check (one bug costs once)."""
    if notebook is None or not notebook.reference:
        return []

    def from_reference(value: Any) -> bool:
        return (getattr(value, "__module__", None) == notebook.reference
                or getattr(value, "__name__", None) == notebook.reference)

    found = [exercise] if from_reference(obj) else []
    scopes = [obj] + ([getattr(v, "__func__", v) for v in vars(obj).values()] if isinstance(obj, type) else [])
    names = _globals_read(obj)
    for scope in scopes:
        module_globals = getattr(scope, "__globals__", None) or {}
        found += [n for n in sorted(names) if n in module_globals and from_reference(module_globals[n])
                  and n not in notebook.exercises]  # an exercise is refused by its own check (one bug costs once)
    return sorted(set(found))


def _first_failure(exercise: str, cases: list[Case], namespace: dict[str, Any],
                   notes: list[str] | None = None) -> CheckFailed | None:
    """The first case's failure, or None; ``notes`` collects the findings that cost nothing."""
    for case in cases:
        outcomes = [run_call(c, namespace) for c in case.calls]
        if not_attempted(outcomes):
            names = set(namespace) | set(globals_of(namespace.get(exercise)) or ())
            failure = CheckFailed(_not_attempted_message(exercise, outcomes, names))
            failure.own_stub = _stub_owner(outcomes) not in names - {exercise}  # type: ignore[attr-defined]
            return failure
        result = judge_case(case, outcomes)
        if notes is not None and result.note:
            notes.append(result.note)
        if result.status != "passed":
            return CheckFailed(result.message)
    return None


def failing_dependencies(exercise: str, obj: Any, notebook: NotebookChecks) -> list[str]:
    """The exercises ``exercise`` calls by the course's call graph (``notebook.calls``) that are in
    ``obj``'s namespace and fail their own visible checks, in notebook order. A callee that passes
    once its own failing callees stand in is not one of them: those callees are (a broken repeat_kv,
    not the GroupedQueryAttention that uses it), as in the grader."""
    scope = globals_of(obj) or {}
    callees = notebook.calls.get(exercise, ())
    failing: list[str] = []
    for other in notebook.exercises:
        if other not in callees or other not in scope:
            continue
        def attempt(ns: dict[str, Any], o: str = other) -> CheckFailed | None:
            return _first_failure(o, notebook.cases(o), ns)

        failure, stood = with_stand_ins(other, scope[other], notebook, attempt, {other: scope[other]})
        failing += [n for n in ([other] if failure is not None else stood) if n not in failing]
    return failing


def with_stand_ins(exercise: str, obj: Any, notebook: NotebookChecks | None,
                   attempt: Callable[[dict[str, Any]], CheckFailed | None],
                   namespace: dict[str, Any]) -> tuple[CheckFailed | None, list[str]]:
    """Run ``attempt(namespace)``; when it fails and ``obj`` calls other exercises that fail their
    own checks, run it again with the course's versions of those in place (in ``obj``'s namespace
    and in ``namespace``), and return that run's failure (or None) and the names stood in.

    The grader does the same (grader/grading.py), so the two verdicts agree.
    """
    failure = attempt(namespace)
    if failure is None or notebook is None or getattr(failure, "own_stub", False):
        return failure, []
    names = failing_dependencies(exercise, obj, notebook)
    if not names:
        return failure, []
    try:
        reference = importlib.import_module(notebook.reference)
    except ImportError:  # the course's solutions are not installed here (a learner environment
        # built by `python -m grader.instructor learner-env` before this notebook's due date)
        failing = ", ".join(f"`{n}`" for n in names)
        failure.args = (f"{failure}\n  note: your {failing} fails its own check, and the course's version "
                        f"cannot stand in here ({notebook.reference} is not installed): fix it first",
                        *failure.args[1:])
        return failure, []
    scope = globals_of(obj)
    saved = {n: scope[n] for n in names}
    try:
        for n in names:
            scope[n] = getattr(reference, n)
        again = attempt({**namespace, **{n: getattr(reference, n) for n in names if n in namespace}})
    finally:
        scope.update(saved)
    return again, names


def run_checks(exercise: str, obj: Any, cases: list[Case], *, verbose: bool = True,
               also: dict[str, Any] | None = None, part: str | None = None,
               notebook: NotebookChecks | None = None) -> None:
    """Run ``cases`` in this process against ``obj``; raise :class:`CheckFailed` on the first
    failure (the notebook cell then shows the message), print one line on success.

    also: other names the calls may use (e.g. the learner's ``MultiHeadAttention`` when checking
    ``mha_from_torch``), as they are in the grader's child, where all solution cells are defined.
    part: only the cases scored by that test cell (``Case.part``); None runs them all.
    notebook: when given, another exercise of the notebook that ``obj`` calls and that fails its
    own checks is replaced by the course's version (:func:`with_stand_ins`), as the grader does.
    """
    selected = [c for c in cases if part is None or c.part == part]
    if not selected:
        raise ValueError(f"{exercise} has no checks in part {part!r}")
    borrowed = demo_dependencies(exercise, obj, notebook)
    if borrowed:
        names = ", ".join(f"`{n}`" for n in borrowed)
        raise CheckFailed(f"✗ {exercise}: it uses {names}, which only a course demo cell defines\n"
                          "  the grader runs the setup cell, your exercise cells and the cells you add, "
                          "not the course's demo cells\n"
                          f"  define {names} in your cell or in a cell you add, then run both again")
    hidden = reference_dependencies(exercise, obj, notebook)
    if hidden and notebook is not None:
        names = ", ".join(f"`{n}`" for n in hidden)
        raise CheckFailed(f"✗ {exercise}: it uses {names} from `{notebook.reference}`, the course's solutions\n"
                          "  the grader hides that module (importing it there raises ModuleNotFoundError)\n"
                          f"  use your own {names} from this notebook instead, then run the cell again")
    namespace = {**(also or {}), exercise: obj}
    notes: list[str] = []
    failure, stood = with_stand_ins(exercise, obj, notebook,
                                    lambda ns: _first_failure(exercise, selected, ns, notes), namespace)
    keys = [(notebook.name if notebook is not None else "", exercise, p) for p in dict.fromkeys(c.part for c in selected)]
    for key in keys:
        _PASSED.pop(key, None)
    if failure is not None:
        raise failure
    if not stood:  # passed on its own, not with the course's callees standing in: each part it ran
        _PASSED.update(dict.fromkeys(keys, obj))
    if verbose:
        line = checks_passed(len(selected), exercise, part)
        if stood:
            line += (f" (with the course's {', '.join(f'`{n}`' for n in stood)} in place of yours, which "
                     "fails its own check: one bug costs points once)")
        scored_here = notebook is not None and "unwritten" in notebook.parts(exercise)
        if notes and not scored_here:  # costs nothing: the rule is scored only where a test cell states it
            line += f"\n  note (no points lost): {notes[0]}"
        show_success(line)
