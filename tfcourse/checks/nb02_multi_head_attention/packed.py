"""Notebook 02's optional challenge (★★★, 0 points): ``PackedMultiHeadAttention``, one packed
q/k/v projection in two layouts, checked against nn.MultiheadAttention and per-head
F.scaled_dot_product_attention; its mistakes and cases.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..call import Call
from ..case import Case, Judge, fmt_dtype
from ..hints import Mistake
from .cases import (
    MODULE_DTYPE,
    NOTEBOOK,
    VIEW_ERROR,
    from_torch_state,
    per_head_sdpa_oracle,
    random_input,
    random_mha_state,
    to_torch_state,
    torch_oracle,
    with_error_hints,
)
from .mistakes import MISTAKES, NEG_INF

PACKED_LAYOUTS = ("blocks", "per_head")


def packed_rows(t: torch.Tensor, num_heads: int, to: str) -> torch.Tensor:
    """Regroup the 3D rows of a packed q/k/v weight (3D, D) or bias (3D,) between the layouts.

    "blocks" (torch's in_proj_weight, GPT-2's c_attn transposed): [q of all heads; k of all heads;
    v of all heads]. "per_head" (GPT-NeoX's and BLOOM's query_key_value): [q_0; k_0; v_0; q_1; ...].
    ``to`` is the layout of the result; the input is in the other one.
    """
    rest = t.shape[1:]
    head_dim = t.size(0) // (3 * num_heads)
    if to == "per_head":  # (3, H, Dh, ...) -> (H, 3, Dh, ...)
        return t.reshape(3, num_heads, head_dim, *rest).transpose(0, 1).reshape(t.shape)
    if to == "blocks":  # (H, 3, Dh, ...) -> (3, H, Dh, ...)
        return t.reshape(num_heads, 3, head_dim, *rest).transpose(0, 1).reshape(t.shape)
    raise ValueError(f"layout must be one of {PACKED_LAYOUTS}, not {to!r}")


def random_packed_state(seed: int, d_model: int, num_heads: int, bias: bool, layout: str,
                        dtype: torch.dtype = MODULE_DTYPE) -> dict[str, torch.Tensor]:
    """PackedMultiHeadAttention weights (qkv_proj (3D, D), o_proj (D, D)) in ``layout``, made from
    :func:`random_mha_state` so that they hold the same W_Q, W_K, W_V, W_O for every layout."""
    blocks = to_torch_state(random_mha_state(seed, d_model, bias, dtype))
    regroup = (lambda t: t) if layout == "blocks" else (lambda t: packed_rows(t, num_heads, "per_head"))
    state = {"qkv_proj.weight": regroup(blocks["in_proj_weight"]), "o_proj.weight": blocks["out_proj.weight"]}
    if bias:
        state["qkv_proj.bias"] = regroup(blocks["in_proj_bias"])
        state["o_proj.bias"] = blocks["out_proj.bias"]
    return {k: v.clone() for k, v in state.items()}


def packed_to_torch_state(state: dict[str, torch.Tensor], num_heads: int, layout: str) -> dict[str, torch.Tensor]:
    """PackedMultiHeadAttention's state -> nn.MultiheadAttention's (in_proj_weight, ...)."""
    regroup = (lambda t: t) if layout == "blocks" else (lambda t: packed_rows(t, num_heads, "blocks"))
    out = {"in_proj_weight": regroup(state["qkv_proj.weight"]), "out_proj.weight": state["o_proj.weight"]}
    if "qkv_proj.bias" in state:
        out["in_proj_bias"] = regroup(state["qkv_proj.bias"])
        out["out_proj.bias"] = state["o_proj.bias"]
    return out


def packed_call(d_model: int, num_heads: int, bias: bool, layout: str, state: dict[str, torch.Tensor],
                x: torch.Tensor, mask: torch.Tensor | None = None) -> Call:
    """``PackedMultiHeadAttention(d_model, num_heads, bias=bias, layout=layout)`` with ``state``,
    called on x (and ``mask=mask`` when given)."""
    return Call("PackedMultiHeadAttention", (d_model, num_heads), {"bias": bias, "layout": layout},
                state=state, forward_args=(x,), forward_kwargs={} if mask is None else {"mask": mask})


class _Packed(nn.Module):
    """PackedMultiHeadAttention with switches that turn on one known mistake (for hints only)."""

    read_as = "layout"  # "blocks" or "per_head": read every layout this way
    order = (0, 1, 2)  # which third (or which slot of a head) is q, k, v
    scale = "head"
    invert_mask = False
    nan_rows = False

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, layout: str = "blocks"):
        super().__init__()
        if d_model % num_heads != 0 or layout not in PACKED_LAYOUTS:
            raise ValueError(f"bad d_model = {d_model}, num_heads = {num_heads} or layout = {layout!r}")
        self.num_heads, self.layout = num_heads, layout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = self.num_heads
        layout = self.layout if self.read_as == "layout" else self.read_as
        qkv = self.qkv_proj(x)
        if layout == "blocks":
            parts = qkv.reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
        else:
            parts = qkv.reshape(b, t, h, 3, d // h).permute(3, 0, 2, 1, 4)  # (3, B, H, T, Dh)
        q, k, v = (parts[i] for i in self.order)
        width = q.size(-1) if self.scale == "head" else d
        scores = q @ k.transpose(-2, -1) / math.sqrt(width)
        allowed = None
        if mask is not None:
            allowed = ~mask if self.invert_mask else mask
            scores = scores.masked_fill(~allowed, NEG_INF)
        weights = torch.softmax(scores, dim=-1)
        if allowed is not None and not self.nan_rows:
            weights = torch.where(allowed.any(-1, keepdim=True), weights, torch.zeros_like(weights))
        return self.o_proj((weights @ v).transpose(1, 2).reshape(b, t, d))


def _packed_variant(name: str, **flags: Any) -> type[_Packed]:
    return type(name, (_Packed,), flags)


MISTAKES["PackedMultiHeadAttention"] = (
    Mistake("blocks read per head", "layout='blocks' is three blocks of D rows, [q of all heads; k of all "
            "heads; v of all heads] (torch's in_proj_weight): view the (B, T, 3D) projection as "
            "(B, T, 3, H, Dh), not (B, T, H, 3, Dh)", _packed_variant("PackedAllPerHead", read_as="per_head")),
    Mistake("per_head read as blocks", "layout='per_head' groups the rows by head, [q_0; k_0; v_0; q_1; ...] "
            "(GPT-NeoX's query_key_value): view the (B, T, 3D) projection as (B, T, H, 3, Dh) for it",
            _packed_variant("PackedAllBlocks", read_as="blocks")),
    Mistake("k, q, v order", "q comes first, then k, then v, in both layouts",
            _packed_variant("PackedKQV", order=(1, 0, 2))),
    Mistake("scale by sqrt(D)", "divide the scores by sqrt(Dh) = sqrt(d_model // num_heads), the width of "
            "one head, not sqrt(d_model)", _packed_variant("PackedScaleModel", scale="model")),
    Mistake("inverted mask", "the course's masks say True = may attend (SDPA convention), the opposite of "
            "nn.MultiheadAttention: pass `mask` as it is, don't invert it",
            _packed_variant("PackedInvertMask", invert_mask=True)),
    Mistake("NaN for a query with no allowed key", "a query that may attend no key must give a zero "
            "attention output (so o_proj's bias), not NaN: the setup cell's scaled_dot_product_attention "
            "does that", _packed_variant("PackedNaNRows", nan_rows=True)),
)
PACKED_NAMES_HINT = ("create self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias) and self.o_proj = "
                     "nn.Linear(d_model, d_model, bias=bias) and no other parameters: the grader loads weights "
                     "by these names")
PACKED_SIZES_HINT = "qkv_proj is one nn.Linear(d_model, 3 * d_model): its weight is (3D, D); o_proj's is (D, D)"
PACKED_ERRORS = (VIEW_ERROR,)


def _packed_case(title: str, calls: list[Call], judge, seed: int) -> Case:
    return Case("PackedMultiHeadAttention", title, calls,
                with_error_hints(judge, PACKED_ERRORS, load_hints=(PACKED_NAMES_HINT, PACKED_SIZES_HINT)),
                seed=seed, mistakes=MISTAKES["PackedMultiHeadAttention"])


@NOTEBOOK.exercise("PackedMultiHeadAttention")
def _packed_cases() -> list[Case]:
    """Check ``PackedMultiHeadAttention(d_model, num_heads, bias=True, layout="blocks")`` (optional,
    0 points) against nn.MultiheadAttention and per-head F.scaled_dot_product_attention."""
    cases = []
    dt = MODULE_DTYPE

    # 1. blocks, biases, causal mask: nn.MultiheadAttention with in_proj_weight = qkv_proj.weight
    state = random_packed_state(461, 16, 4, True, "blocks")
    x = random_input(462, 2, 6, 16, dtype=dt)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()  # (T, T), True = may attend

    def blocks_causal(j: Judge, state=state, x=x, mask=causal):
        got = j.tensor(shape=(2, 6, 16), dtype=dt)
        j.close(got, torch_oracle(packed_to_torch_state(state, 4, "blocks"), 4, x, mask=mask),
                oracle="nn.MultiheadAttention(attn_mask=~mask), in_proj_weight = qkv_proj.weight")

    cases.append(_packed_case(f"layout='blocks', bias=True, causal mask ({fmt_dtype(dt)}): matches nn.MultiheadAttention "
                              "holding qkv_proj.weight as its in_proj_weight",
                              [packed_call(16, 4, True, "blocks", state, x, causal)], blocks_causal, seed=461))

    # 2. the same weights in both layouts give the same outputs (D = 24, H = 4, Dh = 6)
    blocks2 = random_packed_state(463, 24, 4, True, "blocks")
    per_head2 = random_packed_state(463, 24, 4, True, "per_head")
    x2 = random_input(464, 2, 5, 24, dtype=dt)

    def both_layouts(j: Judge, state=blocks2, x=x2):
        expected = torch_oracle(packed_to_torch_state(state, 4, "blocks"), 4, x)
        for call, layout in enumerate(PACKED_LAYOUTS):
            got = j.tensor(call, shape=(2, 5, 24), dtype=dt)
            j.close(got, expected, call=call, name=f"output with layout={layout!r}",
                    oracle="nn.MultiheadAttention holding the same W_Q, W_K, W_V, W_O")

    cases.append(_packed_case("the same weights packed as 'blocks' and as 'per_head' (GPT-NeoX): both match "
                              "nn.MultiheadAttention", [packed_call(24, 4, True, "blocks", blocks2, x2),
                                                        packed_call(24, 4, True, "per_head", per_head2, x2)],
                              both_layouts, seed=463))

    # 3. per_head, no biases, padding mask (B, 1, 1, S), float32
    state3 = random_packed_state(465, 16, 2, False, "per_head", torch.float32)
    x3 = random_input(466, 2, 7, 16, dtype=torch.float32)
    pad = (torch.arange(7)[None, :] < torch.tensor([7, 3])[:, None])[:, None, None, :]  # (B, 1, 1, S)

    def per_head_pad(j: Judge, state=state3, x=x3, pad=pad):
        got = j.tensor(shape=(2, 7, 16), dtype=torch.float32)
        course = from_torch_state(packed_to_torch_state(state, 2, "per_head"))
        j.close(got, per_head_sdpa_oracle(course, 2, x, mask=pad),
                oracle="Concat(F.scaled_dot_product_attention per head) W_O")

    cases.append(_packed_case("layout='per_head', bias=False, padding mask (B, 1, 1, S), float32",
                              [packed_call(16, 2, False, "per_head", state3, x3, pad)], per_head_pad, seed=465))

    # 4. a query that may attend no key: o_proj(0) = o_proj.bias, never NaN
    state4 = random_packed_state(467, 8, 2, True, "per_head")
    x4 = random_input(468, 1, 3, 8, dtype=dt)
    rows = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])

    def empty_row(j: Judge, state=state4, x=x4, rows=rows):
        got = j.tensor(shape=(1, 3, 8), dtype=dt)
        j.require(not bool(torch.isnan(got).any()), "query 1 may attend no key, and the output holds NaN")
        course = from_torch_state(packed_to_torch_state(state, 2, "per_head"))
        expected = per_head_sdpa_oracle(course, 2, x, mask=rows)
        expected[:, 1] = state["o_proj.bias"]  # o_proj(0) = its bias
        j.close(got, expected, oracle="expected (row 1: o_proj(0) = o_proj.bias)")

    cases.append(_packed_case("a query that may attend no key gives o_proj(0) = o_proj.bias, not NaN",
                              [packed_call(8, 2, True, "per_head", state4, x4, rows)], empty_row, seed=467))

    # 5. bad arguments raise ValueError
    def bad_arguments(j: Judge):
        for call, what in enumerate(["layout='neox'", "d_model = 18, num_heads = 4"]):
            o = j.raised(call)
            if o is None:
                j.fail(f"PackedMultiHeadAttention({what}) returned without an error; expected a ValueError",
                       hint="check the layout and d_model % num_heads in __init__ and raise ValueError(...)")
            j.require(o.error_type == "ValueError", f"{what}: raised {o.error_line()[:80]}; expected a ValueError",
                      hint="raise ValueError(...) yourself: an assert or a failing view raises other errors")

    cases.append(Case("PackedMultiHeadAttention", "an unknown layout, or D not divisible by H, raises ValueError",
                      [Call("PackedMultiHeadAttention", (16, 4), {"bias": True, "layout": "neox"}),
                       Call("PackedMultiHeadAttention", (18, 4), {"bias": True, "layout": "blocks"})],
                      bad_arguments, seed=469))
    return cases
