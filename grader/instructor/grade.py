"""``grade``: every ``submitted/<student>/<assignment>/`` through the sandboxed grader, the
verdict written into nbgrader's gradebook and ``autograded/`` as nbgrader autograde would.

Per submission, after grading (learner code only ever runs in the grader's sandboxed child):

* the gradebook, in ONE transaction: the student and the submission created as nbgrader creates
  them (``Gradebook.add_submission``'s structure), ``auto_score`` of every test cell from our
  verdict, ``needs_manual_grade`` as nbgrader's SaveAutoGrades sets it, "No response." on
  untouched answer cells. ``manual_score`` is never written: a score given in formgrader stays;
* ``autograded/<student>/<assignment>/<assignment>.ipynb``: the submission sanitised by nbgrader's
  own preprocessors (locked cells and hidden tests restored from the gradebook), each test cell
  carrying our message as its output (an error output when it lost points), so formgrader and
  ``nbgrader generate_feedback`` show it;
* a marker ``.tfcourse/graded/<student>/<assignment>.json`` in the course directory, written
  last: a re-run skips submissions whose marker matches, so an interrupted run continues. The
  marker is kept out of ``autograded/`` (``nbgrader generate_feedback`` copies that folder to the
  learners, and the key would let a secret ``--seed`` be found by brute force). Its key covers
  what grading depends on: the submitted notebook and timestamp.txt, the course's source
  notebook, the seed, the limits, the device, the sandbox mode, and the grading code and cases
  (``grader/*.py``, ``grader/isolation/``, and ``grader/cases``, ``tfcourse/checks`` and
  ``tfcourse/reference`` of this notebook, of the notebooks before it and their shared modules):
  a changed grader regrades.

The grading itself goes through ``grader.batch.grade_batch`` (one batch per assignment): here
with ``jobs`` submissions at a time, or on a Dask cluster with ``scheduler`` (docs/scale.md); its
``on_row`` hands each row back as soon as it is graded, and it is saved then.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import InstructorError
from .course import course_directory, course_notebooks, nbgrader_on_path, refuse_checkout
from .review import RunReport, missing_submissions

MARKER = ".tfcourse-grade.json"  # where markers were kept before: removed from autograded/
PRIVATE = ".tfcourse"  # in the course directory: never under a folder nbgrader releases from


@dataclass
class Job:
    student: str
    assignment: str
    notebook: Path  # submitted/<student>/<assignment>/<assignment>.ipynb
    key: str  # what the marker must say for the grading to be current


def _sqlite_path(db_url: str) -> Path | None:
    return Path(db_url.removeprefix("sqlite:///")) if db_url.startswith("sqlite:///") else None


def open_course(course: Path):
    """(CourseDirectory, course_id) of an existing nbgrader course, or a one-line error."""
    refuse_checkout(course)
    if not course.is_dir():
        raise InstructorError(f"{course} is not a folder: create the course with "
                              f"`python -m grader.instructor init {course}`")
    coursedir = course_directory(course)
    db = _sqlite_path(coursedir.db_url)
    if db is not None and not db.exists():
        raise InstructorError(f"{course} is not an nbgrader course (no {db.name}): create it with "
                              f"`python -m grader.instructor init {course}`")
    return coursedir


def grading_code_digest(assignment: str) -> str:
    """A digest of the code and cases that grade ``assignment``: ``grader/*.py``, the isolation
    engine (``grader/isolation/``), and in ``grader/cases``, ``tfcourse/checks`` and
    ``tfcourse/reference`` the modules (or packages) of this notebook and of the notebooks before
    it (a later notebook imports earlier components) and the shared ones (not named ``nbNN_*``)."""
    from ..build import ROOT, module_name

    names = course_notebooks()
    upto = names[: names.index(assignment) + 1] if assignment in names else [assignment]
    modules = {module_name(n) for n in upto}
    h = hashlib.sha256()
    paths = sorted([*(ROOT / "grader").glob("*.py"), *(ROOT / "grader" / "isolation").rglob("*.py")])
    for folder in ("grader/cases", "tfcourse/checks", "tfcourse/reference"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            top = path.relative_to(ROOT / folder).parts[0].removesuffix(".py")
            if not top.startswith("nb") or top in modules:
                paths.append(path)
    for path in paths:
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _key(job_nb: Path, source_nb: Path, seed: int, settings: str) -> str:
    h = hashlib.sha256()
    for path in (job_nb, job_nb.parent / "timestamp.txt", source_nb):
        h.update(path.read_bytes() if path.exists() else b"-")
        h.update(b"\0")
    h.update(str(seed).encode() + b"\0" + settings.encode())
    return h.hexdigest()


def settings_text(assignment: str, *, limits, device: str, sandbox_mode: str, code: dict) -> str:
    """What besides the files a grading depends on, for the skip key (``code``: a cache of
    :func:`grading_code_digest` per assignment)."""
    if assignment not in code:
        code[assignment] = grading_code_digest(assignment)
    lim = None if limits is None else dataclasses.asdict(limits)
    return json.dumps({"limits": lim, "device": device, "sandbox": sandbox_mode,
                       "code": code[assignment]}, sort_keys=True, default=str)


def find_jobs(course: Path, coursedir, assignments: list[str], seed: int,
              student: str | None = None, settings=lambda assignment: "") -> tuple[list[Job], list[str]]:
    """The submissions to grade and, per student, the ones that cannot be (one line each)."""
    jobs, problems = [], []
    submitted = course / coursedir.submitted_directory
    students = sorted(p for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
    for folder in students:
        if student is not None and folder.name != student:
            continue
        for name in assignments:
            where = folder / name
            if not where.is_dir():
                continue
            nb = where / f"{name}.ipynb"
            if not nb.is_file():
                others = sorted(p.name for p in where.glob("*.ipynb"))
                found = f"it holds {', '.join(others)}" if others else "it holds no notebook"
                problems.append(f"{folder.name}/{name}: no {name}.ipynb ({found}): rename the learner's "
                                f"notebook to {name}.ipynb in {where} and run grade again")
                continue
            source = course / coursedir.source_directory / name / f"{name}.ipynb"
            jobs.append(Job(folder.name, name, nb, _key(nb, source, seed, settings(name))))
    return jobs, problems


def _marker(course: Path, coursedir, job: Job) -> Path:
    return course / PRIVATE / "graded" / job.student / f"{job.assignment}.json"


def is_current(course: Path, coursedir, job: Job) -> bool:
    try:
        return json.loads(_marker(course, coursedir, job).read_text()).get("key") == job.key
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------------------------
# the autograded notebook


def _verdicts(row: dict) -> tuple[dict[str, dict], dict[str, dict], set[str]]:
    """({test cell: part}, {test cell: its exercise}, {exercises not attempted})."""
    (report,) = row["notebooks"]
    parts, exercises, untouched = {}, {}, set()
    for ex in report["exercises"]:
        if ex["status"] == "not_attempted":
            untouched.add(ex["exercise"])
        for p in ex["parts"]:
            parts[p["test_cell"]] = p
            exercises[p["test_cell"]] = ex
    return parts, exercises, untouched


def part_status(part: dict, exercise: dict) -> str:
    """The status word of one test cell: "passed" when it got all its points, "failed" when its
    exercise was judged and this cell lost points (the exercise's other cells may have passed),
    else the exercise's own reason (error, timeout, not attempted, missing), which holds for all
    its cells."""
    if part["passed"] and part["score"] >= part["max_score"]:
        return "passed"
    if exercise["status"] in ("passed", "failed"):
        return "failed"
    return str(exercise["status"]).replace("_", " ")


#: what a learner who imported the course's hidden solutions is told (the grader hides the
#: graded notebook's reference, whatever the learner environment has)
HIDDEN_REFERENCE_HINT = (
    "hint: {module} holds the course's own solutions of this notebook, which the grader hides "
    "(whether or not your notebook could import them), so an answer built on them gets no points. "
    "Write the exercise with your own code from this notebook; earlier notebooks' components (the "
    "imports cell at the top) stay available.")


def hidden_reference_note(text: str, notebook: str) -> str:
    """``text`` with the hint above when it shows a ModuleNotFoundError for the graded notebook's
    own reference module and says nothing more about it."""
    from ..build import module_name

    module = f"tfcourse.reference.{module_name(notebook)}"
    if not notebook or f"No module named '{module}'" not in text or "hint: the grader hides" in text:
        return text
    return text.rstrip("\n") + "\n  " + HIDDEN_REFERENCE_HINT.format(module=module)


def _output(part: dict, exercise: dict, notebook: str = ""):
    import nbformat

    head = (f"tfcourse grader: {part['score']:g} of {part['max_score']:g} points for this test cell "
            f"({part_status(part, exercise)})")
    # the test cell's own verdict where the exercise has several (which of its checks failed);
    # the exercise's when it has one, or was not judged check by check (not attempted, crashed)
    own = part.get("feedback") if len(exercise["parts"]) > 1 else ""
    text = f"{head}\n{hidden_reference_note(own or exercise['feedback'], notebook)}".rstrip("\n") + "\n"
    if part["passed"] and part["score"] >= part["max_score"]:
        return nbformat.v4.new_output("stream", name="stdout", text=text)
    return nbformat.v4.new_output("error", ename="GraderVerdict",
                                  evalue=f"{part['score']:g} of {part['max_score']:g} points",
                                  traceback=text.splitlines())


def autograded_notebook(course: Path, coursedir, job: Job, row: dict):
    """The submission as nbgrader's autograde sanitises it, with our verdicts as outputs."""
    import nbformat
    from nbgrader.preprocessors import (
        CheckCellMetadata,
        ClearOutput,
        DeduplicateIds,
        OverwriteCells,
        OverwriteKernelspec,
    )

    resources = {"nbgrader": {"db_url": coursedir.db_url, "assignment": job.assignment,
                              "notebook": job.assignment, "student": job.student}}
    note = None
    try:
        nb = nbformat.read(job.notebook, as_version=4)
        for pp in (ClearOutput(), DeduplicateIds(), OverwriteKernelspec(), OverwriteCells(),
                   CheckCellMetadata()):
            nb, resources = pp.preprocess(nb, resources)
    except Exception as exc:  # nbgrader cannot read it: show the released notebook instead
        if _locked(exc):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        note = (f"nbgrader could not read {job.notebook.name} ({type(exc).__name__}: {first}); "
                "this is the released notebook with the grader's verdicts")
        nb = nbformat.read(course / coursedir.release_directory / job.assignment
                           / f"{job.assignment}.ipynb", as_version=4)
        nb, resources = OverwriteCells().preprocess(nb, resources)
    parts, exercises, _ = _verdicts(row)
    for cell in nb.cells:
        gid = (cell.metadata.get("nbgrader") or {}).get("grade_id")
        if cell.cell_type == "code" and gid in parts:
            cell.outputs = [_output(parts[gid], exercises[gid], job.assignment)]
    if note:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"**{note}**"))
    return nb


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# the gradebook


def submission_timestamp(folder: Path, log=print):
    """timestamp.txt of a submission as nbgrader reads it, or None when missing or unreadable
    (the learner can write that file: a bad one is warned about and treated as missing, where
    nbgrader's own reader would stop the whole run)."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    if not path.is_file():
        return None
    try:
        with open(path, errors="replace") as f:
            text = f.read(1000).strip()
        return parse_utc(text) if text else None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        log(f"warning: {path} is not a timestamp ({first}): graded as if it were missing "
            "(no lateness)")
        return None


def write_gradebook(gb, coursedir, job: Job, row: dict, log=print,
                    overridden: list[str] | None = None) -> tuple[float, float]:
    """The submission's scores in one transaction (committed at the end, rolled back on error);
    returns the gradebook's (score, max_score) of the submission, manual scores included.
    ``overridden`` gets one line per test cell whose manual score now hides a higher automatic
    score that this grading changed (formgrader shows the manual one)."""
    from nbgrader.api import (
        Comment,
        Grade,
        MissingEntry,
        Student,
        SubmittedAssignment,
        SubmittedNotebook,
    )

    parts, _, untouched = _verdicts(row)
    db = gb.db
    try:
        try:
            student = gb.find_student(job.student)
        except MissingEntry:
            student = Student(id=job.student)
            db.add(student)
        try:
            submission = gb.find_submission(job.assignment, job.student)
        except MissingEntry:  # what Gradebook.add_submission builds, without its commit
            assignment = gb.find_assignment(job.assignment)
            with db.no_autoflush:  # nothing reaches the database before the commit below
                submission = SubmittedAssignment(assignment=assignment, student=student)
                for notebook in assignment.notebooks:
                    snb = SubmittedNotebook(notebook=notebook, assignment=submission)
                    for cell in notebook.grade_cells:
                        Grade(cell_id=cell.id, notebook=snb)
                    for cell in notebook.solution_cells:
                        Comment(cell_id=cell.id, notebook=snb)
                    for cell in notebook.task_cells:
                        Comment(cell_id=cell.id, notebook=snb)
                        Grade(cell_id=cell.id, notebook=snb)
                db.add(submission)
        timestamp = submission_timestamp(job.notebook.parent, log)
        if timestamp:
            submission.timestamp = timestamp
        db.flush()
        for snb in submission.notebooks:
            for grade in snb.grades:
                part = parts.get(grade.name)
                before = grade.auto_score
                grade.auto_score = float(part["score"]) if part is not None else None
                if (overridden is not None and grade.manual_score is not None and grade.auto_score is not None
                        and grade.auto_score > grade.manual_score and grade.auto_score != before):
                    overridden.append(f"{job.student}/{job.assignment} {grade.name}: the manual score "
                                      f"{grade.manual_score:g} overrides the new automatic score "
                                      f"{grade.auto_score:g} (was {'none' if before is None else f'{before:g}'})")
                # nbgrader's SaveAutoGrades rule; manual_score itself is never touched
                grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            for comment in snb.comments:
                comment.auto_comment = "No response." if comment.name in untouched else None
        db.flush()
        _late_penalties(db, coursedir, job, submission)
        db.commit()
        db.refresh(submission)
        return float(submission.score or 0), float(submission.max_score or 0)
    except BaseException:
        db.rollback()
        raise


def _late_penalties(db, coursedir, job: Job, submission) -> None:
    """nbgrader's AssignLatePenalties, inside our transaction: its configured plugin
    (``AssignLatePenalties.plugin_class``, ``LateSubmissionPlugin.penalty_method``) and its rule."""
    from nbgrader.preprocessors import AssignLatePenalties

    late = AssignLatePenalties(config=coursedir.config)
    late.init_plugin()
    db.refresh(submission)  # the SQL-computed scores and lateness, with this transaction's writes
    for snb in submission.notebooks:
        db.refresh(snb)
        snb.late_submission_penalty = None
        if submission.total_seconds_late > 0:
            penalty = late.plugin_inst.late_submission_penalty(job.student, snb.score,
                                                               submission.total_seconds_late)
            if penalty is not None:
                snb.late_submission_penalty = min(max(penalty, 0), snb.score)


def _locked(exc: BaseException) -> bool:
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


def while_locked(fn, coursedir, *, lock_wait: float, log, what: str):
    """``fn()``, retried while the gradebook is locked (sqlite waits 5 s per try itself), at
    most ``lock_wait`` seconds; then a one-line InstructorError."""
    from sqlalchemy.exc import OperationalError

    deadline = time.monotonic() + lock_wait
    while True:
        try:
            return fn()
        except OperationalError as exc:
            if not _locked(exc):
                raise
            if time.monotonic() >= deadline:
                raise InstructorError(
                    f"the gradebook {coursedir.db_url} stayed locked for {lock_wait:g} s (a formgrader or "
                    "another nbgrader command writing to it?): let it finish or stop it, then run grade "
                    "again; submissions graded so far are saved") from None
            log(f"the gradebook is locked; retrying ({what})")
            time.sleep(1.0)


def save(course: Path, coursedir, job: Job, row: dict, *, lock_wait: float, log,
         overridden: list[str] | None = None) -> tuple[float, float]:
    """Gradebook first (one transaction, retried while locked), then the autograded notebook,
    then the marker: an interruption anywhere leaves the gradebook consistent and the
    submission without a current marker, so the next run grades it again."""
    from nbgrader.api import Gradebook

    def write():
        found: list[str] = []  # a locked try is retried: only the committed one's lines count
        nb = autograded_notebook(course, coursedir, job, row)
        with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
            total = write_gradebook(gb, coursedir, job, row, log, found)
        if overridden is not None:
            overridden.extend(found)
        return nb, total

    nb, total = while_locked(write, coursedir, lock_wait=lock_wait, log=log,
                             what=f"{job.student}/{job.assignment}")
    import nbformat

    folder = course / coursedir.autograded_directory / job.student / job.assignment
    _write_atomic(folder / f"{job.assignment}.ipynb", nbformat.writes(nb))
    (folder / MARKER).unlink(missing_ok=True)  # an older version kept it here, released as feedback
    _write_atomic(_marker(course, coursedir, job),
                  json.dumps({"key": job.key, "score": row["notebooks"][0]["score"]}))
    return total


# --------------------------------------------------------------------------------------------


def _connect(address: str):
    """A client of the Dask scheduler at ``address`` (docs/scale.md), or a one-line error."""
    try:
        from distributed import Client
    except ImportError:
        raise InstructorError("--scheduler needs Dask: pip install 'dask[distributed]' (docs/scale.md), "
                              "or grade on this machine with --jobs N") from None
    try:
        return Client(address, timeout="60s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise InstructorError(f"no Dask scheduler answered at {address} ({type(exc).__name__}): start one "
                              "(docs/scale.md) or grade on this machine with --jobs N") from None


def grade(course: Path, *, assignment: str | None, jobs: int, device: str, seed: int, force: bool,
          lock_wait: float, limits=None, student: str | None = None, scheduler: str | None = None,
          log=print) -> int:
    from nbgrader.api import Gradebook

    from ..batch import grade_batch
    from ..isolation import sandbox, views

    nbgrader_on_path()
    coursedir = open_course(course)
    available = course_notebooks()

    def assignments() -> list[str]:
        with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
            return [a.name for a in gb.assignments]

    in_gradebook = while_locked(assignments, coursedir, lock_wait=lock_wait, log=log, what="reading it")
    ours = _assignments_to_grade(course, in_gradebook, available, assignment, log)
    try:
        isolation = sandbox.choose(strict=True)
    except (sandbox.SandboxError, RuntimeError) as exc:
        raise InstructorError(str(exc)) from None
    views.protect([course.resolve()])
    code: dict[str, str] = {}

    def settings(name: str) -> str:
        return settings_text(name, limits=limits, device=device, sandbox_mode=isolation.mode, code=code)

    todo, skipped, problems = _jobs_to_grade(course, coursedir, ours, seed=seed, student=student,
                                             settings=settings, force=force)
    log(f"{len(todo)} submission(s) to grade, {len(skipped)} already graded (sandbox {isolation.mode})")
    report = RunReport()
    saved = _saver(course, coursedir, problems, lock_wait=lock_wait, log=log, report=report)
    client = _connect(scheduler) if scheduler and todo else None
    try:
        # one batch per assignment: grade_batch grades the same notebooks in every submission
        for name in dict.fromkeys(j.assignment for j in todo):
            group = [j for j in todo if j.assignment == name]
            grade_batch([str(j.notebook) for j in group], notebooks=[name], device=device, limits=limits,
                        seed=seed, jobs=max(1, jobs), scheduler=client, quiet=True,
                        on_row=lambda i, row, group=group: saved(group[i], row))
    except KeyboardInterrupt:
        print("grade: interrupted; what was graded is saved: run grade again to continue", file=sys.stderr)
        return 130
    except sandbox.SandboxError as exc:
        raise InstructorError(str(exc)) from None
    finally:
        if client is not None:
            client.close()
    for line in report.lines(course, coursedir, missing_submissions(course, coursedir, ours, student)):
        log(line)
    for line in problems:
        print(f"grade: not graded: {line}", file=sys.stderr)
    return 1 if problems else 0


def _assignments_to_grade(course: Path, in_gradebook: list[str], available: list[str], assignment: str | None,
                          log) -> list[str]:
    """The gradebook's assignments that are course notebooks (``available``), or the one
    ``assignment`` names (a one-line error unless it is both); the others are logged as skipped."""
    ours = [a for a in in_gradebook if a in available]
    if assignment is not None:
        name = assignment.strip().removesuffix(".ipynb")
        if name not in in_gradebook and name not in available:
            raise InstructorError(f"the course {course} has no assignment {name!r}: give one of "
                                  f"{', '.join(ours) or 'none (init added none)'}; the course's "
                                  f"notebooks are {', '.join(available)}")
        if name not in in_gradebook:
            raise InstructorError(f"the course {course} has no assignment {name!r} (it has "
                                  f"{', '.join(in_gradebook) or 'none'}); add it with "
                                  f"`python -m grader.instructor init {course} --assignments {name}`")
        if name not in available:
            raise InstructorError(f"{name!r} is not one of this course's notebooks ({', '.join(available)}); "
                                  "grade it with `nbgrader autograde`")
        ours = [name]
    for other in sorted(set(in_gradebook) - set(available)):
        log(f"skipped assignment {other}: not a course notebook (grade it with `nbgrader autograde`)")
    return ours


def _jobs_to_grade(course: Path, coursedir, assignments: list[str], *, seed: int, student: str | None,
                   settings, force: bool) -> tuple[list[Job], list[Job], list[str]]:
    """(the submissions to grade, those already graded with these settings, the problems found);
    a one-line error when ``student`` has no submission at all."""
    todo, problems = find_jobs(course, coursedir, assignments, seed, student, settings)
    if student is not None and not todo and not problems:
        raise InstructorError(f"no submission of student {student!r} in "
                              f"{course / coursedir.submitted_directory}: check the name (nbgrader collect "
                              "puts it there)")
    skipped = [] if force else [j for j in todo if is_current(course, coursedir, j)]
    return [j for j in todo if j not in skipped], skipped, problems


def _saver(course: Path, coursedir, problems: list[str], *, lock_wait: float, log, report: RunReport | None = None):
    """What the batches hand each row to (``saved``); a submission that could not be saved goes to
    ``problems``, one saved to ``report``."""
    from ..isolation import sandbox

    def saved(job: Job, row: dict) -> None:
        """Each submission into the gradebook as soon as its row is back (its own transaction)."""
        try:
            total, most = save(course, coursedir, job, row, lock_wait=lock_wait, log=log,
                               overridden=None if report is None else report.overridden)
        except (InstructorError, KeyboardInterrupt, sandbox.SandboxError):
            raise
        except Exception as exc:  # this submission only: its reason, the others saved
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            problems.append(f"{job.student}/{job.assignment}: graded, but saving it failed "
                            f"({type(exc).__name__}: {first}); it is not marked as graded: "
                            "fix the cause and run grade again")
            return
        if report is not None:
            report.graded.append(job)
        nb_row = row["notebooks"][0]
        line = (f"graded {job.student}/{job.assignment}: automatic score "
                f"{nb_row['score']:g}/{nb_row['max_score']:g}")
        if (total, most) != (float(nb_row["score"]), float(nb_row["max_score"])):
            line += f"; gradebook total {total:g}/{most:g} (manual scores count there)"
        log(line)

    return saved


def summary(course: Path) -> list[dict[str, Any]]:
    """Per (student, assignment): score, max_score from the gradebook (for tests and the log)."""
    from nbgrader.api import Gradebook

    coursedir = open_course(course)
    rows = []
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        for a in gb.assignments:
            for s in a.submissions:
                rows.append({"assignment": a.name, "student": s.student.id, "score": s.score,
                             "max_score": s.max_score})
    return rows
