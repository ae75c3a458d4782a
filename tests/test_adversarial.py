"""Hostile submissions through the real grader CLI (docs/grading.md, "What a submission can try").

Every submission in ``tests/adversarial`` is built from the solutions of notebook 01 with one
thing changed, and they are graded together in one batch by ``python -m grader ... --jobs 2``
(short limits: ``--timeout 5 --memory 1536``). For each, the exercise it touches must get the
stated verdict and every other exercise full points. Around the batch the suite checks that no
process it started is left running, that no file outside its temporary folders changed, that a
batch gives one row per submission, that honest submissions get the same JSON in the batch as
alone, and that grading twice gives the same JSON.

The batch runs once per sandbox mode the machine offers (issue 15), through the fast path
where the mode has one (bwrap, unshare: a warm zygote forks each notebook's child, docs/scale.md;
the batch fails if the grader fell back to fresh interpreters): in ``bwrap`` mode every
hostile submission, in ``unshare`` mode those that attack files, peek, forge or use the network,
plus a few of every other kind (``UNSHARE_SET``; ``TFCOURSE_ADVERSARIAL_ALL=1`` runs them all
there too); ``none`` only where neither works. Attacks whose assertions need isolation a mode
cannot give (a private file view needs bwrap or unshare; network and PID namespaces too) are
skipped there, with the reason, and never run: unsandboxed they would really overwrite course
files.
The sandbox's plumbing (fallback, hidden paths, the results channel) has fast tests at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import tfcourse
from grader.build import NOTEBOOKS, ROOT, SOLUTIONS
from grader.isolation import linux, sandbox, views
from tests.adversarial import (
    ATTACKS,
    BACKGROUND,
    DOUBLE_FORK,
    EXERCISES,
    KINDS,
    MEM_RAISE_LIMIT,
    NOTEBOOK,
    Hostile,
    fill,
)
from tfcourse.notebook import read_notebook, solution_cells

TIMEOUT, MEMORY, OUTPUT_KB = "5", "1536", 64
# grades through the real grader (sandboxed children, batches): the full suite only, not the
# inner loop (`pytest -m "not slow"`, CONTRIBUTING.md)
pytestmark = pytest.mark.slow
WATCHED = ("solutions", "notebooks", "tfcourse", "grader")
NEEDS = {"": {"bwrap", "unshare", "none"}, "files": {"bwrap", "unshare"}, "network": {"bwrap", "unshare"},
         "pidns": {"bwrap", "unshare"}}
# What the unshare batch runs (CI time): every attack on files, peeking, forging and the network,
# and one or two of each kind whose outcome depends on the sandbox (processes, limits, output).
UNSHARE_SET = {a.name for a in ATTACKS if a.needs or a.kind in ("peeking", "forging the report")} | {
    "loop_plain", "memory_one_allocation", "fork_loop", "background_process", "double_fork_setsid",
    "segfault", "output_flood", "big_file", "patch_checks"}
ALL_ENV = "TFCOURSE_ADVERSARIAL_ALL"
HONEST = ("honest", "honest_with_mistakes")  # graded in the batch and alone


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _tree_hash(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``root`` (bytecode caches aside)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _changed(before: dict[str, dict[str, str]]) -> list[str]:
    """Files of the WATCHED folders added, removed or changed since ``before``."""
    out = []
    for d, old in before.items():
        new = _tree_hash(ROOT / d)
        out += [f"{d}/{f}" for f in sorted(set(old) | set(new)) if old.get(f) != new.get(f)]
    return out


def _processes_matching(*needles: str) -> list[str]:
    """Command lines of running processes that contain any of ``needles``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if any(n in cmd for n in needles):
            found.append(f"{entry}: {cmd[:200]}")
    return found


def _leftovers(*needles: str, grace: float = 10.0) -> list[str]:
    """Processes still matching after ``grace`` seconds (a killed PID namespace takes a moment)."""
    deadline = time.monotonic() + grace
    while True:
        left = _processes_matching(*needles)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _solution_sources() -> tuple[dict[str, str], dict[str, str]]:
    solutions = {k: c.source for k, c in solution_cells(read_notebook(SOLUTIONS / f"{NOTEBOOK}.ipynb"),
                                                          list(EXERCISES)).items()}
    stubs = {k: c.source for k, c in solution_cells(read_notebook(NOTEBOOKS / f"{NOTEBOOK}.ipynb"),
                                                     list(EXERCISES)).items()}
    return solutions, stubs


def build_submission(attack: Hostile, folder: Path, ctx: dict[str, str]) -> Path:
    """Write ``attack``'s submission under ``folder / attack.name``; return what to grade."""
    solutions, stubs = _solution_sources()
    nb = nbformat.read(SOLUTIONS / f"{NOTEBOOK}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in attack.cells:
            cell.source = fill(attack.cells[gid], gid, ctx, solutions)
    content = attack.mangle(nb, stubs=stubs) if attack.mangle else nb
    sub = folder / attack.name
    sub.mkdir(parents=True)
    if attack.filename is None:
        (sub / "README.txt").write_text("my notebook is somewhere else\n")
        return sub
    path = sub / attack.filename
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        nbformat.write(content, path)
    return path if attack.as_file else sub


def run_cli(submissions: list[Path], report: Path, *, jobs: int, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "grader", *map(str, submissions), "--notebooks", NOTEBOOK, "--jobs", str(jobs),
           "--timeout", TIMEOUT, "--memory", MEMORY, "--output", str(OUTPUT_KB), "--json", str(report), "--quiet"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)


def _honest(name: str) -> Hostile:
    wrong = {"softmax": "@@WRONG@@", "padding_mask": "@@WRONG@@"} if name == "honest_with_mistakes" else {}
    return Hostile(name, "honest", wrong)


@pytest.fixture(scope="module")
def mode() -> str:
    return sandbox.choose().mode


@pytest.fixture(scope="module", params=["bwrap", "unshare", "none", "bwrap-cold"])
def batch_mode(request) -> str:
    """Each sandbox mode this machine offers (none only where no sandbox works); ``bwrap-cold``:
    bubblewrap with the fast path off (``TFCOURSE_FAST=0``, a fresh interpreter per notebook, the
    fallback when a zygote cannot run), on the unshare subset."""
    mode = request.param.partition("-")[0]
    why = sandbox._works(mode)
    if why is not None:
        pytest.skip(f"sandbox {mode!r} cannot run here: {why}")
    if mode == "none" and any(sandbox._works(m) is None for m in ("bwrap", "unshare")):
        pytest.skip("mode 'none' runs the batch only where neither bwrap nor unshare works")
    return request.param


def _skip_reason(attack: Hostile, variant: str) -> str | None:
    mode = variant.partition("-")[0]
    if mode not in NEEDS[attack.needs]:
        return (f"needs {attack.needs!r} isolation; the sandbox here is {mode!r} "
                f"(install bubblewrap for the full suite)")
    if variant in ("unshare", "bwrap-cold") and attack.name not in UNSHARE_SET and not os.environ.get(ALL_ENV):
        return f"not in the {variant} subset (CI time; {ALL_ENV}=1 runs every attack there)"
    return None


@pytest.fixture(scope="module")
def batch(tmp_path_factory, batch_mode) -> dict:
    """Build every hostile submission this machine can safely run, grade them in one CLI batch
    (--jobs 2), and record what the suite checks afterwards."""
    variant = batch_mode
    mode, _, cold = variant.partition("-")
    base = tmp_path_factory.mktemp(f"adversarial-{variant}")
    subs, jobs, reports = base / "submissions", base / "jobs", base / "report"
    for d in (subs, jobs, reports):
        d.mkdir()
    marker = str(random.randrange(10**8, 10**9))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    report = reports / "report.json"
    ctx = {"SLEEP": f"100000.{marker}", "PORT": str(server.getsockname()[1]), "ROOT": str(ROOT),
           "LIBRARY": str(Path(tfcourse.__file__).resolve().parent), "SUBMISSIONS": str(subs),
           "REPORT": str(report), "SECRET": f"secret-{marker}"}
    chosen = [a for a in ATTACKS if _skip_reason(a, variant) is None]
    paths = [build_submission(a, subs, ctx) for a in chosen]
    paths += [build_submission(_honest(n), subs, ctx) for n in HONEST]
    names = [a.name for a in chosen] + list(HONEST)

    before = {d: _tree_hash(ROOT / d) for d in WATCHED}
    subs_before = _tree_hash(subs)
    env = {**os.environ, "TMPDIR": str(jobs), sandbox.ENV_VAR: mode, "TFCOURSE_TEST_SECRET": ctx["SECRET"],
           "TFCOURSE_FAST": "0" if cold else "1"}
    started = time.monotonic()
    proc = run_cli(paths, report, jobs=2, env=env)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    if mode in ("bwrap", "unshare") and not cold:  # graded by forks of warm zygotes, not the cold path
        assert "fast path is off" not in proc.stderr, proc.stderr[-3000:]
    try:
        conn, _ = server.accept()
        conn.close()
        contacted = True
    except BlockingIOError:
        contacted = False
    server.close()
    data = json.loads(report.read_text())
    return {
        "mode": mode, "variant": variant, "ctx": ctx, "names": names, "paths": paths, "report": data, "stderr": proc.stderr,
        "rows": dict(zip(names, data["submissions"], strict=True)), "contacted": contacted,
        "leftover": _leftovers(marker, str(jobs)), "changed": _changed(before),
        "subs_changed": _tree_hash(subs) != subs_before, "jobs_left": sorted(p.name for p in jobs.iterdir()),
        "subs": subs, "jobs": jobs, "env": env, "elapsed": elapsed,
    }


# ---------------------------------------------------------------------------------------------
# the verdict of every hostile submission
# ---------------------------------------------------------------------------------------------
def test_catalogue_covers_every_kind_of_threat():
    assert len(ATTACKS) >= 20
    assert {a.kind for a in ATTACKS} == set(KINDS)
    assert len({a.name for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.adversarial
@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_hostile_submission(attack: Hostile, batch):
    if attack.name not in batch["rows"]:
        pytest.skip(_skip_reason(attack, batch["variant"]))
    assert_verdict(attack, batch["rows"][attack.name])


def assert_verdict(attack: Hostile, row: dict) -> None:
    """``row`` (one submission, notebook 01) is what the catalogue expects of ``attack``."""
    (nb,) = row["notebooks"]
    assert nb["notebook"] == NOTEBOOK and nb["status"] == attack.notebook_status
    assert [ex["exercise"] for ex in nb["exercises"]] == list(EXERCISES)
    for ex in nb["exercises"]:
        want = attack.expect.get(ex["exercise"], "passed")
        assert ex["status"] == want, f"{ex['exercise']}: {ex['feedback']}\n--- output:\n{nb['output'][-2000:]}"
        assert ex["score"] == (ex["max_score"] if want == "passed" else 0.0)
        for text in attack.feedback.get(ex["exercise"], ()):
            assert text in ex["feedback"], ex["feedback"]
        assert "Traceback" not in ex["feedback"]
    assert row["score"] == sum(ex["score"] for ex in nb["exercises"])
    for text in attack.output_has:
        assert text in nb["output"], nb["output"][-2000:]
    for text in attack.output_lacks:
        assert text not in nb["output"], nb["output"][-2000:]
    assert len(nb["output"].encode()) <= OUTPUT_KB * 1024 + 200  # capped, whatever was printed


# ---------------------------------------------------------------------------------------------
# the batch as a whole
# ---------------------------------------------------------------------------------------------
@pytest.mark.adversarial
def test_batch_gives_one_row_per_submission_in_order(batch):
    rows = batch["report"]["submissions"]
    assert [r["submission"] for r in rows] == [str(p) for p in batch["paths"]]
    assert all(r["sandbox"] == batch["mode"] for r in rows)
    assert batch["rows"]["honest"]["score"] == batch["rows"]["honest"]["max_score"] == 10.0
    print(f"graded {len(rows)} submissions in {batch['elapsed']:.0f} s (sandbox: {batch['mode']})")


@pytest.mark.adversarial
def test_no_process_started_by_the_suite_is_left_running(batch):
    assert batch["leftover"] == []


@pytest.mark.adversarial
def test_no_file_outside_the_temporary_folders_changed(batch):
    assert batch["changed"] == [], "course files changed during the adversarial batch"
    assert not batch["subs_changed"], "a submission changed another submission's files"
    assert batch["jobs_left"] == [], "job folders were left behind"


@pytest.mark.adversarial
def test_forged_files_do_not_reach_the_report(batch):
    if "forge_files" not in batch["rows"]:
        pytest.skip(f"forge_files does not run in sandbox {batch['mode']!r}")
    assert not (batch["subs"] / "forge_files" / "01_attention.results.json").exists()
    assert [r["submission"] for r in batch["report"]["submissions"]] == [str(p) for p in batch["paths"]]
    assert batch["rows"]["forge_files"]["score"] == 8.0


@pytest.mark.adversarial
def test_network_attempt_reaches_nothing(batch):
    if "network" not in batch["rows"]:
        pytest.skip("needs a network namespace (bwrap or unshare)")
    assert not batch["contacted"]


@pytest.mark.adversarial
def test_honest_submissions_same_alone_as_in_the_batch(batch):
    """Graded again, alone, honest submissions get exactly the rows they got in the batch next to
    hostile ones (--jobs 2): the same JSON, so regrading is deterministic too."""
    honest = [p for n, p in zip(batch["names"], batch["paths"], strict=True) if n in HONEST]
    out = batch["jobs"].parent / "alone.json"
    proc = run_cli(honest, out, jobs=2, env=batch["env"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    alone = json.loads(out.read_text())
    assert alone["submissions"] == [batch["rows"][n] for n in HONEST]
    per_batch = ("submissions", "limited")  # the rows, and those of them a limit stopped
    assert {k: v for k, v in alone.items() if k not in per_batch} == \
        {k: v for k, v in batch["report"].items() if k not in per_batch}
    assert not alone["limited"]
    assert alone["submissions"][1]["score"] == 7.0  # softmax (2) and padding_mask (1) lost, nothing else


@pytest.mark.adversarial
def test_file_system_walk_finds_the_solutions_without_a_sandbox(tmp_path):
    """The control of issue 15's attack (``fs_walk``): with no sandbox it does find the course's
    solutions (and other submissions) and gets full points, so its 0 in bwrap and unshare mode
    (test_hostile_submission) is the sandbox's doing. The attack only reads."""
    (attack,) = [a for a in ATTACKS if a.name == "fs_walk"]
    subs = tmp_path / "submissions"
    ctx = {"ROOT": str(ROOT), "SUBMISSIONS": str(subs)}
    path = build_submission(attack, subs, ctx)
    build_submission(_honest("honest"), subs, ctx)
    env = {k: v for k, v in os.environ.items() if k != sandbox.ENV_VAR}
    cmd = [sys.executable, "-m", "grader", str(path), "--notebooks", NOTEBOOK, "--sandbox", "none",
           "--timeout", TIMEOUT, "--memory", MEMORY, "--json", str(tmp_path / "r.json"), "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**env, "TMPDIR": str(tmp_path)}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads((tmp_path / "r.json").read_text())["submissions"]
    (nb,) = row["notebooks"]
    assert row["sandbox"] == "none"
    assert "WALK-FOUND" in nb["output"] and "(another submission)" in nb["output"], nb["output"][-2000:]
    assert row["score"] == row["max_score"], nb["exercises"]


# ---------------------------------------------------------------------------------------------
# weaker isolation where the tools are missing: a warning, and the same verdicts
# ---------------------------------------------------------------------------------------------
# One submission with an attack in three exercises: processes that leave the group or the
# session, and a memory bomb that first tries to lift its own limit.
FALLBACK = Hostile("fallback", "process tricks",
                   {"scaled_dot_product_attention": MEM_RAISE_LIMIT, "causal_mask": BACKGROUND,
                    "padding_mask": DOUBLE_FORK},
                   expect={"scaled_dot_product_attention": "error"})


@pytest.fixture(scope="module")
def fallback(tmp_path_factory, mode) -> dict:
    """With bwrap (and unshare) off PATH, grade a few hostile submissions: both runs at once."""
    runs = {}
    for name, tools in (("none", ()), ("unshare", ("unshare",))):
        if tools and mode == "none":
            continue
        base = tmp_path_factory.mktemp(f"fallback-{name}")
        bindir, jobs = base / "bin", base / "jobs"
        bindir.mkdir()
        jobs.mkdir()
        for tool in (*tools, "sleep"):  # the sandbox tool, and what the attacks start
            (bindir / tool).symlink_to(sandbox.shutil.which(tool))
        marker = str(random.randrange(10**8, 10**9))
        # `sleep` by its full path: the sandboxed child does not see this test's bin folder (it
        # lies in a temporary folder, hidden in unshare mode as in bwrap's).
        sleep = sandbox.shutil.which("sleep")
        attacks = [Hostile(FALLBACK.name, FALLBACK.kind, {k: v.replace('"sleep"', repr(sleep))
                                                          for k, v in FALLBACK.cells.items()}, expect=FALLBACK.expect)]
        paths = [build_submission(a, base / "subs", {"SLEEP": f"100000.{marker}"}) for a in attacks]
        env = {k: v for k, v in os.environ.items() if k != sandbox.ENV_VAR}
        env.update(PATH=str(bindir), TMPDIR=str(jobs))
        cmd = [sys.executable, "-m", "grader", *map(str, paths), "--notebooks", NOTEBOOK, "--jobs", "1",
               "--timeout", TIMEOUT, "--memory", MEMORY, "--json", str(base / "r.json"), "--quiet"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs[name] = {"proc": proc, "attacks": attacks, "marker": marker, "jobs": jobs, "report": base / "r.json"}
    for run in runs.values():
        _, run["stderr"] = run["proc"].communicate(timeout=1200)
        run["leftover"] = _leftovers(run["marker"], str(run["jobs"]))
    return runs


@pytest.mark.adversarial
@pytest.mark.parametrize("expected", ["none", "unshare"])
def test_fallback_without_bubblewrap(expected, fallback):
    """The grader warns once, says which sandbox it used, and still grades correctly."""
    if expected not in fallback:
        pytest.skip("unshare does not work on this machine")
    run = fallback[expected]
    assert run["proc"].returncode == 0, run["stderr"][-3000:]
    warnings = [line for line in run["stderr"].splitlines() if "weaker isolation" in line]
    assert len(warnings) == 1 and f"sandbox {expected!r}" in warnings[0], run["stderr"]
    rows = json.loads(run["report"].read_text())["submissions"]
    for attack, row in zip(run["attacks"], rows, strict=True):
        assert row["sandbox"] == expected
        for ex in row["notebooks"][0]["exercises"]:
            assert ex["status"] == attack.expect.get(ex["exercise"], "passed"), (attack.name, ex)
    assert run["leftover"] == []


# ---------------------------------------------------------------------------------------------
# the plumbing, in-process (fast)
# ---------------------------------------------------------------------------------------------
def test_bwrap_view_never_binds_the_course_checkout(tmp_path):
    spec = views.launch("bwrap", tmp_path, ["3"], device="cpu", scratch_mb=8)
    argv = spec.argv
    sources = [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind", "--dev-bind")]
    root = ROOT.resolve()
    secret = [str(root / d) for d in ("solutions", "notebooks", "grader", "tfcourse")]
    for source in sources:  # (a virtual environment inside the checkout may be bound, nothing else of it)
        assert not any(linux.under(p, source) or linux.under(source, p) for p in secret), source
        if linux.under(str(root), source):  # a folder around the checkout: covered by a tmpfs
            assert str(root) in [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert [argv[i + 2] for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1] == str(tmp_path)] == ["/job"]
    assert "--unshare-all" in argv and "--cap-drop" in argv and "--die-with-parent" in argv
    assert "--share-net" not in argv


def test_bwrap_covers_the_checkout_when_it_lies_inside_a_visible_folder(tmp_path, monkeypatch, mode):
    # A checkout inside a folder the child needs (e.g. inside the Python installation), wherever
    # the real checkout lies: the child must see an empty folder there.
    visible, job = tmp_path / "visible", tmp_path / "job"
    checkout = visible / "checkout"
    (checkout / "solutions").mkdir(parents=True)
    (checkout / "solutions" / "01_attention.ipynb").write_text("{}")
    job.mkdir()
    python_dirs, hidden = views._python_dirs, views.hidden_paths
    monkeypatch.setattr(views, "_python_dirs", lambda: [*python_dirs(), str(visible)])
    monkeypatch.setattr(views, "hidden_paths", lambda: [*hidden(), str(checkout)])
    argv = views.launch("bwrap", job, [], device="cpu", scratch_mb=8).argv
    covered = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert str(checkout) in covered
    (job / "child.py").write_text(f"import os\nprint(os.listdir({str(checkout)!r}))\n")
    spec = views.launch("bwrap", job, [], device="cpu", scratch_mb=8)
    if mode != "bwrap":
        pytest.skip("bwrap does not work here")
    proc = subprocess.run(spec.argv, env=spec.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_auto_falls_back_with_one_warning_and_an_explicit_mode_is_strict(monkeypatch, capsys):
    monkeypatch.setattr(sandbox.shutil, "which", lambda tool: None)
    sandbox._choose.cache_clear()
    try:
        monkeypatch.setenv(sandbox.ENV_VAR, "auto")
        assert sandbox.choose().mode == "none"
        assert sandbox.choose().mode == "none"  # probed once, warned once
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "weaker isolation" in err[0] and "bwrap is not installed" in err[0]
        monkeypatch.setenv(sandbox.ENV_VAR, "bwrap")
        with pytest.raises(sandbox.SandboxError, match="bwrap is not installed"):
            sandbox.choose()
        monkeypatch.setenv(sandbox.ENV_VAR, "chroot")
        with pytest.raises(sandbox.SandboxError, match="expected one of"):
            sandbox.choose()
    finally:
        sandbox._choose.cache_clear()


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + b"%08x" % len(payload) + payload


def _result(name: str, record: dict) -> bytes:
    from safetensors.torch import save

    meta = json.dumps(record).encode()
    return _frame(b"R", name.encode() + b"\n" + b"%08x" % len(meta) + meta + save({}))


@pytest.mark.parametrize("frames, kept, broken", [
    # the normal order: a result is kept once the child announces what comes next
    ([b"P:exercise a", b"R:a", b"P:exercise b", b"R:b", b"P:done"], ["a", "b"], False),
    # a result followed by the child's death is dropped
    ([b"P:exercise a", b"R:a"], [], False),
    # a result for an exercise other than the one announced is dropped
    ([b"P:exercise a", b"R:b", b"P:done"], [], False),
    # garbage ends the reading; what came before stays
    ([b"P:exercise a", b"R:a", b"P:exercise b", b"junk"], ["a"], True),
])
def test_results_channel_keeps_only_announced_finished_results(frames, kept, broken):
    from grader.isolation.runner import _Channel

    data = b""
    for f in frames:
        kind, _, body = f.partition(b":")
        if kind == b"P":
            data += _frame(b"P", body)
        elif kind == b"R":
            data += _result(body.decode(), {"cell_error": None, "run_error": None, "cases": []})
        else:
            data += f
    read_end, write_end = os.pipe()
    channel = _Channel(read_end)
    channel.start()
    os.write(write_end, data)
    os.close(write_end)
    channel.join(timeout=10)
    assert sorted(channel.results) == kept
    assert bool(channel.broken) == broken


FAKE_CHILD = '''\
import os, sys, time
fd = int(sys.argv[2])
def frame(text):
    data = text.encode()
    os.write(fd, b"P" + b"%08x" % len(data) + data)
frame("ready")
{body}
'''


def _run_fake_child(body: str, monkeypatch, tmp_path, **limits):
    """run_notebook with ``body`` as the child: a stand-in for learner code that has taken over
    the child's results pipe."""
    from grader.isolation import jobfolder, runner
    from tfcourse.checks.call import Call
    from tfcourse.checks.case import Case

    fake = tmp_path / "child.py"
    fake.write_text(FAKE_CHILD.format(body=body))
    monkeypatch.setattr(jobfolder, "CHILD", fake)
    case = Case("softmax", "a case", [Call("softmax", (1,))], lambda j: None)
    return runner.run_notebook(NOTEBOOK, "", {"softmax": "pass"}, {"softmax": [case]}, device="cpu",
                               limits=runner.Limits(**limits), seed=0)


def test_forged_progress_messages_cannot_keep_a_child_running(monkeypatch, tmp_path):
    body = "while True:\n    frame('exercise softmax')\n    time.sleep(0.05)"
    run = _run_fake_child(body, monkeypatch, tmp_path, timeout=0.5, startup=60)
    assert run.exercises["softmax"].status == "timeout"


def test_a_child_that_keeps_asking_for_a_restart_is_given_up(monkeypatch, tmp_path):
    run = _run_fake_child("frame('restart')", monkeypatch, tmp_path, timeout=5, startup=60)
    assert run.exercises["softmax"].status == "crashed"
    assert "without reporting progress" in run.exercises["softmax"].message
