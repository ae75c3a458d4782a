"""The machinery every check shares: cases, judging, feedback.

A :class:`Case` is one property of one exercise ("rows sum to 1", "matches torch's SDPA", "output
at position t does not change when later tokens change"), described as plain-data calls plus a
``judge`` function. The same case is used three ways (docs/design.md, "one check, three uses"):

* in a notebook, ``check_<name>(fn)`` runs the calls in-process and judges them;
* in nbgrader's test cell, the same ``check_<name>`` call decides the cell's points;
* in the grader, the calls run in a sandboxed child process and only the returned plain tensors
  come back; :func:`judge_case` then decides in the grading process, with the same messages.

Feedback rules (docs/design.md, "feedback teaches"): a failure says which property failed, the inputs to
reproduce it (shapes, dtype, seed), shape before values, the largest difference, where, and the
tolerance, and at most one hint naming the likely mistake, in at most 8 lines. Hints come from
:class:`Mistake` entries: known wrong implementations that are run on the same inputs; the hint is
shown only when one mistake (or several with the same hint) reproduces the answer on every call of
the failing case and no mistake with another hint does (:meth:`Judge.mistake_hint`).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from .call import Call, run_call
from .hints import Mistake, same_outcome
from .outcome import FORBIDDEN_SHAPE, MODIFIED_INPUT, NO_GRADIENT, Outcome
from .tolerance import tolerance

__all__ = ["MAX_LINES", "Case", "CaseResult", "CheckFailed", "Hint", "Judge", "fmt_dtype", "fmt_num", "fmt_shape",
           "judge_case", "not_a_python_int"]

#: A failure's hint: the text, or a function giving it (or None) that runs only when the check
#: fails. ``hint=lambda: j.mistake_hint()`` keeps a passing answer from running every catalogued
#: mistake just to compute a hint nobody reads.
Hint = str | Callable[[], str | None] | None


def _resolved(hint: Hint) -> str | None:
    return hint() if callable(hint) else hint


MAX_LINES = 8


class CheckFailed(AssertionError):
    """A check did not pass. The message is the whole feedback (at most 8 lines)."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a stack trace: feedback, not a traceback. The cell still
        # ends in an error, so nbgrader scores it 0.
        return str(self).splitlines()


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

    def inputs(self, call: int | None = None) -> str:
        """The calls' inputs, one line: the first call's (and how many more), or, when a failure is
        about one call, that call's (and which of how many it is)."""
        n = len(self.calls)
        if call is not None and n > 1 and 0 <= call < n:
            text = self.calls[call].describe() + f" (call {call + 1} of {n})"
        else:
            text = self.calls[0].describe() if self.calls else ""
            if n > 1:
                text += f" (+{n - 1} more call{'s' if n > 2 else ''})"
        if self.seed is not None:
            text += f"; seed {self.seed}"
        return text


@dataclass
class CaseResult:
    """status: "passed", "failed" or "error" (the code under test raised)."""

    status: str
    message: str = ""
    error: Outcome | None = None
    note: str = ""  # a finding that costs nothing (Outcome.note): the answer wrote into an input


class _CallRaised(Exception):
    def __init__(self, outcome: Outcome, call: int | None = None):
        self.outcome = outcome
        self.call = call


def fmt_shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def fmt_dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fmt_num(x: float) -> str:
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
    def fail(self, *lines: str, hint: Hint = None, call: int | None = None) -> NoReturn:
        """Fail the case with ``lines`` (and ``hint``); ``call``: the call the failure is about, whose
        inputs the ``inputs:`` line then shows (by default the first call's)."""
        hint = _resolved(hint)
        body = [f"✗ {self.case.exercise}: {self.case.title}", f"  inputs: {self.case.inputs(call)}"]
        body += [f"  {line}" for line in lines if line]
        if hint:
            body.append(f"  hint: {hint}")
        if len(body) > MAX_LINES:  # keep the hint, drop detail lines
            keep = body[: MAX_LINES - (1 if hint else 0)]
            body = keep + ([body[-1]] if hint else [])
        raise CheckFailed("\n".join(body))

    def require(self, condition: bool, *lines: str, hint: Hint = None, call: int | None = None) -> None:
        """Fail with ``lines`` unless ``condition``; use the mistake catalogue when no hint is given
        (or a function given as the hint returns None). ``call``: the call the condition is about
        (its inputs are shown, its catalogue hint used)."""
        if not condition:
            text = _resolved(hint)
            self.fail(*lines, hint=text if text is not None else self.mistake_hint(call or 0), call=call)

    # -- reading outcomes ------------------------------------------------------------------
    def raised(self, call: int = 0) -> Outcome | None:
        """The outcome if call ``call`` raised an exception, else None (no failure)."""
        o = self.outcomes[call]
        return o if o.kind == "error" else None

    def values(self, call: int = 0, *, n: int = 1, names: Sequence[str] | None = None) -> list[torch.Tensor]:
        """The tensors call ``call`` returned; n=1 means one tensor, n>1 a tuple of n tensors."""
        o = self.outcomes[call]
        if o.kind == "error":
            raise _CallRaised(o, call)
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
            self.fail(f"{name} has shape {fmt_shape(t.shape)}; expected {fmt_shape(shape)}",
                      hint=self.mistake_hint(call, index, check_shape_only=True), call=call)
        if dtype is not None and t.dtype != dtype:
            want = "a bool mask" if dtype == torch.bool else "the dtype of the inputs"
            self.fail(f"{name} has dtype {fmt_dtype(t.dtype)}; expected {fmt_dtype(dtype)} ({want})",
                      hint="return the input's dtype: if you computed in float32, cast the result back "
                      "with .to(x.dtype); tensors you create take dtype=x.dtype"
                      if dtype != torch.bool else "build the mask from comparisons, e.g. j <= i", call=call)
        dev = self.outcomes[call].devices[index]
        want = self.device if self.case.calls[call].on_device() else "cpu"
        if torch.device(dev).type != torch.device(want).type:
            self.fail(f"{name} is on {dev}; expected {want}, the device of the inputs",
                      hint="create new tensors on the input's device (device=x.device)", call=call)
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
              atol: float | None = None, rtol: float | None = None, call: int | None = None, index: int = 0,
              hint: Hint = None, oracle: str = "expected", tol_dtype: torch.dtype | None = None,
              worst: str = "absolute") -> None:
        """Fail unless ``actual`` matches ``expected`` (shape first, then values, NaN-aware).

        tol_dtype: the dtype whose :func:`tolerance` applies (default: expected's), e.g. float16
        when a half-precision answer is compared with a float64 oracle. call: the call ``actual``
        came from (its inputs are shown and its catalogue hint used; default the first).
        worst: which failing entry the message shows: "absolute", the largest difference, or
        "relative", the one furthest outside its own tolerance (difference / allowed), for outputs
        whose entries differ in size by orders of magnitude (a real model's hidden states)."""
        if worst not in ("absolute", "relative"):
            raise ValueError(f"worst must be 'absolute' or 'relative', got {worst!r}")
        at = call or 0

        def why(**how: Any) -> str | None:  # the hint, worked out only once a comparison fails
            return _resolved(hint) or self.mistake_hint(at, index, **how)

        if tuple(actual.shape) != tuple(expected.shape):
            self.fail(f"{name} has shape {fmt_shape(actual.shape)}; expected {fmt_shape(expected.shape)}",
                      hint=lambda: why(check_shape_only=True), call=call)
        tol_dtype = tol_dtype or (expected.dtype if expected.is_floating_point() else actual.dtype)
        d_atol, d_rtol = tolerance(tol_dtype)
        atol = d_atol if atol is None else atol
        rtol = d_rtol if rtol is None else rtol
        if actual.dtype == torch.bool or expected.dtype == torch.bool:
            a, e = actual.to(torch.bool), expected.to(torch.bool)
            wrong = a != e
            if wrong.any():
                idx = tuple(int(i) for i in wrong.nonzero()[0])
                self.fail(f"{name} shape {fmt_shape(actual.shape)} ✓; {int(wrong.sum())} of {a.numel()} "
                          f"entries differ, first at {list(idx)}: got {bool(a[idx])}, {oracle} {bool(e[idx])}",
                          hint=lambda: why(atol=atol, rtol=rtol), call=call)
            return
        a = actual.detach().to(torch.float64)
        e = expected.detach().to(torch.float64)
        nan_a, nan_e = torch.isnan(a), torch.isnan(e)
        if (nan_a & ~nan_e).any():
            idx = tuple(int(i) for i in (nan_a & ~nan_e).nonzero()[0])
            self.fail(f"{name} shape {fmt_shape(actual.shape)} ✓; it holds NaN at {list(idx)} "
                      f"where {oracle} is {fmt_num(float(e[idx]))}",
                      hint=lambda: why(atol=atol, rtol=rtol), call=call)
        both_inf = torch.isinf(a) & torch.isinf(e) & (torch.sign(a) == torch.sign(e))
        diff = torch.where(both_inf | (nan_a & nan_e), torch.zeros_like(a), (a - e).abs())
        diff = torch.nan_to_num(diff, nan=math.inf, posinf=math.inf)  # inf stays inf (not float max)
        allowed = atol + rtol * torch.nan_to_num(e.abs(), posinf=0.0)
        bad = diff > allowed
        if bad.any():
            score = diff / allowed.clamp(min=1e-300) if worst == "relative" else diff
            flat = int(torch.argmax(torch.where(bad, score, torch.zeros_like(score)).flatten()))
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
            where = (f"furthest outside its tolerance: difference {fmt_num(float(diff[idx]))} (allowed "
                     f"{fmt_num(float(allowed[idx]))})" if worst == "relative"
                     else f"largest difference {fmt_num(float(diff[idx]))}")
            self.fail(
                f"{name} shape {fmt_shape(actual.shape)} ✓; {where} "
                f"at {list(idx)}: got {fmt_num(float(a[idx]))}, {oracle} {fmt_num(float(e[idx]))}",
                f"tolerance: atol {atol:g} + rtol {rtol:g}·|{oracle}| ({fmt_dtype(tol_dtype)})",
                hint=lambda: why(atol=atol, rtol=rtol), call=call,
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
            if all(same_outcome(o, self._mistake_outcome(mistake, i), shape_only=check_shape_only,
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


# Outcomes run_call makes itself (no exception was raised): their first feedback line.
_VERDICT_ERRORS = {MODIFIED_INPUT: "changed its input in place",
                   NO_GRADIENT: "no gradient reaches its parameters",
                   FORBIDDEN_SHAPE: "computed a tensor of a shape the task rules out"}


def judge_case(case: Case, outcomes: list[Outcome], expected: list[Outcome] | None = None,
               device: str = "cpu") -> CaseResult:
    """Decide one case from plain outcomes. Never runs the code under test."""
    result = _judged(case, outcomes, expected, device)
    result.note = next((o.note for o in outcomes if o.note), "")
    return result


def _judged(case: Case, outcomes: list[Outcome], expected: list[Outcome] | None, device: str) -> CaseResult:
    judge = Judge(case, outcomes, expected, device)
    try:
        case.judge(judge)
    except CheckFailed as failure:
        return CaseResult("failed", str(failure))
    except _CallRaised as raised:
        o = raised.outcome
        if o.error_type in _VERDICT_ERRORS:  # not an exception of the learner's: a finding
            return CaseResult("failed", f"✗ {case.exercise}: {_VERDICT_ERRORS[o.error_type]}\n"
                              f"  while checking: {case.title}\n  inputs: {case.inputs(raised.call)}\n"
                              f"  hint: {o.error_message}")
        msg = (f"✗ {case.exercise}: raised {o.error_line()}\n"
               f"  while checking: {case.title}\n  inputs: {case.inputs(raised.call)}")
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
