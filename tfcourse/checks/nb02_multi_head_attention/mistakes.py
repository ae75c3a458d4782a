"""Notebook 02's catalogue of known wrong implementations (each has the exercise's signature) and
the hints the feedback shows when an answer behaves like one of them (``MISTAKES``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..hints import Mistake

__all__ = ["MISTAKES", "NEG_INF", "PROJECTIONS"]

NEG_INF = float("-inf")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _split_view_only(x, num_heads):
    b, t, d = x.shape
    return x.reshape(b, num_heads, t, d // num_heads)


def _split_no_transpose(x, num_heads):
    b, t, d = x.shape
    return x.reshape(b, t, num_heads, d // num_heads)


def _split_strided(x, num_heads):
    b, t, d = x.shape
    return x.reshape(b, t, d // num_heads, num_heads).permute(0, 3, 1, 2)


def _split_dh_before_t(x, num_heads):
    b, t, d = x.shape
    return x.reshape(b, t, num_heads, d // num_heads).permute(0, 2, 3, 1)


def _split_batch_transposed(x, num_heads):
    b, t, d = x.shape
    return x.reshape(b, t, num_heads, d // num_heads).transpose(0, 2)  # (H, T, B, Dh)


def _merge_flatten_tokens(x):
    return x.transpose(1, 2).flatten(1)  # (B, T·H·Dh)


def _merge_no_transpose(x):
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


def _merge_strided(x):
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)


def _merge_sum(x):
    return x.sum(dim=1)


def _merge_mean(x):
    return x.mean(dim=1)


def _merge_no_batch_axis(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b * t, h * dh)


class _MHA(nn.Module):
    """Multi-head attention with switches that turn on one known mistake (for hints only)."""

    split = "heads"  # "view": x.view(B, H, T, Dh); "strided": head h gets columns h, h + H, ...
    merge = "heads"  # "view": reshape (B, H, T, Dh) to (B, T, D) without the transpose
    scale = "head"  # "model": divide by sqrt(D); "none": no scaling; "twice": by sqrt(Dh) twice
    use_o_proj = True
    kv_from_x = False
    kv_from_x_same_length = False  # context used only when its length differs from x's
    seq_first = False  # (B, T, D) read as (T, B, D): attention across the batch
    always_causal = False  # F.scaled_dot_product_attention(is_causal=True) instead of `mask`
    swap_qk = False
    invert_mask = False
    ignore_mask = False

    def __init__(self, d_model: int, num_heads: int, bias: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        h = self.num_heads
        if self.split == "view":
            return t.reshape(b, h, n, d // h)
        if self.split == "strided":
            return t.reshape(b, n, d // h, h).permute(0, 3, 1, 2)
        return t.reshape(b, n, h, d // h).transpose(1, 2)

    def _merge(self, t: torch.Tensor) -> torch.Tensor:
        b, h, n, dh = t.shape
        if self.merge == "view":
            return t.reshape(b, n, h * dh)
        return t.transpose(1, 2).reshape(b, n, h * dh)

    def forward(self, x, context=None, mask=None):
        if self.seq_first:
            x = x.transpose(0, 1)
            context = None if context is None else context.transpose(0, 1)
        source = x if context is None or self.kv_from_x else context
        if self.kv_from_x_same_length and context is not None and context.size(1) == x.size(1):
            source = x
        q_proj, k_proj = (self.k_proj, self.q_proj) if self.swap_qk else (self.q_proj, self.k_proj)
        q, k, v = self._split(q_proj(x)), self._split(k_proj(source)), self._split(self.v_proj(source))
        width = {"head": q.size(-1), "model": x.size(-1), "none": 1, "twice": q.size(-1) ** 2}[self.scale]
        scores = q @ k.transpose(-2, -1) / math.sqrt(width)
        allowed = None
        if self.always_causal:
            mask = torch.ones(scores.size(-2), scores.size(-1), dtype=torch.bool, device=scores.device).tril()
        if mask is not None and not self.ignore_mask:
            allowed = ~mask if self.invert_mask else mask
            scores = scores.masked_fill(~allowed, NEG_INF)
        weights = torch.softmax(scores, dim=-1)
        if allowed is not None:
            weights = torch.where(allowed.any(-1, keepdim=True), weights, torch.zeros_like(weights))
        out = self._merge(weights @ v)
        out = self.o_proj(out) if self.use_o_proj else out
        return out.transpose(0, 1) if self.seq_first else out


def _mha_variant(name: str, **flags: Any) -> type[_MHA]:
    return type(name, (_MHA,), flags)


def _from_torch(torch_mha, *, order=(0, 1, 2), transpose=False, keep_bias=True, heads=None,
                cls: type[_MHA] = _MHA):
    w = torch_mha.in_proj_weight.detach().chunk(3)
    has_bias = torch_mha.in_proj_bias is not None
    module = cls(torch_mha.embed_dim, heads or torch_mha.num_heads, bias=has_bias and keep_bias)
    module = module.to(w[0].dtype).to(w[0].device)
    state = {f"{p}.weight": (w[i].T if transpose else w[i]) for p, i in zip(PROJECTIONS[:3], order, strict=True)}
    state["o_proj.weight"] = torch_mha.out_proj.weight.detach()
    if transpose == "all":
        state["o_proj.weight"] = state["o_proj.weight"].T
    if has_bias and keep_bias:
        b = torch_mha.in_proj_bias.detach().chunk(3)
        state.update({f"{p}.bias": b[i] for p, i in zip(PROJECTIONS[:3], order, strict=True)})
        state["o_proj.bias"] = torch_mha.out_proj.bias.detach()
    module.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    return module


def _from_torch_kqv(torch_mha):
    return _from_torch(torch_mha, order=(1, 0, 2))


def _from_torch_vkq(torch_mha):
    return _from_torch(torch_mha, order=(2, 1, 0))


def _from_torch_qvk(torch_mha):
    return _from_torch(torch_mha, order=(0, 2, 1))


def _from_torch_transposed(torch_mha):
    return _from_torch(torch_mha, transpose="all")


def _from_torch_transposed_in_proj(torch_mha):
    return _from_torch(torch_mha, transpose=True)


def _from_torch_no_bias(torch_mha):
    return _from_torch(torch_mha, keep_bias=False)


def _from_torch_one_head(torch_mha):
    return _from_torch(torch_mha, heads=1)


def _from_torch_per_head(torch_mha):
    """in_proj_weight read as per-head [q_h; k_h; v_h] blocks (a fused layout), not [q_proj.weight; k_proj.weight; v_proj.weight]."""
    h, d = torch_mha.num_heads, torch_mha.embed_dim
    w = torch_mha.in_proj_weight.detach().reshape(h, 3, d // h, d)
    has_bias = torch_mha.in_proj_bias is not None
    module = _MHA(d, h, bias=has_bias).to(w.dtype)
    state = {f"{p}.weight": w[:, i].reshape(d, d) for i, p in enumerate(PROJECTIONS[:3])}
    state["o_proj.weight"] = torch_mha.out_proj.weight.detach()
    if has_bias:
        b = torch_mha.in_proj_bias.detach().reshape(h, 3, d // h)
        state.update({f"{p}.bias": b[:, i].reshape(d) for i, p in enumerate(PROJECTIONS[:3])})
        state["o_proj.bias"] = torch_mha.out_proj.bias.detach()
    module.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    return module


_HINT_SPLIT_VIEW = ("x.view(B, H, T, Dh) cuts the memory of (T, D) into H blocks and mixes tokens: view as "
                    "(B, T, H, Dh) first, then .transpose(1, 2)")
_HINT_MERGE_VIEW = ("reshaping (B, H, T, Dh) straight to (B, T, D) mixes tokens across heads: .transpose(1, 2) "
                    "to (B, T, H, Dh) first, then reshape")
_HINT_STRIDED = "head h owns the contiguous columns h·Dh … (h+1)·Dh − 1: the H axis comes before Dh"

_HINT_KV_FROM_CONTEXT = ("cross-attention: keys and values come from `context` whenever it is given "
                        "(k_proj(context), v_proj(context)), whatever its length; queries from x")

MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "split_heads": (
        Mistake("view without transpose", _HINT_SPLIT_VIEW, _split_view_only),
        Mistake("no transpose", "you returned (B, T, H, Dh): .transpose(1, 2) puts the heads before the "
                "tokens, (B, H, T, Dh)", _split_no_transpose),
        Mistake("strided heads", _HINT_STRIDED + ": view as (B, T, H, Dh), not (B, T, Dh, H)", _split_strided),
        Mistake("Dh before T", "the result is (B, H, T, Dh), tokens before features (k.transpose(-2, -1) "
                "belongs inside the scores, not here)", _split_dh_before_t),
        Mistake("batch axis transposed", "keep the batch axis first: (B, H, T, Dh) is (B, T, H, Dh) with "
                ".transpose(1, 2), not .transpose(0, 2)", _split_batch_transposed),
    ),
    "merge_heads": (
        Mistake("reshape without transpose", _HINT_MERGE_VIEW, _merge_no_transpose),
        Mistake("strided heads", _HINT_STRIDED + ": transpose(1, 2), not permute(0, 2, 3, 1)", _merge_strided),
        Mistake("sum over heads", "merge by concatenating the heads (width H·Dh), not by summing or averaging "
                "them", _merge_sum),
        Mistake("mean over heads", "merge by concatenating the heads (width H·Dh), not by summing or averaging "
                "them", _merge_mean),
        Mistake("batch folded into tokens", "keep the batch axis: the result is (B, T, H·Dh)",
                _merge_no_batch_axis),
        Mistake("tokens flattened too", "flatten only the heads and their features: .flatten(2) (or "
                ".reshape(B, T, H·Dh)) keeps the token axis", _merge_flatten_tokens),
    ),
    "MultiHeadAttention": (
        Mistake("split view without transpose", "splitting heads: " + _HINT_SPLIT_VIEW,
                _mha_variant("SplitView", split="view")),
        Mistake("merge view without transpose", "merging heads: " + _HINT_MERGE_VIEW,
                _mha_variant("MergeView", merge="view")),
        Mistake("strided heads", _HINT_STRIDED, _mha_variant("Strided", split="strided")),
        Mistake("scale by sqrt(D)", "divide the scores by sqrt(Dh) = sqrt(d_model // num_heads), the width of "
                "one head, not sqrt(d_model)", _mha_variant("ScaleModel", scale="model")),
        Mistake("no scale", "divide the scores by sqrt(Dh) (the nb01 scaled_dot_product_attention does it "
                "for you)", _mha_variant("NoScale", scale="none")),
        Mistake("no o_proj", "apply the output projection: return self.o_proj(merged heads)",
                _mha_variant("NoOut", use_o_proj=False)),
        Mistake("k/v from x", _HINT_KV_FROM_CONTEXT, _mha_variant("KVFromX", kv_from_x=True)),
        Mistake("k/v from x when S == T", _HINT_KV_FROM_CONTEXT,
                _mha_variant("KVFromXSameLength", kv_from_x_same_length=True)),
        Mistake("scaled twice", "scaled_dot_product_attention (nb01) already divides by sqrt(Dh): scaling q "
                "or the scores yourself as well divides by Dh", _mha_variant("ScaleTwice", scale="twice")),
        Mistake("(B, T, D) read as (T, B, D)", "x is (B, T, D), batch first: attention mixes the T tokens of "
                "one sequence, not the B sequences of a batch (nn.MultiheadAttention's default layout is "
                "(T, B, D))", _mha_variant("SeqFirst", seq_first=True)),
        Mistake("q/k swapped", "q = q_proj(x) and k = k_proj(context or x): the two projections are swapped",
                _mha_variant("SwapQK", swap_qk=True)),
        Mistake("inverted mask", "the course's masks say True = may attend (SDPA convention), the opposite "
                "of nn.MultiheadAttention: pass `mask` as it is, don't invert it", _mha_variant(
                    "InvertMask", invert_mask=True)),
        Mistake("always causal", "use the `mask` you are given (True = may attend) and nothing else: "
                "is_causal=True makes every call causal, self-attention without a mask too",
                _mha_variant("AlwaysCausal", always_causal=True)),
        Mistake("mask ignored", "pass `mask` on to the attention: it broadcasts against (B, H, T, S) as is",
                _mha_variant("IgnoreMask", ignore_mask=True)),
    ),
    "mha_from_torch": (
        Mistake("k, q, v order", "in_proj_weight stacks [q_proj.weight; k_proj.weight; v_proj.weight] along dim 0 (q first): take "
                "in_proj_weight.chunk(3) in that order (and in_proj_bias alike)", _from_torch_kqv),
        Mistake("v, k, q order", "in_proj_weight stacks [q_proj.weight; k_proj.weight; v_proj.weight] along dim 0 (q first): take "
                "in_proj_weight.chunk(3) in that order (and in_proj_bias alike)", _from_torch_vkq),
        Mistake("q, v, k order", "in_proj_weight stacks [q_proj.weight; k_proj.weight; v_proj.weight] along dim 0 (q first): take "
                "in_proj_weight.chunk(3) in that order (and in_proj_bias alike)", _from_torch_qvk),
        Mistake("transposed", "nn.Linear.weight, in_proj_weight and out_proj.weight are all (out, in): "
                "copy them as they are, without .T", _from_torch_transposed),
        Mistake("in_proj transposed", "nn.Linear.weight, in_proj_weight and out_proj.weight are all (out, in): "
                "copy them as they are, without .T", _from_torch_transposed_in_proj),
        Mistake("biases dropped", "torch_mha has biases (in_proj_bias, out_proj.bias): build with "
                "bias=True and copy them too", _from_torch_no_bias),
        Mistake("one head", "use torch_mha.num_heads heads: the same weights split into other heads "
                "give other outputs", _from_torch_one_head),
        Mistake("in_proj read per head", "in_proj_weight is [q_proj.weight; k_proj.weight; v_proj.weight], three (D, D) blocks along dim 0 "
                "(.chunk(3)), not per-head [q_h; k_h; v_h] slices (a fused layout of other code bases)",
                _from_torch_per_head),
    ),
}
