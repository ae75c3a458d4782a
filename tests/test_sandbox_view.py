"""What a grader child can see in each sandbox mode, measured, against docs/grading.md's table.

A probe stands in for learner code: started exactly as the grader starts a child
(``grader.isolation.views.launch``), it tries to read one path per row of the table "What each
mode hides" in docs/grading.md (the course checkout, the reference solutions, another submission of
the batch, another job folder, the rest of the machine, ...) and reports what it reached. Every
mode this machine offers is run; a mode that cannot run here is skipped with the reason. Each
cell's first word in the docs ("visible"/"hidden", "yes"/"no") must be what the probe measured,
so the table is a measurement, not a claim. The probe runs plain Python (no torch): about a
second per mode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tfcourse
from grader.build import ROOT
from grader.isolation import linux, sandbox, views

DOCS = ROOT / "docs" / "grading.md"
HEADING = "### What each mode hides (measured)"

# the table's rows (first column, as written in the docs) -> the probe's check
ROWS = {
    "its job folder: its cells, the inputs, the public `tfcourse` copy": "job",
    "writing into its job folder": "write_job",
    "the Python installation and `/usr`": "system",
    "the course checkout: `solutions/`, `grader/cases/`": "checkout",
    "the installed course library's `tfcourse/reference/`": "reference",
    "other submissions of the batch": "other_submission",
    "other children's job folders": "other_job",
    "the rest of the machine: other top-level folders (`/home`, `/var`, `/opt`, …)": "machine",
    "`/etc` beyond the few files the loader needs": "etc",
}

PROBE = r"""
import json, os, sys
job, checks = sys.argv[1], json.loads(sys.argv[2])
def reach(kind, path):
    path = path.replace("@JOB@", job)
    try:
        if kind == "read":
            with open(path, "rb") as fh:
                fh.read(1)
            return "visible"
        if kind == "list":
            return "visible" if os.listdir(path) else "hidden"
        if kind == "write":
            with open(path, "w") as fh:
                fh.write("x")
            return "yes"
    except OSError:
        return "no" if kind == "write" else "hidden"
print(json.dumps({key: reach(*check) for key, check in checks.items()}))
"""


def docs_table() -> dict[str, dict[str, str]]:
    """{row label: {mode: first word of the cell}} from docs/grading.md."""
    text = DOCS.read_text(encoding="utf-8")
    assert HEADING in text, f"{DOCS} lost its section {HEADING!r}"
    lines = text.split(HEADING, 1)[1].strip().splitlines()
    header = [c.strip().strip("`") for c in lines[0].strip("|").split("|")]
    assert header[1:] == list(sandbox.MODES), header
    table = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        table[cells[0]] = {m: re.split(r"[\s,(]", c, maxsplit=1)[0] for m, c in zip(header[1:], cells[1:], strict=True)}
    return table


def _host_folder() -> str | None:
    """A top-level folder of this machine with something in it, that no mode needs."""
    for d in ("/home", "/var", "/opt", "/srv", "/mnt", "/root"):
        try:
            if os.listdir(d) and not any(linux.under(p, d) or linux.under(d, p) for p in views._python_dirs()):
                return d
        except OSError:
            continue
    return None


def _etc_file() -> str | None:
    """A world-readable file of /etc that the loader does not need."""
    for entry in sorted(os.scandir("/etc"), key=lambda e: e.name):
        if entry.path not in views.ETC_FILES and entry.is_file(follow_symlinks=False) and \
                entry.stat().st_mode & 0o004 and entry.stat().st_size:
            return entry.path
    return None


@pytest.fixture
def world(tmp_path, monkeypatch) -> dict:
    """A batch's surroundings: a submissions folder with another learner's notebook, a folder
    of job folders with another child's job, and this child's own job folder."""
    subs, jobs = tmp_path / "submitted", tmp_path / "jobs"
    (subs / "someone").mkdir(parents=True)
    (subs / "someone" / "01_attention.ipynb").write_text('{"cells": []}')
    (jobs / "other").mkdir(parents=True)
    (jobs / "other" / "job.json").write_text("{}")
    job = jobs / "mine"
    job.mkdir()
    (job / "job.json").write_text("{}")
    (job / "child.py").write_text(PROBE)
    for path in [job, *job.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    monkeypatch.setattr(views, "_protected", set())
    views.protect([subs / "someone", subs])  # as `python -m grader submitted/*` does
    library = Path(tfcourse.__file__).resolve().parent
    checks = {
        "job": ("read", "@JOB@/job.json"),
        "write_job": ("write", "@JOB@/probe-wrote-here"),
        "system": ("list", sys.prefix),
        "checkout": ("read", str(ROOT / "solutions" / "01_attention.ipynb")),
        "reference": ("read", str(library / "reference" / "nb01_attention.py")),
        "other_submission": ("read", str(subs / "someone" / "01_attention.ipynb")),
        "other_job": ("read", str(jobs / "other" / "job.json")),
    }
    if (folder := _host_folder()) is not None:
        checks["machine"] = ("list", folder)
    if (etc := _etc_file()) is not None:
        checks["etc"] = ("read", etc)
    return {"job": job, "checks": checks}


def test_docs_table_names_every_probe_and_every_mode():
    table = docs_table()
    assert set(table) == set(ROWS), set(table) ^ set(ROWS)
    for label, cells in table.items():
        assert set(cells.values()) <= {"visible", "hidden", "yes", "no"}, (label, cells)


@pytest.mark.parametrize("mode", sandbox.MODES)
def test_what_the_child_sees_is_what_the_docs_say(mode, world):
    why = sandbox._works(mode)
    if why is not None:
        pytest.skip(f"sandbox {mode!r} cannot run here: {why}")
    spec = views.launch(mode, world["job"], [json.dumps(world["checks"])], device="cpu",
                          scratch_mb=8)
    proc = subprocess.run(spec.argv, cwd=spec.cwd, env=spec.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{mode}: {seen}")
    table = docs_table()
    claimed = {ROWS[label]: cells[mode] for label, cells in table.items()}
    measured = {key: seen[key] for key in claimed if key in seen}
    assert measured == {key: claimed[key] for key in measured}
    assert {"job", "checkout", "other_submission", "other_job"} <= set(measured)


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_what_lies_inside_a_folder_the_child_needs_is_covered(mode, tmp_path, monkeypatch):
    """A checkout, a submissions folder and a report folder inside a folder the child needs
    (here: one added to the Python installation's folders) are covered, while the rest of that
    folder stays visible."""
    if (why := sandbox._works(mode)) is not None:
        pytest.skip(f"sandbox {mode!r} cannot run here: {why}")
    kept, job = tmp_path / "kept", tmp_path / "jobs" / "mine"
    for sub in ("checkout/solutions", "submitted/someone", "reports", "public"):
        (kept / sub).mkdir(parents=True)
    (kept / "checkout" / "solutions" / "01_attention.ipynb").write_text("{}")
    (kept / "submitted" / "someone" / "01_attention.ipynb").write_text("{}")
    (kept / "reports" / "grades.json").write_text("{}")
    (kept / "public" / "module.py").write_text("")
    job.mkdir(parents=True)
    (job / "child.py").write_text(PROBE)
    python_dirs, hidden = views._python_dirs, views.hidden_paths
    monkeypatch.setattr(views, "_python_dirs", lambda: [*python_dirs(), str(kept)])
    monkeypatch.setattr(views, "hidden_paths", lambda: [*hidden(), str(kept / "checkout")])
    monkeypatch.setattr(views, "_protected", set())
    views.protect([kept / "submitted", kept / "reports"])
    checks = {name: ("read", str(kept / rel)) for name, rel in (
        ("checkout", "checkout/solutions/01_attention.ipynb"), ("submission", "submitted/someone/01_attention.ipynb"),
        ("report", "reports/grades.json"), ("public", "public/module.py"))}
    spec = views.launch(mode, job, [json.dumps(checks)], device="cpu", scratch_mb=8)
    proc = subprocess.run(spec.argv, cwd=spec.cwd, env=spec.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"checkout": "hidden", "submission": "hidden", "report": "hidden", "public": "visible"}


def test_unshare_child_has_no_capabilities_and_a_read_only_view(tmp_path):
    """Learner code in unshare mode cannot undo the view: no capabilities (so no umount or
    remount), and nothing outside its scratch space is writable."""
    if (why := sandbox._works("unshare")) is not None:
        pytest.skip(f"sandbox 'unshare' cannot run here: {why}")
    (tmp_path / "child.py").write_text(
        "import ctypes, os, sys\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "umount = libc.umount2(b'/tmp', 2)\n"
        "def writable(p):\n"
        "    try:\n"
        "        open(p, 'w').close(); return True\n"
        "    except OSError:\n"
        "        return False\n"
        "print(caps, umount, writable(sys.prefix + '/probe'), writable('/tmp/probe'), writable('probe'))\n")
    spec = views.launch("unshare", tmp_path, [], device="cpu", scratch_mb=8)
    proc = subprocess.run(spec.argv, cwd=spec.cwd, env=spec.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["['0000000000000000',", "'0000000000000000',", "'0000000000000000']",
                                   "-1", "False", "False", "True"], proc.stdout
