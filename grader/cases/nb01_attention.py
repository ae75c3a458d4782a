"""Grading cases for notebook 01 (scaled dot-product attention).

The visible cases come from ``tfcourse.checks.nb01_attention``; the hidden ones below compare
with the reference solution on inputs drawn from the grader's seed: several batch/head shapes,
T != S and T = 1, float64 (tight tolerance) and float32, fully masked rows and large logits, and
float16/bfloat16 (``half.py``: compared with the reference computed in float64).
"""

from __future__ import annotations

import torch

from tfcourse.checks.call import DEVICE, Call
from tfcourse.checks.case import Case, Judge
from tfcourse.checks.nb01_attention import MISTAKES, NOTEBOOK
from tfcourse.device import make_generator

from . import HiddenCases, seeded
from .half import HALF_DTYPES, half_case

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)


def _hidden(exercise: str, title: str, call: Call, seed: int, *, n: int = 1, names=None,
            part: str = "core") -> Case:
    def judge(j: Judge) -> None:
        j.match_reference(n=n, names=names)

    return Case(exercise, title, [call], judge, seed=seed, reference=True,
                mistakes=MISTAKES[exercise], hidden=True, part=part)


@HIDDEN.exercise("softmax")
def _softmax(seed: int) -> list[Case]:
    out = []
    for i, s, g, (shape, dtype, dim, scale) in seeded(seed, 100, [
        ((4, 7), torch.float64, -1, 5.0),
        ((2, 3, 4, 6), torch.float32, 2, 1.0),
        ((3, 5), torch.float64, 0, 400.0),  # logits in the hundreds
    ]):
        x = torch.randn(*shape, generator=g, dtype=dtype) * scale
        if i == 2:
            x[:, 1] = float("-inf")  # one all -inf slice along dim 0
        out.append(_hidden("softmax", f"hidden case {i + 1}: matches the reference", Call("softmax", (x,), {"dim": dim}), s))
    return out + _softmax_more(seed)


def _softmax_more(seed: int) -> list[Case]:
    """A 1-D input and a negative dim other than -1 (no other case has them), then half precision."""
    out = []
    s = seed * 1000 + 110
    g = make_generator(s)
    out.append(_hidden("softmax", "hidden case: a 1-D input (one vector of logits)",
                       Call("softmax", (torch.randn(9, generator=g, dtype=torch.float64) * 3,)), s))
    out.append(_hidden("softmax", "hidden case: dim=-2", Call("softmax", (torch.randn(
        2, 5, 3, generator=g, dtype=torch.float64) * 3,), {"dim": -2}), s))
    for _, s, g, dtype in seeded(seed, 120, HALF_DTYPES):
        x = torch.randn(3, 4, 9, generator=g) * 4  # float32, then cast
        x[1, 2] = float("-inf")  # an all -inf slice
        x[2, :, :4] = float("-inf")  # masked entries
        out.append(half_case(NOTEBOOK.name, "softmax", "hidden case: half precision, with -inf entries",
                             Call("softmax", (x.to(dtype),)), dtype, s, mistakes=MISTAKES["softmax"]))
    return out


@HIDDEN.exercise("softmax_jacobian")
def _jacobian(seed: int) -> list[Case]:
    out = []
    # n = 5 repeats the size of a visible case with other values: an answer cached by size fails
    for i, s, g, (n, dtype) in seeded(seed, 200, [(6, torch.float64), (11, torch.float32), (1, torch.float64),
                                                  (5, torch.float64)]):
        p = torch.softmax(torch.randn(n, generator=g, dtype=dtype) * 2, -1)
        out.append(_hidden("softmax_jacobian", f"hidden case {i + 1}: matches the reference",
                           Call("softmax_jacobian", (p,)), s))
    return out


@HIDDEN.exercise("scaled_dot_product_attention")
def _sdpa(seed: int) -> list[Case]:
    out = []
    name = "scaled_dot_product_attention"
    shapes = [  # (batch dims, T, S, Dh, Dv, dtype, mask kind)
        ((2, 4), 5, 9, 16, 16, torch.float64, "random"),
        ((3,), 1, 7, 32, 8, torch.float32, None),
        ((1, 2), 6, 6, 8, 8, torch.float64, "causal+empty"),
        ((2, 2), 3, 5, 64, 64, torch.float32, "padding"),
    ]
    for i, s, g, (batch, t, s_len, dh, dv, dtype, kind) in seeded(seed, 300, shapes):
        q = torch.randn(*batch, t, dh, generator=g, dtype=dtype) * 2
        k = torch.randn(*batch, s_len, dh, generator=g, dtype=dtype) * 2
        v = torch.randn(*batch, s_len, dv, generator=g, dtype=dtype)
        kwargs = {}
        if kind == "random":
            kwargs["mask"] = torch.rand(*batch, t, s_len, generator=g) > 0.5
        elif kind is not None:
            kwargs["mask"] = _sdpa_mask(kind, t, s_len, empty_row=2, lengths=[5, 2])
        out.append(_hidden(name, f"hidden case {i + 1}: matches the reference", Call(name, (q, k, v), kwargs), s,
                           n=2, names=("out", "weights"), part="masks" if "mask" in kwargs else "core"))
    return out + _sdpa_half(seed)


def _sdpa_mask(kind: str, t: int, s_len: int, *, empty_row: int, lengths: list[int]) -> torch.Tensor:
    """A (T, S) bottom-right causal mask with query ``empty_row`` attending nothing
    ("causal+empty"), or a (B, 1, 1, S) key-padding mask for ``lengths`` ("padding")."""
    if kind == "causal+empty":
        mask = torch.ones(t, s_len, dtype=torch.bool).tril(s_len - t)
        mask[empty_row] = False  # a query that may attend nothing
        return mask
    if kind == "padding":
        return (torch.arange(s_len)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]
    raise ValueError(f"unknown mask kind {kind!r}")


def _sdpa_half(seed: int) -> list[Case]:
    """float16 and bfloat16, without a mask and with masks (a query that may attend nothing): the
    ``half`` test cell."""
    out = []
    name = "scaled_dot_product_attention"
    configs = [  # (batch dims, T, S, Dh, Dv, dtype, mask kind)
        ((2, 3), 5, 7, 16, 16, torch.float16, None),
        ((2, 2), 6, 6, 32, 16, torch.float16, "causal+empty"),
        ((2, 3), 4, 9, 16, 8, torch.bfloat16, None),
        ((2, 2), 3, 8, 64, 64, torch.bfloat16, "padding"),
    ]
    for _, s, g, (batch, t, s_len, dh, dv, dtype, kind) in seeded(seed, 320, configs):
        q = torch.randn(*batch, t, dh, generator=g)  # float32, then cast
        k = torch.randn(*batch, s_len, dh, generator=g)
        v = torch.randn(*batch, s_len, dv, generator=g)
        kwargs = {} if kind is None else {"mask": _sdpa_mask(kind, t, s_len, empty_row=1, lengths=[8, 3])}
        call = Call(name, tuple(x.to(dtype) for x in (q, k, v)), kwargs)
        out.append(half_case(NOTEBOOK.name, name, f"hidden case: half precision, mask: {kind}", call, dtype, s,
                             mistakes=MISTAKES[name], n=2, names=("out", "weights")))
    return out


@HIDDEN.exercise("causal_mask")
def _causal(seed: int) -> list[Case]:
    out = []
    for i, (args, kwargs) in enumerate([((7,), {}), ((3, 8), {}), ((1,), {"t_k": 9}), ((4, 4), {"device": DEVICE})]):
        out.append(_hidden("causal_mask", f"hidden case {i + 1}: matches the reference",
                           Call("causal_mask", args, kwargs), seed))
    return out


@HIDDEN.exercise("padding_mask")
def _padding(seed: int) -> list[Case]:
    out = []
    for i, s, g, b in seeded(seed, 500, [4, 1]):
        t_k = 6
        lengths = torch.randint(0, t_k + 1, (b,), generator=g)
        out.append(_hidden("padding_mask", f"hidden case {i + 1}: matches the reference",
                           Call("padding_mask", (lengths, t_k)), s))
    return out


@HIDDEN.exercise("memory_efficient_attention")
def _memory_efficient(seed: int) -> list[Case]:
    """The optional challenge: chunk sizes that divide S, that do not, 1, and larger than S."""
    out = []
    name = "memory_efficient_attention"
    shapes = [  # (batch dims, T, S, Dh, Dv, dtype, mask kind, chunk_size, score scale)
        ((2, 2), 5, 11, 8, 8, torch.float64, "random", 4, 1.0),
        ((3,), 1, 9, 16, 4, torch.float32, None, 2, 1.0),
        ((1, 2), 6, 6, 8, 8, torch.float64, "causal+empty", 5, 1.0),
        ((2,), 4, 8, 8, 8, torch.float32, None, 1, 30.0),  # scores in the hundreds
        ((2,), 3, 5, 4, 6, torch.float64, "padding", 16, 1.0),  # one chunk larger than S
    ]
    for i, s, g, (batch, t, s_len, dh, dv, dtype, kind, chunk, scale) in seeded(seed, 600, shapes):
        q = torch.randn(*batch, t, dh, generator=g, dtype=dtype) * scale
        k = torch.randn(*batch, s_len, dh, generator=g, dtype=dtype)
        v = torch.randn(*batch, s_len, dv, generator=g, dtype=dtype)
        kwargs = {"chunk_size": chunk}
        if kind == "random":
            kwargs["mask"] = torch.rand(*batch, t, s_len, generator=g) > 0.5
        elif kind == "causal+empty":
            mask = torch.ones(t, s_len, dtype=torch.bool).tril(s_len - t)
            mask[3] = False  # a query that may attend nothing
            kwargs["mask"] = mask
        elif kind == "padding":
            lengths = torch.tensor([5, 0])  # the second sequence has no real key
            kwargs["mask"] = (torch.arange(s_len)[None, :] < lengths[:, None])[:, None, :]
        out.append(_hidden(name, f"hidden case {i + 1}: matches the reference", Call(name, (q, k, v), kwargs), s))
    return out


cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
