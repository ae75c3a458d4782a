"""The Linux calls of the isolation engine, written once: mounts (bind, tmpfs, read-only), the
capability sets, the loopback, the unshare sandbox's file view, and the process tree from /proc.

Standard library only, and no import of the rest of ``grader``: besides being imported by the
grading process (``grader.isolation.linux``, for the process tree), it runs where the package
cannot be imported. child.py and zygote.py import it (as ``linux``) from their own folder:
jobfolder.py copies it into every job folder and into a bwrap zygote's folder (an unshare zygote
runs from grader/isolation/ itself). And the unshare sandbox's first process is this file
(``views.launch``), which makes the child's view before any learner code runs::

    python -I -S linux.py SPEC PROGRAM ARGS...

SPEC (JSON, made by ``views._unshare_spec``): "cover" folders get an empty tmpfs, "keep" paths
under a cover are bound back from the original (opened before anything is covered), "mask"
files get /dev/null bound over them; paths are handled shortest first, so what is nested inside
something bound back is covered again. Then everything is made read-only (recursively),
size-limited tmpfs are mounted at "scratch" and /dev/shm, every capability is dropped (bounding
set, ambient, no new privileges) and PROGRAM is executed in "scratch". Any failure stops the
sandbox (exit 125): the grader never runs learner code in a half-made view.
"""

import ctypes
import json
import os
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, AT_RECURSIVE, SYS_MOUNT_SETATTR = 1, 2, 0x8000, 442
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1

libc = ctypes.CDLL(None, use_errno=True)
WHO = "tfcourse sandbox"  # who says what failed (the zygote and the unshare view name themselves)


def fail(what: str) -> None:
    """Stop this process before any learner code runs: one line on stderr, exit status 125."""
    sys.stderr.write(f"{WHO}: {what}\n")
    sys.stderr.flush()
    os._exit(125)


def check(ok: bool, what: str) -> None:
    """:func:`fail` with the C library's error unless ``ok``."""
    if not ok:
        fail(f"{what}: {os.strerror(ctypes.get_errno())}")


def under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies inside it (as strings: no file system access)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def mount(src: str | None, dst: str, fs: str | None, flags: int, data: str | None = None) -> None:
    args = [None if a is None else a.encode() for a in (src, dst, fs, data)]
    check(libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags), args[3]) == 0,
          f"mount {fs or src} on {dst}")


def bind(fd: int, path: str) -> None:
    """Bind what ``fd`` (an O_PATH descriptor opened before anything was covered) names, with
    the mounts under it, on ``path``."""
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)


def read_only(path: str) -> None:
    """Make ``path`` and every mount under it read-only and nosuid (mount_setattr, Linux 5.12)."""
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    check(libc.syscall(SYS_MOUNT_SETATTR, -100, path.encode(), AT_RECURSIVE, ctypes.byref(attr),
                       ctypes.c_size_t(32)) == 0, f"read-only {path} (mount_setattr)")


def tmpfs(path: str, size: int, flags: int = 0) -> None:
    """A size-limited tmpfs on ``path`` (made first if missing)."""
    os.makedirs(path, exist_ok=True)
    mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | flags, f"size={size},mode=755")


def drop_bounding_set() -> None:
    """Every capability out of the bounding set and the ambient set, and no new privileges: no
    program this process executes can gain one."""
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0, f"drop capability {cap}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs")


def clear_capabilities() -> None:
    """Empty this thread's effective, permitted and inheritable sets (capset): for a process that
    goes on without executing a program, which the bounding set alone would leave them to."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all empty
    check(libc.syscall(126, ctypes.byref(header), ctypes.byref(data)) == 0, "capset")  # SYS_capset


def loopback_up() -> None:
    """Bring up the new network namespace's loopback (127.0.0.1, as bubblewrap does): the child
    can talk to itself, and to nothing else."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def in_own_user_namespace() -> bool:
    """Whether this process runs in a user namespace of its own, not the machine's initial one
    (whose uid_map maps every uid to itself: ``0 0 4294967295``)."""
    try:
        with open("/proc/self/uid_map", encoding="ascii") as fh:
            return fh.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def unshare_view(spec: dict) -> None:
    """Make the unshare sandbox's file view in this (new) mount namespace, as the module docstring
    says, and go to its scratch folder; any failure exits 125. Refuses to run in the machine's own
    user namespace, where its mounts would cover the machine's folders (run by hand as root)."""
    if not in_own_user_namespace():
        fail("the sandbox's view is made only inside a new user namespace (unshare --user); not run")
    try:
        fds = {}
        for path in spec["keep"] + ["/dev/null"]:
            try:
                fds[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                pass
        events = sorted([(p, "cover") for p in spec["cover"]] + [(p, "keep") for p in spec["keep"] if p in fds],
                        key=lambda e: (len(e[0]), e[1] == "keep"))
        done = []
        for path, what in events:
            near = max((d for d in done if under(path, d[0])), key=lambda d: len(d[0]), default=None)
            hidden = near is not None and near[1] == "cover"
            if what == "cover":
                if hidden or not os.path.isdir(path) or os.path.islink(path):
                    continue
                tmpfs(path, 2**20)
            else:
                if not hidden:
                    continue
                if os.path.isdir(f"/proc/self/fd/{fds[path]}"):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "a").close()
                bind(fds[path], path)
            done.append((path, what))
        for path in spec["mask"]:
            if os.path.isfile(path) and not os.path.islink(path):
                mount(f"/proc/self/fd/{fds['/dev/null']}", path, None, MS_BIND)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):
            if not os.path.lexists("/dev/" + name):
                os.symlink(target, "/dev/" + name)
        os.makedirs("/dev/shm", exist_ok=True)
        read_only("/")
        tmpfs(spec["scratch"], spec["scratch_bytes"])
        tmpfs("/dev/shm", spec["scratch_bytes"])
        drop_bounding_set()
        os.chdir(spec["scratch"])
    except OSError as exc:
        fail(str(exc))


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it still attached to its tree (threads' children too),
    each once, from /proc; just ``[root]`` where there is no /proc."""
    found, seen, todo = [], {root}, [root]
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
                    children = [int(c) for c in fh.read().split()]
            except (OSError, ValueError):
                continue
            todo += [c for c in children if c not in seen]
            seen.update(children)
    return found


if __name__ == "__main__":  # the unshare sandbox's first process
    WHO = "tfcourse unshare view"
    unshare_view(json.loads(sys.argv[1]))
    os.execv(sys.argv[2], sys.argv[2:])
