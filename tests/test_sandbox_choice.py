"""Where bubblewrap works at all, the grader's own bubblewrap command must work too; and a batch
without bubblewrap fails closed (issue 15).

(A Python installation under /tmp, as a virtual environment in a checkout under /tmp, was once
hidden by the sandbox's /tmp and the grader silently fell back to weaker isolation.)
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from grader.build import ROOT
from grader.isolation import sandbox, views


def _bwrap_usable() -> bool:
    if sys.platform != "linux" or shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                            "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _bwrap_usable(), reason="bubblewrap is not installed or cannot run here")
def test_grader_bubblewrap_command_starts_python():
    assert sandbox._works("bwrap") is None


def test_fallback_reason_is_one_line():
    for mode in sandbox.MODES:
        why = sandbox._works(mode)
        assert why is None or "\n" not in why


# ---------------------------------------------------------------------------------------------
# Fail closed (issue 15): a batch without bubblewrap stops before grading unless the weaker mode
# is asked for by name. "No bubblewrap" is simulated: in-process by hiding the tool from
# shutil.which, end to end by a PATH without it.
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    """This process's grader as on a machine without bubblewrap (unshare and none as they are)."""
    which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda tool, *a, **k: None if tool == "bwrap" else which(tool, *a, **k))
    monkeypatch.setenv(sandbox.ENV_VAR, "auto")  # restored afterwards, whatever --sandbox sets
    monkeypatch.setattr(views, "_protected", set())
    sandbox._choose.cache_clear()
    yield tmp_path
    sandbox._choose.cache_clear()


def _main(*argv: str) -> int:
    from grader.__main__ import main

    return main(["--notebooks", "01_attention", "--quiet", *argv])


def test_a_batch_without_bubblewrap_refuses_to_start(no_bwrap, capsys):
    out = no_bwrap / "r.json"
    for argv in (["a", "b"], ["a", "--strict"]):
        assert _main(*argv, "--json", str(out)) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("grader: bubblewrap is unavailable (bwrap is not installed)")
        for fix in ("apt-get install bubblewrap", "container recipe in docs/grading.md", "--sandbox unshare",
                    "--sandbox none"):
            assert fix in err[0], err[0]
        assert not out.exists()  # stopped before grading


def test_one_submission_without_bubblewrap_warns_then_grades(no_bwrap, capsys):
    out = no_bwrap / "r.json"
    assert _main("a", "--json", str(out)) == 0
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if "weaker isolation" in line]) == 1, err
    (row,) = json.loads(out.read_text())["submissions"]
    assert row["sandbox"] in ("unshare", "none")


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_weaker_mode_named_grades_a_batch_and_every_row_says_so(no_bwrap, monkeypatch, capsys, how):
    mode = "unshare" if sandbox._works("unshare") is None else "none"
    named = ["--sandbox", mode] if how == "flag" else []
    if how == "environment":
        monkeypatch.setenv(sandbox.ENV_VAR, mode)
    out, table = no_bwrap / "r.json", no_bwrap / "r.csv"
    assert _main("a", "b", *named, "--json", str(out), "--csv", str(table)) == 0
    assert "weaker isolation" not in capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["sandbox"] == mode and [r["sandbox"] for r in report["submissions"]] == [mode, mode]
    rows = list(csv.DictReader(table.open()))
    assert [r["sandbox"] for r in rows] == [mode, mode]


def test_batch_refusal_end_to_end_with_bubblewrap_off_path(tmp_path):
    """The real CLI, with a PATH that holds no bwrap: one line, exit 1, nothing graded."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if shutil.which("unshare"):
        (bindir / "unshare").symlink_to(shutil.which("unshare"))
    env = {k: v for k, v in os.environ.items() if k != sandbox.ENV_VAR}
    env["PATH"] = str(bindir)
    proc = subprocess.run([sys.executable, "-m", "grader", "x", "y", "--json", str(tmp_path / "r.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    print(proc.stderr)
    assert proc.returncode == 1 and not (tmp_path / "r.json").exists()
    assert len(proc.stderr.strip().splitlines()) == 1 and "apt-get install bubblewrap" in proc.stderr


# ---------------------------------------------------------------------------------------------
# python -m grader --doctor
# ---------------------------------------------------------------------------------------------
def test_doctor_says_which_sandbox_cuda_versions_and_course_state(monkeypatch):
    from grader import doctor

    monkeypatch.setenv(sandbox.ENV_VAR, "auto")
    lines, ok = doctor.report()
    text = "\n".join(lines)
    print(text)
    assert len(lines) <= 25  # one screen
    import nbgrader
    import torch

    assert f"torch {torch.__version__}" in text and f"nbgrader {nbgrader.__version__}" in text
    assert "CUDA" in text and ("not seen" in text) == (not torch.cuda.is_available())
    assert "notebooks/ is as the build writes it" in text and "tfcourse/reference/ is up to date" in text
    best = next(m for m in sandbox.MODES if sandbox._works(m) is None)
    will = next(line for line in lines if "will use" in line)
    assert will.split("will use")[1].split()[0] == best
    assert ok == (best == "bwrap")


def test_doctor_without_bubblewrap_says_a_batch_would_refuse(no_bwrap, monkeypatch):
    from grader import doctor

    lines, ok = doctor.report()
    text = "\n".join(lines)
    assert not ok and "bwrap is not installed" in text
    assert "refuses to start" in text and "apt-get install bubblewrap" in text
    monkeypatch.setenv(sandbox.ENV_VAR, "none")  # asked for by name: nothing refuses
    lines, ok = doctor.report()
    assert ok and any("none, asked for by name" in line for line in lines), lines


def test_doctor_flag_on_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "grader", "--doctor"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode in (0, 1) and "will use" in proc.stdout and "course" in proc.stdout, proc.stderr
