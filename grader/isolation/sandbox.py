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
* ``unshare`` (util-linux, Linux with user namespaces): no network, own PID, IPC and UTS
  namespaces, rlimits the child cannot raise, and a file view made in its own mount namespace
  (by linux.py, the sandbox's first process, before learner code runs): every top-level folder
  of ``/`` except the system's (``/usr``, ``/bin``, ``/lib*``, ``/proc``) is covered by an empty
  tmpfs, and so are the course checkout, the submissions' folders (:func:`protect`) and the
  folder of the job folders; then only what the child needs is put back: the Python
  installation, its own job folder (read-only, with a size-limited tmpfs as working directory),
  a few ``/etc`` files and ``/dev`` nodes; everything is read-only and every capability dropped
  before learner code starts. Still visible, unlike bwrap: the covered folders' names (empty), ``/proc/self/mountinfo``,
  the machine's host name, and the job folder under its real path rather than ``/job``.
* ``none`` (e.g. macOS): a new session (process group) and rlimits only.

In every mode the grading process also watches the child from outside (:class:`Watch`): the
number of processes/threads it runs and their memory, and kills the whole sandbox when a limit
is passed.
"""

from __future__ import annotations

import atexit
import functools
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from . import linux

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

# Variables a child may keep from the grader's environment (nothing else leaks in).
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH")

# Inside a bwrap sandbox: where the job folder and the scratch space appear (and, in a fast path
# zygote's view, the folder of all job folders).
JOB_VIEW = "/job"
SCRATCH_VIEW = "/tmp"
JOBS_VIEW = "/jobs"
ZYGOTE_UID = 1000  # a root grader's fast path zygote, inside its own user namespace

# Files of /etc the child may need (the dynamic loader, user names, fonts for matplotlib).
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
             "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/fonts")


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


@dataclass(frozen=True)
class Launch:
    """How to start one child: the command line, its environment and working directory, and the
    paths the child sees for its job folder and its scratch space."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    job: str
    scratch: str


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
                  and not any(linux.under(d, h) or linux.under(h, d) for h in secret if not _prefix(d)))


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


def _bwrap_argv(job_dir: Path, inner: list[str], *, device: str, scratch_bytes: int,
                jobs: str | None = None) -> list[str]:
    """bwrap's command line for a child whose job folder is ``job_dir`` (seen at /job).

    ``jobs``: the view of a fast path zygote (zygote.py), which runs no learner code but
    forks the children: ``job_dir`` is its own folder, the folder of every job folder is seen
    read-only at :data:`JOBS_VIEW` (each fork binds its own job at /job and covers the others),
    and /proc is the grading machine's (read-write bind, no PID namespace: bubblewrap's own
    /proc has covered entries, which would stop the forks mounting a /proc of their own PID
    namespace; the forks make those namespaces)."""
    namespaces = ["--unshare-all"]  # user (if it can), IPC, PID, network, UTS, cgroup (if it can)
    if jobs is not None:
        namespaces = ["--unshare-user-try", "--unshare-ipc", "--unshare-net", "--unshare-uts",
                      "--unshare-cgroup-try"]
    if jobs is not None and os.getuid() == 0:
        # Each fork maps its own root to the zygote's user; since Linux 5.12 a namespace made
        # without CAP_SETFCAP cannot map the parent's uid 0, so a root grader's zygote runs as
        # another uid of its namespace (still the grader's user outside it).
        namespaces[0:1] = ["--unshare-user", "--uid", str(ZYGOTE_UID), "--gid", str(ZYGOTE_UID)]
    # --die-with-parent ties bwrap to the thread that started it (PR_SET_PDEATHSIG); a zygote is
    # started by a short-lived thread (fastpath.prestart) and exits when its socket closes instead.
    argv = ["bwrap", *namespaces, *(["--die-with-parent"] if jobs is None else []), "--new-session",
            "--cap-drop", "ALL", "--hostname", "grader"]
    # Scratch space first: a size-limited tmpfs at /tmp, thrown away with the sandbox (no disk
    # fill). Mounted before the binds so that a Python installation under /tmp (a virtual
    # environment in a checkout under /tmp, as CI makes) is bound on top of it, not hidden by it.
    argv += ["--size", str(scratch_bytes), "--tmpfs", SCRATCH_VIEW, "--dir", f"{SCRATCH_VIEW}/work"]
    visible: list[str] = []

    def ro(path: str) -> None:
        nonlocal argv
        if any(linux.under(path, v) for v in visible):
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
        if not linux.under(SCRATCH_VIEW, d):  # never /tmp itself (or /): it holds other jobs' files
            ro(d)
    # read-only: learner code must not write /proc/1/mem of bubblewrap's init (nor anything else)
    argv += ["--proc", "/proc", "--remount-ro", "/proc"] if jobs is None else ["--bind", "/proc", "/proc"]
    argv += ["--dev", "/dev"]
    if device.startswith("cuda"):
        for node in sorted(glob.glob("/dev/nvidia*")):
            argv += ["--dev-bind", node, node]
        argv += ["--ro-bind-try", "/sys", "/sys"]
    # /dev/shm: size-limited, thrown away with the sandbox (no disk fill).
    argv += ["--size", str(scratch_bytes), "--tmpfs", "/dev/shm"]
    # Anything secret that lies inside a folder the child needs is covered by an empty tmpfs: the
    # course checkout and packages, and the folders around the submissions and reports (protect).
    covered: list[str] = []
    for secret in sorted({*hidden_paths(), *protected()}, key=len):
        if any(linux.under(secret, v) for v in visible) and not any(linux.under(secret, c) for c in covered):
            argv += ["--size", "4096", "--tmpfs", secret, "--remount-ro", secret]
            covered.append(secret)
    if jobs is not None:
        argv += ["--ro-bind", jobs, JOBS_VIEW]
    argv += ["--ro-bind", str(job_dir), JOB_VIEW, "--chdir", f"{SCRATCH_VIEW}/work", "--"]
    return argv + inner


def bwrap_covered(device: str = "cpu") -> list[str]:
    """The secret folders the bwrap view covers with an empty tmpfs because they lie inside a
    folder it shows (checkout, installed course packages, :func:`protect`'s folders): what a
    zygote's view depends on besides the device. A protected folder elsewhere (a batch's
    submissions under /tmp, say) is simply absent from the view and does not count."""
    argv = _bwrap_argv(Path(JOB_VIEW), [], device=device, scratch_bytes=1, jobs=JOBS_VIEW)
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 2:i + 4] == ["--remount-ro", argv[i + 1]]]


def bwrap_tmp_binds() -> list[str]:
    """The folders the bwrap view binds inside its /tmp (a Python installation under /tmp, as
    CI's checkout makes): a fast path fork mounts a fresh /tmp and binds them again."""
    dirs = [d for d in sorted(_python_dirs(), key=len) if linux.under(d, SCRATCH_VIEW) and d != SCRATCH_VIEW]
    return [d for i, d in enumerate(dirs) if not any(linux.under(d, e) for e in dirs[:i])]


UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
           "--mount-proc", "--"]

# The unshare view. Top-level entries of / the child keeps as they are (read-only): the system.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc")
# Device nodes put back into the child's /dev (the set bubblewrap's --dev gives).
DEV_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")

_protected: set[str] = set()
_protect_lock = threading.Lock()
_jobs: list[str] = []


def jobs_folder() -> str:
    """The folder (private to this grading process, made on first use, removed at exit) that
    holds every child's job folder: the unshare view covers it, a fast path zygote's bwrap view
    binds it (each fork then shows only its own job)."""
    with _lock:
        if not _jobs:
            path = tempfile.mkdtemp(prefix="tfcourse-jobs-")
            atexit.register(shutil.rmtree, path, ignore_errors=True)
            _jobs.append(_real(path))
        return _jobs[0]


def protect(paths) -> None:
    """Folders the unshare view covers too (e.g. the folders holding the batch's submissions,
    the folders reports are written to). "/" and folders in or around the system's are ignored.
    Thread-safe (a Dask worker's tasks call it from several threads)."""
    for path in paths:
        real = _real(str(path))
        if real != "/" and not any(linux.under(real, s) or linux.under(s, real) for s in SYSTEM_DIRS):
            with _protect_lock:
                _protected.add(real)


def protected() -> list[str]:
    """The folders :func:`protect` was given (real paths, sorted; a copy)."""
    with _protect_lock:
        return sorted(_protected)


def _unshare_spec(job_dir: str, scratch: str, *, device: str, scratch_bytes: int) -> dict:
    """What the unshare view (linux.py) covers and keeps for one child (see the module docstring)."""
    cover, mask = [], []
    for entry in sorted(os.listdir("/")):
        path = "/" + entry
        if path in SYSTEM_DIRS or os.path.islink(path):
            continue
        if os.path.isdir(path):
            if path == "/sys" and device.startswith("cuda"):
                continue
            cover.append(path)
        elif os.path.isfile(path):
            mask.append(path)
    cover += hidden_paths() + protected() + [str(Path(job_dir).parent)]
    cover = [c for c in dict.fromkeys(cover) if c != "/" and not any(linux.under(s, c) for s in SYSTEM_DIRS)]
    keep = [*_python_dirs(), job_dir, *(f for f in ETC_FILES if os.path.exists(f)), *DEV_NODES]
    for var in ("LD_LIBRARY_PATH", "CUDA_HOME"):
        keep += [d for d in os.environ.get(var, "").split(":") if os.path.isabs(d) and os.path.isdir(d)]
    if device.startswith("cuda"):
        keep += sorted(glob.glob("/dev/nvidia*"))
    keep = [k for k in dict.fromkeys(keep) if k not in cover]
    return {"cover": cover, "keep": keep, "mask": mask, "scratch": scratch, "scratch_bytes": scratch_bytes}


def launch(sandbox: Sandbox, job_dir: Path, child_args: list[str], *, device: str, scratch_mb: int) -> Launch:
    """The command that starts ``python -I <job>/child.py <job> ...child_args`` in ``sandbox``.

    job_dir holds child.py and the job; in bwrap mode it appears read-only at /job and the
    working directory is a size-limited tmpfs; otherwise the child works in ``job_dir/work``.
    """
    if sandbox.mode == "bwrap":
        job, scratch = JOB_VIEW, f"{SCRATCH_VIEW}/work"
    else:
        job = _real(str(job_dir)) if sandbox.mode == "unshare" else str(job_dir)
        scratch = f"{job}/work"
        (job_dir / "work").mkdir(exist_ok=True)
    inner = [sys.executable, "-I", f"{job}/child.py", job, *child_args]
    scratch_bytes = max(1, scratch_mb) * 2**20
    if sandbox.mode == "bwrap":
        argv = _bwrap_argv(job_dir, inner, device=device, scratch_bytes=scratch_bytes)
    elif sandbox.mode == "unshare":
        spec = _unshare_spec(job, scratch, device=device, scratch_bytes=scratch_bytes)
        argv = [*UNSHARE, sys.executable, "-I", "-S", linux.__file__, json.dumps(spec), *inner]
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
_warned: list[Sandbox] = []  # the choices already warned about (kept: identity counts)

# The one-line fixes, named in the refusal and in `python -m grader --doctor`.
FIX = ("install bubblewrap (`apt-get install bubblewrap`, or the container recipe in docs/grading.md), "
       "or ask for a weaker sandbox by name: --sandbox unshare / --sandbox none")


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
        return linux.process_tree(self.pid) if self.enabled else []

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

