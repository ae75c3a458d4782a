"""Isolation of the grader's child process: which sandbox, how to start the child in it, how to
watch it and how to stop it.

Three modes, strongest first (``auto`` takes the first that works on this machine; the
environment variable ``TFCOURSE_SANDBOX`` can ask for one, see docs/grading.md):

* ``bwrap`` (bubblewrap, Linux): the child gets its own view of the file system — the system
  and Python installation read-only, the job folder read-only at ``/job`` (learner cells, the
  course's public library without reference solutions, the inputs), a small size-limited tmpfs
  as ``/tmp`` and working directory — and nothing else: not the course checkout (``solutions/``,
  ``grader/cases``, ``tfcourse/reference``), not other submissions, not the reports. Also no
  network (own network namespace), own PID namespace (every process it starts dies with it), no
  capabilities (so it cannot raise its own rlimits or remount anything), no new privileges.
* ``unshare`` (util-linux, Linux with user namespaces): no network, own PID namespace, rlimits
  the child cannot raise. Files are NOT hidden.
* ``none`` (e.g. macOS): a new session (process group) and rlimits only.

In every mode the grading process also watches the child from outside (:class:`Watch`): the
number of processes/threads it runs and their memory, and kills the whole sandbox when a limit
is passed.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "TFCOURSE_SANDBOX"
MODES = ("bwrap", "unshare", "none")

# What each mode isolates, in one line (shown in the warning and the docs).
DESCRIPTIONS = {
    "bwrap": "bubblewrap: private file view (job folder + public course code only), no network, "
             "own PID namespace, no capabilities",
    "unshare": "unshare: no network, own PID namespace, rlimits it cannot raise; files are NOT hidden",
    "none": "no sandbox: process group and rlimits only; learner code can read and write "
            "whatever the grader's user can, and use the network",
}

# Variables a child may keep from the grader's environment (nothing else leaks in).
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH")

# Inside a bwrap sandbox: where the job folder and the scratch space appear.
JOB_VIEW = "/job"
SCRATCH_VIEW = "/tmp"

# Files of /etc the child may need (the dynamic loader, user names, fonts for matplotlib).
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
             "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/fonts")


class SandboxError(RuntimeError):
    """The sandbox asked for (``TFCOURSE_SANDBOX``) cannot be used on this machine."""


@dataclass(frozen=True)
class Sandbox:
    """The isolation used for every child of this grading process."""

    mode: str

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.mode]

    @property
    def hides_files(self) -> bool:
        return self.mode == "bwrap"

    @property
    def pid_namespace(self) -> bool:
        return self.mode in ("bwrap", "unshare")


@dataclass(frozen=True)
class Launch:
    """How to start one child: the command line, its environment and working directory, and the
    paths the child sees for its job folder and its scratch space."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    job: str
    scratch: str


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _real(path: str) -> str:
    return os.path.realpath(path)


def _python_dirs() -> list[str]:
    """Folders of the Python installation the child needs (read-only): the prefixes, and the
    folders on this interpreter's path (site-packages, folders added by .pth files), except the
    course checkout and anything inside it or around it."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            str(Path(_real(sys.executable)).parent.parent)}
    dirs |= {p for p in sys.path if p and os.path.isabs(p)}
    dirs |= {_real(d) for d in dirs}
    secret = hidden_paths()
    return sorted(d for d in dirs if os.path.isdir(d) and d != "/"
                  and not any(_under(d, h) or _under(h, d) for h in secret if not _prefix(d)))


def _prefix(path: str) -> bool:
    """Whether ``path`` is one of the interpreter's prefixes (always needed; a checkout inside
    one is covered by a tmpfs instead)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return path in prefixes | {_real(p) for p in prefixes}


def hidden_paths() -> list[str]:
    """Paths a child must never see even when they lie inside a folder it needs: the course
    checkout (solutions, hidden cases, reference solutions) and the installed course packages."""
    import grader
    import tfcourse

    package = Path(grader.__file__).resolve().parent
    paths = {str(package), _real(str(Path(tfcourse.__file__).parent))}
    checkout = package.parent
    if (checkout / "solutions").is_dir() or (checkout / ".git").exists():
        paths.add(str(checkout))
    return sorted(paths)


def child_env(home: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
    env.update({
        "HOME": home,
        "TMPDIR": home,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    })
    return env


def _bwrap_argv(job_dir: Path, inner: list[str], *, device: str, scratch_bytes: int) -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--hostname", "grader"]
    # Scratch space first: a size-limited tmpfs at /tmp, thrown away with the sandbox (no disk
    # fill). Mounted before the binds so that a Python installation under /tmp (a virtual
    # environment in a checkout under /tmp, as CI makes) is bound on top of it, not hidden by it.
    argv += ["--size", str(scratch_bytes), "--tmpfs", SCRATCH_VIEW, "--dir", f"{SCRATCH_VIEW}/work"]
    visible: list[str] = []

    def ro(path: str) -> None:
        nonlocal argv
        if any(_under(path, v) for v in visible):
            return
        argv += ["--ro-bind", path, path]
        visible.append(path)

    ro("/usr")
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            ro(d)
    for f in ETC_FILES:
        argv += ["--ro-bind-try", f, f]
    for d in sorted(_python_dirs(), key=len):  # a folder before the folders inside it
        if not _under(SCRATCH_VIEW, d):  # never /tmp itself (or /): it holds other jobs' files
            ro(d)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if device.startswith("cuda"):
        for node in sorted(glob.glob("/dev/nvidia*")):
            argv += ["--dev-bind", node, node]
        argv += ["--ro-bind-try", "/sys", "/sys"]
    # /dev/shm: size-limited, thrown away with the sandbox (no disk fill).
    argv += ["--size", str(scratch_bytes), "--tmpfs", "/dev/shm"]
    # Anything secret that lies inside a folder the child needs is covered by an empty tmpfs.
    covered: list[str] = []
    for secret in sorted(hidden_paths(), key=len):
        if any(_under(secret, v) for v in visible) and not any(_under(secret, c) for c in covered):
            argv += ["--size", "4096", "--tmpfs", secret, "--remount-ro", secret]
            covered.append(secret)
    argv += ["--ro-bind", str(job_dir), JOB_VIEW, "--chdir", f"{SCRATCH_VIEW}/work", "--"]
    return argv + inner


UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]


def launch(sandbox: Sandbox, job_dir: Path, child_args: list[str], *, device: str, scratch_mb: int) -> Launch:
    """The command that starts ``python -I <job>/child.py <job> ...child_args`` in ``sandbox``.

    job_dir holds child.py and the job; in bwrap mode it appears read-only at /job and the
    working directory is a size-limited tmpfs; otherwise the child works in ``job_dir/work``.
    """
    if sandbox.mode == "bwrap":
        job, scratch = JOB_VIEW, f"{SCRATCH_VIEW}/work"
    else:
        job, scratch = str(job_dir), str(job_dir / "work")
        (job_dir / "work").mkdir(exist_ok=True)
    inner = [sys.executable, "-I", f"{job}/child.py", job, *child_args]
    if sandbox.mode == "bwrap":
        argv = _bwrap_argv(job_dir, inner, device=device, scratch_bytes=max(1, scratch_mb) * 2**20)
    elif sandbox.mode == "unshare":
        argv = UNSHARE + inner
    else:
        argv = inner
    return Launch(argv, child_env(scratch), str(job_dir), job, scratch)


# ---------------------------------------------------------------------------------------------
# Choosing the sandbox
# ---------------------------------------------------------------------------------------------
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
        spec = launch(Sandbox(mode), job, [], device="cpu", scratch_mb=16)
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


@functools.cache
def _choose(requested: str) -> Sandbox:
    if requested in MODES:
        why = _works(requested)
        if why is not None:
            raise SandboxError(f"{ENV_VAR}={requested}, but {why}")
        return Sandbox(requested)
    if requested not in ("", "auto"):
        raise SandboxError(f"{ENV_VAR}={requested!r}: expected one of auto, {', '.join(MODES)}")
    reasons = []
    for mode in MODES:
        why = _works(mode)
        if why is None:
            if mode != "bwrap":
                print(f"grader: warning: {'; '.join(reasons)}: learner code runs with weaker isolation, "
                      f"sandbox {mode!r} ({DESCRIPTIONS[mode]}); see docs/grading.md", file=sys.stderr)
            return Sandbox(mode)
        reasons.append(why)
    raise AssertionError("unreachable: mode 'none' always works")


def choose() -> Sandbox:
    """The sandbox for this process's children (probed once; ``TFCOURSE_SANDBOX`` may ask for
    one: auto, bwrap, unshare or none). Warns once on stderr when auto falls back.

    Raises SandboxError when the requested mode cannot run here."""
    with _lock:
        return _choose(os.environ.get(ENV_VAR, "auto").strip().lower())


# ---------------------------------------------------------------------------------------------
# Watching and stopping
# ---------------------------------------------------------------------------------------------
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Watch:
    """Counts the tasks (processes and threads) of a child's process tree and their memory,
    from /proc (Linux). Elsewhere it sees nothing and the rlimits alone apply."""

    def __init__(self, pid: int):
        self.pid = pid
        self.enabled = os.path.isdir(f"/proc/{pid}")

    def pids(self) -> list[int]:
        """The child and all its descendants (those still attached to its tree)."""
        if not self.enabled:
            return []
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children") as fh:
                        todo += [int(c) for c in fh.read().split()]
                except (OSError, ValueError):
                    pass
        return found

    def sample(self) -> tuple[int, int]:
        """(number of tasks, resident memory in bytes) of the whole tree. Memory is the sum of
        RSS, refined to PSS (shared pages counted once) when the RSS sum looks large."""
        tasks, rss, pids = 0, 0, self.pids()
        for pid in pids:
            try:
                tasks += len(os.listdir(f"/proc/{pid}/task"))
                with open(f"/proc/{pid}/statm") as fh:
                    rss += int(fh.read().split()[1]) * PAGE
            except (OSError, ValueError, IndexError):
                pass
        return tasks, rss

    def pss(self) -> int:
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/smaps_rollup") as fh:
                    for line in fh:
                        if line.startswith("Pss:"):
                            total += int(line.split()[1]) * 1024
                            break
            except (OSError, ValueError, IndexError):
                pass
        return total


def kill_tree(proc: subprocess.Popen, watch: Watch | None = None) -> None:
    """Kill the child's process group and every descendant still in its tree, then reap it.

    With a PID namespace (bwrap, unshare) killing the group kills the namespace's first process,
    and the kernel then kills everything else in it, also processes that left the group."""
    stragglers = watch.pids() if watch is not None else []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in stragglers:
        if pid != proc.pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass

