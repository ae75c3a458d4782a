"""The tolerances the checks compare with, per dtype (docs/conventions.md states them)."""

from __future__ import annotations

import torch

__all__ = ["HALF_TOLERANCE", "tolerance"]


# Half precision (float16, bfloat16): answers are compared with the reference computed in float64
# on the same half-valued inputs. Measured on the course's hidden inputs (tests/test_half.py), a
# correct answer computed in half (the reference itself, torch.softmax) or in float32 and then cast
# is at most ~2e-3 (float16) and ~2.2e-2 (bfloat16) away; these allow about twice that, and a real
# bug (a missing scale, a mask applied after the softmax) is off by 0.1 or more.
# docs/conventions.md ("Half precision") states them.
HALF_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (4e-2, 2e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) used to compare values of ``dtype`` with an oracle or the reference."""
    if dtype == torch.float64:
        return 1e-10, 1e-7
    if dtype in HALF_TOLERANCE:
        return HALF_TOLERANCE[dtype]
    return 1e-5, 1e-4
