"""Grading cases for notebook 02 (multi-head attention).

The visible cases come from ``tfcourse.checks.nb02_multi_head_attention``; the hidden ones below
compare with the reference solution on inputs drawn from the grader's seed: several batch sizes,
widths and head counts (H = 1 and Dh = 1 included), T != S for cross-attention and S = T with a
context that is not x, causal, padding and random masks (one with a query that may attend
nothing), float64 where the call machinery loads float64 weights into modules (``MODULE_DTYPE``),
float32, and float16/bfloat16 (``half.py``: compared with the reference computed in float64).
Module weights have a realistic scale (std 1/sqrt(D)).

``mha_from_torch`` cases also run the learner's own ``MultiHeadAttention`` with the converted
weights, so a bug in that module is not charged to the conversion a second time
(``from_torch_judge``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch

from tfcourse.checks.call import Call
from tfcourse.checks.case import Case, Judge
from tfcourse.checks.nb02_multi_head_attention import MISTAKES, NOTEBOOK
from tfcourse.checks.nb02_multi_head_attention.cases import (
    MHA_ERRORS,
    MODULE_DTYPE,
    from_torch_calls,
    from_torch_judge,
    mha_call,
    random_mha_state,
    random_torch_mha_state,
    with_error_hints,
)
from tfcourse.checks.nb02_multi_head_attention.packed import packed_call, random_packed_state
from tfcourse.device import make_generator

from . import HiddenCases, seeded
from .half import half_case

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)


def _hidden(exercise: str, title: str, calls: list[Call], seed: int, known=None, part: str | None = None) -> Case:
    def judge(j: Judge) -> None:
        j.match_reference()

    wrapped = judge if known is None else with_error_hints(judge, known)
    masked = exercise == "MultiHeadAttention" and any(
        c.forward_kwargs.get("mask") is not None or c.forward_kwargs.get("context") is not None for c in calls)
    return Case(exercise, title, calls, wrapped, seed=seed, reference=True, mistakes=MISTAKES[exercise],
                hidden=True, part=part or ("cross_and_masks" if masked else "core"))


def _per_shape(exercise: str, seed: int, offset: int, inputs: list[tuple[tuple[int, ...], tuple, torch.dtype]],
               parts: list[str | None] | None = None, **kw) -> list[Case]:
    """Hidden case i: ``exercise(x, *rest)`` for ``(shape, rest, dtype) = inputs[i]``, x drawn with
    seed ``seed * 1000 + offset + i``, against the reference; scored by test cell ``parts[i]``
    (None: the default of :func:`_hidden`)."""
    out = []
    for i, (shape, rest, dtype) in enumerate(inputs):
        s = seed * 1000 + offset + i
        x = torch.randn(*shape, generator=make_generator(s), dtype=dtype)
        out.append(_hidden(exercise, f"hidden case {i + 1}: matches the reference",
                           [Call(exercise, (x, *rest))], s, part=parts[i] if parts else None, **kw))
    return out


@HIDDEN.exercise("split_heads")
def _split(seed: int) -> list[Case]:
    shapes = [  # B, T, D, H, dtype
        (3, 7, 32, 8, torch.float64),
        (1, 1, 6, 6, torch.float32),
        (2, 4, 64, 1, torch.float64),
        (2, 9, 24, 4, torch.float32),
        (2, 3, 20, 3, torch.float64),  # 20 % 3 != 0: the reference raises ValueError
    ]
    return _per_shape("split_heads", seed, 500, [((b, t, d), (h,), dtype) for b, t, d, h, dtype in shapes],
                      parts=["validation" if d % h else None for _, _, d, h, _ in shapes])


@HIDDEN.exercise("merge_heads")
def _merge(seed: int) -> list[Case]:
    shapes = [  # B, H, T, Dh, dtype
        (2, 8, 5, 16, torch.float64),
        (1, 1, 3, 7, torch.float32),
        (4, 2, 1, 4, torch.float64),
        (2, 16, 6, 1, torch.float32),
    ]
    return _per_shape("merge_heads", seed, 600, [(shape, (), dtype) for *shape, dtype in shapes],
                      known=MHA_ERRORS[:1])  # the .view-after-transpose error


def _mask(kind: str | None, b: int, t: int, s_len: int, g: torch.Generator) -> torch.Tensor | None:
    if kind is None:
        return None
    if kind == "causal":  # bottom-right aligned (T, S)
        return torch.ones(t, s_len, dtype=torch.bool).tril(s_len - t)
    if kind == "padding":  # (B, 1, 1, S), every sequence keeps at least one key
        lengths = torch.randint(1, s_len + 1, (b,), generator=g)
        return (torch.arange(s_len)[None, :] < lengths[:, None])[:, None, None, :]
    if kind == "random+empty":  # (B, 1, T, S) with query 0 of batch 0 allowed nothing
        mask = torch.rand(b, 1, t, s_len, generator=g) > 0.4
        mask[..., -1] = True
        mask[0, 0, 0] = False
        return mask
    if kind == "shared":  # (1, 1, T, S): one random pattern for every sequence and head
        return (torch.rand(1, 1, t, s_len, generator=g) > 0.3) | torch.eye(t, s_len, dtype=torch.bool)
    raise ValueError(kind)


# (B, T, S or None for self-attention, D, H, bias, mask kind, dtype)
_MODULE_CONFIGS = [
    (2, 6, None, 32, 4, False, "causal", MODULE_DTYPE),
    (1, 4, 9, 24, 6, True, "padding", torch.float32),
    (3, 5, None, 16, 1, True, None, MODULE_DTYPE),
    (2, 3, 5, 64, 8, False, "random+empty", torch.float32),
    (2, 7, None, 16, 16, False, "causal", torch.float32),
    (2, 2, 6, 32, 2, True, "shared", MODULE_DTYPE),
    (2, 5, 5, 24, 3, True, None, MODULE_DTYPE),  # cross-attention with S = T (context is not x)
]


class _ModuleConfig(NamedTuple):
    b: int
    t: int
    s_len: int | None  # None: self-attention
    d: int
    h: int
    bias: bool
    kind: str | None  # the mask (_mask)
    dtype: torch.dtype

    @property
    def attending(self) -> str:
        return "self" if self.s_len is None else f"cross, S = {self.s_len}"


def _module_draws(seed: int, offset: int, configs: list[tuple], dtype: torch.dtype | None = None
                  ) -> Iterator[tuple[int, int, _ModuleConfig, tuple]]:
    """For each module config i: (i, its seed ``seed * 1000 + offset + i``, the config, (x, context,
    mask) drawn from that seed). ``dtype``: draw x and context in it rather than the config's."""
    for i, s, g, config in seeded(seed, offset, configs):
        c = _ModuleConfig(*config)
        x = torch.randn(c.b, c.t, c.d, generator=g, dtype=dtype or c.dtype)
        context = None if c.s_len is None else torch.randn(c.b, c.s_len, c.d, generator=g, dtype=dtype or c.dtype)
        yield i, s, c, (x, context, _mask(c.kind, c.b, c.t, c.t if c.s_len is None else c.s_len, g))


@HIDDEN.exercise("MultiHeadAttention")
def _mha(seed: int) -> list[Case]:
    out = []
    for i, s, c, (x, context, mask) in _module_draws(seed, 700, _MODULE_CONFIGS):
        state = random_mha_state(s, c.d, c.bias, c.dtype)
        out.append(_hidden("MultiHeadAttention", f"hidden case {i + 1} (D = {c.d}, H = {c.h}, {c.attending}, mask: "
                           f"{c.kind}): matches the reference", [mha_call(c.d, c.h, c.bias, state, x, context, mask)],
                           s, known=MHA_ERRORS))
    return out + _mha_half(seed)


# half precision: (B, T, S or None, D, H, bias, mask kind, dtype); inputs and weights made in float32
_HALF_CONFIGS = [
    (2, 6, None, 32, 4, True, None, torch.float16),
    (2, 5, None, 32, 4, False, "causal", torch.float16),
    (2, 4, 7, 32, 2, True, "padding", torch.bfloat16),
    (1, 6, None, 16, 2, True, None, torch.bfloat16),
]


def _mha_half(seed: int) -> list[Case]:
    out = []
    for _, s, c, (x, context, mask) in _module_draws(seed, 750, _HALF_CONFIGS, torch.float32):
        state = {k: v.to(c.dtype) for k, v in random_mha_state(s, c.d, c.bias, torch.float32).items()}
        call = mha_call(c.d, c.h, c.bias, state, x.to(c.dtype), None if context is None else context.to(c.dtype), mask)
        out.append(half_case("02_multi_head_attention", "MultiHeadAttention",
                             f"hidden case: half precision (D = {c.d}, H = {c.h}, {c.attending}, mask: {c.kind})",
                             call, c.dtype, s,
                             mistakes=MISTAKES["MultiHeadAttention"],
                             wrap=lambda judge: with_error_hints(judge, MHA_ERRORS)))
    return out


# mha_from_torch judges the conversion: cross-attention without masks, masks in self-attention only,
# so that a MultiHeadAttention that cannot run masked cross-attention (exercise 3's business) does
# not make every converted module raise here too.
_FROM_TORCH_CONFIGS = [
    (2, 6, None, 32, 4, True, "causal", MODULE_DTYPE),
    (1, 4, 9, 24, 6, False, None, torch.float32),
    (3, 5, None, 16, 1, False, None, MODULE_DTYPE),
    (2, 3, 5, 64, 8, True, None, torch.float32),
    (2, 7, None, 16, 16, True, "causal", torch.float32),
    (2, 5, None, 32, 2, False, "shared", MODULE_DTYPE),
]


@HIDDEN.exercise("mha_from_torch")
def _from_torch(seed: int) -> list[Case]:
    out = []
    for i, s, c, (x, context, mask) in _module_draws(seed, 800, _FROM_TORCH_CONFIGS):
        torch_state = random_torch_mha_state(s, c.d, c.bias, c.dtype)
        out.append(Case("mha_from_torch", f"hidden case {i + 1} (D = {c.d}, H = {c.h}): matches the reference",
                        from_torch_calls(c.h, torch_state, x, context, mask),
                        from_torch_judge(lambda j: (j.expected_tensor(0), "reference")),
                        seed=s, reference=True, mistakes=MISTAKES["mha_from_torch"], hidden=True))
    return out


# Optional challenge (0 points): PackedMultiHeadAttention in both layouts, with the masks above.
# (B, T, D, H, bias, layout, mask kind, dtype)
_PACKED_CONFIGS = [
    (2, 6, 32, 4, True, "blocks", "causal", MODULE_DTYPE),
    (2, 5, 24, 4, True, "per_head", None, MODULE_DTYPE),
    (1, 7, 48, 3, False, "per_head", "padding", torch.float32),  # H = 3: the two axes of size 3
    (2, 4, 16, 16, True, "per_head", "random+empty", MODULE_DTYPE),  # Dh = 1, a query with no key
    (3, 5, 16, 1, False, "blocks", "shared", torch.float32),  # one head: the layouts differ anyway
    (2, 3, 64, 8, True, "blocks", None, torch.float32),
]


@HIDDEN.exercise("PackedMultiHeadAttention")
def _packed(seed: int) -> list[Case]:
    out = []
    for i, s, g, (b, t, d, h, bias, layout, kind, dtype) in seeded(seed, 900, _PACKED_CONFIGS):
        x = torch.randn(b, t, d, generator=g, dtype=dtype)
        mask = _mask(kind, b, t, t, g)
        state = random_packed_state(s, d, h, bias, layout, dtype)
        out.append(_hidden("PackedMultiHeadAttention", f"hidden case {i + 1} (D = {d}, H = {h}, layout "
                           f"{layout!r}, mask: {kind}): matches the reference",
                           [packed_call(d, h, bias, layout, state, x, mask)], s, known=MHA_ERRORS[:1]))
    bad = torch.randn(1, 2, 12, generator=make_generator(seed * 1000 + 990), dtype=MODULE_DTYPE)
    out.append(_hidden("PackedMultiHeadAttention", "hidden case 7 (layout 'Blocks'): raises ValueError, "
                       "as the reference does",
                       [Call("PackedMultiHeadAttention", (12, 3), {"bias": True, "layout": "Blocks"},
                             forward_args=(bad,))], seed * 1000 + 990))
    return out

cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
