"""ruff (with bugbear) over the library, the grader and the tests, as configured in pyproject.toml,
and mypy over the typed core. Both run from this interpreter's environment (``python -m``), so an
activated virtual environment is not needed for them to run rather than be skipped."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from grader.build import ROOT


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is installed by requirements-dev.txt")
def test_ruff_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "tfcourse", "grader",
                           "tests"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]


@pytest.mark.slow  # about 30 s cold: the full suite
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is installed by requirements-dev.txt")
def test_mypy_is_clean_on_the_typed_core():
    """The report's rows (grader/rows.py: TypedDicts, Literal statuses), grading, reporting and the
    checks' shared core type-check (the file list is [tool.mypy] in pyproject.toml)."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
