"""Hints: the catalogue of known wrong implementations (:class:`Mistake`) and how an answer is
matched against them (:func:`same_outcome`). A hint is shown only when exactly one explanation fits
the answer on every call of the failing case (:meth:`~tfcourse.checks.case.Judge.mistake_hint`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .outcome import Outcome
from .tolerance import HALF_TOLERANCE, tolerance

__all__ = ["Mistake", "same_outcome"]


@dataclass(frozen=True)
class Mistake:
    """A known wrong implementation, with the hint shown when an answer behaves like it.

    ``fn`` has the exercise's own signature (a function, or a class for module exercises).
    """

    name: str
    hint: str
    fn: Callable[..., Any]


def same_outcome(mine: Outcome, wrong: Outcome, *, shape_only: bool,
                  floor: tuple[float, float] = (0.0, 0.0)) -> bool:
    if mine.ok != wrong.ok:
        return False
    if not mine.ok:
        return mine.kind == wrong.kind and mine.error_type == wrong.error_type \
            and mine.type_name == wrong.type_name
    return len(mine.tensors) == len(wrong.tensors) and _same(mine.tensors, wrong.tensors, shape_only=shape_only,
                                                             floor=floor)


def _same(a: list[torch.Tensor], b: list[torch.Tensor], *, shape_only: bool,
          floor: tuple[float, float] = (0.0, 0.0)) -> bool:
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        if shape_only:
            continue
        if x.dtype == torch.bool or y.dtype == torch.bool:
            if not torch.equal(x.bool(), y.bool()):
                return False
            continue
        dtype = y.dtype if y.is_floating_point() else torch.float64
        atol, rtol = tolerance(dtype)
        factor = 2 if dtype in HALF_TOLERANCE else 10
        atol, rtol = max(atol * factor, floor[0]), max(rtol * factor, floor[1])
        if not torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True):
            return False
    return True
