"""ruff (with bugbear) over the library, the grader and the tests, as configured in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from grader.build import ROOT


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed by requirements-dev.txt")
def test_ruff_is_clean():
    proc = subprocess.run(["ruff", "check", "--output-format", "concise", "tfcourse", "grader", "tests"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
