"""Grading cases for notebook 03 (positional encodings).

The visible cases come from ``tfcourse.checks.nb03_positional_encodings``; the hidden ones below
use inputs drawn from the grader's seed: several shapes, positions (T,) and (B, T), large positions
(up to 4095) and base 500000, Dh = 2, float32/float64, float16/bfloat16 x for ``apply_rope``
and ``apply_rope_interleaved`` (their "half" test cells; ``half.py``: compared with the reference
computed in float64), 1 … 40 ALiBi heads, T ≠ S and T = 1, non-default T5 bucket counts and distances,
and every error of the contract.

Tables of angles (sinusoidal, RoPE cos/sin) and interleaved RoPE are judged against the float64
formula with the angle-scaled tolerance of docs/conventions.md (``angle_atol``), as the visible
cases are: the contract leaves the angles' precision to the learner (float32, float64, complex),
so the reference, itself float32-accurate, is not the yardstick there. Everything else is judged
against the reference solution.
"""

from __future__ import annotations

import torch

from tfcourse.checks.call import Call
from tfcourse.checks.case import Case, Judge
from tfcourse.checks.nb03_positional_encodings import MISTAKES, NOTEBOOK
from tfcourse.checks.nb03_positional_encodings.cases import (
    angle_atol,
    interleaved_oracle,
    max_angle,
    rope_tables32,
    rope_tables64,
    rotation_atol,
    sinusoid64,
)
from tfcourse.device import make_generator

from . import HiddenCases, hidden_case, seeded
from .half import HALF_DTYPES, half_case

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)
F32, F64 = torch.float32, torch.float64


def _hidden(exercise: str, title: str, calls: list[Call], seed: int, *, n: int = 1, names=None,
            part: str = "core", atol: float | None = None, rtol: float | None = None) -> Case:
    return hidden_case(exercise, f"hidden case: {title}", calls, seed, mistakes=MISTAKES[exercise], n=n,
                       names=names, part=part, atol=atol, rtol=rtol)


def _oracle_case(exercise: str, title: str, call: Call, seed: int, expected: list[torch.Tensor], atol: float,
                 *, names=None, part: str = "core") -> Case:
    """A hidden case judged against the float64 formula (``expected``) within ``atol``, rtol 0, in the
    dtype the reference returns."""
    def judge(j: Judge) -> None:
        n = len(expected)
        for index, want in enumerate(expected):
            dtype = j.expected_tensor(0, index).dtype
            got = j.tensor(0, index, n=n, names=names, shape=tuple(want.shape), dtype=dtype)
            j.close(got, want, name=names[index] if names else "output", index=index, atol=atol, rtol=0.0,
                    oracle="the float64 formula", tol_dtype=dtype)

    return Case(exercise, f"hidden case: {title}", [call], judge, seed=seed, reference=True,
                mistakes=MISTAKES[exercise], hidden=True, part=part)


@HIDDEN.exercise("sinusoidal_position_encoding")
def _sinusoidal(seed: int) -> list[Case]:
    name = "sinusoidal_position_encoding"
    out = []
    for t, d, base in [(4096, 64, None), (100, 10, 500000.0), (7, 2, None), (33, 128, 100.0)]:
        kwargs = {} if base is None else {"base": base}
        out.append(_oracle_case(name, f"T = {t}, D = {d}, base = {base or 10000.0:g}", Call(name, (t, d), kwargs),
                                seed, [sinusoid64(t, d, base or 10000.0)], angle_atol(max_angle(t))))
    out.append(_hidden(name, "d_model = 1 raises ValueError", [Call(name, (3, 1))], seed, part="validation"))
    return out


@HIDDEN.exercise("rope_cos_sin")
def _rope_cos_sin(seed: int) -> list[Case]:
    name = "rope_cos_sin"
    names = ("cos", "sin")
    g = make_generator(seed * 1000 + 200)
    configs = [  # positions, Dh, base
        (torch.arange(4096), 128, 500000.0),
        (torch.randint(0, 4096, (3, 17), generator=g), 64, None),
        (torch.tensor([4095], dtype=torch.int32), 2, None),
        (torch.randint(0, 50, (2, 5), generator=g), 16, 1000.0),
    ]
    out = []
    for i, (positions, dh, base) in enumerate(configs):
        kwargs = {} if base is None else {"base": base}
        out.append(_oracle_case(name, f"positions {tuple(positions.shape)} up to {int(positions.max())}, Dh = {dh}",
                                Call(name, (positions, dh), kwargs), seed * 1000 + 200 + i,
                                list(rope_tables64(positions, dh, base or 10000.0)),
                                angle_atol(max_angle(positions)), names=names))
    out.append(_hidden(name, "head_dim = 5 raises ValueError", [Call(name, (torch.arange(4), 5))], seed,
                       part="validation"))
    return out


@HIDDEN.exercise("rotate_half")
def _rotate_half(seed: int) -> list[Case]:
    name = "rotate_half"
    out = []
    # float32 and float64 only: rotate_half moves and negates numbers, so float16 and bfloat16 need
    # no handling of their own (no half test cell; docs/grading.md), and these dtypes check it keeps x's
    for _, s, g, (shape, dtype) in seeded(seed, 300, [((1, 12, 7, 64), F32), ((3, 2), F64), ((2, 2, 3, 4), F64),
                                                      ((2, 5, 6), F32)]):
        x = torch.randn(*shape, generator=g).to(dtype)
        out.append(_hidden(name, f"x {shape} {str(dtype).removeprefix('torch.')}", [Call(name, (x,))], s,
                           atol=0.0, rtol=0.0))
    return out


@HIDDEN.exercise("apply_rope")
def _apply_rope(seed: int) -> list[Case]:
    name = "apply_rope"
    out = []
    configs = [  # x shape, dtype, positions, base, part
        ((2, 8, 9, 64), F32, torch.arange(4087, 4096), 10000.0, "core"),
        ((1, 2, 5, 2), F64, torch.arange(5), 10000.0, "core"),
        ((3, 4, 6, 32), F64, torch.arange(6) * 500, 500000.0, "core"),
        ((4, 2, 6, 16), F64, None, 10000.0, "batched"),
        ((2, 3, 5, 8), F32, None, 10000.0, "batched"),
    ]
    for _, s, g, (shape, dtype, positions, base, part) in seeded(seed, 400, configs):
        x = torch.randn(*shape, generator=g, dtype=dtype)
        if positions is None:
            positions = torch.randint(0, 3000, (shape[0], shape[2]), generator=g)
        cos, sin = rope_tables32(positions, shape[-1], base)
        out.append(_hidden(name, f"x {shape} {str(dtype).removeprefix('torch.')}, tables {tuple(cos.shape)}",
                           [Call(name, (x, cos, sin))], s, part=part))
    for _, s, g, dtype in seeded(seed, 420, HALF_DTYPES):
        x = torch.randn(2, 3, 6, 16, generator=g)
        positions = torch.randint(0, 300, (2, 6), generator=g)
        cos, sin = rope_tables32(positions, 16)
        out.append(half_case(NOTEBOOK.name, name, "hidden case: half precision x, (B, T, Dh) float32 tables",
                             Call(name, (x.to(dtype), cos, sin)), dtype, s, mistakes=MISTAKES[name]))
    return out


@HIDDEN.exercise("apply_rope_interleaved")
def _interleaved(seed: int) -> list[Case]:
    name = "apply_rope_interleaved"
    out = []
    configs = [  # x shape, dtype, positions (None: random (B, T)), base
        ((2, 4, 16, 64), F32, torch.arange(4080, 4096), None),
        ((3, 2, 7, 32), F64, None, 500000.0),
        ((1, 1, 3, 2), F64, torch.tensor([0, 1, 2]), None),
        ((2, 3, 5, 16), F32, torch.tensor([9, 2, 2, 0, 1]), 100.0),
    ]
    for _, s, g, (shape, dtype, positions, base) in seeded(seed, 500, configs):
        x = torch.randn(*shape, generator=g, dtype=dtype)
        if positions is None:
            positions = torch.randint(0, 4000, (shape[0], shape[2]), generator=g)
        kwargs = {} if base is None else {"base": base}
        want = interleaved_oracle(x, positions, base or 10000.0)
        out.append(_oracle_case(name, f"x {shape} {str(dtype).removeprefix('torch.')}, positions "
                                f"{tuple(positions.shape)} up to {int(positions.max())}",
                                Call(name, (x, positions), kwargs), s, [want],
                                rotation_atol(x, max_angle(positions))))
    for _, s, g, dtype in seeded(seed, 520, HALF_DTYPES):
        x = torch.randn(2, 3, 6, 16, generator=g)
        positions = torch.randint(0, 300, (2, 6), generator=g)
        out.append(half_case(NOTEBOOK.name, name, "hidden case: half precision x, (B, T) positions",
                             Call(name, (x.to(dtype), positions)), dtype, s, mistakes=MISTAKES[name]))
    return out


@HIDDEN.exercise("permute_for_rotate_half")
def _permute(seed: int) -> list[Case]:
    name = "permute_for_rotate_half"
    out = []
    # a permutation of rows: float32 and float64 check it keeps the dtype; half precision needs no
    # handling of its own, so no half case (and no half test cell; docs/grading.md)
    for _, s, g, (heads, dh, d, dtype) in seeded(seed, 600, [(4, 16, 64, F32), (1, 2, 3, F64), (2, 32, 128, F64),
                                                             (8, 8, 32, F32)]):
        w = torch.randn(heads * dh, d, generator=g).to(dtype)
        out.append(_hidden(name, f"H = {heads}, Dh = {dh}, D = {d}, {str(dtype).removeprefix('torch.')}",
                           [Call(name, (w, heads))], s, atol=0.0, rtol=0.0))
    out.append(_hidden(name, "12 rows, num_heads = 5 raises ValueError",
                       [Call(name, (torch.zeros(12, 4), 5))], seed, part="validation"))
    out.append(_hidden(name, "10 rows, num_heads = 2 (Dh = 5) raises ValueError",
                       [Call(name, (torch.zeros(10, 4), 2))], seed, part="validation"))
    return out


@HIDDEN.exercise("alibi_slopes")
def _slopes(seed: int) -> list[Case]:
    name = "alibi_slopes"
    out = [_hidden(name, f"H = {h}", [Call(name, (h,))], seed) for h in (1, 32, 64)]
    out += [_hidden(name, f"H = {h}", [Call(name, (h,))], seed, part="other_head_counts") for h in (3, 5, 24, 40)]
    out.append(_hidden(name, "H = -1 raises ValueError", [Call(name, (-1,))], seed, part="validation"))
    return out


@HIDDEN.exercise("alibi_bias")
def _bias(seed: int) -> list[Case]:
    name = "alibi_bias"
    return [_hidden(name, f"H = {h}, T = {t}, S = {s}", [Call(name, (h, t) if s is None else (h, t, s))], seed)
            for h, t, s in ((12, 7, None), (20, 1, 9), (24, 5, 13), (1, 4, 4))]


@HIDDEN.exercise("relative_position_bucket")
def _buckets(seed: int) -> list[Case]:
    name = "relative_position_bucket"
    g = make_generator(seed * 1000 + 900)
    grid = torch.arange(30)[None, :] - torch.arange(20)[:, None] - 5
    configs = [  # relative positions, kwargs, part
        (torch.randint(-5000, 5001, (4, 50), generator=g), {}, "core"),
        (grid, {"num_buckets": 64, "max_distance": 256}, "core"),
        (torch.arange(-60, 61, dtype=torch.int32), {"num_buckets": 10, "max_distance": 50}, "core"),
        (torch.randint(-3000, 100, (3, 40), generator=g), {"bidirectional": False}, "unidirectional"),
        (torch.arange(-100, 5), {"bidirectional": False, "num_buckets": 16, "max_distance": 64}, "unidirectional"),
    ]
    return [_hidden(name, f"relative positions {tuple(rel.shape)} {str(rel.dtype).removeprefix('torch.')}, "
                    f"{kwargs or 'defaults'}", [Call(name, (rel,), kwargs)], seed, part=part)
            for rel, kwargs, part in configs]


@HIDDEN.exercise("llama3_inv_freq")
def _llama3(seed: int) -> list[Case]:
    name = "llama3_inv_freq"
    configs = [
        ((128,), {"factor": 32.0}),  # Llama 3.2's factor
        ((64,), {}),
        ((256,), {"base": 1e6, "factor": 16.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                  "original_max_position_embeddings": 4096}),
    ]
    return [_hidden(name, f"Dh = {args[0]}, {kwargs or 'defaults'}", [Call(name, args, kwargs)], seed,
                    atol=0.0, rtol=2e-5) for args, kwargs in configs]

cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
