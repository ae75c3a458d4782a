"""Timing helper for the notebooks' cost experiments.

Built on ``torch.utils.benchmark.Timer`` (timeit's timer, which also synchronises CUDA): calls are
timed in blocks, and the time of a point is the **minimum** over the blocks, timeit's own practice
(``timeit.Timer.repeat``, take the min). Noise on a shared machine (another process, a clock
change) only ever makes a block slower, so the fastest block is the closest to what the code
costs, and the one that repeats best on a busy machine; a median still moves with the load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.benchmark import Timer

__all__ = ["benchmark", "compared", "trend"]


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    min_run_time: float = 0.2,
    num_threads: int = 1,
    repeat: int = 5,
    **kwargs: Any,
) -> float:
    """Wall-clock seconds per call of ``fn(*args, **kwargs)``: the minimum over repeated blocks.

    ``torch.utils.benchmark.Timer(...).blocked_autorange(min_run_time=min_run_time)`` warms up,
    picks how many calls make a block and times blocks for at least ``min_run_time`` seconds;
    more blocks are timed until there are ``repeat``. Each block gives the mean time per call of
    its calls; the **minimum** over blocks is returned, as ``min(timeit.Timer.repeat(...))``
    would. Expect a few percent of run-to-run variation anyway; compare trends, not digits.

    On CUDA the timer synchronises the device, so the time includes the kernels and not just
    their launch.

    fn: the callable to time; ``args``/``kwargs`` are passed to it unchanged (so ``fn`` cannot
    receive keyword arguments named ``min_run_time``, ``num_threads`` or ``repeat`` this way).
    min_run_time: seconds of measurement, > 0 (small values are cheaper and noisier).
    num_threads: CPU threads torch may use while timing; 1 by default, the Timer's own default,
    because single-threaded timings repeat far better on a shared machine (with 2 threads on
    2 busy cores, one preempted thread can stall a small op by milliseconds). Pass
    ``torch.get_num_threads()`` to time what a plain call would use.
    repeat: the fewest blocks the minimum is taken over, >= 1.
    Raises ValueError if ``min_run_time`` is not positive, ``num_threads`` < 1 or ``repeat`` < 1;
    exceptions from ``fn`` propagate.
    """
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be > 0 seconds, got {min_run_time!r}")
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads!r}")
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat!r}")
    timer = Timer(
        stmt="fn(*args, **kwargs)",
        globals={"fn": fn, "args": args, "kwargs": kwargs},
        num_threads=num_threads,
    )
    measured = timer.blocked_autorange(min_run_time=min_run_time)
    times = list(measured.times)
    while len(times) < repeat:  # a slow call: blocks of one call each, until there are `repeat`
        times += timer.timeit(measured.number_per_run).times
    return float(min(times))


def compared(ratio: float, *, tie: float = 0.1, faster: str = "faster than", slower: str = "slower than",
             same: str = "about as fast as") -> str:
    """How a measured speed ratio (a rate over another, or a time over another's inverse) reads in
    a sentence ("A was {compared(rate_a / rate_b)} B"): ``faster`` above 1 + tie, ``slower`` below 1 / (1 + tie), ``same`` in between, so a
    notebook's conclusion is the run's and never contradicts the table above it.

    Raises ValueError for a ratio that is not a positive number (a timing of 0 or NaN)."""
    if not ratio > 0 or ratio == float("inf"):
        raise ValueError(f"a speed ratio must be a positive number, got {ratio!r}")
    if not tie >= 0:
        raise ValueError(f"tie must be >= 0, got {tie!r}")
    return faster if ratio > 1 + tie else slower if ratio < 1 / (1 + tie) else same


def trend(values: list[float], *, flat: float = 1.5, rose: str = "rose", fell: str = "fell",
          same: str = "stayed nearly flat") -> str:
    """How a measured series changed from its first point to its last, with the factor:
    "fell (x0.12)", "stayed nearly flat (x0.83)", "rose (x2.4)"; "nearly flat" while the factor is
    within ``flat`` either way. Raises ValueError for fewer than two points or a value that is
    not a positive number."""
    if len(values) < 2:
        raise ValueError(f"a trend needs at least two points, got {len(values)}")
    if not all(v > 0 and v != float("inf") for v in values):
        raise ValueError(f"a trend needs positive numbers, got {values!r}")
    if not flat >= 1:
        raise ValueError(f"flat must be >= 1, got {flat!r}")
    factor = values[-1] / values[0]
    word = rose if factor > flat else fell if factor < 1 / flat else same
    return f"{word} (x{factor:.2f})"
