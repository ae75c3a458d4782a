"""The machinery every check shares: cases, judging, feedback.

A :class:`Case` is one property of one exercise ("rows sum to 1", "matches torch's SDPA", "output
at position t does not change when later tokens change"), described as plain-data calls plus a
``judge`` function. The same case is used three ways (architecture.md, principle 2):

* in a notebook, ``check_<name>(fn)`` runs the calls in-process and judges them;
* in nbgrader's test cell, the same ``check_<name>`` call decides the cell's points;
* in the grader, the calls run in a sandboxed child process and only the returned plain tensors
  come back; :func:`judge_case` then decides in the grading process, with the same messages.

Feedback rules (architecture.md, principle 4): a failure says which property failed, the inputs to
reproduce it (shapes, dtype, seed), shape before values, the largest difference, where, and the
tolerance, and at most one hint naming the likely mistake, in at most 8 lines. Hints come from
:class:`Mistake` entries: known wrong implementations that are run on the same inputs; the hint is
shown only when one mistake (or several with the same hint) reproduces the answer on every call of
the failing case and no mistake with another hint does (:meth:`Judge.mistake_hint`).
"""

from __future__ import annotations

import builtins
import dis
import functools
import importlib
import math
import re
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch

from ..notebook import bound_names, demo_names, normalise_source
from ._calls import (
    FORBIDDEN_SHAPE,
    MODIFIED_INPUT,
    NO_GRADIENT,
    Call,
    Outcome,
    _globals_of,
    run_call,
)

__all__ = [
    "Case",
    "CaseResult",
    "CheckFailed",
    "HALF_TOLERANCE",
    "Judge",
    "Mistake",
    "NotebookChecks",
    "judge_case",
    "run_checks",
    "tolerance",
]

MAX_LINES = 8


class CheckFailed(AssertionError):
    """A check did not pass. The message is the whole feedback (at most 8 lines)."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a stack trace: feedback, not a traceback. The cell still
        # ends in an error, so nbgrader scores it 0.
        return str(self).splitlines()


@dataclass(frozen=True)
class Mistake:
    """A known wrong implementation, with the hint shown when an answer behaves like it.

    ``fn`` has the exercise's own signature (a function, or a class for module exercises).
    """

    name: str
    hint: str
    fn: Callable[..., Any]


@dataclass
class Case:
    """One property of one exercise.

    exercise: the graded name (the nbgrader grade_id). title: the property, one line.
    calls: what to run. judge: ``judge(j: Judge) -> None``; it calls ``j.fail(...)`` to fail.
    seed: the generator seed the inputs came from (reported for reproduction).
    reference: when True the grader fills ``Judge.expected`` by running the same calls on the
    reference solution (hidden cases). mistakes: catalogue entries that give hints.
    part: which test cell of the exercise scores this case: "core" is ``test_<exercise>``, another
    name ``test_<exercise>__<part>`` (``tfcourse.notebook.test_cell_id``), so an exercise's points
    can be split over core behaviour and edge cases (partial credit).
    """

    exercise: str
    title: str
    calls: list[Call]
    judge: Callable[[Judge], None]
    seed: int | None = None
    reference: bool = False
    mistakes: Sequence[Mistake] = ()
    hidden: bool = False
    part: str = "core"

    def inputs(self) -> str:
        text = self.calls[0].describe() if self.calls else ""
        if len(self.calls) > 1:
            text += f" (+{len(self.calls) - 1} more call{'s' if len(self.calls) > 2 else ''})"
        if self.seed is not None:
            text += f"; seed {self.seed}"
        return text


@dataclass
class CaseResult:
    """status: "passed", "failed" or "error" (the code under test raised)."""

    status: str
    message: str = ""
    error: Outcome | None = None


class _CallRaised(Exception):
    def __init__(self, outcome: Outcome):
        self.outcome = outcome


# Half precision (float16, bfloat16): answers are compared with the reference computed in float64
# on the same half-valued inputs. Measured on the course's hidden inputs (tests/test_half.py), a
# correct answer computed in half (the reference itself, torch.softmax) or in float32 and then cast
# is at most ~2e-3 (float16) and ~2.2e-2 (bfloat16) away; these allow about twice that, and a real
# bug (a missing scale, a mask applied after the softmax) is off by 0.1 or more.
# docs/conventions.md ("Half precision") states them.
HALF_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (4e-2, 2e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) used to compare values of ``dtype`` with an oracle or the reference."""
    if dtype == torch.float64:
        return 1e-10, 1e-7
    if dtype in HALF_TOLERANCE:
        return HALF_TOLERANCE[dtype]
    return 1e-5, 1e-4


def _fmt_shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _fmt_dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _fmt_num(x: float) -> str:
    return str(x) if math.isnan(x) or math.isinf(x) else f"{x:.6g}"


class Judge:
    """What a case's ``judge`` function sees: the outcomes and helpers that fail with good text."""

    def __init__(self, case: Case, outcomes: list[Outcome], expected: list[Outcome] | None = None,
                 device: str = "cpu"):
        self.case = case
        self.outcomes = outcomes
        self.expected = expected
        self.device = device
        self._mistake_outcomes: dict[tuple[str, int, int], Outcome] = {}  # catalogue runs, per call

    # -- failing ---------------------------------------------------------------------------
    def fail(self, *lines: str, hint: str | None = None) -> NoReturn:
        body = [f"✗ {self.case.exercise}: {self.case.title}", f"  inputs: {self.case.inputs()}"]
        body += [f"  {line}" for line in lines if line]
        if hint:
            body.append(f"  hint: {hint}")
        if len(body) > MAX_LINES:  # keep the hint, drop detail lines
            keep = body[: MAX_LINES - (1 if hint else 0)]
            body = keep + ([body[-1]] if hint else [])
        raise CheckFailed("\n".join(body))

    def require(self, condition: bool, *lines: str, hint: str | None = None, call: int = 0) -> None:
        """Fail with ``lines`` unless ``condition``; use the mistake catalogue when no hint given."""
        if not condition:
            self.fail(*lines, hint=hint if hint is not None else self.mistake_hint(call))

    # -- reading outcomes ------------------------------------------------------------------
    def raised(self, call: int = 0) -> Outcome | None:
        """The outcome if call ``call`` raised an exception, else None (no failure)."""
        o = self.outcomes[call]
        return o if o.kind == "error" else None

    def values(self, call: int = 0, *, n: int = 1, names: Sequence[str] | None = None) -> list[torch.Tensor]:
        """The tensors call ``call`` returned; n=1 means one tensor, n>1 a tuple of n tensors."""
        o = self.outcomes[call]
        if o.kind == "error":
            raise _CallRaised(o)
        want = "one torch.Tensor" if n == 1 else f"a tuple of {n} tensors ({', '.join(names or [])})"
        if o.kind == "bad_type":
            self.fail(f"returned {o.type_name}; expected {want}",
                      hint="return plain torch.Tensor objects (not lists, numpy arrays or subclasses)")
        got = len(o.tensors)
        if (n == 1 and o.kind != "tensor") or (n > 1 and (o.kind != "tuple" or got != n)):
            what = "one tensor" if o.kind == "tensor" else f"a tuple of {got} tensors"
            self.fail(f"returned {what}; expected {want}")
        return o.tensors

    def tensor(self, call: int = 0, index: int = 0, *, n: int = 1, names: Sequence[str] | None = None,
               shape: Sequence[int] | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
        """One returned tensor, after checking its shape, dtype and device (shape first)."""
        t = self.values(call, n=n, names=names)[index]
        name = names[index] if names else "output"
        if shape is not None and tuple(t.shape) != tuple(shape):
            self.fail(f"{name} has shape {_fmt_shape(t.shape)}; expected {_fmt_shape(shape)}",
                      hint=self.mistake_hint(call, index, check_shape_only=True))
        if dtype is not None and t.dtype != dtype:
            want = "a bool mask" if dtype == torch.bool else "the dtype of the inputs"
            self.fail(f"{name} has dtype {_fmt_dtype(t.dtype)}; expected {_fmt_dtype(dtype)} ({want})",
                      hint="return the input's dtype: if you computed in float32, cast the result back "
                      "with .to(x.dtype); tensors you create take dtype=x.dtype"
                      if dtype != torch.bool else "build the mask from comparisons, e.g. j <= i")
        dev = self.outcomes[call].devices[index]
        want = self.device if self.case.calls[call].on_device() else "cpu"
        if torch.device(dev).type != torch.device(want).type:
            self.fail(f"{name} is on {dev}; expected {want}, the device of the inputs",
                      hint="create new tensors on the input's device (device=x.device)")
        return t

    def expected_tensor(self, call: int = 0, index: int = 0) -> torch.Tensor:
        if self.expected is None:
            raise RuntimeError("this case has no reference outcome (reference=False)")
        o = self.expected[call]
        if not o.ok:
            raise RuntimeError(f"the reference solution failed on this case: {o.error_line()}")
        return o.tensors[index]

    # -- comparing -------------------------------------------------------------------------
    def close(self, actual: torch.Tensor, expected: torch.Tensor, *, name: str = "output",
              atol: float | None = None, rtol: float | None = None, call: int = 0, index: int = 0,
              hint: str | None = None, oracle: str = "expected", tol_dtype: torch.dtype | None = None) -> None:
        """Fail unless ``actual`` matches ``expected`` (shape first, then values, NaN-aware).

        tol_dtype: the dtype whose :func:`tolerance` applies (default: expected's), e.g. float16
        when a half-precision answer is compared with a float64 oracle."""
        if tuple(actual.shape) != tuple(expected.shape):
            self.fail(f"{name} has shape {_fmt_shape(actual.shape)}; expected {_fmt_shape(expected.shape)}",
                      hint=hint or self.mistake_hint(call, index, check_shape_only=True))
        tol_dtype = tol_dtype or (expected.dtype if expected.is_floating_point() else actual.dtype)
        d_atol, d_rtol = tolerance(tol_dtype)
        atol = d_atol if atol is None else atol
        rtol = d_rtol if rtol is None else rtol
        if actual.dtype == torch.bool or expected.dtype == torch.bool:
            a, e = actual.to(torch.bool), expected.to(torch.bool)
            wrong = a != e
            if wrong.any():
                idx = tuple(int(i) for i in wrong.nonzero()[0])
                self.fail(f"{name} shape {_fmt_shape(actual.shape)} ✓; {int(wrong.sum())} of {a.numel()} "
                          f"entries differ, first at {list(idx)}: got {bool(a[idx])}, {oracle} {bool(e[idx])}",
                          hint=hint or self.mistake_hint(call, index, atol=atol, rtol=rtol))
            return
        a = actual.detach().to(torch.float64)
        e = expected.detach().to(torch.float64)
        nan_a, nan_e = torch.isnan(a), torch.isnan(e)
        if (nan_a & ~nan_e).any():
            idx = tuple(int(i) for i in (nan_a & ~nan_e).nonzero()[0])
            self.fail(f"{name} shape {_fmt_shape(actual.shape)} ✓; it holds NaN at {list(idx)} "
                      f"where {oracle} is {_fmt_num(float(e[idx]))}",
                      hint=hint or self.mistake_hint(call, index, atol=atol, rtol=rtol))
        both_inf = torch.isinf(a) & torch.isinf(e) & (torch.sign(a) == torch.sign(e))
        diff = torch.where(both_inf | (nan_a & nan_e), torch.zeros_like(a), (a - e).abs())
        diff = torch.nan_to_num(diff, nan=math.inf, posinf=math.inf)  # inf stays inf (not float max)
        allowed = atol + rtol * torch.nan_to_num(e.abs(), posinf=0.0)
        bad = diff > allowed
        if bad.any():
            flat = int(torch.argmax(torch.where(bad, diff, torch.zeros_like(diff)).flatten()))
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
            self.fail(
                f"{name} shape {_fmt_shape(actual.shape)} ✓; largest difference {_fmt_num(float(diff[idx]))} "
                f"at {list(idx)}: got {_fmt_num(float(a[idx]))}, {oracle} {_fmt_num(float(e[idx]))}",
                f"tolerance: atol {atol:g} + rtol {rtol:g}·|{oracle}| ({_fmt_dtype(tol_dtype)})",
                hint=hint or self.mistake_hint(call, index, atol=atol, rtol=rtol),
            )

    def match_reference(self, *, n: int = 1, names: Sequence[str] | None = None,
                        atol: float | None = None, rtol: float | None = None) -> None:
        """Every call's tensors match the reference solution's (hidden cases)."""
        for call in range(len(self.case.calls)):
            exp = self.expected[call] if self.expected else None
            if exp is not None and exp.kind == "error":
                # the reference raises here: the answer must raise the same kind of error
                got = self.raised(call)
                self.require(got is not None and got.error_type == exp.error_type,
                             f"expected {exp.error_type} ({exp.error_message.splitlines()[0][:80]}), "
                             f"but {'it raised ' + got.error_type if got else 'nothing was raised'}",
                             call=call)
                continue
            for index in range(n):
                expected = self.expected_tensor(call, index)
                actual = self.tensor(call, index, n=n, names=names, shape=tuple(expected.shape),
                                     dtype=expected.dtype)
                self.close(actual, expected, name=(names[index] if names else "output"),
                           atol=atol, rtol=rtol, call=call, index=index, oracle="reference")

    # -- hints -----------------------------------------------------------------------------
    def mistake_hint(self, call: int = 0, index: int = 0, *, check_shape_only: bool = False,
                     atol: float | None = None, rtol: float | None = None) -> str | None:
        """The hint of the one catalogued mistake that explains this answer on this case, or None.

        A mistake explains the answer when it reproduces it on *every* call of the case that runs
        the exercise (not only the failing ``call``): the same shapes and, unless
        ``check_shape_only``, the same values (within 10x the dtype's tolerance, 2x for float16 and
        bfloat16, where a correct answer may differ by rounding; NaN where the answer has NaN),
        and the same exception type where the answer raised. Mistakes whose hints are the same
        text are one explanation. The hint is shown only when exactly one explanation fits: when
        two or more fit, this case cannot tell them apart and no hint is shown (a hint naming a
        mistake the learner did not make misleads more than none; the failure lines still say
        what went wrong). ``index`` is kept for callers; every returned tensor is compared.
        ``atol``/``rtol``: the tolerance the case judges with, when looser (a float64 answer judged at
        float32 level matches a mistake computed in float32 at that level, not at float64's).
        """
        if not self.outcomes[call].ok or not self.case.mistakes:
            return None
        mine = [(i, o) for i, (c, o) in enumerate(zip(self.case.calls, self.outcomes, strict=True))
                if c.target == self.case.exercise]
        hints: list[str] = []
        for mistake in self.case.mistakes:
            if mistake.hint in hints:
                continue
            if all(_same_outcome(o, self._mistake_outcome(mistake, i), shape_only=check_shape_only,
                                 floor=(atol or 0.0, rtol or 0.0))
                   for i, o in mine):
                hints.append(mistake.hint)
                if len(hints) > 1:
                    return None  # ambiguous: say nothing rather than maybe the wrong thing
        return hints[0] if hints else None

    def _mistake_outcome(self, mistake: Mistake, call: int) -> Outcome:
        key = (mistake.name, id(mistake.fn), call)
        if key not in self._mistake_outcomes:
            c = self.case.calls[call]
            with warnings.catch_warnings():  # a catalogued mistake's own warnings are not the learner's
                warnings.simplefilter("ignore")
                self._mistake_outcomes[key] = run_call(c, {c.target: mistake.fn})
        return self._mistake_outcomes[key]


def _same_outcome(mine: Outcome, wrong: Outcome, *, shape_only: bool,
                  floor: tuple[float, float] = (0.0, 0.0)) -> bool:
    if mine.ok != wrong.ok:
        return False
    if not mine.ok:
        return mine.kind == wrong.kind and mine.error_type == wrong.error_type \
            and mine.type_name == wrong.type_name
    return len(mine.tensors) == len(wrong.tensors) and _same(mine.tensors, wrong.tensors, shape_only=shape_only,
                                                             floor=floor)


def _same(a: list[torch.Tensor], b: list[torch.Tensor], *, shape_only: bool,
          floor: tuple[float, float] = (0.0, 0.0)) -> bool:
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        if shape_only:
            continue
        if x.dtype == torch.bool or y.dtype == torch.bool:
            if not torch.equal(x.bool(), y.bool()):
                return False
            continue
        dtype = y.dtype if y.is_floating_point() else torch.float64
        atol, rtol = tolerance(dtype)
        factor = 2 if dtype in HALF_TOLERANCE else 10
        atol, rtol = max(atol * factor, floor[0]), max(rtol * factor, floor[1])
        if not torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True):
            return False
    return True


# Outcomes run_call makes itself (no exception was raised): their first feedback line.
_VERDICT_ERRORS = {MODIFIED_INPUT: "changed its input in place",
                   NO_GRADIENT: "no gradient reaches its parameters",
                   FORBIDDEN_SHAPE: "computed a tensor of a shape the task rules out"}


def judge_case(case: Case, outcomes: list[Outcome], expected: list[Outcome] | None = None,
               device: str = "cpu") -> CaseResult:
    """Decide one case from plain outcomes. Never runs the code under test."""
    judge = Judge(case, outcomes, expected, device)
    try:
        case.judge(judge)
    except CheckFailed as failure:
        return CaseResult("failed", str(failure))
    except _CallRaised as raised:
        o = raised.outcome
        if o.error_type in _VERDICT_ERRORS:  # not an exception of the learner's: a finding
            return CaseResult("failed", f"✗ {case.exercise}: {_VERDICT_ERRORS[o.error_type]}\n"
                              f"  while checking: {case.title}\n  inputs: {case.inputs()}\n"
                              f"  hint: {o.error_message}")
        msg = (f"✗ {case.exercise}: raised {o.error_line()}\n"
               f"  while checking: {case.title}\n  inputs: {case.inputs()}")
        if o.error_type in ("ModuleNotFoundError", "ImportError") and "tfcourse.reference" in o.error_message:
            msg += ("\n  hint: the grader hides the course's solutions of the notebook being graded "
                    "(tfcourse.reference.nbNN_*): use your own code from this notebook instead")
        return CaseResult("error", msg, error=o)
    return CaseResult("passed")


def not_a_python_int(outcome: Outcome) -> str | None:
    """What a call read through ``INT_STEP`` returned instead of a Python int ("a float", "a
    Tensor", "a numpy int64", ...), or None when it returned an int or raised on its own."""
    if outcome.kind == "error" and outcome.error_type == "AttributeError" and "'numerator'" in outcome.error_message:
        found = re.match(r"'([\w.]+)' object", outcome.error_message)
        name = found.group(1).replace("numpy.", "numpy ") if found else "value that is not an int"
    elif outcome.kind == "bad_type":
        numpy_int = re.fullmatch(r"tuple of \((u?int\d*)\)", outcome.type_name)  # a numpy integer's numerator
        name = f"numpy {numpy_int.group(1)}" if numpy_int else outcome.type_name
    else:
        return None
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


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


@dataclass(frozen=True)
class NotebookChecks:
    """What a notebook's checks need to know of the notebook as a whole.

    exercises: its exercise names. cases: ``cases(exercise)`` gives an exercise's visible cases.
    reference: the module holding the course's solutions (``tfcourse.reference.nbNN_topic``);
    its objects stand in for another exercise that fails its own checks (one bug costs once).
    """

    exercises: tuple[str, ...]
    cases: Callable[[str], list[Case]]
    reference: str
    released: str = ""  # the learner notebook's file name in notebooks/, e.g. "01_attention.ipynb"
    # which graded exercises call which others (the course's call graph, stated in the task
    # cells): only these callees ever stand in, and never for an optional challenge
    calls: dict[str, tuple[str, ...]] = field(default_factory=dict)


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


def _first_failure(exercise: str, cases: list[Case], namespace: dict[str, Any]) -> CheckFailed | None:
    for case in cases:
        outcomes = [run_call(c, namespace) for c in case.calls]
        if not_attempted(outcomes):
            names = set(namespace) | set(_globals_of(namespace.get(exercise)) or ())
            failure = CheckFailed(_not_attempted_message(exercise, outcomes, names))
            failure.own_stub = _stub_owner(outcomes) not in names - {exercise}
            return failure
        result = judge_case(case, outcomes)
        if result.status != "passed":
            return CheckFailed(result.message)
    return None


def failing_dependencies(exercise: str, obj: Any, notebook: NotebookChecks) -> list[str]:
    """The exercises ``exercise`` calls by the course's call graph (``notebook.calls``) that are in
    ``obj``'s namespace and fail their own visible checks, in notebook order. A callee that passes
    once its own failing callees stand in is not one of them: those callees are (a broken repeat_kv,
    not the GroupedQueryAttention that uses it), as in the grader."""
    scope = _globals_of(obj) or {}
    callees = notebook.calls.get(exercise, ())
    failing: list[str] = []
    for other in notebook.exercises:
        if other not in callees or other not in scope:
            continue
        failure, stood = with_stand_ins(other, scope[other], notebook,
                                        lambda ns, o=other: _first_failure(o, notebook.cases(o), ns),
                                        {other: scope[other]})
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
    scope = _globals_of(obj)
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
    if hidden:
        names = ", ".join(f"`{n}`" for n in hidden)
        raise CheckFailed(f"✗ {exercise}: it uses {names} from `{notebook.reference}`, the course's solutions\n"
                          "  the grader hides that module (importing it there raises ModuleNotFoundError)\n"
                          f"  use your own {names} from this notebook instead, then run the cell again")
    namespace = {**(also or {}), exercise: obj}
    failure, stood = with_stand_ins(exercise, obj, notebook,
                                    lambda ns: _first_failure(exercise, selected, ns), namespace)
    if failure is not None:
        raise failure
    if verbose:
        which = f" of {part}" if part not in (None, "core") else ""
        line = (f"✓ {exercise}: all {len(selected)} checks{which} passed" if len(selected) > 1
                else f"✓ {exercise}: the check{which} passed")
        if stood:
            line += (f" (with the course's {', '.join(f'`{n}`' for n in stood)} in place of yours, which "
                     "fails its own check: one bug costs points once)")
        print(line)
