"""Which sandbox the grader's children run in: three modes, strongest first (``auto`` takes the
first that works on this machine, probed once; the environment variable ``TFCOURSE_SANDBOX``, set
by ``--sandbox``, can ask for one, see docs/grading.md). What each one shows and hides is
views.py's; in short:

* ``bwrap`` (bubblewrap, Linux): a private file view (the job folder and the public course code
  only), no network, own PID namespace, no capabilities;
* ``unshare`` (util-linux, Linux with user namespaces): a file view made in its own mount
  namespace (the checkout, other submissions and jobs covered), no network, own PID namespace,
  no capabilities;
* ``none`` (e.g. macOS): a new session (process group) and rlimits only.

When auto falls back to a weaker mode it warns once; a batch (or ``--strict``) refuses instead
(:func:`choose`). In every mode the grading process also watches the child from outside
(watch.py) and kills the whole sandbox when a limit is passed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from . import views

ENV_VAR = "TFCOURSE_SANDBOX"
MODES = ("bwrap", "unshare", "none")

# What each mode isolates, in one line (shown in the warning and the docs).
DESCRIPTIONS = {
    "bwrap": "bubblewrap: private file view (job folder + public course code only), no network, "
             "own PID namespace, no capabilities",
    "unshare": "unshare: mount-namespace file view (job folder + Python installation; checkout, other "
               "submissions and jobs covered), no network, own PID namespace, no capabilities",
    "none": "no sandbox: process group and rlimits only; learner code can read and write "
            "whatever the grader's user can, and use the network",
}

# The one-line fixes, named in the refusal and in `python -m grader --doctor`.
FIX = ("install bubblewrap (`apt-get install bubblewrap`, or the container recipe in docs/grading.md), "
       "or ask for a weaker sandbox by name: --sandbox unshare / --sandbox none")


class SandboxError(RuntimeError):
    """The sandbox asked for (``TFCOURSE_SANDBOX``) cannot be used on this machine, or a batch
    would have to run with weaker isolation than bubblewrap without asking for it by name."""


@dataclass(frozen=True)
class Sandbox:
    """The isolation used for every child of this grading process.

    fallback: why ``auto`` did not take the stronger modes ("" when it took bwrap, or when a mode
    was asked for by name); requested: what was asked for (auto, bwrap, unshare, none)."""

    mode: str
    fallback: str = ""
    requested: str = "auto"

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.mode]

    @property
    def hides_files(self) -> bool:
        return self.mode in ("bwrap", "unshare")

    @property
    def pid_namespace(self) -> bool:
        return self.mode in ("bwrap", "unshare")


def _works(mode: str) -> str | None:
    """None if ``mode`` can start a Python child here, else the reason (one line)."""
    if mode == "none":
        return None
    tool = {"bwrap": "bwrap", "unshare": "unshare"}[mode]
    if sys.platform != "linux":
        return f"{tool} needs Linux"
    if shutil.which(tool) is None:
        return f"{tool} is not installed"
    with tempfile.TemporaryDirectory(prefix="tfcourse-probe-") as tmp:
        job = Path(tmp)
        (job / "child.py").write_text("import sys\n", encoding="utf-8")
        spec = views.launch(mode, job, [], device="cpu", scratch_mb=16)
        try:
            res = subprocess.run(spec.argv, cwd=spec.cwd, env=spec.env, stdin=subprocess.DEVNULL,
                                 capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{tool} failed: {exc}"
    if res.returncode != 0:
        lines = res.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{tool} failed: {lines[-1] if lines else f'exit status {res.returncode}'}"
    return None


_lock = threading.Lock()
_warned: list[Sandbox] = []  # the choices already warned about (kept: identity counts)


@functools.cache
def _choose(requested: str) -> Sandbox:
    if requested in MODES:
        why = _works(requested)
        if why is not None:
            raise SandboxError(f"{ENV_VAR}={requested}, but {why}")
        return Sandbox(requested, requested=requested)
    if requested not in ("", "auto"):
        raise SandboxError(f"{ENV_VAR}={requested!r}: expected one of auto, {', '.join(MODES)}")
    reasons = []
    for mode in MODES:
        why = _works(mode)
        if why is None:
            return Sandbox(mode, fallback="; ".join(reasons))
        reasons.append(why)
    raise AssertionError("unreachable: mode 'none' always works")


def requested() -> str:
    """What this process asks for: ``TFCOURSE_SANDBOX`` (set by ``--sandbox``), or auto."""
    return os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"


def refusal(box: Sandbox) -> str:
    """The one-line error of a batch (or --strict) that would run without bubblewrap."""
    return (f"bubblewrap is unavailable ({box.fallback}), and a batch (or --strict) does not fall back "
            f"to sandbox {box.mode!r} unasked: {FIX}")


def choose(strict: bool = False) -> Sandbox:
    """The sandbox for this process's children (probed once; ``TFCOURSE_SANDBOX`` may ask for
    one: auto, bwrap, unshare or none). When auto falls back: with ``strict`` (a batch, or
    ``--strict``) raises SandboxError with :func:`refusal`'s line, else warns once on stderr.

    Raises SandboxError when the requested mode cannot run here."""
    with _lock:
        asked = requested()
        box = _choose(asked)
        if box.fallback:
            if strict:
                raise SandboxError(refusal(box))
            if not any(b is box for b in _warned):
                _warned.append(box)
                print(f"grader: warning: {box.fallback}: learner code runs with weaker isolation, "
                      f"sandbox {box.mode!r} ({DESCRIPTIONS[box.mode]}); see docs/grading.md", file=sys.stderr)
        return box
