"""tfcourse.timing: the minimum of repeated blocks, and the words a notebook derives from its own
measurements (so a sentence never contradicts the table above it on a busy machine)."""

from __future__ import annotations

import itertools
import time

import pytest

from tfcourse.timing import benchmark, compared, trend


def test_benchmark_takes_the_fastest_block_so_a_slow_interruption_does_not_count():
    delays = itertools.cycle([0.004, 0.004, 0.03])  # every third call is interrupted
    measured = benchmark(lambda: time.sleep(next(delays)), min_run_time=0.05, repeat=6)
    assert 0.003 < measured < 0.015  # a mean or median of blocks would be pulled up by the slow calls


def test_benchmark_times_at_least_repeat_blocks_of_a_slow_call():
    calls = []
    benchmark(lambda: (calls.append(1), time.sleep(0.02)), min_run_time=0.01, repeat=4)
    assert len(calls) >= 4


@pytest.mark.parametrize("kwargs", [{"min_run_time": 0}, {"num_threads": 0}, {"repeat": 0}])
def test_benchmark_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        benchmark(lambda: None, **kwargs)


def test_compared_follows_the_measured_ratio():
    assert compared(2.0) == "faster than" and compared(0.5) == "slower than"
    assert compared(1.05) == compared(1 / 1.05) == "about as fast as"
    assert compared(0.95, faster="cheaper", slower="dearer", same="as cheap") == "as cheap"
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive"):
            compared(bad)


def test_trend_reads_the_first_and_last_points():
    assert trend([100.0, 90.0, 80.0]) == "stayed nearly flat (x0.80)"
    assert trend([100.0, 50.0, 10.0]) == "fell (x0.10)"
    assert trend([1.0, 3.0], rose="grew") == "grew (x3.00)"
    with pytest.raises(ValueError, match="two points"):
        trend([1.0])
    with pytest.raises(ValueError, match="positive"):
        trend([1.0, float("nan")])
