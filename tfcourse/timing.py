"""Timing helper for the notebooks' cost experiments.

Built on ``torch.utils.benchmark.Timer``, which warms up, picks how many calls to time per
block, synchronises CUDA, and reports robust statistics; we only choose the median.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.benchmark import Timer

__all__ = ["benchmark"]


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    min_run_time: float = 0.2,
    num_threads: int = 1,
    **kwargs: Any,
) -> float:
    """Median wall-clock seconds per call of ``fn(*args, **kwargs)``.

    Uses ``torch.utils.benchmark.Timer(...).blocked_autorange(min_run_time=min_run_time)``: calls
    are timed in blocks for at least ``min_run_time`` seconds and the **median** time per call
    is returned (the median, not the mean, because a laptop or shared CI machine is noisy: a
    background process or a frequency change shows up as a few slow blocks, which the median
    ignores). Expect a few percent of run-to-run variation anyway; compare trends, not digits.

    On CUDA the timer synchronises the device, so the time includes the kernels and not just
    their launch.

    fn: the callable to time; ``args``/``kwargs`` are passed to it unchanged (so ``fn`` cannot
    receive keyword arguments named ``min_run_time`` or ``num_threads`` this way).
    min_run_time: seconds of measurement, > 0 (small values are cheaper and noisier).
    num_threads: CPU threads torch may use while timing; 1 by default, the Timer's own default,
    because single-threaded timings repeat far better on a shared machine (with 2 threads on
    2 busy cores, one preempted thread can stall a small op by milliseconds). Pass
    ``torch.get_num_threads()`` to time what a plain call would use.
    Raises ValueError if ``min_run_time`` is not positive or ``num_threads`` < 1; exceptions
    from ``fn`` propagate.
    """
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be > 0 seconds, got {min_run_time!r}")
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads!r}")
    timer = Timer(
        stmt="fn(*args, **kwargs)",
        globals={"fn": fn, "args": args, "kwargs": kwargs},
        num_threads=num_threads,
    )
    return float(timer.blocked_autorange(min_run_time=min_run_time).median)
