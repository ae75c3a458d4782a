"""The instructor workflow (issue 18): ``python -m grader.instructor init|grade|learner-env``.

End to end, in a temporary folder: ``init`` builds an nbgrader course for notebooks 01 and 02
(with an exchange folder of its own); ``nbgrader release_assignment`` releases both through the
exchange with the config init wrote; three students fetch them and submit through nbgrader's
exchange (what the Assignments tab does; one account plays all three here, so ``collect`` warns
about the owner) and ``nbgrader collect`` puts them into ``submitted/``; a fourth student, in the
gradebook (``nbgrader db student add``), submits nothing:

* ``full``: the reference code in every answer cell;
* ``partial``: notebook 01's ``scaled_dot_product_attention`` with an inverted mask (a realistic
  mistake: it costs the masks test cell, 2 of its 4 points, and the half cell, whose float16
  cases are masked too, 0.5), notebook 02 full;
* ``hostile``: notebook 01's ``softmax`` returns its input and, in the same cell, replaces every
  check function of its kernel (visible ``check_*`` and the hidden ``check_hidden``) by a no-op:
  inside its own kernel every test cell "passes".

A copy of the course, taken before grading, is graded by ``nbgrader autograde`` (tests in the
learner's kernel); the course itself by ``python -m grader.instructor grade``. Then: the
gradebook's scores per test cell, ``nbgrader export``'s CSV, ``nbgrader generate_feedback``'s
HTML holding our messages, the two graders agreeing on honest submissions and not on the hostile
one, a manual score surviving a second ``grade`` run, and the one-line errors of bad input.

Every submission keeps only the cells grading needs (tests/test_nbgrader_roundtrip.py's
``_with_cells``: a learner may delete the demos) so that nbgrader's six kernel runs stay short.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.instructor.__main__ import main
from tests.test_nbgrader_roundtrip import INVERTED_MASK_SDPA, _environment, _with_cells

# grades through the real grader (sandboxed children, batches): the full suite only, not the
# inner loop (`pytest -m "not slow"`, CONTRIBUTING.md)
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
NB1, NB2 = "01_attention", "02_multi_head_attention"
STUDENTS = ("full", "partial", "hostile")
ABSENT = "absent"  # in the gradebook, submits nothing
TIMEOUT = 900

# The fake pass: in nbgrader's kernel this cell runs after the cell importing the checks, and the
# hidden tests import check_hidden from grader.cases again in each test cell.
HOSTILE_SOFTMAX = '''
def softmax(x, dim=-1):
    return x  # wrong


for _name in [n for n in globals() if n.startswith("check_")]:
    globals()[_name] = lambda *args, **kwargs: None
try:
    import grader.cases as _cases
    _cases.check_hidden = lambda *args, **kwargs: None
except Exception:
    pass
'''


def _named() -> list[str]:
    """A batch needs bubblewrap unless a weaker sandbox is named: name it where bwrap is missing."""
    from grader.isolation import sandbox

    return [] if sandbox._works("bwrap") is None else ["--sandbox", sandbox.choose().mode]


def _nbgrader(course: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "| ERROR]" not in log, f"nbgrader {' '.join(args)}:\n{log[-4000:]}"
    return proc


def _cell_scores(course: Path, assignment: str, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "tfcourse") as gb:
        nb = gb.find_submission_notebook(assignment, assignment, student)
        return {g.name: g.score for g in nb.grades}


def _submit(course: Path, student: str, assignment: str, nb) -> None:
    """A submission put into submitted/ by hand (the way without the exchange)."""
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{assignment}.ipynb")
    (folder / "timestamp.txt").write_text("2026-12-01 10:00:00.000000 UTC")


def _learner_submits(exchange: Path, home: Path, student: str, assignment: str, nb) -> None:
    """What a learner's Assignments tab does, with nbgrader's own exchange classes: fetch the
    released assignment into their home, work on it, submit it."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit
    from traitlets.config import Config

    cfg = Config()  # the two lines docs/instructor.md says the learners' nbgrader needs
    cfg.Exchange.root, cfg.CourseDirectory.course_id = str(exchange), "tfcourse"
    cfg.Exchange.assignment_dir = cfg.CourseDirectory.root = str(home)
    home.mkdir(parents=True, exist_ok=True)
    coursedir = CourseDirectory(config=cfg)
    coursedir.assignment_id = assignment
    auth = Authenticator(config=cfg)
    ExchangeFetchAssignment(coursedir=coursedir, authenticator=auth, config=cfg).start()
    fetched = home / assignment / f"{assignment}.ipynb"
    assert fetched.is_file()
    nbformat.write(nb, fetched)
    coursedir.student_id = student  # the hub's username; one account plays every learner here
    ExchangeSubmit(coursedir=coursedir, authenticator=auth, config=cfg).start()


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("instructor")
    course, exchange = tmp / "course", tmp / "exchange"
    init_out = io.StringIO()
    with contextlib.redirect_stdout(init_out):
        assert main(["init", str(course), "--assignments", f"{NB1},{NB2}", "--exchange", str(exchange)]) == 0
    env = _environment(tmp)
    _nbgrader(course, env, "db", "student", "add", ABSENT)
    for name in (NB1, NB2):
        _nbgrader(course, env, "release_assignment", name)  # the config init wrote: no --Exchange.root
        released = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
        source = nbformat.read(course / "source" / name / f"{name}.ipynb", as_version=4)
        wrong = {"scaled_dot_product_attention": INVERTED_MASK_SDPA} if name == NB1 else {}
        fake = {"softmax": HOSTILE_SOFTMAX} if name == NB1 else {}
        for student, changes in (("full", {}), ("partial", wrong), ("hostile", fake)):
            _learner_submits(exchange, tmp / "home" / student, student, name, _with_cells(released, source, changes))
        _nbgrader(course, env, "collect", name)
    theirs = tmp / "nbgrader-course"
    shutil.copytree(course, theirs)
    for name in (NB1, NB2):
        _nbgrader(theirs, env, "autograde", name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["grade", str(course), "--jobs", "2", *_named()]) == 0
    return course, theirs, env, exchange, init_out.getvalue() + out.getvalue()


def test_init_releases_the_course_notebooks(term) -> None:
    course = term[0]
    for name in (NB1, NB2):
        assert (course / "source" / name / f"{name}.ipynb").read_bytes() == \
            (ROOT / "solutions" / f"{name}.ipynb").read_bytes()
        released = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
        committed = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        assert [c.source for c in released.cells] == [c.source for c in committed.cells]
    assert "course_id" in (course / "nbgrader_config.py").read_text()


def test_release_and_collect_through_the_exchange(term) -> None:
    """release_assignment and collect ran with the config init wrote (no --Exchange.root), and
    formgrader sees the exchange and both assignments as released, not as drafts."""
    from nbgrader.apps import NbGraderAPI

    from grader.instructor.course import course_directory, load_config

    course, _, _, exchange, log = term
    assert f"exchange {exchange} (course tfcourse)" in log, log
    assert f"c.Exchange.root = {str(exchange)!r}" in (course / "nbgrader_config.py").read_text()
    # formgrader's API with the course's config, as formgrader loads it from the course directory
    api = NbGraderAPI(coursedir=course_directory(course), config=load_config(course))
    assert not api.exchange_missing and api.exchange_root == str(exchange)
    for name in (NB1, NB2):
        assert (exchange / "tfcourse" / "outbound" / name / f"{name}.ipynb").is_file()
        assert api.get_assignment(name)["status"] == "released", api.get_assignment(name)
        for student in STUDENTS:  # collect's layout, with nbgrader's timestamp
            assert (course / "submitted" / student / name / "timestamp.txt").is_file(), (student, name)
    assert not (course / "submitted" / ABSENT).exists()


def test_grade_lists_missing_submissions(term) -> None:
    log = term[4]
    for name in (NB1, NB2):
        assert f"missing submission(s) of {name}: {ABSENT} (nothing in submitted/<student>/{name}/: " \
               f"`nbgrader collect {name}` puts submissions there)" in log, log
    assert "review:" not in log and "stale" not in log, log  # nothing overridden, no feedback yet


def test_gradebook_scores_per_test_cell(term) -> None:
    course = term[0]
    for student in STUDENTS:
        scores = _cell_scores(course, NB2, student)
        assert sum(scores.values()) == 10 and len(scores) >= 5, (student, scores)
    full = _cell_scores(course, NB1, "full")
    assert sum(full.values()) == 10, full
    partial = _cell_scores(course, NB1, "partial")
    assert partial == {**full, "test_scaled_dot_product_attention__masks": 0,
                       "test_scaled_dot_product_attention__half": 0}, partial
    hostile = _cell_scores(course, NB1, "hostile")
    assert hostile["test_softmax"] == 0, hostile
    assert sum(hostile.values()) == 8, hostile  # one bug costs points once


def test_honest_submissions_agree_with_nbgrader_autograde(term) -> None:
    """The same score per test cell from both; the hostile one fools nbgrader only."""
    course, theirs = term[:2]
    for student in ("full", "partial"):
        for name in (NB1, NB2):
            assert _cell_scores(course, name, student) == _cell_scores(theirs, name, student), (student, name)
    fooled = _cell_scores(theirs, NB1, "hostile")
    assert sum(fooled.values()) == 10, f"nbgrader autograde was not fooled this time: {fooled}"
    assert sum(_cell_scores(course, NB1, "hostile").values()) < 10


def test_formgrader_sees_graded_submissions(term) -> None:
    """What formgrader lists (through nbgrader's NbGraderAPI): every submission autograded (the
    gradebook's timestamp is timestamp.txt's), with our scores, nothing waiting for a manual grade."""
    from nbgrader.apps import NbGraderAPI

    from grader.instructor.course import course_directory

    course = term[0]
    api = NbGraderAPI(coursedir=course_directory(course))
    for name in (NB1, NB2):
        assert api.get_autograded_students(name) == set(STUDENTS)
    hostile = api.get_submission(NB1, "hostile")
    assert hostile["autograded"] and hostile["score"] == 8 and not hostile["needs_manual_grade"], hostile
    (nb,) = api.get_student_notebook_submissions("partial", NB1)
    assert nb["score"] == 7.5 and nb["failed_tests"], nb


def test_nbgrader_export(term) -> None:
    course, env = term[0], term[2]
    _nbgrader(course, env, "export", "--to", "grades.csv")
    with open(course / "grades.csv", newline="") as f:
        rows = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(f)}
    expected = {(NB1, "full"): 10, (NB1, "partial"): 7.5, (NB1, "hostile"): 8,
                (NB2, "full"): 10, (NB2, "partial"): 10, (NB2, "hostile"): 10}
    got = {key: float(rows[key]["score"]) for key in expected}
    assert got == expected
    assert {float(rows[key]["max_score"]) for key in expected} == {10.0}


def test_feedback_holds_our_messages(term) -> None:
    course, env = term[0], term[2]
    _nbgrader(course, env, "generate_feedback", NB1)
    hostile = (course / "feedback" / "hostile" / NB1 / f"{NB1}.html").read_text()
    assert "tfcourse grader: 0 of 1.5 points for this test cell" in hostile
    assert "✗ softmax" in hostile
    full = (course / "feedback" / "full" / NB1 / f"{NB1}.html").read_text()
    # softmax has two test cells (core, half): each shows its own line
    assert "✓ test_softmax: all" in full and "✓ test_softmax__half: all" in full and "✗" not in full
    # each test cell's own status: the core cell of the exercise whose masks cell failed passed
    partial = (course / "feedback" / "partial" / NB1 / f"{NB1}.html").read_text()
    two_point_cells = sum(1 for score in _cell_scores(course, NB1, "full").values() if score == 2)
    assert partial.count("2 of 2 points for this test cell (passed)") == two_point_cells - 1, partial.count("(passed)")
    assert partial.count("0 of 2 points for this test cell (failed)") == 1
    assert "points for this test cell (failed)" not in full
    # nothing of the grading markers reaches the learners (their key depends on the seed)
    assert sorted(p.name for p in (course / "feedback").rglob("*") if p.is_file()) == \
        sorted(f"{NB1}.html" for _ in STUDENTS)
    assert not list((course / "autograded").rglob(".tfcourse-grade.json"))
    assert len(list((course / ".tfcourse" / "graded").glob("*/*.json"))) == 6


def test_autograded_notebook_has_hidden_tests_and_verdicts(term) -> None:
    course = term[0]
    nb = nbformat.read(course / "autograded" / "partial" / NB1 / f"{NB1}.ipynb", as_version=4)
    cells = {c.metadata.nbgrader["grade_id"]: c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    masks = cells["test_scaled_dot_product_attention__masks"]
    assert "check_hidden" in masks.source  # restored from the gradebook, as nbgrader does
    assert [o.output_type for o in masks.outputs] == ["error"]
    assert masks.outputs[0].traceback[0] == "tfcourse grader: 0 of 2 points for this test cell (failed)"
    core = cells["test_scaled_dot_product_attention"]
    assert core.outputs[0].text.startswith("tfcourse grader: 1.5 of 1.5 points for this test cell (passed)\n")
    assert [o.output_type for o in cells["test_softmax"].outputs] == ["stream"]


def test_hidden_reference_is_explained_in_the_feedback(term, tmp_path, capsys) -> None:
    """A learner whose answer imports this notebook's own reference (it imports in their kernel)
    is told in formgrader and in the feedback why the grader cannot use it."""
    course, env = term[0], term[2]
    copy = tmp_path / "course"
    shutil.copytree(course, copy)
    released = nbformat.read(copy / "release" / NB1 / f"{NB1}.ipynb", as_version=4)
    source = nbformat.read(copy / "source" / NB1 / f"{NB1}.ipynb", as_version=4)
    borrowed = {"softmax": "from tfcourse.reference.nb01_attention import softmax\n"}
    _submit(copy, "borrower", NB1, _with_cells(released, source, borrowed))
    rc, out, err = _run(capsys, "grade", str(copy), "--assignment", NB1, "--student", "borrower", *_named())
    assert rc == 0 and f"graded borrower/{NB1}: automatic score 8/10" in out, (out, err)
    nb = nbformat.read(copy / "autograded" / "borrower" / NB1 / f"{NB1}.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_softmax"]
    text = "\n".join(cell.outputs[0].traceback)
    assert "No module named 'tfcourse.reference.nb01_attention'" in text, text
    assert "holds the course's own solutions of this notebook, which the grader hides" in text, text
    _nbgrader(copy, env, "generate_feedback", NB1, "--student", "borrower")
    html = (copy / "feedback" / "borrower" / NB1 / f"{NB1}.html").read_text()
    assert "which the grader hides" in html and "your own code from this notebook" in html


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_bad_input_one_line_errors(term, tmp_path, capsys) -> None:
    course = term[0]
    rc, _, err = _run(capsys, "grade", str(tmp_path))
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "grader.instructor init" in err, err
    rc, _, err = _run(capsys, "grade", str(course), "--assignment", "09_nothing")
    # not a course notebook: init could not add it, so name the ones there are instead
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "init" not in err, err
    assert f"give one of {NB1}, {NB2}" in err, err
    rc, _, err = _run(capsys, "grade", str(course), "--assignment", "03_positional_encodings")
    assert rc == 1 and "--assignments 03_positional_encodings" in err, err  # a notebook: init adds it
    for command in ("grade", "init"):  # the checkout itself is no course directory
        rc, _, err = _run(capsys, command, str(ROOT))
        assert rc == 1 and len(err.strip().splitlines()) == 1, err
        assert "COURSE_DIR is a new folder outside it" in err and f"init {ROOT}`" not in err, err
    assert not (ROOT / "gradebook.db").exists() and not (ROOT / "release").exists()
    rc, _, err = _run(capsys, "init", str(tmp_path / "c"), "--assignments", "01_atention")
    assert rc == 1 and "01_attention" in err and not (tmp_path / "c").exists(), err
    rc, _, err = _run(capsys, "learner-env", "--through", "99_x", "--out", str(tmp_path))
    assert rc == 1 and len(err.strip().splitlines()) == 1, err


def test_misnamed_notebook_and_locked_gradebook(term, tmp_path, capsys) -> None:
    """A notebook under another name is reported for its student, the rest graded; a locked
    gradebook is waited for, then named in one line (nothing half-written)."""
    course = term[0]
    copy = tmp_path / "course"
    shutil.copytree(course, copy)
    renamed = copy / "submitted" / "renamed" / NB1
    renamed.mkdir(parents=True)
    shutil.copy(copy / "submitted" / "full" / NB1 / f"{NB1}.ipynb", renamed / f"{NB1} (1).ipynb")
    shutil.copytree(copy / "submitted" / "full" / NB2, copy / "submitted" / "renamed" / NB2)
    rc, out, err = _run(capsys, "grade", str(copy), *_named())
    assert rc == 1, (out, err)
    assert "renamed/01_attention: no 01_attention.ipynb (it holds 01_attention (1).ipynb)" in err, err
    assert "1 submission(s) to grade, 6 already graded" in out, out  # a re-run continues
    assert sum(_cell_scores(copy, NB2, "renamed").values()) == 10
    # locked: another writer holds the database
    shutil.copytree(copy / "submitted" / "full" / NB1, copy / "submitted" / "late" / NB1)
    holder = sqlite3.connect(copy / "gradebook.db", timeout=0)
    holder.execute("BEGIN IMMEDIATE")  # a writer mid-transaction: reads work, writes wait
    try:
        rc, _, err = _run(capsys, "grade", str(copy), "--assignment", NB1, "--lock-wait", "1", *_named())
    finally:
        holder.rollback()
        holder.close()
    assert rc == 1 and "stayed locked" in err and len(err.strip().splitlines()) == 1, err
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{copy / 'gradebook.db'}", "tfcourse") as gb:
        with pytest.raises(MissingEntry):
            gb.find_student("late")  # the student and the submission: one transaction, not committed
        assert not (copy / "autograded" / "late").exists()


def test_late_penalty_and_init_again(term, tmp_path, capsys) -> None:
    """A late submission gets nbgrader's configured penalty (here: zero points), and init run again
    on a course with grades keeps them."""
    from nbgrader.api import Gradebook

    course = term[0]
    copy = tmp_path / "course"
    shutil.copytree(course, copy)
    with open(copy / "nbgrader_config.py", "a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    url = f"sqlite:///{copy / 'gradebook.db'}"
    with Gradebook(url, "tfcourse") as gb:
        gb.update_or_create_assignment(NB2, duedate="2026-11-30 23:59:00 UTC")
    rc, out, err = _run(capsys, "grade", str(copy), "--assignment", NB2, "--student", "partial", "--force",
                        *_named())
    assert rc == 0 and "1 submission(s) to grade" in out, (out, err)
    with Gradebook(url, "tfcourse") as gb:
        late = gb.find_submission(NB2, "partial")
        # nbgrader keeps the raw score; export and formgrader subtract the penalty
        assert (late.score, late.late_submission_penalty) == (10, 10)
        assert gb.find_submission(NB2, "full").late_submission_penalty in (None, 0)  # not graded again
    rc, _, err = _run(capsys, "init", str(copy), "--assignments", f"{NB1},{NB2}")
    assert rc == 0, err
    # without --assignments an existing course keeps its assignments (nothing more released)
    (copy / "release" / NB2 / f"{NB2}.ipynb").unlink()
    rc, out, err = _run(capsys, "init", str(copy))
    assert rc == 0 and f"existing course: updating its assignments ({NB1}, {NB2})" in out, (out, err)
    assert "--assignments NAME" in out, out
    assert sorted(p.name for p in (copy / "release").iterdir()) == [NB1, NB2]
    assert (copy / "release" / NB2 / f"{NB2}.ipynb").exists()
    with Gradebook(url, "tfcourse") as gb:
        assert gb.find_submission(NB1, "partial").score == 7.5
        assert gb.find_submission(NB1, "hostile").score == 8
    assert (copy / "submitted" / "full" / NB1 / f"{NB1}.ipynb").exists()
    rc, out, _ = _run(capsys, "grade", str(copy), *_named())
    assert rc == 0 and "0 submission(s) to grade, 6 already graded" in out, out


def test_bad_timestamp_and_a_failing_write_stay_with_their_submission(term, tmp_path, capsys,
                                                                       monkeypatch) -> None:
    """A learner's timestamp.txt that is no timestamp gets its row (no lateness, a warning naming
    the file); an error while saving one submission is reported for it, the others are saved."""
    from nbgrader.api import Gradebook, MissingEntry

    import grader.instructor.grade as grade_mod

    course = term[0]
    copy = tmp_path / "course"
    shutil.copytree(course, copy)
    for student in ("badtime", "boom"):
        shutil.copytree(copy / "submitted" / "full" / NB1, copy / "submitted" / student / NB1)
    bad = copy / "submitted" / "badtime" / NB1 / "timestamp.txt"
    bad.write_text("not a timestamp")
    original = grade_mod.autograded_notebook

    def failing(course_, coursedir, job, row):
        if job.student == "boom":
            raise ValueError("disk full (simulated)")
        return original(course_, coursedir, job, row)

    monkeypatch.setattr(grade_mod, "autograded_notebook", failing)
    rc, out, err = _run(capsys, "grade", str(copy), "--assignment", NB1, *_named())
    assert rc == 1 and "2 submission(s) to grade, 3 already graded" in out, (out, err)
    assert f"warning: {bad} is not a timestamp" in out, out
    assert f"boom/{NB1}: graded, but saving it failed (ValueError: disk full (simulated))" in err, err
    assert sum(_cell_scores(copy, NB1, "badtime").values()) == 10
    with Gradebook(f"sqlite:///{copy / 'gradebook.db'}", "tfcourse") as gb:
        assert gb.find_submission(NB1, "badtime").timestamp is None
        with pytest.raises(MissingEntry):
            gb.find_student("boom")
    # a changed limit is a changed grading: graded again without --force
    rc, out, err = _run(capsys, "grade", str(copy), "--assignment", NB1, "--student", "badtime",
                        "--timeout", "29", *_named())
    assert rc == 0 and "1 submission(s) to grade, 0 already graded" in out, (out, err)


def test_skip_key_covers_limits_device_sandbox_and_grading_code(tmp_path, monkeypatch) -> None:
    import grader.build
    from grader.instructor.grade import grading_code_digest, settings_text
    from grader.isolation.runner import Limits

    def key(**kw) -> str:
        args = {"limits": Limits(), "device": "cpu", "sandbox_mode": "bwrap", **kw}
        return settings_text(NB1, code={}, **args)

    base = key()
    assert base == key()
    for change in ({"limits": Limits(timeout=31)}, {"limits": Limits(memory_mb=1)},
                   {"limits": Limits(output_kb=1)}, {"device": "cuda"}, {"sandbox_mode": "unshare"}):
        assert key(**change) != base, change
    copy = tmp_path / "root"
    for folder in ("grader", "tfcourse/checks", "tfcourse/reference"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(grader.build, "ROOT", copy)
    before = {nb: grading_code_digest(nb) for nb in (NB1, NB2)}
    with open(copy / "grader" / "cases" / "nb02_multi_head_attention.py", "a") as f:
        f.write("\n# changed\n")
    assert grading_code_digest(NB1) == before[NB1]  # notebook 02's cases do not grade 01
    assert grading_code_digest(NB2) != before[NB2]
    with open(copy / "tfcourse" / "checks" / "case.py", "a") as f:
        f.write("\n# changed\n")
    assert grading_code_digest(NB1) != before[NB1]
    changed = grading_code_digest(NB1)
    with open(copy / "grader" / "isolation" / "child.py", "a") as f:  # the isolation engine grades them all
        f.write("\n# changed\n")
    assert grading_code_digest(NB1) != changed


def test_killed_run_continues(term, tmp_path, capsys) -> None:
    """A grade run killed (SIGKILL) after its first submission leaves a consistent gradebook, and
    the next run grades only what was left."""
    import re

    course = term[0]
    copy = tmp_path / "course"
    shutil.copytree(course, copy)
    for marker in (copy / ".tfcourse" / "graded").glob(f"*/{NB1}.json"):
        marker.unlink()
    proc = subprocess.Popen([sys.executable, "-u", "-m", "grader.instructor", "grade", str(copy),
                             "--assignment", NB1, *_named()], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        for line in proc.stdout:
            if line.startswith("graded "):
                proc.kill()
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -9
    rc, out, err = _run(capsys, "grade", str(copy), "--assignment", NB1, *_named())
    todo, done = map(int, re.search(r"(\d+) submission\(s\) to grade, (\d+) already graded", out).groups())
    assert rc == 0 and done >= 1 and todo + done == 3 and todo >= 1, (out, err)
    for student in STUDENTS:
        assert _cell_scores(copy, NB1, student) == _cell_scores(course, NB1, student)


def test_manual_score_survives_a_second_grade_run(term, capsys) -> None:
    """Runs last (it changes the course): a score given in formgrader is never overwritten."""
    from nbgrader.api import Gradebook

    course, env = term[0], term[2]
    if not (course / "feedback" / "full" / NB1).exists():  # run alone: test_feedback_holds_our_messages' step
        _nbgrader(course, env, "generate_feedback", NB1)
    url = f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(url, "tfcourse") as gb:
        grade = gb.find_grade("test_softmax", NB1, NB1, "hostile")
        grade.manual_score = 1.5
        # full's cell as an earlier grading left it (0 points), raised by hand to 1 in formgrader
        earlier = gb.find_grade("test_softmax", NB1, NB1, "full")
        earlier.auto_score, earlier.manual_score = 0, 1
        gb.db.commit()
    marker = course / ".tfcourse" / "graded" / "hostile" / f"{NB1}.json"
    os.utime(marker, (0, 0))
    rc, out, _ = _run(capsys, "grade", str(course), "--assignment", NB1, "--force", *_named())
    assert rc == 0 and "3 submission(s) to grade" in out, out
    # the line says what the gradebook holds, manual score included
    assert f"graded hostile/{NB1}: automatic score 8/10; gradebook total 9.5/10" in out, out
    assert f"graded partial/{NB1}: automatic score 7.5/10\n" in out, out
    # the regrade gives full 1.5 points automatically: the manual 1 now hides them
    assert (f"review: full/{NB1} test_softmax: the manual score 1 overrides the new automatic score 1.5 "
            "(was 0): resolve it in formgrader") in out, out
    assert "review: hostile" not in out, out  # a manual score above the automatic one is the point
    # the feedback generated by test_feedback_holds_our_messages no longer matches
    assert (f"feedback generated earlier is stale for {NB1} (full, hostile, partial): run "
            f"`nbgrader generate_feedback {NB1} --force`") in out, out
    assert marker.stat().st_mtime > 0  # graded again
    with Gradebook(url, "tfcourse") as gb:
        grade = gb.find_grade("test_softmax", NB1, NB1, "hostile")
        assert (grade.manual_score, grade.auto_score, grade.score) == (1.5, 0, 1.5)
        assert grade.needs_manual_grade  # as nbgrader marks a cell with a manual score
        assert gb.find_submission(NB1, "hostile").score == 9.5
        assert gb.find_grade("test_softmax", NB1, NB1, "full").auto_score == 1.5


# --------------------------------------------------------------------------------------------
# the learner environment


def test_doctor_warns_root_without_failing(monkeypatch) -> None:
    """grading.md: never grade as root. --doctor says so on a line of its own, a warning that
    leaves the exit status as the other checks decide."""
    from grader import doctor

    monkeypatch.setattr(doctor.os, "getuid", lambda: 1000)
    lines, ok = doctor.report()
    assert not [line for line in lines if line.startswith("! root")]
    monkeypatch.setattr(doctor.os, "getuid", lambda: 0)
    root_lines, root_ok = doctor.report()
    assert [line for line in root_lines if line.startswith("! root ")], root_lines
    assert root_ok == ok
