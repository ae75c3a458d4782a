"""The fast path: warm zygotes (grader/zygote.py) that start each notebook's child as a fork
instead of a fresh interpreter that imports torch (about 3 s per notebook, most of a submission's
grading time).

Used in the ``unshare`` sandbox only, where the fork makes exactly the cold child's sandbox
(same namespaces, same ``VIEW_SCRIPT`` view, same rlimits, set by the same child.py); under
``bwrap`` and ``none`` the cold path runs as before. ``TFCOURSE_FAST=0`` turns it off. If a
zygote cannot start or refuses to fork (user namespaces unavailable, threads in it), the run
falls back to the cold path and :func:`status` says why (``python -m grader --doctor``).

One zygote per grading thread that needs one (``--jobs N``: at most N), kept for the life of
the grading process and stopped when it exits (a zygote exits when its socket closes).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import sandbox

ENV_VAR = "TFCOURSE_FAST"
ZYGOTE = Path(__file__).with_name("zygote.py")
START_TIMEOUT = 120.0

_free: queue.SimpleQueue = queue.SimpleQueue()
_all: list[Zygote] = []
_lock = threading.Lock()
_broken = ""  # why the fast path is off in this process ("" while it works)


class ZygoteError(RuntimeError):
    pass


def enabled(box: sandbox.Sandbox) -> bool:
    return box.mode == "unshare" and os.environ.get(ENV_VAR, "1").strip() != "0" and not _broken


def status(box: sandbox.Sandbox) -> str:
    """One line for --doctor: whether notebooks are graded by warm forks here, and why not."""
    if os.environ.get(ENV_VAR, "1").strip() == "0":
        return f"off ({ENV_VAR}=0): a fresh child per notebook"
    if box.mode != "unshare":
        return (f"off in sandbox {box.mode!r}: a fresh child per notebook (the warm forks make the "
                f"unshare sandbox only; --sandbox unshare uses them)")
    if _broken:
        return f"off: {_broken}; a fresh child per notebook"
    try:
        z = _get()
        _free.put(z)
    except ZygoteError as exc:
        return f"off: {exc}; a fresh child per notebook"
    return "on: each notebook's child is a fork of a warm zygote, in its own unshare sandbox"


class Zygote:
    def __init__(self) -> None:
        # The jobs' folder on the command line (unused): the zygote and every fork of it (learner
        # processes that fork without exec) are found by it in a process listing.
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = sandbox.child_env(str(Path.home()))
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", str(ZYGOTE), str(theirs.fileno()),
                                          tempfile.gettempdir()],
                                         pass_fds=(theirs.fileno(),), env=env, cwd="/",
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
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

    def start(self, job: dict, fds: tuple[int, int]) -> ForkedChild:
        socket.send_fds(self.sock, [json.dumps(job).encode("utf-8")], list(fds))
        reply = self._recv(30)
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


_starting = [0]  # zygotes prestart() is starting now


def _get() -> Zygote:
    try:
        return _free.get_nowait()
    except queue.Empty:
        pass
    while True:  # one on its way: starting another would only compete with it for the cores
        with _lock:
            if not _starting[0]:
                break
        try:
            return _free.get(timeout=0.1)
        except queue.Empty:
            pass
    try:
        return _free.get_nowait()
    except queue.Empty:
        pass
    z = Zygote()
    with _lock:
        _all.append(z)
    return z


def launch(job_dir: Path, spec: sandbox.Launch, channel: int, output: int,
           *, device: str, scratch_mb: int) -> ForkedChild:
    """Start the child of ``job_dir`` as a fork of a free zygote. Raises ZygoteError (then the
    caller runs the cold path, and the fast path stays off in this process)."""
    global _broken
    try:
        z = _get()
    except (ZygoteError, OSError) as exc:
        _broken = str(exc)
        raise ZygoteError(str(exc)) from exc
    job = {"job": spec.job, "env": spec.env, "hidden": sandbox.hidden_paths(),
           "view_script": sandbox.VIEW_SCRIPT,
           "spec": sandbox._unshare_spec(spec.job, spec.scratch, device=device,
                                         scratch_bytes=max(1, scratch_mb) * 2**20)}
    try:
        child = z.start(job, (channel, output))
    except (ZygoteError, OSError) as exc:
        z.close()
        _broken = str(exc)
        raise ZygoteError(str(exc)) from exc
    return child


def prestart(n: int, box: sandbox.Sandbox) -> None:
    """Start up to ``n`` zygotes in the background (their torch import overlaps the grading
    process's own work); the first child waits for one only if none is ready yet."""
    if not enabled(box):
        return

    def one() -> None:
        try:
            z = Zygote()
        except (ZygoteError, OSError):
            return
        finally:
            with _lock:
                _starting[0] -= 1
        with _lock:
            _all.append(z)
        _free.put(z)

    with _lock:
        missing = max(0, n - len(_all) - _starting[0])
        _starting[0] += missing
    for _ in range(missing):
        threading.Thread(target=one, daemon=True).start()


def release(child: ForkedChild) -> None:
    """Give the zygote back once its child is reaped (a zygote that died is dropped)."""
    z = child.zygote
    if child.returncode is not None and z.proc.poll() is None:
        _free.put(z)
    else:
        z.close()


@atexit.register
def _stop() -> None:
    with _lock:
        for z in _all:
            z.close()
        _all.clear()
