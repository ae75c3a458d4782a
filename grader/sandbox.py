"""How the grader's child process is started and stopped: environment, wrapping, killing."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

# Variables a child may keep from the grader's environment (nothing else leaks in).
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "TMPDIR")


def child_env(job_dir: Path) -> dict[str, str]:
    env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
    env.update({
        "HOME": str(job_dir / "work"),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    })
    return env


def wrap(cmd: list[str]) -> list[str]:
    """The command that starts the child (isolation wrappers go here)."""
    return cmd


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the child's whole process group (it was started in a new session) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
