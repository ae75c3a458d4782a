"""Watching a child from outside and stopping it, in every sandbox mode: the number of processes
and threads its tree runs and their memory (from /proc, Linux), and killing the whole tree."""

from __future__ import annotations

import os
import signal
import subprocess

from . import linux

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the tree has used so far, its reaped children's included."""
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rpartition(")")[2].split()  # after the command name
                total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            except (OSError, ValueError, IndexError):
                pass
        return total / TICKS

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
