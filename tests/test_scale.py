"""Grading at scale (issue 14): the fast path (warm zygotes, grader/isolation/fastpath.py) and batches on a
Dask cluster (grader/batch.py).

The cluster is real: a scheduler and two workers started as separate processes on 127.0.0.1
(``dask scheduler`` / ``dask worker``), with ``allowed-failures`` 1 so that a submission that kills
its worker twice is given up. Every test grades notebook 01 only (CI time). The whole
adversarial catalogue (tests/adversarial) is graded on the cluster too, each attack getting the
verdict tests/test_adversarial.py expects of it there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader.build import NOTEBOOKS, ROOT, SOLUTIONS
from grader.isolation import fastpath, sandbox, views
from grader.isolation.runner import Limits
from tests.adversarial import ATTACKS, EXERCISES, NOTEBOOK
from tests.test_adversarial import _skip_reason, assert_verdict, build_submission

distributed = pytest.importorskip("distributed")

# grades through the real grader (sandboxed children, batches): the full suite only, not the
# inner loop (`pytest -m "not slow"`, CONTRIBUTING.md)
pytestmark = pytest.mark.slow
LIMITS = Limits(timeout=5, memory_mb=1536)
HOSTILE = ("segfault", "patch_torch", "forge_channel", "peek", "background_process")
CRASHER = "crasher"


def _fast_mode() -> str:
    """The sandbox these tests grade in: the strongest whose fast path runs here (bwrap, the
    default, else unshare)."""
    reasons = []
    for m in fastpath.MODES:
        why = sandbox._works(m)
        if why is None:
            return m
        reasons.append(why)
    pytest.skip(f"the fast path needs the bwrap or unshare sandbox: {'; '.join(reasons)}")


@pytest.fixture(scope="module")
def mode(monkeypatch_module) -> str:
    """The sandbox of these tests (see _fast_mode), asked for by name."""
    m = _fast_mode()
    monkeypatch_module.setenv(sandbox.ENV_VAR, m)
    return m


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> list[str]:
    """A small class: a full submission, a partial one (the learner notebook, nothing done), a
    few hostile ones, and one that crashes the worker that grades it."""
    base = tmp_path_factory.mktemp("class")
    full, partial, crasher = base / "full", base / "partial", base / CRASHER
    for d, src in ((full, SOLUTIONS), (partial, NOTEBOOKS), (crasher, SOLUTIONS)):
        d.mkdir()
        shutil.copy(src / f"{NOTEBOOK}.ipynb", d)
    ctx = {"SLEEP": "100000.5", "PORT": "9", "ROOT": str(ROOT), "LIBRARY": str(ROOT / "tfcourse"),
           "SUBMISSIONS": str(base), "REPORT": str(base / "report.json"), "SECRET": "secret-scale"}
    hostile = [build_submission(a, base / "hostile", ctx) for a in ATTACKS if a.name in HOSTILE]
    return [str(full), str(partial), *map(str, hostile), str(crasher)]


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, mode):
    """scheduler + 2 workers (1 thread each, with a nanny that restarts a dead worker)."""
    folder = tmp_path_factory.mktemp("dask")
    sched_file = folder / "scheduler.json"
    bindir = Path(sys.executable).parent
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1",
           "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0", "TFCOURSE_TEST_CRASH_WORKER": CRASHER}
    procs = [_start([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--no-dashboard", "--scheduler-file", str(sched_file)], env)]
    try:
        deadline = time.monotonic() + 120
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        for _ in range(2):
            procs.append(_start([str(bindir / "dask"), "worker", "--scheduler-file", str(sched_file),
                                 "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"], env))
        client = distributed.Client(scheduler_file=str(sched_file), timeout="120s")
        client.wait_for_workers(2, timeout=180)
        yield client
        client.close()
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)


def _grade(subs, **kw):
    from grader.batch import grade_batch

    return grade_batch(subs, notebooks=[NOTEBOOK], limits=LIMITS, quiet=True, **kw)


@pytest.fixture(scope="module")
def local_rows(klass, mode):
    """The class graded here (fast path), without the crasher."""
    return _grade(klass[:-1], jobs=2)


def _statuses(row: dict) -> dict[str, str]:
    return {e["exercise"]: e["status"] for nb in row["notebooks"] for e in nb["exercises"]}


def test_local_class_is_graded_as_expected(local_rows, mode):
    full, partial, *hostile = local_rows
    assert full["score"] == full["max_score"] > 0
    assert set(_statuses(partial).values()) == {"not_attempted"}
    assert all(r["sandbox"] == mode for r in local_rows)
    attacks = {a.name: a for a in ATTACKS}
    for row in hostile:  # the verdicts the adversarial suite expects
        attack = attacks[Path(row["submission"]).name]
        assert _statuses(row) == {e: attack.expect.get(e, "passed") for e in EXERCISES}, row["submission"]


def _same(rows) -> str:
    """The rows as JSON, the random names of job folders (in a peek's output) left out."""
    return re.sub(r"tfcourse-grade-\w+", "tfcourse-grade-*", json.dumps(rows, sort_keys=True))


def test_cluster_gives_the_same_rows_as_the_local_run(cluster, klass, local_rows):
    rows = _grade(klass[:-1], scheduler=cluster)
    assert _same(rows) == _same(local_rows)
    assert "dask-scratch-space" not in json.dumps(rows)  # the worker's own files stay hidden


def test_submission_that_crashes_its_worker_twice_gets_an_error_row(cluster, klass, local_rows):
    rows = _grade([klass[0], klass[-1]], scheduler=cluster)
    assert _same(rows[0]) == _same(local_rows[0])
    assert rows[1]["submission"] == klass[-1]
    statuses = set(_statuses(rows[1]).values())
    assert statuses == {"error"}, statuses
    assert "killing the cluster's workers" in rows[1]["notebooks"][0]["exercises"][0]["feedback"]
    cluster.wait_for_workers(2, timeout=180)  # the nannies brought them back


def test_killing_a_worker_mid_batch_still_gives_every_submission_a_row(cluster, klass, local_rows):
    subs = [klass[0], klass[1]] * 3
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(rows=_grade(subs, scheduler=cluster)))
    thread.start()
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        busy = [w for w, keys in cluster.processing().items() if keys]
        if busy:
            pid = cluster.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(pid, signal.SIGKILL)
            killed = busy[0]
        time.sleep(0.1)
    thread.join(timeout=600)
    assert killed is not None, "no worker was busy: the batch ended before one could be killed"
    rows = result["rows"]
    assert [r["submission"] for r in rows] == subs
    assert _same(rows) == _same([local_rows[0], local_rows[1]] * 3)
    cluster.wait_for_workers(2, timeout=180)


@pytest.mark.adversarial
def test_every_hostile_submission_gets_its_verdict_on_the_cluster(cluster, mode, tmp_path):
    """The adversarial catalogue (every attack the sandbox here can safely run) graded on the
    Dask cluster: each submission gets the verdict tests/test_adversarial.py expects of it."""
    ctx = {"SLEEP": "100000.7", "PORT": "9", "ROOT": str(ROOT), "LIBRARY": str(ROOT / "tfcourse"),
           "SUBMISSIONS": str(tmp_path), "REPORT": str(tmp_path / "report.json"), "SECRET": "secret-dask"}
    chosen = [a for a in ATTACKS if _skip_reason(a, mode) is None]
    subs = [str(build_submission(a, tmp_path / "hostile", ctx)) for a in chosen]
    rows = _grade(subs, scheduler=cluster)
    assert [r["submission"] for r in rows] == subs
    for attack, row in zip(chosen, rows, strict=True):
        assert_verdict(attack, row)
    cluster.wait_for_workers(2, timeout=180)


def test_cli_scheduler_option_writes_the_same_report(cluster, klass, local_rows, tmp_path):
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "grader", *klass[:2], "--notebooks", NOTEBOOK, "--timeout", "5", "--memory",
           "1536", "--scheduler", cluster.scheduler.address, "--json", str(report), "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _same(json.loads(report.read_text())["submissions"]) == _same(local_rows[:2])



def test_instructor_grade_on_the_cluster_writes_the_same_gradebook(cluster, mode, tmp_path, capsys,
                                                                   monkeypatch):
    """``python -m grader.instructor grade --scheduler``: the same scores per test cell in nbgrader's
    gradebook as a local ``grade`` (a full and a partial student, notebook 01), each submission
    saved as its row comes back, and a re-run on the cluster skips what is graded."""
    import nbformat

    from grader.instructor.__main__ import main
    from tests.test_instructor import _cell_scores, _submit
    from tests.test_nbgrader_roundtrip import INVERTED_MASK_SDPA, _with_cells

    here = tmp_path / "here"
    assert main(["init", str(here), "--assignments", NOTEBOOK]) == 0
    released = nbformat.read(here / "release" / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4)
    source = nbformat.read(here / "source" / NOTEBOOK / f"{NOTEBOOK}.ipynb", as_version=4)
    _submit(here, "full", NOTEBOOK, _with_cells(released, source, {}))
    _submit(here, "partial", NOTEBOOK,
            _with_cells(released, source, {"scaled_dot_product_attention": INVERTED_MASK_SDPA}))
    there = tmp_path / "there"
    shutil.copytree(here, there)
    limits = ["--timeout", "5", "--memory", "1536"]
    assert main(["grade", str(here), "--jobs", "2", *limits]) == 0
    capsys.readouterr()

    def not_here(*args, **kwargs):
        raise AssertionError("graded in the instructor's process, not on the cluster")

    monkeypatch.setattr("grader.grading.grade_submission", not_here)
    assert main(["grade", str(there), *limits, "--scheduler", cluster.scheduler.address]) == 0
    out, err = capsys.readouterr()
    assert "2 submission(s) to grade, 0 already graded" in out, (out, err)
    assert out.count(f"graded full/{NOTEBOOK}") + out.count(f"graded partial/{NOTEBOOK}") == 2, out
    scores = {s: _cell_scores(there, NOTEBOOK, s) for s in ("full", "partial")}
    assert scores == {s: _cell_scores(here, NOTEBOOK, s) for s in ("full", "partial")}
    assert sum(scores["full"].values()) == 10 and sum(scores["partial"].values()) == 7.5, scores  # the inverted mask costs masks and half
    assert (there / "autograded" / "partial" / NOTEBOOK / f"{NOTEBOOK}.ipynb").is_file()
    assert main(["grade", str(there), *limits, "--scheduler", cluster.scheduler.address]) == 0
    assert "0 submission(s) to grade, 2 already graded" in capsys.readouterr().out

# ---------------------------------------------------------------------------------------------
# the fast path itself
# ---------------------------------------------------------------------------------------------
def _pids_masked(rows) -> str:
    """_same, with the PID background_process prints masked: a cold unshare child is PID 1 of
    its namespace, a fork (like a cold bwrap child) PID 2 under a small init."""
    return re.sub(r"BACKGROUND-STARTED \d+", "BACKGROUND-STARTED N", _same(rows))


def test_fast_and_cold_paths_give_the_same_rows(klass, local_rows, monkeypatch):
    monkeypatch.setenv("TFCOURSE_FAST", "0")
    cold = _grade(klass[:4], jobs=2)
    assert _pids_masked(cold) == _pids_masked(local_rows[:4])


def test_a_hostile_notebook_does_not_change_the_next_one_graded_by_the_same_zygote(klass, local_rows, mode):
    # --jobs 1: one zygote grades the hostile notebooks, then the full one
    rows = _grade([*klass[2:-1], klass[0]], jobs=1)
    assert _same(rows[-1]) == _same(local_rows[0])


def test_one_submission_with_jobs_grades_its_notebooks_side_by_side_with_the_same_rows(tmp_path, monkeypatch, mode):
    """--jobs 2 on a single submission grades two of its notebooks at a time (issue 30: one
    submission on both cores); the rows are those of --jobs 1, in the course's order."""
    import grader.grading as grading
    from grader.batch import grade_batch

    names = ["01_attention", "02_multi_head_attention", "04_normalisation"]
    sub = tmp_path / "sub"
    sub.mkdir()
    for name, source in zip(names, (SOLUTIONS, SOLUTIONS, NOTEBOOKS), strict=True):  # 04 untouched
        shutil.copy(source / f"{name}.ipynb", sub)
    one = grade_batch([str(sub)], notebooks=names, limits=LIMITS, quiet=True, jobs=1)

    running, most, lock = [0], [0], threading.Lock()
    grade_notebook = grading.grade_notebook

    def counted(*args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            time.sleep(0.5)  # let the other thread start its notebook
            return grade_notebook(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(grading, "grade_notebook", counted)
    two = grade_batch([str(sub)], notebooks=names, limits=LIMITS, quiet=True, jobs=2)
    assert most[0] == 2
    assert [n["notebook"] for n in two[0]["notebooks"]] == names
    assert [n["status"] for n in two[0]["notebooks"]] == ["graded", "graded", "graded"]
    assert _same(two) == _same(one)


def test_zygote_refuses_to_fork_with_threads_or_shared_memory():
    code = ("import sys, threading, mmap; sys.path.insert(0, 'grader/isolation'); import zygote;"
            "assert zygote.unsafe_to_fork() == '', zygote.unsafe_to_fork();"
            "m = mmap.mmap(-1, 4096); assert 'shared' in zygote.unsafe_to_fork(); m.close();"
            "e = threading.Event(); t = threading.Thread(target=e.wait); t.start();"
            "assert 'threads' in zygote.unsafe_to_fork(); e.set(); t.join(); print('ok')")
    _prints_ok(code)


def _prints_ok(code: str) -> None:
    """Run ``code`` in a fresh interpreter from the checkout; it must print ok."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_numerics_reset_turns_deterministic_mode_off_and_imports_nothing_otherwise():
    """Between calls a child restores torch's numeric flags. torch.use_deterministic_algorithms
    imports torch._inductor (3 s) on its first call, so the reset calls it only for a learner who
    turned the flag on; and the zygote's warm-up and the shape watcher import neither torch._inductor
    nor torch._dynamo, which would be paid at every command's start."""
    code = ("import sys, torch; sys.path.insert(0, 'grader/isolation'); import child, zygote;"
            "zygote.warm(); reset = child._numerics_reset(torch, 0); reset();"
            "from tfcourse.checks.evidence import watch_shapes;"
            "start, stop, verdict = watch_shapes(((2, 2),)); start(); torch.nn.Linear(3, 2)(torch.ones(2, 3));"
            "stop(None, None, None); assert verdict() is not None;"
            "heavy = [m for m in ('torch._inductor', 'torch._dynamo') if m in sys.modules]; assert not heavy, heavy;"
            "torch.use_deterministic_algorithms(True, warn_only=True); reset();"
            "assert not torch.are_deterministic_algorithms_enabled();"
            "assert not torch.is_deterministic_algorithms_warn_only_enabled(); print('ok')")
    _prints_ok(code)


# What a forked child checks about itself (the probe replaces softmax; each fact is printed as
# name=True/False). TAG is written into /tmp, /dev/shm and a System V shared memory segment:
# the next fork of the same zygote must find none of them.
FORK_PROBE = r"""
import os
def softmax(x, dim=-1):
    import ctypes, importlib, socket, torch
    libc = ctypes.CDLL(None, use_errno=True)
    checkout, job, tag = {checkout!r}, {job!r}, {tag!r}
    facts = {{"pid2_under_init": (os.getpid(), os.getppid()) == (2, 1),
              "hostname": socket.gethostname() == "grader"}}
    facts["checkout_hidden"] = not os.path.isdir(checkout) or not os.listdir(checkout)
    try:
        importlib.import_module("tfcourse.reference.nb01_attention")
        facts["reference_hidden"] = False
    except ImportError:
        facts["reference_hidden"] = True
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    facts["no_capabilities"] = int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    facts["no_new_privs"] = status["NoNewPrivs"].strip() == "1"
    facts["own_job"] = os.path.isfile(os.path.join(job, "job.json"))
    facts["other_jobs_hidden"] = all(not os.path.isdir(d) or sorted(os.listdir(d)) in ([], [os.path.basename(job)])
                                     for d in {jobs_dirs!r})
    facts["job_read_only"] = not os.access(job, os.W_OK) or _cannot_write(os.path.join(job, "x"))
    facts["no_network"] = _no_network()
    facts["loopback"] = _loopback() == {loopback!r}
    facts["root_read_only"] = _cannot_write("/" + tag)
    libc.syscall.restype = ctypes.c_long
    keyctl = {{"x86_64": 250, "aarch64": 219}}.get(os.uname().machine)
    facts["no_keyrings"] = keyctl is None or (libc.syscall(keyctl, 0, -4, 0) == -1 and ctypes.get_errno() == 1)
    # the namespace's init (PID 1) is out of reach: no ptrace, no /proc/1/mem, no /proc/1/fd
    libc.ptrace.restype = ctypes.c_long
    facts["init_not_traceable"] = libc.ptrace(16, 1, 0, 0) == -1  # PTRACE_ATTACH
    facts["init_mem_closed"] = _cannot_open("/proc/1/mem", "rb") and _cannot_open("/proc/1/mem", "r+b")
    try:
        fds = os.listdir("/proc/1/fd")
    except OSError:
        fds = []
    facts["init_fds_closed"] = all(_cannot_open("/proc/1/fd/" + fd, "wb") for fd in fds)
    # what an earlier fork left must be gone; then leave some for the next one
    home = os.environ["HOME"]
    left = [os.path.join(d, tag) for d in (home, "/tmp", "/dev/shm")]
    facts["fresh_scratch"] = not any(os.path.exists(p) for p in left)
    key = 0x7FC0
    facts["fresh_ipc"] = libc.shmget(key, 4096, 0) == -1
    facts["home_writable"] = not _cannot_write(left[0])
    _cannot_write(left[1])
    facts["shm_writable"] = not _cannot_write(left[2])
    libc.shmget(key, 4096, 0o1666)
    print("FACTS", sorted(facts.items()), flush=True)
    return torch.softmax(x, dim)

def _cannot_open(path, mode):
    try:
        open(path, mode).close()
        return False
    except OSError:
        return True

def _cannot_write(path):
    try:
        open(path, "w").close()
        return False
    except OSError:
        return True

def _loopback():
    import socket
    server = socket.socket()
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        socket.create_connection(server.getsockname(), timeout=1).close()
        return True
    except OSError:
        return False
    finally:
        server.close()

def _no_network():
    import socket
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1).close()
    except OSError as exc:
        return "unreachable" in str(exc).lower() or getattr(exc, "errno", 0) in (101, 111, 113, 99)
    return False
"""


@pytest.mark.parametrize("fast_mode", fastpath.MODES)
def test_fork_makes_the_cold_childs_sandbox(fast_mode, tmp_path, monkeypatch):
    """Two forks of one zygote, in each mode the fast path serves: each is PID 2 of its own
    namespace under a small init (as a cold bwrap child), has no capabilities, sees its own job
    and not the checkout, the graded notebook's reference or other jobs, has a loopback where
    the cold child has one (bwrap), and finds nothing the fork before it left in /tmp, /dev/shm
    or System V IPC. Every child must really be a fork (not the cold path after a failure)."""
    from grader.course import load_course
    from grader.isolation import runner

    if (why := sandbox._works(fast_mode)) is not None:
        pytest.skip(f"sandbox {fast_mode!r} cannot run here: {why}")
    monkeypatch.setenv(sandbox.ENV_VAR, fast_mode)
    monkeypatch.delenv(fastpath.ENV_VAR, raising=False)
    forks = []
    real_launch = fastpath.launch

    def launch(*args, **kwargs):
        child = real_launch(*args, **kwargs)
        forks.append(child)
        return child

    monkeypatch.setattr(fastpath, "launch", launch)
    nb = load_course()[NOTEBOOK]
    jobs = views.jobs_folder()
    # the job folder's path as the child sees it: /job in bwrap, its real path in unshare
    for _ in range(2):
        job = views.JOB_VIEW if fast_mode == "bwrap" else None
        source = FORK_PROBE.format(checkout=str(ROOT / "solutions"), job=job or "@JOB@", tag="tfcourse-fork-probe",
                                   jobs_dirs=[jobs, views.JOBS_VIEW], loopback=fast_mode == "bwrap")
        if job is None:  # unshare: the probe finds its job folder from its working directory
            source = source.replace("'@JOB@'", "os.path.dirname(os.getcwd())")
        run = runner.run_notebook(NOTEBOOK, nb.setup, {"softmax": source},
                                  {"softmax": nb.cases_module().cases("softmax", 0)[:1]},
                                  device="cpu", limits=LIMITS, seed=0)
        line = [ln for ln in run.output.splitlines() if ln.startswith("FACTS")]
        assert line, run.output[-2000:]
        facts = dict(eval(line[0][len("FACTS "):]))  # noqa: S307 - our own probe's repr
        assert all(facts.values()), (fast_mode, {k: v for k, v in facts.items() if not v}, run.output[-1500:])
    assert len(forks) == 2 and fastpath._broken == "", fastpath._broken


def test_a_zygote_view_depends_only_on_folders_it_would_show(tmp_path, monkeypatch):
    """A Dask worker protects a new folder per task (outside the view): the bwrap zygote is kept.
    A protected folder inside a folder the view shows must be covered: a new zygote."""
    monkeypatch.setattr(views, "_protected", set())
    box = sandbox.Sandbox("bwrap")
    before = fastpath._key(box, "cpu")
    views.protect([tmp_path / "tfcourse-submission-1"])
    assert fastpath._key(box, "cpu") == before
    inside = Path(sys.prefix) / "tfcourse-test-not-created"
    views.protect([inside])
    assert fastpath._key(box, "cpu") != before and str(inside) in fastpath._key(box, "cpu")[2]
    assert fastpath._key(box, "cuda") != fastpath._key(box, "cpu")


SURVIVOR = """
import ctypes, os, time
def softmax(x, dim=-1):
    libc = ctypes.CDLL(None)
    libc.prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0: no death signal
    libc.prctl(15, b"{name}", 0, 0, 0)  # PR_SET_NAME, to be found in the process list
    try:
        os.setsid()
    except OSError:
        pass
    time.sleep(600)
"""


def _named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as fh:
                if fh.read().strip() == name:
                    found.append(int(entry))
        except (OSError, ValueError):
            pass
    return found


@pytest.mark.parametrize("fast_mode", fastpath.MODES)
def test_learner_code_dies_with_a_killed_grader(fast_mode, tmp_path):
    """Learner code that clears its death signal and leaves its session must not outlive a
    grader killed with SIGKILL (no clean-up in the grader at all): the fork's init keeps the
    death signal, and the zygote kills the job when the grader's socket closes."""
    if (why := sandbox._works(fast_mode)) is not None:
        pytest.skip(f"sandbox {fast_mode!r} cannot run here: {why}")
    name = f"tfsurv{os.getpid() % 100000}"
    nb = json.loads((SOLUTIONS / f"{NOTEBOOK}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "softmax":
            cell["source"] = SURVIVOR.format(name=name)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / f"{NOTEBOOK}.ipynb").write_text(json.dumps(nb))
    env = {**os.environ, sandbox.ENV_VAR: fast_mode, "TFCOURSE_FAST": "1"}
    grader = subprocess.Popen([sys.executable, "-m", "grader", str(tmp_path / "sub"), "--notebooks", NOTEBOOK,
                               "--timeout", "120", "--quiet", "--json", str(tmp_path / "r.json")],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not _named(name) and time.monotonic() < deadline and grader.poll() is None:
            time.sleep(0.2)
        assert _named(name), "the learner code never started"
    finally:
        grader.kill()
        grader.wait()
    deadline = time.monotonic() + 15
    while _named(name) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _named(name)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"learner processes outlived the grader: {left}"


KEYRING_PROBE = """
import ctypes, os
def softmax(x, dim=-1):
    import torch
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
    got = libc.syscall(keyctl, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID of the user keyring
    print("KEYCTL", got, ctypes.get_errno(), flush=True)
    libc.ptrace.restype = ctypes.c_long
    print("PTRACE", libc.ptrace(16, 1, 0, 0), ctypes.get_errno(), flush=True)  # PTRACE_ATTACH to PID 1
    try:
        open("/proc/1/mem", "r+b").close()
        print("MEM open", flush=True)
    except OSError:
        print("MEM closed", flush=True)
    return torch.softmax(x, dim)
"""


@pytest.mark.parametrize("mode, fast", [("bwrap", "0"), ("unshare", "0"), ("none", "0"), ("bwrap", "1")])
def test_keyring_and_ptrace_calls_are_refused_in_every_child(mode, fast, monkeypatch):
    """The grader's user's kernel keyrings and the sandbox's init are out of reach of learner
    code, cold or forked, in every sandbox (a seccomp filter in child.py refuses the keyring
    calls and ptrace; /proc/1/mem cannot be opened for writing in bwrap and unshare)."""
    from grader.course import load_course
    from grader.isolation import runner

    if os.uname().machine not in ("x86_64", "aarch64") or sys.platform != "linux":
        pytest.skip("the filter knows x86_64 and aarch64 Linux only")
    if (why := sandbox._works(mode)) is not None:
        pytest.skip(f"sandbox {mode!r} cannot run here: {why}")
    monkeypatch.setenv(sandbox.ENV_VAR, mode)
    monkeypatch.setenv(fastpath.ENV_VAR, fast)
    nb = load_course()[NOTEBOOK]
    run = runner.run_notebook(NOTEBOOK, nb.setup, {"softmax": KEYRING_PROBE},
                              {"softmax": nb.cases_module().cases("softmax", 0)[:1]},
                              device="cpu", limits=LIMITS, seed=0)
    assert "KEYCTL -1 1" in run.output and "PTRACE -1 1" in run.output, run.output[-2000:]
    if mode != "none":  # with no sandbox, PID 1 is the machine's init: the grader's user's business
        assert "MEM closed" in run.output, run.output[-2000:]
