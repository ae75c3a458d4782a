"""Grade submissions: find their notebooks, run their code in a child, judge here.

``grade_submission`` returns the plain dict that the JSON report holds for one submission; the
CLI (``python -m grader``) and the pytest entry point (``pytest grader --submission DIR``) both
call it, so the two never disagree.

Scoring rule (documented in docs/grading.md): an exercise earns its points (the ``points`` of
its test cell in ``solutions/``) when every one of its cases passes, and 0 otherwise, the same
all-or-nothing rule nbgrader applies to a test cell. Feedback reports how many cases passed.
"""

from __future__ import annotations

import importlib
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tfcourse.checks.call import Call, Instance
from tfcourse.checks.case import Case, judge_case
from tfcourse.checks.outcome import Outcome, out_of_memory
from tfcourse.notebook import (
    SolutionCell,
    UnreadableNotebook,
    added_cells,
    bound_names,
    normalise_source,
    read_notebook,
    solution_cells,
    test_cell_id,
)

from .cases import DEFAULT_SEED
from .course import CourseError, Exercise, Notebook, load_course
from .expected import cases_of as _cases
from .expected import reference_outcomes_of as _reference_outcomes
from .isolation import sandbox
from .isolation.runner import ExerciseRun, Limits, run_notebook
from .names import module_name
from .rows import (
    EXERCISE_STATUSES,
    ROW_LIMITS,
    ExerciseRow,
    ExerciseStatus,
    NotebookRow,
    PartRow,
    SubmissionRow,
)

MAX_CANDIDATES = 50  # notebooks of a folder looked at when a course notebook is not found by name
STATUSES = EXERCISE_STATUSES


def find_notebooks(submission: Path, course: dict[str, Notebook]) -> dict[str, Path | None]:
    """Map each course notebook to its file in ``submission`` (a folder or one .ipynb)."""
    found: dict[str, Path | None] = dict.fromkeys(course)
    best: str | None
    if submission.is_file():
        if submission.stem in course:
            found[submission.stem] = submission
        else:  # a renamed file: take the course notebook whose exercises it holds
            try:
                nb = read_notebook(submission)
                best = max(course, key=lambda n: len(solution_cells(nb, [e.name for e in course[n].exercises])))
                if solution_cells(nb, [e.name for e in course[best].exercises]):
                    found[best] = submission
            except UnreadableNotebook:
                pass
        return found
    root = submission.resolve()

    def inside(p: Path) -> bool:
        # rglob follows linked folders: a link to the course's solutions/ must not count
        return ".ipynb_checkpoints" not in p.parts and p.resolve().is_relative_to(root) or p.is_symlink()

    for name in course:
        direct = submission / f"{name}.ipynb"
        if direct.is_file() or direct.is_symlink():
            found[name] = direct  # read_notebook refuses a link, with a clear status
            continue
        nested = sorted(p for p in submission.rglob(f"{name}.ipynb") if inside(p))
        found[name] = nested[0] if nested else None
    if any(p is None for p in found.values()):  # renamed notebooks ("01_attention-Copy1.ipynb")
        taken = {p for p in found.values() if p is not None}
        others = sorted(p for p in submission.rglob("*.ipynb")
                        if inside(p) and not p.is_symlink() and p not in taken)[:MAX_CANDIDATES]
        for path in others:
            try:
                nb = read_notebook(path)
            except UnreadableNotebook:
                continue
            counts = {n: len(solution_cells(nb, [e.name for e in course[n].exercises]))
                      for n, p in found.items() if p is None}
            best = max(counts, key=lambda n: counts[n], default=None)
            if best is not None and counts[best]:
                found[best] = path
    return found


def _exercise(name: str, status: ExerciseStatus, points: float, feedback: str, score: float = 0.0, *,
              cases_passed: int | None = None, cases_total: int | None = None,
              parts: list[PartRow] | None = None) -> ExerciseRow:
    row: ExerciseRow = {"exercise": name, "status": status, "score": score, "max_score": points, "feedback": feedback}
    if cases_passed is not None and cases_total is not None:
        row["cases_passed"], row["cases_total"] = cases_passed, cases_total
    if parts is not None:
        row["parts"] = parts
    return row


def _memory_error(o: Outcome) -> bool:
    return out_of_memory(o.error_type, o.error_message)


def _memory_text(limits: Limits) -> str:
    if limits.memory_mb:
        return f"memory limit exceeded (--memory {limits.memory_mb} MiB)"
    return "out of memory (no --memory limit was set)"


def _file_limit(o: Outcome) -> bool:
    text = o.error_message.lower()
    return "file too large" in text or "no space left on device" in text or "disk quota" in text


def _limit_note(o: Outcome, limits: Limits) -> str:
    """What limit an exception in learner code ran into, as a short sentence (or "")."""
    if _file_limit(o):
        return (f"files are limited to {limits.file_mb} MiB each and the scratch space to "
                f"{limits.file_mb} MiB; only the returned values are graded")
    if o.error_type == "NameError":
        return ("the grader runs the course's setup cell, your exercise cells and the code cells you "
                "added, in notebook order, but not the course's demo cells: define what your answer "
                "needs in its cell or in a cell you add")
    return ""


def _judge_run(nb: Notebook, ex: Exercise, run: ExerciseRun, cases: list[Case],
               device: str, limits: Limits, notes: list[str]) -> ExerciseRow:
    note = "".join(f"\n  note: {n}" for n in notes)
    stopped = _stopped_run(ex, run, limits, note)
    if stopped is not None:
        return stopped
    tally = _tally_cases(nb, ex, run, cases, device, note)
    if not isinstance(tally, _Tally):  # a stub still raising NotImplementedError
        return tally
    return _verdict(nb, ex, tally, len(cases), limits, note)


def _stopped_run(ex: Exercise, run: ExerciseRun, limits: Limits, note: str) -> ExerciseRow | None:
    """The row of a run that never got to its checks' outcomes (timed out, crashed, or its cell
    raised), or None; ``limit`` names the limit that stopped it, when one did."""
    row = _stopped_row(ex, run, limits, note)
    if row is not None and run.limit in ROW_LIMITS:
        row["limit"] = ROW_LIMITS[run.limit]
    if row is not None and "limit" not in row and run.cell_error is not None and _memory_error(run.cell_error):
        row["limit"] = "memory"
    return row


def _stopped_row(ex: Exercise, run: ExerciseRun, limits: Limits, note: str) -> ExerciseRow | None:
    name, points = ex.name, ex.points
    if run.status == "timeout" and run.limit == "wall":  # the message says which limit and why
        return _exercise(name, "timeout", points, f"✗ {name}: {run.message}{note}")
    if run.status == "timeout":
        return _exercise(name, "timeout", points, f"✗ {name}: {run.message} (--timeout {limits.timeout:g} s of "
                         f"CPU time per exercise). Is there an endless loop, or a very slow one?{note}")
    if run.status == "crashed":
        o = run.cell_error
        if o is not None and _memory_error(o):
            return _exercise(name, "error", points, f"✗ {name}: {_memory_text(limits)} while its checks ran{note}")
        return _exercise(name, "error", points, f"✗ {name}: {run.message}{note}")
    if run.status == "cell_error" and run.cell_error is not None:
        o = run.cell_error
        if _memory_error(o):
            return _exercise(name, "error", points, f"✗ {name}: {_memory_text(limits)} while the cell ran{note}")
        where = "the course's setup code failed" if o.error_cell == "<course setup>" else "the cell raised"
        extra = _limit_note(o, limits)
        extra = f"\n  ({extra})" if extra else ""
        return _exercise(name, "error", points, f"✗ {name}: {where} {o.error_line()}{extra}{note}")
    return None


class _Tally:
    """The cases of one exercise judged: how many passed, the first failure, and per test cell
    whether each of its cases passed and its first failure."""

    def __init__(self, ex: Exercise) -> None:
        self.passed = 0
        self.first: Any = None
        self.part_ok: dict[str, list[bool]] = {part: [] for part, _ in ex.parts}
        self.part_first: dict[str, Any] = {}  # the first failed check of each test cell
        self.note = ""  # the first finding that costs nothing (an input written in place)


def _tally_cases(nb: Notebook, ex: Exercise, run: ExerciseRun, cases: list[Case], device: str,
                 note: str) -> _Tally | ExerciseRow:
    """Judge every case of a run against the reference; the row instead when a stub still raises
    NotImplementedError (the exercise's own, or one it calls)."""
    name, points = ex.name, ex.points
    tally = _Tally(ex)
    for case, outcomes in zip(cases, run.outcomes, strict=True):
        stub = _stub_row(name, points, outcomes, note)
        if stub is not None:
            return stub
        if case.part not in tally.part_ok:
            raise CourseError(f"{nb.name}: a case of {name} is scored by test cell "
                              f"{test_cell_id(name, case.part)}, which solutions/{nb.name}.ipynb lacks")
        expected = _reference_outcomes(nb.name, case) if case.reference else None
        result = judge_case(case, outcomes, expected, device)
        tally.note = tally.note or result.note
        tally.part_ok[case.part].append(result.status == "passed")
        if result.status == "passed":
            tally.passed += 1
        else:
            tally.first = tally.first or result
            tally.part_first.setdefault(case.part, result)
    return tally


def _stub_row(name: str, points: float, outcomes: list[Outcome], note: str) -> ExerciseRow | None:
    """The row when one of a case's outcomes is a stub's NotImplementedError, or None."""
    for o in outcomes:
        if o.kind == "error" and o.error_type == "NotImplementedError":
            if o.error_cell in ("", f"<cell {name}>"):
                return _exercise(name, "not_attempted", points, f"{name}: not attempted (the stub still "
                                 f"raises NotImplementedError){note}")
            other = o.error_cell.removeprefix("<cell ").removesuffix(">")
            return _exercise(name, "error", points, f"✗ {name}: it calls `{other}`, which is not "
                             f"implemented yet (NotImplementedError){note}")
    return None


def _checks(n: int) -> str:
    return "1 check" if n == 1 else f"{n} checks"


def _all_checks(n: int) -> str:
    """"all 4 checks" or "the check", never "all 1 checks"."""
    return "the check" if n == 1 else f"all {n} checks"


def _part_rows(ex: Exercise, tally: _Tally, limits: Limits) -> list[PartRow]:
    """What each test cell of the exercise scored, with its feedback."""
    name = ex.name
    parts: list[PartRow] = []
    for part, pts in ex.parts:
        ok, cell = bool(tally.part_ok[part]) and all(tally.part_ok[part]), test_cell_id(name, part)
        n = len(tally.part_ok[part])
        feedback = (f"✓ {cell}: {_all_checks(n)} of this test cell passed" if ok else
                    f"{_failure_text(tally.part_first[part], name, limits)}\n  ({sum(tally.part_ok[part])} of "
                    f"{_checks(n)} of this test cell passed)" if part in tally.part_first else "")
        parts.append({"test_cell": cell, "passed": ok, "score": pts if ok else 0.0, "max_score": pts,
                      "feedback": feedback})
    return parts


def _verdict(nb: Notebook, ex: Exercise, tally: _Tally, total: int, limits: Limits, note: str) -> ExerciseRow:
    """The exercise's row once every case is judged: its score is what its test cells scored."""
    name, points = ex.name, ex.points
    passed, first = tally.passed, tally.first
    parts = _part_rows(ex, tally, limits)
    score = round(sum(p["score"] for p in parts), 4)
    if tally.note and "unwritten" not in dict(ex.parts):  # costs nothing: scored only where a test cell states it
        note = f"\n  note (no points lost): {tally.note}{note}"
    if first is None and all(p["passed"] for p in parts):
        return _exercise(name, "passed", points, f"✓ {name}: {_all_checks(total)} passed{note}", score=score,
                         cases_passed=passed, cases_total=total, parts=parts)
    if first is None:  # a part without cases: a course bug, never free points
        raise CourseError(f"{nb.name}: {name} has a test cell that no case scores")
    message = _failure_text(first, name, limits)
    status: ExerciseStatus = "error" if first.status == "error" else "failed"
    summary = f"{passed} of {_checks(total)} passed"
    if len(parts) > 1:
        summary += "; " + ", ".join(f"{p['test_cell']} {p['score']:g}/{p['max_score']:g}" for p in parts)
    return _exercise(name, status, points, f"{message}\n  ({summary}){note}", score=score,
                     cases_passed=passed, cases_total=total, parts=parts)


def _failure_text(result: Any, name: str, limits: Limits) -> str:
    """A failed check's message, with what the limits had to do with it."""
    message = result.message
    if result.error is not None and _memory_error(result.error):
        message = f"✗ {name}: {_memory_text(limits)}\n" + "\n".join(message.splitlines()[1:])
    elif result.error is not None and _limit_note(result.error, limits):
        message += f"\n  ({_limit_note(result.error, limits)})"
    return message


def _calls_any(source: str, names: set[str]) -> set[str]:
    """The names of ``names`` that ``source`` mentions as whole words."""
    return {n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}\b", source)}


def _instance_targets(value: Any) -> set[str]:
    """The class names of the ``Instance`` arguments in ``value`` (a Call, or any part of one)."""
    if isinstance(value, Instance):
        return {value.target} | _instance_targets(value.args) | _instance_targets(value.kwargs)
    if isinstance(value, Call):
        parts = (value.args, value.kwargs, value.forward_args, value.forward_kwargs,
                 [(st.args, st.kwargs) for st in value.steps])
        return set().union(*(_instance_targets(p) for p in parts))
    if isinstance(value, tuple | list):
        return set().union(set(), *(_instance_targets(v) for v in value))
    if isinstance(value, dict):
        return set().union(set(), *(_instance_targets(v) for v in value.values()))
    return set()


def _reached_callees(source: str, callees: tuple[str, ...], sources: dict[str, str],
                     cases: list[Case]) -> set[str]:
    """The callees (of the course's call graph) an exercise reaches: those its ``source`` names,
    those named by the source of a callee it reaches (a chain: a DecoderLM builds DecoderBlocks,
    which build CausalSelfAttention; ``sources`` gives each callee's source), and those its
    ``cases`` build themselves (an ``Instance`` of the learner's class, e.g. a KVCache)."""
    reached = {c for c in callees if any(c in _instance_targets(call) for case in cases for call in case.calls)}
    frontier = [source] + [sources.get(c, "") for c in reached]  # what a built instance calls, too
    while frontier:
        for c in _calls_any(frontier.pop(), set(callees) - reached):
            reached.add(c)
            frontier.append(sources.get(c, ""))
    return reached


def grade_notebook(nb: Notebook, path: Path | None, *, device: str, limits: Limits, seed: int) -> NotebookRow:
    """Grade one notebook file of a submission (None: it is missing); the report's notebook dict."""
    names = [e.name for e in nb.exercises]
    result: NotebookRow = {"notebook": nb.name, "status": "graded", "score": 0.0, "max_score": nb.max_score,
                           "exercises": [], "output": ""}
    if path is None:
        result["status"] = "missing"
        result["exercises"] = [_with_parts(_exercise(e.name, "missing", e.points,
                                                     f"{nb.name}.ipynb is not in the submission"), e)
                               for e in nb.exercises]
        return result
    try:
        submitted = read_notebook(path)
    except UnreadableNotebook as exc:
        result["status"] = "unreadable"
        result["exercises"] = [_with_parts(_exercise(e.name, "error", e.points, f"✗ {e.name}: {exc}"), e)
                               for e in nb.exercises]
        return result
    cells = solution_cells(submitted, names)
    if path.name != f"{nb.name}.ipynb":
        for found_cell in cells.values():
            found_cell.notes.append(f"graded {path.name}; the course's file name is {nb.name}.ipynb")
    ordered, extra = _cells_in_order(nb, submitted, cells)
    all_cells = dict(v for _, v in ordered)
    then, redefined = _check_places(submitted, names, cells, ordered, extra)
    verdicts, to_run = _verdicts_without_run(nb, cells, path, redefined)
    if to_run:
        result["output"] = _run_and_judge(nb, verdicts, to_run, cells, all_cells, then, device=device,
                                          limits=limits, seed=seed)
    result["exercises"] = [_with_parts(verdicts[e.name], e) for e in nb.exercises]
    result["score"] = round(sum(v["score"] for v in result["exercises"]), 4)
    return result


_Cell = tuple[str, str]  # (grade_id, source) of a cell the child runs; an added cell's is added-<index>


def _cells_in_order(nb: Notebook, submitted: Any,
                    cells: dict[str, SolutionCell]) -> tuple[list[tuple[int, _Cell]], dict[int, _Cell]]:
    """The cells the child runs, in notebook order: the exercise cells and the code cells the
    learner added (a helper or an import above an exercise), as Run All would run them; and the
    added ones alone, by index."""
    own = {cells[e.name].index: (e.name, cells[e.name].source) for e in nb.exercises
           if e.name in cells and cells[e.name].kind == "code"}
    extra = {} if nb.released is None else {
        index: (f"added-{index}", source) for index, source in added_cells(submitted, nb.released, set(own))}
    return sorted({**own, **extra}.items()), extra


def _check_places(submitted: Any, names: list[str], cells: dict[str, SolutionCell],
                  ordered: list[tuple[int, _Cell]], extra: dict[int, _Cell]) -> tuple[dict[str, list[str]], set[str]]:
    """Where each exercise is graded: ``then`` (cell -> the exercises graded right after it), and
    the exercises a cell the learner added defines again before their check cell."""
    # Each exercise is graded where its first check cell stands, with the names as they are there
    # (what the notebook's check sees after Run All); without a check cell, after the last cell.
    checks = _check_cells(submitted, names)
    then: dict[str, list[str]] = {}
    redefined: set[str] = set()
    for name, at in checks.items():
        before = [(i, g) for i, (g, _) in ordered if i < at]
        if before:
            then.setdefault(before[-1][1], []).append(name)
        own_index = cells[name].index if name in cells else -1
        if any(own_index < i < at and name in bound_names(src) for i, (g, src) in extra.items()):
            redefined.add(name)  # a cell the learner added defines the exercise before its check
    return then, redefined


def _verdicts_without_run(nb: Notebook, cells: dict[str, SolutionCell], path: Path,
                          redefined: set[str]) -> tuple[dict[str, ExerciseRow], dict[str, str]]:
    """The verdicts that need no run (a missing cell, a cell that is no longer code, the stub as
    released), and the source of every other exercise: the ones to run."""
    verdicts: dict[str, ExerciseRow] = {}
    to_run: dict[str, str] = {}
    for ex in nb.exercises:
        cell = cells.get(ex.name)
        if cell is None:
            verdicts[ex.name] = _exercise(ex.name, "missing", ex.points, f"✗ {ex.name}: no cell with grade_id "
                                          f"'{ex.name}' in {path.name} (deleted or renamed?)")
        elif cell.kind != "code":
            verdicts[ex.name] = _exercise(ex.name, "missing", ex.points, f"✗ {ex.name}: its cell is a "
                                          f"{cell.kind} cell now; change it back to code")
        elif normalise_source(cell.source) == normalise_source(ex.stub) and ex.name not in redefined:
            verdicts[ex.name] = _exercise(ex.name, "not_attempted", ex.points, f"{ex.name}: not attempted")
        else:
            to_run[ex.name] = cell.source
            if ex.name in redefined:
                cell.notes.append(f"graded the `{ex.name}` that a cell you added defines after the exercise's cell")
    return verdicts, to_run


def _run_and_judge(nb: Notebook, verdicts: dict[str, ExerciseRow], to_run: dict[str, str], cells: dict[str, SolutionCell],
                   all_cells: dict[str, str], then: dict[str, list[str]], *, device: str, limits: Limits,
                   seed: int) -> str:
    """Run the exercises of ``to_run`` in a child and judge them into ``verdicts`` (then again with
    the course's callees standing in where that applies); the learner's output of the run."""
    cases = {name: _cases(nb, name, seed) for name in to_run}
    run = run_notebook(nb.name, nb.setup, all_cells, cases, device=device, limits=limits, seed=seed, then=then)
    skipped = [g for g in all_cells if g.startswith("added-") and g in run.skipped_cells]
    for ex in nb.exercises:
        if ex.name in to_run:
            notes = cells[ex.name].notes + ([f"a cell you added did not finish and was skipped "
                                             f"({', '.join(skipped)}: cell numbers count from 0)"]
                                            if skipped else [])
            verdicts[ex.name] = _judge_run(nb, ex, run.exercises[ex.name], cases[ex.name],
                                           device, limits, notes)
    _grade_with_stand_ins(nb, verdicts, to_run, all_cells, cases, then, device=device, limits=limits,
                          seed=seed)
    return run.output


def _check_cells(nb: Any, exercises: list[str]) -> dict[str, int]:
    """The index of each exercise's first check cell (nbgrader grade_id ``test_<exercise>`` or
    ``test_<exercise>__<part>``) in ``nb``; exercises without one are left out."""
    found: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        gid = (cell.get("metadata", {}) or {}).get("nbgrader", {}) or {}
        gid = gid.get("grade_id", "") if isinstance(gid, dict) else ""
        exercise = str(gid).removeprefix("test_").partition("__")[0] if str(gid).startswith("test_") else ""
        if exercise in exercises and exercise not in found:
            found[exercise] = index
    return found


def _with_parts(verdict: ExerciseRow, ex: Exercise) -> ExerciseRow:
    """Every exercise row lists its test cells (``parts``): what each scored."""
    if "parts" not in verdict:
        verdict["parts"] = [{"test_cell": test_cell_id(ex.name, part), "passed": False, "score": 0.0,
                             "max_score": pts, "feedback": ""} for part, pts in ex.parts]
    return verdict


def _grade_with_stand_ins(nb: Notebook, verdicts: dict[str, ExerciseRow], to_run: dict[str, str],
                          all_cells: dict[str, str], cases: dict[str, list[Case]],
                          then: dict[str, list[str]], *, device: str, limits: Limits, seed: int) -> None:
    """One bug costs points once: an exercise that lost points and calls, by the course's call
    graph (``NOTEBOOK.calls`` of the notebook's checks), an exercise that lost points too, is graded
    again in a run of its own with the course's solution of that callee standing in; the better
    score counts.

    Nothing the learner's code does in that run reaches the report except the score per test
    cell: its output is dropped and the feedback stays the first run's, with a note giving the
    second run's test-cell scores (the stand-in's source is within the code's reach there).
    """
    calls = importlib.import_module(f"tfcourse.checks.{module_name(nb.name)}").NOTEBOOK.calls
    extra_source = "\n".join(s for g, s in all_cells.items() if g.startswith("added-"))
    stood: dict[str, list[str]] = {}  # exercise -> the callees whose stand-ins its verdict counts with
    for name in to_run:
        verdict = verdicts[name]
        if (0 < verdict["max_score"] <= verdict["score"]) or verdict["status"] not in ("failed", "error", "timeout"):
            continue  # a 0-point challenge that failed is graded again too (its status is what counts)
        graph = calls.get(name, ())
        sources = {c: to_run.get(c) or nb.solution(c) for c in graph}
        reached = _reached_callees(to_run[name] + "\n" + extra_source, graph, sources, cases[name])
        # a callee still failing stands in; one that passed once its own callees stood in (graded
        # earlier in this loop) does not, those callees do: a broken repeat_kv, not the GQA using it
        callees = list(dict.fromkeys(n for c in graph if c in reached for n in (
            [c] if verdicts[c]["status"] != "passed" else stood.get(c, []))))
        if not callees:
            continue
        run = run_notebook(nb.name, nb.setup, all_cells, {name: cases[name]}, device=device, limits=limits,
                           seed=seed, stand_ins={c: nb.solution(c) for c in callees}, then=then)
        ex = next(e for e in nb.exercises if e.name == name)
        again = _judge_run(nb, ex, run.exercises[name], cases[name], device, limits, [])
        used = ", ".join(f"`{c}`" for c in callees)
        if again["score"] <= verdict["score"] and again["status"] != "passed":
            # the exercise has a problem of its own; the messages above came from a run with the
            # learner's broken callee and may describe that one: say where to see the own one
            verdict["feedback"] += (f"\n  note: graded again with the course's {used} in place of yours (it "
                                    f"lost points on its own): the score stays, so `{name}` has a problem of "
                                    f"its own too; its check cell in your notebook uses the course's {used} "
                                    "and names it")
            continue
        why = "which is not attempted yet" if all(verdicts[c]["status"] == "not_attempted" for c in callees) \
            else "which lost points on its own"
        note = f"graded with the course's {used} in place of yours, {why} (one bug costs points once)"
        if again["status"] == "passed":
            again["feedback"] = (f"✓ {name}: {_all_checks(again.get('cases_total', 0))} passed with the course's "
                                 f"{used}\n  note: {note}")
        else:
            # that run could read the course's code, so only its scores are shown: say which test
            # cells still fail and where to see why, then what the first run (own callee) found
            got = ", ".join(f"{p['test_cell']} {p['score']:g}/{p['max_score']:g}" for p in again["parts"])
            failing = ", ".join(p["test_cell"] for p in again["parts"] if not p["passed"])
            again["feedback"] = "\n".join([
                f"✗ {name}: {got}, {note}",
                f"  why {failing} still fails is not shown from that run (it could read the course's code): "
                f"run that check cell in your notebook to see it",
                f"  first run, with your own {used}:",
                *("    " + line for line in verdict["feedback"].splitlines()),
            ])
        # a test cell's own feedback from that run holds messages the code made: only its score stays
        first_parts = {p["test_cell"]: p["feedback"] for p in verdict.get("parts", [])}
        for part in again["parts"]:
            if not part["passed"]:
                part["feedback"] = "\n".join([
                    f"✗ {part['test_cell']}: fails also with the course's {used} in place of yours; why is not "
                    "shown from that run (it could read the course's code): run that check cell in your notebook",
                    *(f"  first run, with your own {used}: " + line if i == 0 else "  " + line
                      for i, line in enumerate(first_parts.get(part["test_cell"], "").splitlines()))])
        verdicts[name] = again
        stood[name] = callees


def grade_submission(submission: str | Path, *, notebooks: list[str] | None = None, device: str = "cpu",
                     limits: Limits | None = None, seed: int = DEFAULT_SEED, jobs: int = 1) -> SubmissionRow:
    """Grade one submission (a folder of notebooks, or one .ipynb). Always returns a row.

    ``jobs``: notebooks graded at a time (each in its own sandboxed child; the rows keep the
    course's order). A batch passes 1 and grades submissions side by side instead."""
    limits = limits or Limits()
    course = load_course()
    chosen = {n: course[n] for n in (notebooks or course)}
    path = Path(submission)
    row: SubmissionRow = {"submission": str(submission), "score": 0.0, "max_score": 0.0, "notebooks": []}
    if not path.exists():
        found = dict.fromkeys(chosen)
    else:
        found = find_notebooks(path, chosen)
    row["sandbox"] = sandbox.choose().mode

    def one(name: str) -> NotebookRow:
        nb = chosen[name]
        try:
            return grade_notebook(nb, found[name], device=device, limits=limits, seed=seed)
        except sandbox.SandboxError:
            raise
        except Exception as exc:  # a bug met on this submission must not stop the batch
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            return {"notebook": name, "status": "unreadable", "score": 0.0, "max_score": nb.max_score,
                    "exercises": [_with_parts(_exercise(e.name, "error", e.points, f"✗ {e.name}: the grader failed "
                                                        f"on this notebook ({type(exc).__name__}: {first}); "
                                                        "please report it"), e)
                                  for e in nb.exercises], "output": ""}

    if jobs > 1 and len(chosen) > 1:
        # the course's later notebooks first: they take longest to grade (08 loads two real models
        # in its child, about 7 s of a full submission's 17), so the short early ones fill the
        # other slots meanwhile and the last to start is a short one
        order = sorted(chosen, reverse=True)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = dict(zip(order, pool.map(one, order), strict=True))
        row["notebooks"] = [done[name] for name in chosen]
    else:
        row["notebooks"] = [one(name) for name in chosen]
    row["score"] = round(sum(n["score"] for n in row["notebooks"]), 4)
    row["max_score"] = round(sum(n["max_score"] for n in row["notebooks"]), 4)
    return row
