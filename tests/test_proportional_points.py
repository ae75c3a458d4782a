"""Proportional points: the core test cell pays for the core computation.

A stated extra (the ``ValueError``s a task cell asks for; half-precision handling; leaving the
inputs unwritten) is scored by a test cell of its own, never by the core cell, and the extras of
an exercise are worth at most a third of its points (docs/grading.md, "Proportional points"). So a
correct computation that lacks only a stated extra keeps at least two thirds of the exercise.

What is an extra is derived from the cases, not listed:

* a **validation** case: the course's reference solution raises on one of its calls (the contract
  asks for that error);
* a **half** case: one of its calls hands the answer a float16 or bfloat16 tensor (an argument,
  weights, a forward input, a step's argument);
* an **unwritten** case: one of its calls runs the answer twice on the same tensors and returns
  them (``Call.twice``): "the inputs are left unwritten", judged from values.

The tests then check, for every graded exercise, visible and hidden cases alike, that no extra
case sits in the core cell, that each kind sits in the test cell named after it and that cell
scores nothing else, and that the extra cells' points add up to at most a third. Through the real
grader, each exercise's catalogue entry "correct math, no validation" (the base with its checks
deleted) keeps every other test cell and loses only the validation cell, and each entry with the
right math but no half-precision handling (float16 squares, angles, a -1e9 fill) loses only the
half cell. tests/test_unwritten_cell.py does the same for an answer that writes into its input.
"""


from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import nbformat
import pytest
import torch

from grader.build import SOLUTIONS
from grader.cases import cases_for, reference_outcomes
from grader.course import load_course
from grader.grading import grade_submission
from tests.catalogue import load_catalogues
from tfcourse.checks.call import Call, Instance, TorchModule
from tfcourse.notebook import CORE_PART

VALIDATION, HALF, UNWRITTEN = "validation", "half", "unwritten"
EXTRA_PARTS = (VALIDATION, HALF, UNWRITTEN)
NO_VALIDATION = "correct math, no validation"
CONTRACT_ERRORS = ("ValueError", "TypeError")


def _raises(notebook: str, case) -> bool:
    """Whether the reference solution raises one of the contract's errors on a call of ``case``."""
    return any(o.kind == "error" and o.error_type in CONTRACT_ERRORS for o in reference_outcomes(notebook, case))


_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _holds_half(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dtype in _HALF_DTYPES
    if isinstance(value, TorchModule):
        return _holds_half(value.state)
    if isinstance(value, Instance):
        return _holds_half(value.args) or _holds_half(value.kwargs)
    if isinstance(value, tuple | list):
        return any(_holds_half(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_half(v) for v in value.values())
    return False


def _half_call(call: Call) -> bool:
    """Whether ``call`` hands the answer a float16 or bfloat16 tensor anywhere."""
    return any(_holds_half(v) for v in (call.args, call.kwargs, call.state, call.forward_args, call.forward_kwargs)) \
        or any(_holds_half(st.args) or _holds_half(st.kwargs) for st in call.steps)


def kind_of(notebook: str, case) -> str | None:
    """The extra a case checks (VALIDATION, HALF or UNWRITTEN), or None for the computation."""
    if _raises(notebook, case):
        return VALIDATION
    if any(_half_call(c) for c in case.calls):
        return HALF
    if any(c.twice for c in case.calls):
        return UNWRITTEN
    return None


def violations(points: dict[str, float], cases: Iterable[tuple[str, str | None]]) -> list[str]:
    """What breaks the rule for one exercise: ``points`` is ``{part: points}``, ``cases`` the
    ``(part, kind)`` of each of its cases (kind: an extra's name, or None for the computation).
    Empty when the exercise follows it."""
    found = []
    kinds: dict[str, set[str | None]] = {}
    for part, kind in cases:
        kinds.setdefault(part, set()).add(kind)
    for part, seen in kinds.items():
        if points and part not in points:
            found.append(f"cases are scored by test cell {part!r}, which the exercise does not have")
        for kind in sorted(k for k in seen if k is not None):
            if part == CORE_PART:
                found.append(f"a {kind} case is scored by the core test cell")
            elif part != kind:
                found.append(f"{kind} cases are scored by {part!r}, not by the {kind!r} test cell")
        if part in EXTRA_PARTS and seen - {part}:
            other = ", ".join(sorted(str(k or "computation") for k in seen - {part}))
            found.append(f"the {part!r} test cell also scores cases of another kind ({other})")
    total = sum(points.values())
    extra = sum(p for part, p in points.items() if part in EXTRA_PARTS)
    if total and extra * 3 > total + 1e-9:
        found.append(f"the extras ({', '.join(p for p in points if p in EXTRA_PARTS)}) are worth {extra:g} "
                     f"of {total:g} points, more than a third")
    return found


def test_the_rule_catches_an_extra_in_the_core_cell_and_extras_worth_too_much():
    ok = {"core": 1.5, VALIDATION: 0.5}
    assert violations(ok, [("core", None), (VALIDATION, VALIDATION)]) == []
    assert violations(ok, [("core", None), ("core", VALIDATION)])  # a ValueError case put back into core
    assert violations({"core": 2, "tanh": 1}, [("core", None), ("tanh", None), ("tanh", VALIDATION)])
    assert violations({"core": 1, VALIDATION: 1}, [("core", None), (VALIDATION, VALIDATION)])  # half the points
    assert violations({"core": 2, HALF: 1.5}, [("core", None), (HALF, HALF)])
    # half precision and the unwritten rule: never in the core cell, never sharing a cell
    assert violations({"core": 1.5, HALF: 0.5}, [("core", None), (HALF, HALF)]) == []
    assert violations({"core": 2}, [("core", None), ("core", HALF)])  # RMSNorm's float16 case before
    assert violations({"core": 2, "batched": 1}, [("core", None), ("batched", None), ("batched", HALF)])
    assert violations({"core": 1.5, HALF: 0.5}, [("core", None), (HALF, HALF), (HALF, None)])
    assert violations({"core": 1.5, "filters": 2, VALIDATION: 0.5},
                      [("core", UNWRITTEN), ("filters", UNWRITTEN), (VALIDATION, VALIDATION)])  # 4 points on it
    assert violations({"core": 1, "filters": 2, VALIDATION: 0.5, UNWRITTEN: 0.5},
                      [("core", None), ("filters", None), (VALIDATION, VALIDATION), (UNWRITTEN, UNWRITTEN)]) == []
    assert violations({"core": 1, HALF: 0.5, VALIDATION: 0.5}, [("core", None), (HALF, HALF), (VALIDATION, VALIDATION)])
    assert violations({"core": 2}, [("core", None), (HALF, HALF)])  # a half cell the notebook lacks
    assert violations({"core": 1.5, HALF: 0.25, VALIDATION: 0.25},
                      [("core", None), (HALF, HALF), (VALIDATION, VALIDATION)]) == []


@pytest.mark.parametrize("notebook", [pytest.param(nb, marks=[pytest.mark.slow] if nb == "08_real_weights" else [])
                                      for nb in sorted(load_course())])  # 08 runs real checkpoints: ~1 min
def test_a_stated_extra_has_its_own_test_cell_worth_at_most_a_third(notebook):
    problems = []
    for ex in load_course()[notebook].exercises:
        if not ex.points:  # an optional challenge: 0 points, nothing to share
            continue
        cases = [(case.part, kind_of(notebook, case)) for case in cases_for(notebook, ex.name)]
        problems += [f"{ex.name}: {v}" for v in violations(dict(ex.parts), cases)]
    assert not problems, "\n".join(problems)


def _affected() -> dict[str, list[str]]:
    """``{notebook: [exercise, ...]}``: the graded exercises that have a validation test cell."""
    found: dict[str, list[str]] = {}
    for name, nb in load_course().items():
        for ex in nb.exercises:
            if ex.points and VALIDATION in dict(ex.parts):
                found.setdefault(name, []).append(ex.name)
    return found


def _no_validation_entry(notebook: str, exercise: str):
    entries = [e for e in load_catalogues()[notebook].WRONG.get(exercise, []) if e.name == NO_VALIDATION]
    return entries[0] if entries else None


def test_every_exercise_with_a_validation_cell_has_a_correct_math_no_validation_entry():
    missing = [f"{nb}/{ex}" for nb, exercises in _affected().items() for ex in exercises
               if _no_validation_entry(nb, ex) is None]
    assert not missing, f"no catalogue entry {NO_VALIDATION!r} for: {', '.join(missing)}"
    for nb, exercises in _affected().items():
        for ex in exercises:
            source = _no_validation_entry(nb, ex).source
            assert not re.search(r"^\s*raise ValueError", source, re.M) or ex == "KVCache", (nb, ex, source)


def _submission(notebook: str, exercises: list[str], root: Path) -> Path:
    """The solutions notebook with each of ``exercises`` replaced by its no-validation entry."""
    nb = nbformat.read(SOLUTIONS / f"{notebook}.ipynb", as_version=4)
    for cell in nb.cells:
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if name in exercises:
            cell.source = _no_validation_entry(notebook, name).source
    folder = root / notebook
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{notebook}.ipynb")
    return folder


def _grader_params():
    # one notebook in the fast tier, the others with the slow tier
    return [pytest.param(nb, marks=[] if i == 0 else [pytest.mark.slow], id=nb)
            for i, nb in enumerate(sorted(_affected()))]


def _lost_only(rows: dict, exercises, cell: str) -> None:
    """Each exercise's test cell ``test_<name>__<cell>`` failed, every other cell passed, and the
    exercise kept at least two thirds of its points."""
    for name in exercises:
        r = rows[name]
        parts = {p["test_cell"]: p["passed"] for p in r["parts"]}
        assert parts.pop(f"test_{name}__{cell}") is False, f"{name}: the {cell} cell passed:\n{r['feedback']}"
        assert all(parts.values()), f"{name}: lost more than the {cell} cell: {parts}\n{r['feedback']}"
        assert r["score"] * 3 >= 2 * r["max_score"], f"{name}: {r['score']}/{r['max_score']}"


@pytest.mark.parametrize("notebook", _grader_params())
def test_correct_math_without_validation_keeps_two_thirds_through_the_grader(notebook, tmp_path):
    exercises = _affected()[notebook]
    report = grade_submission(_submission(notebook, exercises, tmp_path), notebooks=[notebook])
    (nb_report,) = report["notebooks"]
    rows = {r["exercise"]: r for r in nb_report["exercises"]}
    _lost_only(rows, exercises, VALIDATION)
    others = [r for n, r in rows.items() if n not in exercises]
    assert all(r["status"] == "passed" for r in others), [(r["exercise"], r["status"]) for r in others]


# Entries with the right math and no half-precision handling, per exercise that has a half test
# cell where such handling matters (an upcast, a cast of the tables or the mask, a fill that float16
# can hold); each must keep every other cell and at least two thirds of the exercise.
NO_HALF = {
    ("01_attention", "scaled_dot_product_attention"): "-1e9 fill (raises on float16)",
    ("03_positional_encodings", "apply_rope"): "no cast for half x",
    ("03_positional_encodings", "apply_rope_interleaved"): "angles in x's dtype",
    ("04_normalisation", "layer_norm"): "statistics in fp16 (no upcast)",
    ("04_normalisation", "rms_norm"): "squares in fp16",
    ("04_normalisation", "RMSNorm"): "correct math, no half-precision handling",
    ("08_real_weights", "mean_pool"): "mask as float32 (half in, float32 out)",
}


def _entry(notebook: str, exercise: str, name: str):
    found = [e for e in load_catalogues()[notebook].WRONG.get(exercise, []) if e.name == name]
    return found[0] if found else None


def test_every_no_half_entry_exists_and_its_exercise_has_a_half_cell():
    course = load_course()
    for (nb, ex), name in NO_HALF.items():
        assert _entry(nb, ex, name) is not None, f"{nb}/{ex}: no catalogue entry {name!r}"
        parts = dict(next(e for e in course[nb].exercises if e.name == ex).parts)
        assert HALF in parts, f"{nb}/{ex} has no {HALF!r} test cell"


@pytest.mark.parametrize("notebook", [pytest.param(nb, marks=[] if nb == "04_normalisation" else [pytest.mark.slow])
                                      for nb in sorted({nb for nb, _ in NO_HALF})])
def test_correct_math_without_half_precision_handling_loses_the_half_cell_only(notebook, tmp_path):
    exercises = {ex: name for (nb, ex), name in NO_HALF.items() if nb == notebook}
    nb = nbformat.read(SOLUTIONS / f"{notebook}.ipynb", as_version=4)
    for cell in nb.cells:
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if name in exercises:
            cell.source = _entry(notebook, name, exercises[name]).source
    folder = tmp_path / notebook
    folder.mkdir()
    nbformat.write(nb, folder / f"{notebook}.ipynb")
    (nb_report,) = grade_submission(folder, notebooks=[notebook])["notebooks"]
    rows = {r["exercise"]: r for r in nb_report["exercises"]}
    _lost_only(rows, exercises, HALF)
    # an exercise that calls one of them (RMSNorm calls rms_norm) is graded with the course's version
    others = [r for n, r in rows.items() if n not in exercises and r["status"] != "passed"]
    assert not others, [(r["exercise"], r["status"]) for r in others]
