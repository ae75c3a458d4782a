"""Grading cases per notebook: the visible checks from ``tfcourse.checks`` plus hidden cases.

Each ``grader.cases.nbNN_topic`` module makes a :class:`HiddenCases` from its notebook's
``NotebookChecks`` and registers one builder per exercise (``@HIDDEN.exercise("softmax")``);
its ``cases(exercise, seed)`` returns every case the grader runs for one exercise, the visible
ones first. Hidden cases are generated from the grader's seed (each case from its own seed,
:func:`seeded`) and judged against the reference solution, which the grading process computes
itself; the learner's child process never sees this package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import torch

from tfcourse.checks.call import Call, run_call
from tfcourse.checks.case import Case, CheckFailed, Judge, fmt_dtype, judge_case
from tfcourse.checks.hints import Mistake
from tfcourse.checks.protocol import NotebookChecks
from tfcourse.checks.run import not_attempted, with_stand_ins
from tfcourse.device import make_generator

from ..names import DEFAULT_SEED, module_name


class HiddenCases:
    """One notebook's hidden cases, registered per exercise on its ``NotebookChecks``
    (``tfcourse.checks.protocol``): ``@HIDDEN.exercise(name)`` registers ``build(seed) ->
    list[Case]``; every exercise of the notebook needs one (tests/test_protocol.py)."""

    def __init__(self, checks: NotebookChecks) -> None:
        self.checks = checks
        self._builders: dict[str, Callable[[int], list[Case]]] = {}

    def exercise(self, name: str) -> Callable[[Callable[[int], list[Case]]], Callable[[int], list[Case]]]:
        if name not in self.checks.exercises:
            raise ValueError(f"{self.checks.name} has no exercise {name!r}")
        if name in self._builders:
            raise ValueError(f"{self.checks.name}: hidden cases of {name!r} are registered twice")

        def register(build: Callable[[int], list[Case]]) -> Callable[[int], list[Case]]:
            self._builders[name] = build
            return build

        return register

    @property
    def exercises(self) -> tuple[str, ...]:
        return tuple(self._builders)

    def hidden_cases(self, exercise: str, seed: int) -> list[Case]:
        return self._builders[exercise](seed)

    def cases(self, exercise: str, seed: int) -> list[Case]:
        """Visible cases first (their feedback is what the learner already saw), then hidden ones."""
        return self.checks.cases(exercise) + self.hidden_cases(exercise, seed)


T = TypeVar("T")


def seeded(seed: int, offset: int, configs: Iterable[T]) -> Iterator[tuple[int, int, torch.Generator, T]]:
    """A builder's hidden cases, one per config: (i, the case's own seed ``seed * 1000 + offset + i``,
    a generator made from it, config i). Every case draws its inputs from its own seed, which it
    reports, so a failing case can be rebuilt alone; ``offset`` keeps a notebook's builders apart."""
    for i, config in enumerate(configs):
        s = seed * 1000 + offset + i
        yield i, s, make_generator(s), config


def hidden_case(exercise: str, title: str, calls: Sequence[Call], seed: int, *,
                mistakes: Sequence[Mistake] = (), n: int = 1, names: Sequence[str] | None = None,
                part: str = "core", atol: float | None = None, rtol: float | None = None,
                wrap: Callable[[Callable[[Judge], None]], Callable[[Judge], None]] | None = None,
                every_tensor: bool = False) -> Case:
    """A hidden case judged against the reference solution run on the same calls.

    Every call's first ``n`` returned tensors (named ``names``) must match the reference's in
    shape, dtype and value (the dtype's tolerance, or ``atol``/``rtol`` when given: a contract
    that leaves the internal precision to the learner is judged at the precision the learner may
    legitimately use, docs/conventions.md). ``every_tensor``: every tensor each call returns, as
    many as the reference's (:func:`tensors_judge`: calls with steps). ``wrap`` adds an
    exercise's own error hints.
    """
    def judge(j: Judge) -> None:
        j.match_reference(n=n, names=names, atol=atol, rtol=rtol)

    if every_tensor:
        judge = tensors_judge(atol, rtol)
    return Case(exercise, title, list(calls), wrap(judge) if wrap else judge, seed=seed, reference=True,
                mistakes=mistakes, hidden=True, part=part)


def every_tensor_cases(mistakes: Mapping[str, Sequence[Mistake]],
                       wrap: Callable[[Callable[[Judge], None]], Callable[[Judge], None]],
                       tolerances: Mapping[torch.dtype, tuple[float, float]],
                       untyped: tuple[float | None, float | None] = (None, None)) -> Callable[..., Case]:
    """A notebook's maker of hidden cases whose calls return several tensors (modules with caches,
    steps): ``make(exercise, title, calls, seed, *, part="core", dtype=None)`` is a
    :func:`hidden_case` with ``every_tensor``, the exercise's ``mistakes``, the notebook's ``wrap``
    for error hints, and ``tolerances[dtype]`` for a case drawn in ``dtype`` (``untyped`` for one
    drawn in no single dtype; ``None``: the dtype's tolerance)."""
    def make(exercise: str, title: str, calls: list[Call], seed: int, *, part: str = "core",
             dtype: torch.dtype | None = None) -> Case:
        atol, rtol = tolerances[dtype] if dtype is not None else untyped
        return hidden_case(exercise, f"hidden case: {title}", calls, seed, mistakes=mistakes[exercise], part=part,
                           atol=atol, rtol=rtol, wrap=wrap, every_tensor=True)

    return make


def tensors_judge(atol: float | None = None, rtol: float | None = None) -> Callable[[Judge], None]:
    """A hidden case's judge for calls that return several tensors (a Call's steps flattened):
    every tensor each call returned matches the reference's, with the same count, shape, dtype and
    values (``atol``/``rtol``, else the dtype's tolerance); where the reference raised, the same
    exception type. Tensors the framework makes from Python ints and None are compared wherever
    they live (no device check, unlike :meth:`Judge.match_reference`)."""

    def judge(j: Judge) -> None:
        for call in range(len(j.case.calls)):
            exp, o = j.expected[call], j.outcomes[call]
            if exp.kind == "error":
                j.require(o.kind == "error" and o.error_type == exp.error_type,
                          f"expected {exp.error_type} ({exp.error_message.splitlines()[0][:80]}), but "
                          f"{'it raised ' + o.error_type if o.kind == 'error' else 'nothing was raised'}", call=call)
                continue
            if o.kind == "error":
                j.values(call)  # raises: reported as the answer's error
            if o.kind == "bad_type":
                j.fail(f"returned {o.type_name}; expected tensors")
            j.require(len(o.tensors) == len(exp.tensors), f"returned {len(o.tensors)} tensors; expected "
                      f"{len(exp.tensors)}", call=call)
            for index, (got, want) in enumerate(zip(o.tensors, exp.tensors, strict=True)):
                name = f"result {index + 1}" if len(exp.tensors) > 1 else "output"
                j.require(tuple(got.shape) == tuple(want.shape), f"{name} has shape {tuple(got.shape)}; expected "
                          f"{tuple(want.shape)}", call=call,
                          hint=lambda call=call, index=index: j.mistake_hint(call, index, check_shape_only=True))
                j.require(got.dtype == want.dtype, f"{name} is {fmt_dtype(got.dtype)}; expected "
                          f"{fmt_dtype(want.dtype)}", call=call)
                j.close(got, want, name=name, atol=atol, rtol=rtol, call=call, index=index, oracle="reference")

    return judge


def cases_for(notebook: str, exercise: str, seed: int = DEFAULT_SEED) -> list[Case]:
    return importlib.import_module(f"grader.cases.{module_name(notebook)}").cases(exercise, seed)


def reference_outcomes(notebook: str, case: Case, device: str = "cpu"):
    """Run ``case`` on the reference solution (trusted code, in this process)."""
    ref = importlib.import_module(f"tfcourse.reference.{module_name(notebook)}")
    return [run_call(call, vars(ref), device) for call in case.calls]


def check_hidden(notebook: str, exercise: str, obj: Any, seed: int = DEFAULT_SEED, part: str | None = None) -> None:
    """Run the hidden cases of one exercise in this process (nbgrader's hidden test regions).

    part: only the cases of that test cell (``Case.part``); None runs them all. Another exercise
    that ``obj`` calls and that fails its own checks is replaced by the course's version, as in
    the visible checks and the grader. Raises CheckFailed like the visible checks, so nbgrader
    scores the test cell 0.
    """
    selected = [c for c in cases_for(notebook, exercise, seed) if c.hidden and (part is None or c.part == part)]
    checks = importlib.import_module(f"tfcourse.checks.{module_name(notebook)}")
    scope = getattr(obj, "__globals__", None) or {}
    targets = {call.target for case in selected for call in case.calls}
    namespace = {**{t: scope[t] for t in targets if t in scope}, exercise: obj}

    def attempt(ns: dict[str, Any]) -> CheckFailed | None:
        for case in selected:
            outcomes = [run_call(call, ns) for call in case.calls]
            if not_attempted(outcomes):
                return CheckFailed(f"✗ {exercise}: not attempted yet")
            result = judge_case(case, outcomes, reference_outcomes(notebook, case))
            if result.status != "passed":
                return CheckFailed(result.message)
        return None

    failure, _ = with_stand_ins(exercise, obj, getattr(checks, "NOTEBOOK", None), attempt, namespace)
    if failure is not None:
        raise failure
