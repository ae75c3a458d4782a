"""Hidden cases in half precision (float16 and bfloat16), shared by the notebooks' case modules.

Modern models run attention in float16 or bfloat16, so an answer must work there too (a mask
filled with -1e9 raises on float16, where the reference works). A half case builds its inputs in
float32 and casts them to the half dtype; the answer must return that dtype, and its values are
compared with the reference solution run in float64 on the same (half-valued) inputs, within
``tfcourse.checks.tolerance.HALF_TOLERANCE`` (docs/conventions.md, "Half precision"): a correct
answer computed in half or in float32 and cast back passes, a real bug does not
(tests/test_half.py measures both).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tfcourse.checks.call import Call, TorchModule, run_call
from tfcourse.checks.case import Case, Judge
from tfcourse.checks.hints import Mistake
from tfcourse.checks.outcome import Outcome
from tfcourse.checks.shared import half_precision_errors

from ..names import module_name

__all__ = ["HALF_DTYPES", "as_float64", "half_case"]

HALF_DTYPES = (torch.float16, torch.bfloat16)


def _to64(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(torch.float64) if value.is_floating_point() else value
    if isinstance(value, TorchModule):
        return TorchModule(value.cls, value.kwargs, _to64(value.state))
    if isinstance(value, tuple):
        return tuple(_to64(v) for v in value)
    if isinstance(value, list):
        return [_to64(v) for v in value]
    if isinstance(value, dict):
        return {k: _to64(v) for k, v in value.items()}
    return value


def as_float64(call: Call) -> Call:
    """``call`` with every floating tensor (arguments, weights, forward inputs) in float64."""
    return dataclasses.replace(
        call, args=_to64(call.args), kwargs=_to64(call.kwargs),
        state=None if call.state is None else _to64(call.state),
        forward_args=None if call.forward_args is None else _to64(call.forward_args),
        forward_kwargs=_to64(call.forward_kwargs),
        steps=tuple(dataclasses.replace(st, args=_to64(st.args), kwargs=_to64(st.kwargs)) for st in call.steps))


def reference64(notebook: str, call: Call) -> Outcome:
    """The reference solution's outcome for ``call`` run in float64 (trusted code, this process)."""
    ref = importlib.import_module(f"tfcourse.reference.{module_name(notebook)}")
    return run_call(as_float64(call), vars(ref))


def half_case(notebook: str, exercise: str, title: str, call: Call, dtype: torch.dtype, seed: int, *,
              mistakes: Sequence[Mistake] = (), n: int = 1, names: Sequence[str] | None = None,
              part: str = "half", wrap: Callable[[Callable[[Judge], None]], Callable[[Judge], None]] | None = None
              ) -> Case:
    """A hidden case: ``call`` (half inputs of ``dtype``) must return ``dtype`` tensors that match
    the reference run in float64 on the same values, within the tolerance of ``dtype``. It is
    scored by the exercise's ``half`` test cell (docs/grading.md, "Proportional points"): half
    precision is a stated extra, never the core cell's.

    An exception that a float32 constant raises on half input gets its hint
    (:func:`tfcourse.checks.shared.half_precision_errors`); ``wrap`` adds an exercise's own
    error hints (e.g. ``tfcourse.checks.shared.with_error_hints``)."""
    if dtype not in HALF_DTYPES:
        raise ValueError(f"{dtype} is not a half-precision dtype {HALF_DTYPES}")

    def judge(j: Judge) -> None:
        half_precision_errors(j)
        expected = reference64(notebook, call)
        if not expected.ok:
            raise RuntimeError(f"the reference solution failed on this case: {expected.error_line()}")
        for index in range(n):
            want = expected.tensors[index]
            got = j.tensor(0, index, n=n, names=names, shape=tuple(want.shape), dtype=dtype)
            j.close(got, want, name=names[index] if names else "output", index=index, tol_dtype=dtype,
                    oracle="reference in float64")

    dt = str(dtype).removeprefix("torch.")
    return Case(exercise, f"{title} ({dt}): keeps {dt}, matches the reference computed in float64",
                [call], wrap(judge) if wrap else judge, seed=seed, mistakes=mistakes, hidden=True, part=part)
