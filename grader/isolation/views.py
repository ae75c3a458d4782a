"""What the grader's child sees in each sandbox mode, and the command that starts it there
(:func:`launch`); which mode is used is sandbox.py's choice, how it is watched watch.py's.

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
  before learner code starts. Still visible, unlike bwrap: the covered folders' names (empty),
  ``/proc/self/mountinfo``, the machine's host name, and the job folder under its real path
  rather than ``/job``.
* ``none`` (e.g. macOS): a new session (process group) and rlimits only.

The folders every view hides (:func:`hidden_paths`, :func:`protect`) and the folder of the job
folders (:func:`jobs_folder`) are kept here too.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from . import linux

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
    # --die-with-parent ties bwrap to the thread that started it (PR_SET_PDEATHSIG); a zygote is
    # started by a short-lived thread (fastpath.prestart) and exits when its socket closes instead.
    argv = ["bwrap", *_bwrap_namespaces(jobs), *(["--die-with-parent"] if jobs is None else []), "--new-session",
            "--cap-drop", "ALL", "--hostname", "grader"]
    # Scratch space first: a size-limited tmpfs at /tmp, thrown away with the sandbox (no disk
    # fill). Mounted before the binds so that a Python installation under /tmp (a virtual
    # environment in a checkout under /tmp, as CI makes) is bound on top of it, not hidden by it.
    argv += ["--size", str(scratch_bytes), "--tmpfs", SCRATCH_VIEW, "--dir", f"{SCRATCH_VIEW}/work"]
    binds, visible = _bwrap_system_binds()
    argv += binds
    # read-only: learner code must not write /proc/1/mem of bubblewrap's init (nor anything else)
    argv += ["--proc", "/proc", "--remount-ro", "/proc"] if jobs is None else ["--bind", "/proc", "/proc"]
    argv += ["--dev", "/dev"]
    if device.startswith("cuda"):
        for node in sorted(glob.glob("/dev/nvidia*")):
            argv += ["--dev-bind", node, node]
        argv += ["--ro-bind-try", "/sys", "/sys"]
    # /dev/shm: size-limited, thrown away with the sandbox (no disk fill).
    argv += ["--size", str(scratch_bytes), "--tmpfs", "/dev/shm"]
    argv += _bwrap_covers(visible)
    if jobs is not None:
        argv += ["--ro-bind", jobs, JOBS_VIEW]
    argv += ["--ro-bind", str(job_dir), JOB_VIEW, "--chdir", f"{SCRATCH_VIEW}/work", "--"]
    return argv + inner


def _bwrap_namespaces(jobs: str | None) -> list[str]:
    """bwrap's namespace options: all of them for a child; a zygote's view (``jobs``) keeps the
    grading machine's PID namespace (its forks make their own)."""
    namespaces = ["--unshare-all"]  # user (if it can), IPC, PID, network, UTS, cgroup (if it can)
    if jobs is not None:
        namespaces = ["--unshare-user-try", "--unshare-ipc", "--unshare-net", "--unshare-uts",
                      "--unshare-cgroup-try"]
    if jobs is not None and os.getuid() == 0:
        # Each fork maps its own root to the zygote's user; since Linux 5.12 a namespace made
        # without CAP_SETFCAP cannot map the parent's uid 0, so a root grader's zygote runs as
        # another uid of its namespace (still the grader's user outside it).
        namespaces[0:1] = ["--unshare-user", "--uid", str(ZYGOTE_UID), "--gid", str(ZYGOTE_UID)]
    return namespaces


def _bwrap_system_binds() -> tuple[list[str], list[str]]:
    """(bwrap options, the folders they show): the system, a few /etc files and the Python
    installation, read-only; a folder inside one already shown is not bound again."""
    argv: list[str] = []
    visible: list[str] = []

    def ro(path: str) -> None:
        if any(linux.under(path, v) for v in visible):
            return
        argv.extend(["--ro-bind", path, path])
        visible.append(path)

    ro("/usr")
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            argv.extend(["--symlink", os.readlink(d), d])
        elif os.path.isdir(d):
            ro(d)
    for f in ETC_FILES:
        argv.extend(["--ro-bind-try", f, f])
    for d in sorted(_python_dirs(), key=len):  # a folder before the folders inside it
        if not linux.under(SCRATCH_VIEW, d):  # never /tmp itself (or /): it holds other jobs' files
            ro(d)
    return argv, visible


def _bwrap_covers(visible: list[str]) -> list[str]:
    """Anything secret that lies inside a folder the child sees (``visible``) is covered by an
    empty tmpfs: the course checkout and packages, and the folders around the submissions and
    reports (protect)."""
    argv: list[str] = []
    covered: list[str] = []
    for secret in sorted({*hidden_paths(), *protected()}, key=len):
        if any(linux.under(secret, v) for v in visible) and not any(linux.under(secret, c) for c in covered):
            argv += ["--size", "4096", "--tmpfs", secret, "--remount-ro", secret]
            covered.append(secret)
    return argv


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
_jobs_lock = threading.Lock()


def jobs_folder() -> str:
    """The folder (private to this grading process, made on first use, removed at exit) that
    holds every child's job folder: the unshare view covers it, a fast path zygote's bwrap view
    binds it (each fork then shows only its own job)."""
    with _jobs_lock:
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


def launch(mode: str, job_dir: Path, child_args: list[str], *, device: str, scratch_mb: int) -> Launch:
    """The command that starts ``python -I <job>/child.py <job> ...child_args`` in sandbox ``mode``.

    job_dir holds child.py and the job; in bwrap mode it appears read-only at /job and the
    working directory is a size-limited tmpfs; otherwise the child works in ``job_dir/work``.
    """
    if mode == "bwrap":
        job, scratch = JOB_VIEW, f"{SCRATCH_VIEW}/work"
    else:
        job = _real(str(job_dir)) if mode == "unshare" else str(job_dir)
        scratch = f"{job}/work"
        (job_dir / "work").mkdir(exist_ok=True)
    inner = [sys.executable, "-I", f"{job}/child.py", job, *child_args]
    scratch_bytes = max(1, scratch_mb) * 2**20
    if mode == "bwrap":
        argv = _bwrap_argv(job_dir, inner, device=device, scratch_bytes=scratch_bytes)
    elif mode == "unshare":
        spec = _unshare_spec(job, scratch, device=device, scratch_bytes=scratch_bytes)
        argv = [*UNSHARE, sys.executable, "-I", "-S", linux.__file__, json.dumps(spec), *inner]
    else:
        argv = inner
    return Launch(argv, child_env(scratch), str(job_dir), job, scratch)
