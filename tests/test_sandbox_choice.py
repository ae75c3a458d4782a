"""Where bubblewrap works at all, the grader's own bubblewrap command must work too.

(A Python installation under /tmp, as a virtual environment in a checkout under /tmp, was once
hidden by the sandbox's /tmp and the grader silently fell back to weaker isolation.)
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from grader import sandbox


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
