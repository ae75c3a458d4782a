"""Grading cases for notebook 04 (normalisation).

The visible cases come from ``tfcourse.checks.nb04_normalisation``; the hidden ones below compare
with the reference solution on inputs drawn from the grader's seed: x of shape (D,), (B, T, D) and
(B, H, T, Dh), D = 1 (LayerNorm's output is then its bias), float64 and float32, tiny magnitudes
(±1e-3, where eps is as large as the variance), non-default eps, and float16/bfloat16 (``half.py``:
compared with the reference computed in float64; float16 values of a few hundred, whose squares
overflow float16, and bfloat16 values around 1000).

Tolerances (docs/conventions.md, "Where correct public code differs"): layer_norm keeps float64 in
float64 and is judged at float64 tolerance; rms_norm, RMSNorm and rms_norm_backward may keep their
statistics in float32 (HF LlamaRMSNorm, Meta's ``_norm(x.float())``), so their float64 cases are
judged at float32 level (atol 1e-6, rtol 1e-5); float32 cases at float32 tolerance.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from tfcourse.checks.call import Call, TorchModule
from tfcourse.checks.case import Case, Judge
from tfcourse.checks.nb04_normalisation import MISTAKES, NOTEBOOK
from tfcourse.checks.nb04_normalisation.cases import (
    BACKWARD_NAMES,
    judge_dtype,
    norm_tolerance,
    rmsnorm_call,
    with_load_hints,
)
from tfcourse.device import make_generator

from . import HiddenCases, hidden_case, seeded
from .half import half_case

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, shift: float = 0.0,
           dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).to(dtype)


def _affine(g: torch.Generator, d: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return _randn(g, d, scale=0.5, shift=1.0, dtype=dtype), _randn(g, d, scale=0.5, dtype=dtype)


def _dtype_first(dtype: torch.dtype, n: int = 1) -> Callable[[Callable[[Judge], None]], Callable[[Judge], None]]:
    """Wrap a half-precision judge: a float32 result gets the "cast back" hint before anything else."""

    def wrap(judge: Callable[[Judge], None]) -> Callable[[Judge], None]:
        def wrapped(j: Judge) -> None:
            if j.outcomes[0].ok:
                for index in range(n):
                    judge_dtype(j, dtype, index=index, n=n)
            judge(j)

        return wrapped

    return wrap


def _hidden(exercise: str, title: str, call: Call, seed: int, dtype: torch.dtype, *, part: str = "core",
            n: int = 1, names=None) -> Case:
    atol, rtol = norm_tolerance(exercise, dtype)
    return hidden_case(exercise, f"hidden case: {title}", [call], seed, mistakes=MISTAKES[exercise], n=n,
                       names=names, part=part, atol=atol, rtol=rtol,
                       wrap=with_load_hints if exercise == "RMSNorm" else None)


def _half(exercise: str, title: str, call: Call, seed: int, dtype: torch.dtype, part: str = "half") -> Case:
    dtype_first = _dtype_first(dtype)

    def wrap(judge: Callable[[Judge], None]) -> Callable[[Judge], None]:
        wrapped = dtype_first(judge)
        return with_load_hints(wrapped) if exercise == "RMSNorm" else wrapped

    return half_case(NOTEBOOK.name, exercise, f"hidden case: half precision, {title}", call, dtype, seed,
                     mistakes=MISTAKES[exercise], part=part, wrap=wrap)


# (shape, dtype, scale, shift, eps or None)
_NORM_CONFIGS = [
    ((33,), torch.float64, 2.0, 0.5, None),
    ((3, 7, 32), torch.float32, 2.0, 0.5, None),
    ((2, 4, 5, 16), torch.float64, 1.0, -1.0, None),
    ((4, 24), torch.float64, 1e-3, 0.0, None),  # tiny: eps is as large as the variance
    ((2, 3, 16), torch.float32, 1e-3, 0.0, None),
    ((2, 6, 20), torch.float32, 0.05, 0.0, 1e-3),  # a non-default eps that matters
    ((5, 1), torch.float64, 3.0, 0.0, None),  # D = 1
    ((2, 5, 48), torch.float32, 300.0, 100.0, 1e-5),
]

# (shape, dtype, scale, shift): float16 of a few hundred overflows when squared in float16
_HALF_CONFIGS = [
    ((2, 5, 128), torch.float16, 400.0, 0.0),
    ((3, 48), torch.float16, 2.0, 0.5),
    ((2, 4, 64), torch.bfloat16, 3.0, 1.0),
    ((3, 32), torch.bfloat16, 10.0, 1000.0),
]


def _norms(exercise: str, seed: int, base: int) -> list[Case]:
    out = []
    for i, (shape, dtype, scale, shift, eps) in enumerate(_NORM_CONFIGS):
        s = seed * 1000 + base + i
        g = make_generator(s)
        x = _randn(g, *shape, scale=scale, shift=shift, dtype=dtype)
        w, b = _affine(g, shape[-1], dtype)
        args = (x, w, b) if exercise == "layer_norm" else (x, w)
        what = f"x {tuple(shape)} {str(dtype).removeprefix('torch.')}, |x| ~ {scale:g}" + \
            (f", eps={eps:g}" if eps is not None else "")
        out.append(_hidden(exercise, f"{what}: matches the reference",
                           Call(exercise, args, {} if eps is None else {"eps": eps}), s, dtype))
    for i, (shape, dtype, scale, shift) in enumerate(_HALF_CONFIGS):
        s = seed * 1000 + base + 50 + i
        g = make_generator(s)
        x = _randn(g, *shape, scale=scale, shift=shift, dtype=dtype)
        w, b = _affine(g, shape[-1], dtype)
        args = (x, w, b) if exercise == "layer_norm" else (x, w)
        out.append(_half(exercise, f"x {tuple(shape)} ~ {shift:g} ± {scale:g}", Call(exercise, args), s, dtype))
    return out


@HIDDEN.exercise("RMSNorm")
def _rmsnorm(seed: int) -> list[Case]:
    out = []
    configs = [  # (shape, dtype, scale, eps, load a weight)
        ((2, 6, 24), torch.float64, 2.0, None, True),
        ((3, 32), torch.float32, 1e-2, 1e-4, True),
        ((2, 3, 8), torch.float64, 1.0, None, False),  # a fresh module: weight = ones
        ((2, 2, 3, 16), torch.float32, 1e-3, None, True),
    ]
    for _, s, g, (shape, dtype, scale, eps, load) in seeded(seed, 300, configs):
        x = _randn(g, *shape, scale=scale, shift=0.3 * scale, dtype=dtype)
        w = _randn(g, shape[-1], scale=0.5, shift=1.0, dtype=dtype) if load else None
        what = f"RMSNorm({shape[-1]}{'' if eps is None else f', eps={eps:g}'})" + \
            (" with a weight loaded by name" if load else ", fresh") + f" on x {tuple(shape)}"
        out.append(_hidden("RMSNorm", f"{what}: matches the reference", rmsnorm_call(shape[-1], x, w, eps), s,
                           dtype))
    for _, s, g, (shape, dtype, scale, shift) in seeded(seed, 350, _HALF_CONFIGS[::2]):
        x = _randn(g, *shape, scale=scale, shift=shift, dtype=dtype)
        w = _randn(g, shape[-1], scale=0.5, shift=1.0, dtype=dtype)
        out.append(_half("RMSNorm", f"RMSNorm({shape[-1]}) on x {tuple(shape)} ~ {shift:g} ± {scale:g}",
                         rmsnorm_call(shape[-1], x, w), s, dtype))
    return out


def _module(cls: str, g: torch.Generator, d: int, dtype: torch.dtype) -> TorchModule:
    if cls == "Linear":
        state = {"weight": _randn(g, d, d, scale=d ** -0.5, dtype=dtype), "bias": _randn(g, d, scale=0.5, dtype=dtype)}
        return TorchModule("Linear", {"in_features": d, "out_features": d}, state)
    w, b = _affine(g, d, dtype)
    if cls == "LayerNorm":
        return TorchModule("LayerNorm", {"normalized_shape": d, "eps": 1e-5}, {"weight": w, "bias": b})
    return TorchModule("RMSNorm", {"normalized_shape": d, "eps": 1e-6}, {"weight": w})


def _residual(exercise: str, seed: int, base: int) -> list[Case]:
    out = []
    configs = [  # (shape, dtype, sublayer, norm)
        ((3, 7, 32), torch.float64, "Linear", "RMSNorm"),
        ((2, 4, 16), torch.float32, "RMSNorm", "LayerNorm"),
        ((10,), torch.float64, "Linear", "LayerNorm"),
        ((2, 2, 3, 8), torch.float32, "LayerNorm", "RMSNorm"),
    ]
    for i, (shape, dtype, sub, norm) in enumerate(configs):
        s = seed * 1000 + base + i
        g = make_generator(s)
        x = _randn(g, *shape, scale=2.0, shift=1.0, dtype=dtype)
        args = (x, _module(sub, g, shape[-1], dtype), _module(norm, g, shape[-1], dtype))
        out.append(_hidden(exercise, f"x {tuple(shape)}, sublayer nn.{sub}, norm nn.{norm}: matches the reference",
                           Call(exercise, args), s, dtype))
    return out


@HIDDEN.exercise("rms_norm_backward")
def _backward(seed: int) -> list[Case]:
    out = []
    configs = [  # (shape, dtype, scale, eps)
        ((3, 7, 16), torch.float64, 2.0, None),
        ((2, 2, 3, 8), torch.float32, 1.0, None),
        ((12,), torch.float64, 1.0, None),
        ((4, 10), torch.float64, 1e-3, 1e-5),
    ]
    for _, s, g, (shape, dtype, scale, eps) in seeded(seed, 700, configs):
        x = _randn(g, *shape, scale=scale, shift=0.2 * scale, dtype=dtype)
        grad_out = _randn(g, *shape, dtype=dtype)
        w = _randn(g, shape[-1], scale=0.5, shift=1.0, dtype=dtype)
        out.append(_hidden("rms_norm_backward", f"x {tuple(shape)} {str(dtype).removeprefix('torch.')}: matches "
                           "the reference", Call("rms_norm_backward", (grad_out, x, w), {} if eps is None else
                                                 {"eps": eps}), s, dtype, n=2, names=BACKWARD_NAMES))
    return out


# the exercises whose hidden cases one builder makes: (exercise, builder, seed offset)
for _exercise, _build, _offset in (("layer_norm", _norms, 100), ("rms_norm", _norms, 200),
                                   ("pre_norm_residual", _residual, 500),
                                   ("post_norm_residual", _residual, 600)):
    HIDDEN.exercise(_exercise)(functools.partial(_build, _exercise, base=_offset))

cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
