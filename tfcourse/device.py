"""Device, dtype and seed helpers shared by notebooks, checks and the grader."""

from __future__ import annotations

import random

import torch

__all__ = ["get_device", "make_generator", "seed_everything"]


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

