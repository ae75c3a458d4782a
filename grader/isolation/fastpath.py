"""The fast path: warm zygotes (zygote.py) that start each notebook's child as a fork
instead of a fresh interpreter that imports torch (about 3 s per notebook, most of a submission's
grading time).

Used in the ``bwrap`` and ``unshare`` sandboxes; under ``none`` the cold path runs as before.
In each the fork makes the cold child's sandbox (same namespaces, same file view, same rlimits,
set by the same child.py):

* ``unshare``: the zygote runs outside any sandbox; each fork makes new user, mount, network,
  PID, IPC and UTS namespaces and the cold child's view (``linux.unshare_view``).
* ``bwrap``: the zygote itself runs in bubblewrap, in a view like a cold child's (system and
  Python read-only, the checkout and the reference solutions absent, no network, no
  capabilities) whose /job is its own folder (jobfolder.py: zygote.py, linux.py and the course's
  public library without any reference solution) and which also shows the folder of all job
  folders read-only at /jobs; each fork makes new user, mount, network, PID, IPC and UTS
  namespaces, binds its own job at /job, covers /jobs, mounts a fresh /tmp, /tmp/work and
  /dev/shm, makes the rest read-only and drops every capability: the cold bwrap child's view,
  paths included.

``TFCOURSE_FAST=0`` turns it off. If a zygote cannot start or refuses to fork (user namespaces
unavailable, threads in it), the run falls back to the cold path and :func:`status` says why
(``python -m grader --doctor``).

One zygote per grading thread that needs one (``--jobs N``: at most N), kept for the life of
the grading process and stopped when it exits (a zygote exits when its socket closes).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import jobfolder, sandbox, views

ENV_VAR = "TFCOURSE_FAST"
START_TIMEOUT = 120.0

MODES = ("bwrap", "unshare")
ZYGOTE_SCRATCH = 16 * 2**20  # the zygote's own /tmp in bwrap (it writes nothing; forks get their own)

_free: list[Zygote] = []  # started and idle (guarded by _ready)
_all: list[Zygote] = []
_lock = threading.Lock()
_ready = threading.Condition(_lock)
_broken = ""  # why the fast path is off in this process ("" while it works)


class ZygoteError(RuntimeError):
    pass


def enabled(box: sandbox.Sandbox) -> bool:
    return box.mode in MODES and os.environ.get(ENV_VAR, "1").strip() != "0" and not _broken


def _key(box: sandbox.Sandbox, device: str) -> tuple:
    """What a zygote's view depends on: the unshare one on nothing (each fork makes the whole
    view), the bwrap one on the device (GPU nodes) and the secret folders it covers (those
    protect() adds inside a folder the view shows; a Dask worker protects a new folder per task,
    outside any of them, which must not cost a new zygote)."""
    if box.mode == "unshare":
        return ("unshare",)
    return ("bwrap", device.startswith("cuda"), tuple(views.bwrap_covered(device)))


def status(box: sandbox.Sandbox) -> str:
    """One line for --doctor: whether notebooks are graded by warm forks here, and why not."""
    if os.environ.get(ENV_VAR, "1").strip() == "0":
        return f"off ({ENV_VAR}=0): a fresh child per notebook"
    if box.mode not in MODES:
        return (f"off in sandbox {box.mode!r}: a fresh child per notebook (the warm forks make the "
                f"bwrap and unshare sandboxes only)")
    if _broken:
        return f"off: {_broken}; a fresh child per notebook"
    try:
        z = _get(_key(box, "cpu"), box, "cpu")
        _put(z)
    except (ZygoteError, OSError) as exc:
        return f"off: {exc}; a fresh child per notebook"
    return f"on: each notebook's child is a fork of a warm zygote, in its own {box.mode} sandbox"


class Zygote:
    def __init__(self, box: sandbox.Sandbox, device: str) -> None:
        self.key, self.folder = _key(box, device), None
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The jobs' folder on the command line (unused in unshare): the zygote and every fork of
        # it (learner processes that fork without exec) are found by it in a process listing.
        jobs = views.jobs_folder()
        try:
            if box.mode == "bwrap":
                self.folder = Path(tempfile.mkdtemp(prefix="tfcourse-zygote-"))
                jobfolder.fill_zygote(self.folder)
                scratch = f"{views.SCRATCH_VIEW}/work"
                inner = [sys.executable, "-I", f"{views.JOB_VIEW}/zygote.py", str(theirs.fileno()),
                         views.JOBS_VIEW, f"{views.JOB_VIEW}/lib"]
                argv = views._bwrap_argv(self.folder, inner, device=device, scratch_bytes=ZYGOTE_SCRATCH,
                                         jobs=jobs)
                env, cwd = views.child_env(scratch), str(self.folder)
            else:
                argv = [sys.executable, "-I", str(jobfolder.ZYGOTE), str(theirs.fileno()), jobs]
                env, cwd = views.child_env(str(Path.home())), "/"
            self.proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), env=env, cwd=cwd,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            mine.close()
            self._remove()
            raise
        finally:
            theirs.close()
        self.sock = mine
        reply = self._recv(START_TIMEOUT)
        if reply != "ready":
            self.close()
            raise ZygoteError(f"the warm worker did not start ({reply or 'no answer'})")

    def _recv(self, timeout: float | None) -> str:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return ""
        try:
            return self.sock.recv(4096).decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def _remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._remove()

    def start(self, job: dict, fds: tuple[int, int]) -> ForkedChild:
        socket.send_fds(self.sock, [json.dumps(job).encode("utf-8")], list(fds))
        reply = self._recv(120 if job.get("warm") else 30)  # a warm-up runs first (a few seconds)
        kind, _, value = reply.partition(" ")
        if kind != "pid":
            raise ZygoteError(f"the warm worker did not fork ({reply or 'no answer'})")
        return ForkedChild(self, int(value))


class ForkedChild:
    """What runner._supervise needs of a Popen: pid, poll, wait, returncode, stdout."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None
        self.stdout = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0)
        return self.returncode

    def _read(self, timeout: float) -> None:
        reply = self.zygote._recv(timeout)
        if not reply and self.zygote.proc.poll() is not None:
            self.returncode = -9  # the zygote died: so did this child's waiter
            return
        kind, _, value = reply.partition(" ")
        if kind == "exit":
            self.returncode = int(value)

    def wait(self, timeout: float | None = None) -> int:
        end = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.returncode is None:
            left = end - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("zygote child", timeout)
            self._read(min(left, 0.5))
        return self.returncode


_starting: dict[tuple, int] = {}  # zygotes prestart() is starting now, by key


def _put(z: Zygote) -> None:
    with _ready:
        _free.append(z)
        _ready.notify_all()


def _get(key: tuple, box: sandbox.Sandbox, device: str) -> Zygote:
    """A free zygote for ``key``; waits for one prestart() is starting (starting another would
    only compete with it for the cores), else starts one. Idle zygotes of an older key (the
    protected folders changed) are stopped."""
    stale: list[Zygote] = []
    deadline = time.monotonic() + START_TIMEOUT
    try:
        with _ready:
            while True:
                for z in list(_free):
                    if z.key == key:
                        _free.remove(z)
                        return z
                    if len(key) == 3 and z.key[:2] == key[:2]:  # protect() added a covered folder since
                        _free.remove(z)
                        _all.remove(z)
                        stale.append(z)
                if not _starting.get(key) or time.monotonic() > deadline:
                    break
                _ready.wait(timeout=0.5)
    finally:
        for z in stale:
            z.close()
    z = Zygote(box, device)
    with _lock:
        _all.append(z)
    return z


# The zygote's warm-ups (zygote.WARM_UPS) a notebook's children use: the zygote runs them before
# forking that notebook's first child, and every later fork inherits them, also their address
# space (SmolLM2's: about 680 MiB), which counts against each child's --memory limit. So they run
# only with no limit or a limit of at least WARM_MEMORY_MB (torch itself needs about 650 MiB).
NOTEBOOK_WARM_UPS = {"08_real_weights": ["smollm2"]}
WARM_MEMORY_MB = 3072


def warm_ups(notebook: str | None, memory_mb: int) -> list[str]:
    """The warm-ups a zygote runs before forking a child of ``notebook`` under ``memory_mb``."""
    if memory_mb and memory_mb < WARM_MEMORY_MB:
        return []
    return list(NOTEBOOK_WARM_UPS.get(notebook or "", []))


def _view(box: sandbox.Sandbox, spec: views.Launch, job_dir: Path, *, device: str, scratch_mb: int,
          warm: list[str] | None = None) -> dict:
    """What the zygote's fork needs to make this job's view (see the module docstring), and the
    warm-ups the zygote runs first."""
    scratch_bytes = max(1, scratch_mb) * 2**20
    job = {"job": spec.job, "env": spec.env, "hidden": views.hidden_paths(), "view": box.mode,
           "warm": warm or []}
    if box.mode == "bwrap":
        keep = views.bwrap_tmp_binds()
        job["spec"] = {"keep": views._python_dirs()}
        job["bwrap"] = {"jobs": views.JOBS_VIEW, "name": Path(job_dir).name, "job": views.JOB_VIEW,
                        "scratch": views.SCRATCH_VIEW, "scratch_bytes": scratch_bytes, "keep": keep}
    else:
        job["spec"] = views._unshare_spec(spec.job, spec.scratch, device=device, scratch_bytes=scratch_bytes)
    return job


def launch(box: sandbox.Sandbox, job_dir: Path, spec: views.Launch, channel: int, output: int,
           *, device: str, scratch_mb: int, notebook: str | None = None, memory_mb: int = 0) -> ForkedChild:
    """Start the child of ``job_dir`` (a job of ``notebook``, under a ``memory_mb`` limit) as a
    fork of a free zygote. Raises ZygoteError (then the caller runs the cold path, and the fast
    path stays off in this process)."""
    if Path(job_dir).resolve().parent != Path(views.jobs_folder()):
        raise ZygoteError(f"{job_dir} is not in the jobs folder {views.jobs_folder()}")
    try:
        z = _get(_key(box, device), box, device)
    except (ZygoteError, OSError) as exc:
        _give_up(str(exc))
        raise ZygoteError(str(exc)) from exc
    job = _view(box, spec, job_dir, device=device, scratch_mb=scratch_mb, warm=warm_ups(notebook, memory_mb))
    try:
        child = z.start(job, (channel, output))
    except (ZygoteError, OSError) as exc:
        z.close()
        _give_up(str(exc))
        raise ZygoteError(str(exc)) from exc
    return child


def _give_up(why: str) -> None:
    """Turn the fast path off in this process, saying so once on stderr (grading goes on, slower)."""
    global _broken
    with _lock:
        first, _broken = not _broken, _broken or why
    if first:
        print(f"grader: warning: the fast path is off ({why}): each notebook starts a fresh "
              f"interpreter (slower, same isolation); see `python -m grader --doctor`", file=sys.stderr)


def zygotes_for(jobs: int, submissions: int) -> int:
    """The fast path's zygotes a local grading uses: one per grading thread, that is ``jobs``
    (one submission's notebooks, or submissions, graded ``jobs`` at a time), fewer when there are
    fewer submissions than that (but at least one)."""
    return max(1, jobs if submissions == 1 else min(jobs, submissions))


def prestart(n: int, box: sandbox.Sandbox, device: str = "cpu") -> None:
    """Start up to ``n`` zygotes in the background (their torch import overlaps the grading
    process's own work); the first child waits for one only if none is ready yet."""
    if not enabled(box):
        return
    key = _key(box, device)

    def one() -> None:
        z = None
        try:
            z = Zygote(box, device)
        except BaseException:  # noqa: BLE001 - the grading goes on without it (cold path, or _get starts one)
            z = None
        finally:
            with _ready:
                _starting[key] -= 1
                if z is not None:
                    _all.append(z)
                    _free.append(z)
                _ready.notify_all()

    with _lock:
        have = sum(1 for z in _all if z.key == key)
        missing = max(0, n - have - _starting.get(key, 0))
        _starting[key] = _starting.get(key, 0) + missing
    for _ in range(missing):
        threading.Thread(target=one, daemon=True).start()


def release(child: ForkedChild) -> None:
    """Give the zygote back once its child is reaped (a zygote that died is dropped)."""
    z = child.zygote
    if child.returncode is not None and z.proc.poll() is None:
        _put(z)
    else:
        z.close()


@atexit.register
def _stop() -> None:
    with _lock:
        for z in _all:
            z.close()
        _all.clear()
