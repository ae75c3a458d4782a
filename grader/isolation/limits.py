"""The limits a child runs under (no heavy imports: ``python -m grader`` reads their defaults for
its options before torch is imported)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-notebook limits, enforced from outside the learner's process.

    timeout: CPU seconds for each exercise (its cell's definition, and all its cases), of all the
        child's processes together, so a busy machine does not cost a correct exercise its points.
    wall_factor: the wall-clock backstop, ``wall_factor × timeout`` seconds per exercise: code that
        waits without computing (sleep, a lock) uses no CPU time and is stopped there.
    startup: wall-clock seconds the child may take to start (importing torch) before learner code runs.
    memory_mb: memory of the child, MiB; 0 for none. On CPU an address-space limit (RLIMIT_AS)
        of each process, and on every device a watch on the resident memory of all its
        processes together.
    output_kb: learner output kept per notebook (stdout + stderr); the rest is discarded.
    file_mb: the largest file the child may write (RLIMIT_FSIZE), and the size of its scratch
        space (/tmp and the working directory) in the bwrap sandbox.
    tasks: processes + threads the child may run at once (a fork loop is stopped here).
    """

    timeout: float = 30.0
    wall_factor: float = 4.0
    startup: float = 120.0
    memory_mb: int = 4096
    output_kb: int = 64
    file_mb: int = 256
    tasks: int = 128
