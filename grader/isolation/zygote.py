"""The fast path's warm worker: imports torch and the course's public checks once, then starts
each notebook's child as a fork of itself, inside a fresh sandbox made by the fork (the cold
child's: bwrap's view or unshare's).

Started by ``fastpath`` as ``python -I zygote.py CONTROL_FD JOBS_FOLDER [LIBRARY]`` (a
fresh interpreter, never a fork of the grading process: it holds no reference solution, no hidden
case, no other learner's work; under bwrap it runs in bubblewrap and imports the course's public
library from LIBRARY; the Linux calls come from linux.py, next to this file). It never runs
learner code itself. Per job it receives, on the control socket, one JSON line (the job folder,
the view to make, the child's environment) and two file descriptors (the results channel and the
output pipe), and forks:

* A (the fork): a death signal tied to the zygote, its own session (the grading process kills
  its process group), every other file descriptor closed, then new user, mount, network, PID,
  IPC and UTS namespaces; it forks B, waits for it and exits with the status of the job's child
  (dies by the same signal), like ``unshare --fork --kill-child``.
* B (PID 1 of the new PID namespace, killed when A dies): a fresh /proc, host name ``grader``,
  then exactly the cold child's view: under unshare ``linux.unshare_view``'s (everything
  but the system, the Python installation and its own job folder covered, all read-only,
  scratch tmpfs, capability bounding set dropped, no_new_privs), under bwrap :func:`_bwrap_view`'s
  (its own job at /job, the other jobs covered, fresh /tmp and /dev/shm, the rest read-only, the
  bounding set dropped, the loopback up); then every capability cleared (B does not exec, so the
  bounding set alone would not take them), and B made non-dumpable. It forks C and stays as a
  small init, as bubblewrap's: it keeps its death signal, reaps, and passes C's wait status to A.
* C (PID 2): ``child.main`` of the job's own child.py, as the cold path's child would run it.

The zygote answers ``pid N`` once A exists and ``exit STATUS`` once it is reaped (STATUS as
Popen.returncode: -signal or the exit code), and exits when the grading process closes the
socket (then it kills a child still running). It refuses to fork (``refused REASON``) with more
than one thread (an OpenMP pool would be broken in the fork) or with a writable shared mapping
(a fork would share it with the next one).
"""

import json
import os
import resource
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # linux.py lies next to this file
import linux  # noqa: E402

del sys.path[0]
libc = linux.libc


def warm() -> None:
    """What every child imports before learner code: torch (single-threaded) and the public
    checks. Never a reference module (asserted)."""
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import safetensors.torch  # noqa: F401

    import tfcourse.checks.wire  # noqa: F401

    # What child.py's reset_numerics and the first backward import lazily: once here, not in
    # every fork. (Not torch.use_deterministic_algorithms: it imports torch._inductor and
    # torch._dynamo, 3 s, and reset_numerics calls it only for a learner who turned it on; the
    # checks' shape watcher keeps torch from importing torch._dynamo, tfcourse.checks.evidence.)
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None)
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    # A backward given a gradient (what the checks' gradient cases call) makes torch import
    # torch.fx's symbolic shapes, sympy and torch._refs (about 480 modules, 0.4-1 s): once here.
    (x * x).backward(torch.ones(3))
    _settle()


def _settle() -> None:
    """After a warm-up: freeze what it made, and assert it imported no reference module."""
    import gc

    gc.collect()
    gc.freeze()  # the forks' collections leave the zygote's objects (and their pages) alone
    leaked = [m for m in sys.modules if m.startswith("tfcourse.reference")]
    if leaked:
        raise SystemExit(f"tfcourse zygote: warm-up imported {leaked}")


# What a job may ask the zygote to prepare before forking it, for it and every later fork: public,
# learner-independent work its children would each redo (notebook 08's: SmolLM2's file parsed and
# dequantized, about 2 s per child). Each is done at most once; one that fails is not retried (the
# children then do the work themselves, and fail or not as they would have).
WARM_UPS = {"smollm2": ("tfcourse.weight_files", "warm_smollm2")}
_warmed: set[str] = set()


def warm_up(names: list) -> None:
    """Run the warm-ups ``names`` (keys of WARM_UPS; others are ignored) not yet run here."""
    import importlib

    todo = [n for n in dict.fromkeys(names) if isinstance(n, str) and n in WARM_UPS and n not in _warmed]
    if not todo:
        return
    for name in todo:
        _warmed.add(name)
        module, function = WARM_UPS[name]
        try:
            getattr(importlib.import_module(module), function)()
        except Exception as exc:  # noqa: BLE001 - the children do it themselves
            _report(exc)
    _settle()


def unsafe_to_fork() -> str:
    """Why forking now would not give an independent child ("" when it would)."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        return f"{threads} threads are running in the zygote"
    with open("/proc/self/maps") as fh:
        for line in fh:
            perms = line.split()[1]
            if perms[1] == "w" and perms[3] == "s":
                return f"writable shared mapping: {line.strip()[:120]}"
    return ""


def _report(exc: BaseException) -> None:
    """One line on the child's output: what failed, and where in this file (or the child's)."""
    import traceback

    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" ({where.name}, line {where.lineno})" if where else ""
    os.write(2, f"tfcourse zygote: {type(exc).__name__}: {exc}{at}\n".encode())


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _bwrap_view(view: dict) -> None:
    """B, in a zygote's bubblewrap view: make exactly the cold bwrap child's view. /job becomes
    this job's folder (from /jobs, then covered: the other jobs vanish), a fresh size-limited /tmp
    (the Python installation's folders under /tmp bound back, read-only) with /tmp/work, a fresh
    /dev/shm; everything else read-only. No learner code has run; any failure exits 125."""
    job = os.open(os.path.join(view["jobs"], view["name"]), os.O_PATH | os.O_CLOEXEC)
    keep = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in view["keep"]}
    linux.read_only("/")
    linux.bind(job, view["job"])
    linux.read_only(view["job"])
    linux.tmpfs(view["jobs"], 4096, linux.MS_RDONLY)
    linux.tmpfs(view["scratch"], view["scratch_bytes"])
    for path, fd in keep.items():  # shortest first, none inside another
        os.makedirs(path, exist_ok=True)
        linux.bind(fd, path)
        linux.read_only(path)
    os.makedirs(os.path.join(view["scratch"], "work"), exist_ok=True)
    linux.tmpfs("/dev/shm", view["scratch_bytes"])
    for fd in (job, *keep.values()):
        os.close(fd)
    linux.drop_bounding_set()
    os.chdir(os.path.join(view["scratch"], "work"))


def _pid1(job: dict, channel: int, status_w: int) -> None:
    """B: finish the sandbox, fork C to run the job's child, and stay PID 1 of the namespace as
    a small init (as bubblewrap's): it keeps its death signal (learner code runs in C and cannot
    clear it), reaps, and hands C's wait status to A through ``status_w`` (never returns)."""
    libc.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    linux.mount("none", "/", None, linux.MS_REC | linux.MS_PRIVATE)
    linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
    linux.check(libc.sethostname(b"grader", 6) == 0, "sethostname")
    if job["view"] == "bwrap":
        _bwrap_view(job["bwrap"])
        linux.loopback_up()  # as bubblewrap gives its children
    else:
        linux.unshare_view(job["spec"])
    linux.clear_capabilities()
    # Not dumpable: C (learner code, same user, no capabilities) can then neither ptrace this
    # init nor open its /proc/1/mem or /proc/1/fd (its death signal and the status pipe stay
    # out of reach). C is made dumpable again: its own /proc is as a cold child's.
    libc.prctl(linux.PR_SET_DUMPABLE, 0, 0, 0, 0)
    child = os.fork()
    if child == 0:
        libc.prctl(linux.PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.close(status_w)
        _child(job, channel)
    # the init: nothing of the job's, only its status
    for fd in (0, 1, 2, channel):
        os.close(fd)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # as PID 1, ignored from inside
        signal.signal(sig, signal.SIG_DFL)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(125)
        except InterruptedError:
            continue
        if pid == child:
            os.write(status_w, status.to_bytes(4, "little"))
            os._exit(0)  # the namespace's other processes die with it


def _child(job: dict, channel: int) -> None:
    """C (PID 2, as a cold bwrap child): the job's child.py, as the cold path runs it."""
    sys.argv = [os.path.join(job["job"], "child.py"), job["job"], str(channel)]  # as the cold child's
    os.environ.clear()
    os.environ.update(job["env"])
    # The zygote's process-wide caches were filled outside the sandbox: tempfile's directory (the
    # zygote's, e.g. /root, read-only here) must be found again in this view, as a cold child does.
    import tempfile

    tempfile.tempdir = None
    # The course's modules come from the job's copy from now on (the installed package is covered).
    lib = os.path.join(job["job"], "lib")

    def under(p: str, roots: list) -> bool:
        return any(linux.under(p, r) for r in roots)

    sys.path[:] = [p for p in sys.path if under(p, job["spec"]["keep"]) or not under(p, job["hidden"])]
    for name, module in list(sys.modules.items()):
        if name == "tfcourse" or name.startswith("tfcourse."):
            if getattr(module, "__path__", None) is not None:
                module.__path__ = [os.path.join(lib, *name.split("."))]
    sys.path_importer_cache.clear()
    import importlib

    importlib.invalidate_caches()
    code = 125
    try:
        with open(os.path.join(job["job"], "child.py"), encoding="utf-8") as fh:
            source = fh.read()
        namespace = {"__name__": "tfcourse_child", "__file__": os.path.join(job["job"], "child.py")}
        exec(compile(source, namespace["__file__"], "exec"), namespace)
        code = namespace["main"](job["job"], channel)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - learner code may have replaced or closed them
            pass
        namespace["_kill_descendants"]()
    except BaseException as exc:  # noqa: BLE001
        _report(exc)
    os._exit(code if isinstance(code, int) else 125)


def _fork_a(job: dict, channel: int, output: int) -> None:
    """A: isolate, fork B, wait for it (never returns)."""
    try:
        zygote = os.getppid()
        libc.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the zygote killed: so is this job
        if os.getppid() != zygote:
            os._exit(125)
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.dup2(channel, 3)
        os.closerange(4, min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 20))  # nr_open's default
        channel = 3
        status_r, status_w = os.pipe()
        uid, gid = os.getuid(), os.getgid()
        flags = (linux.CLONE_NEWUSER | linux.CLONE_NEWNS | linux.CLONE_NEWNET | linux.CLONE_NEWPID
                 | linux.CLONE_NEWIPC | linux.CLONE_NEWUTS)
        linux.check(libc.unshare(flags) == 0, "unshare")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            _pid1(job, channel, status_w)
        os.close(status_w)
        os.close(channel)
        os.close(1)
        os.close(2)
        _, status = os.waitpid(pid, 0)
        child = os.read(status_r, 4)
        if len(child) == 4:  # B reported C's status: the job's child's own end
            status = int.from_bytes(child, "little")
    except BaseException as exc:  # noqa: BLE001
        _report(exc)
        os._exit(125)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 125)


def serve(control: socket.socket) -> None:
    while True:
        try:
            line, fds, _, _ = socket.recv_fds(control, 1 << 20, 2)
        except OSError:
            return
        if not line:
            return
        job = json.loads(line)
        warm_up(job.get("warm", []))
        why = unsafe_to_fork()
        if why or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            control.sendall(f"refused {why or 'expected two file descriptors'}\n".encode())
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _fork_a(job, *fds)
        for fd in fds:
            os.close(fd)
        control.sendall(f"pid {pid}\n".encode())
        while True:  # reap A; if the grading process goes away, A goes too
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                control.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                break
            ready, _, _ = select.select([control], [], [], 0.02)
            if ready and not control.recv(1, socket.MSG_PEEK):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return


def main() -> int:
    linux.WHO = "tfcourse zygote"
    control = socket.socket(fileno=int(sys.argv[1]))
    if len(sys.argv) > 3:  # in bubblewrap: the course's public library, copied for the zygote
        sys.path.insert(0, sys.argv[3])
    try:
        warm()
    except BaseException as exc:  # noqa: BLE001
        control.sendall(f"failed {type(exc).__name__}: {str(exc)[:300]}\n".encode())
        return 1
    why = unsafe_to_fork()
    control.sendall((f"failed {why}\n" if why else "ready\n").encode())
    if why:
        return 1
    serve(control)
    return 0


if __name__ == "__main__":
    sys.exit(main())
