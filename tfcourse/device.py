"""Device, dtype and seed helpers shared by notebooks, checks and the grader."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["get_device", "make_generator", "seed_everything", "single_thread"]


def get_device(prefer: str = "auto") -> torch.device:
    """Return the device to compute on.

    prefer: ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda"``.
    Raises ValueError for another name and RuntimeError when ``"cuda"`` is asked for but
    no CUDA device is present.
    """
    if prefer not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {prefer!r}")
    if prefer == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if prefer == "cuda":
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device("cpu")


def make_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed``: all randomness in checks goes through one."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, and torch's global RNGs (for notebook experiments, not for checks)."""
    random.seed(seed)
    torch.manual_seed(seed)



@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch's CPU ops on one thread inside the block, and restore the thread count after.

    For notebook demos that run thousands of operations on small tensors (deep toy stacks, tiny
    training loops): threads cannot speed such operations up, and on a busy machine (other
    programs on the same cores) every operation can wait for a preempted worker thread. Measured
    on a 2-core machine under load: 20 s with 2 threads against 1 s with one (notebook 04's deep
    stacks), 17-94 s against 4 s (notebook 03's extrapolation experiment); results are the same.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
