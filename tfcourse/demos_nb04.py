"""Helpers for the demo cells of notebook 04 (normalisation)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["single_thread"]


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch's CPU ops on one thread inside the block, and restore the thread count after.

    For the deep toy stacks of notebook 04: thousands of operations on tensors of a few thousand
    numbers each. Threads cannot speed such small operations up, and on a busy machine (other
    programs on the same cores) every operation can wait for a preempted worker thread: measured
    on a 2-core machine under load, 20 s with 2 threads against 1 s with one. Results are the
    same either way.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
