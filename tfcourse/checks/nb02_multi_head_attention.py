"""Checks for notebook 02, multi-head attention.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. Visible cases judge with oracles that do not hand out the
answer: PyTorch's own ``nn.MultiheadAttention`` (with its opposite mask polarity) and
``F.scaled_dot_product_attention`` run head by head, the paper's "Concat(head_1, ..., head_H)"
written with ``torch.cat``, and properties: tokens stay tokens when heads are split and merged,
causality under a causal mask, permutation equivariance without a mask. ``MISTAKES`` is the
catalogue of known wrong implementations whose hints the feedback shows.

Module exercises are called as ``Call("MultiHeadAttention", (D, H), {"bias": ...}, state=...,
forward_args=(x,), forward_kwargs={"context": ..., "mask": ...})``: the weights are loaded by the
parameter names of docs/conventions.md (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``), so an
answer is judged on its outputs for weights the check chooses. Module cases run in
``MODULE_DTYPE`` (float64; the call machinery gives a module the dtype of the weights it loads).

``mha_from_torch`` is judged through the learner's own ``MultiHeadAttention``: every case also
runs ``MultiHeadAttention`` with the converted weights loaded by name, and when that module
itself disagrees with PyTorch (a bug of exercise 3, judged there), the conversion is judged
against it instead. So one bug costs the points of one exercise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..device import make_generator
from .call import Call, TorchModule
from .case import Case, Judge
from .hints import Mistake
from .nb01_attention import HALF_FILL_ERROR
from .run import NotebookChecks, run_checks
from .tolerance import tolerance

__all__ = [
    "EXERCISES",
    "MHA_ERRORS",
    "MISTAKES",
    "MODULE_DTYPE",
    "NAMES_HINT",
    "SIZES_HINT",
    "check_MultiHeadAttention",
    "check_PackedMultiHeadAttention",
    "check_merge_heads",
    "check_mha_from_torch",
    "check_split_heads",
    "from_torch_calls",
    "from_torch_judge",
    "from_torch_state",
    "judge_from_torch",
    "mha_call",
    "packed_call",
    "packed_rows",
    "packed_to_torch_state",
    "random_mha_state",
    "random_packed_state",
    "random_torch_mha_state",
    "to_torch_state",
    "visible_cases",
    "with_error_hints",
]

EXERCISES = ("split_heads", "merge_heads", "MultiHeadAttention", "mha_from_torch", "PackedMultiHeadAttention")

NEG_INF = float("-inf")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


# Module cases run in float64 (tight tolerances); float32 cases are separate.
MODULE_DTYPE = torch.float64


# ---------------------------------------------------------------------------------------------
# Oracles (trusted code, run by the judge)
# ---------------------------------------------------------------------------------------------
def _split_oracle(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, Dh): head h is the h-th chunk of D columns of every token."""
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # (B, H, T, Dh)


def _concat_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, Dh) -> (B, T, H·Dh): Concat(head_1, ..., head_H) along the features."""
    return torch.cat(x.unbind(dim=1), dim=-1)  # (B, T, D)


def to_torch_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Course names (q_proj.weight, ...) -> nn.MultiheadAttention's (in_proj_weight, ...)."""
    out = {"in_proj_weight": torch.cat([state[f"{p}.weight"] for p in PROJECTIONS[:3]]),
           "out_proj.weight": state["o_proj.weight"]}
    if "q_proj.bias" in state:
        out["in_proj_bias"] = torch.cat([state[f"{p}.bias"] for p in PROJECTIONS[:3]])
        out["out_proj.bias"] = state["o_proj.bias"]
    return out


def from_torch_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """nn.MultiheadAttention's names -> the course's (the inverse of :func:`to_torch_state`)."""
    out = dict(zip((f"{p}.weight" for p in PROJECTIONS[:3]), state["in_proj_weight"].chunk(3), strict=True))
    out["o_proj.weight"] = state["out_proj.weight"]
    if "in_proj_bias" in state:
        out.update(zip((f"{p}.bias" for p in PROJECTIONS[:3]), state["in_proj_bias"].chunk(3), strict=True))
        out["o_proj.bias"] = state["out_proj.bias"]
    return {k: v.clone() for k, v in out.items()}


def _torch_module(torch_state: dict[str, torch.Tensor], num_heads: int) -> nn.MultiheadAttention:
    weight = torch_state["in_proj_weight"]
    module = nn.MultiheadAttention(weight.size(1), num_heads, bias="in_proj_bias" in torch_state,
                                   batch_first=True, dtype=weight.dtype)
    module.load_state_dict(torch_state, strict=True)
    return module.eval()


def _torch_oracle(torch_state: dict[str, torch.Tensor], num_heads: int, x: torch.Tensor,
                  context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """nn.MultiheadAttention's output; ``mask`` in the course's polarity (True = may attend)."""
    module = _torch_module(torch_state, num_heads)
    source = x if context is None else context
    attn_mask = None
    if mask is not None:  # nn.MultiheadAttention: bool True = may NOT attend, (B·H, T, S)
        b, t, s = x.size(0), x.size(1), source.size(1)
        attn_mask = ~mask.expand(b, num_heads, t, s).reshape(b * num_heads, t, s)
    with torch.no_grad():
        return module(x, source, source, attn_mask=attn_mask, need_weights=False)[0]  # (B, T, D)


def _per_head_sdpa_oracle(state: dict[str, torch.Tensor], num_heads: int, x: torch.Tensor,
                          context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """head_i = F.scaled_dot_product_attention(x W_Q^i, c W_K^i, c W_V^i) one head at a time,
    then Concat(head_1..head_H) W_O (Vaswani et al. 2017, §3.2.2)."""
    source = x if context is None else context
    d_model = x.size(-1)
    head_dim = d_model // num_heads
    heads = []
    for h in range(num_heads):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        proj = {p: (state[f"{p}.weight"][cols], state.get(f"{p}.bias")) for p in PROJECTIONS[:3]}
        q, k, v = (F.linear(inp, w, None if b is None else b[cols])
                   for inp, (w, b) in zip((x, source, source), proj.values(), strict=True))
        attn_mask = None if mask is None else mask.expand(x.size(0), num_heads, x.size(1), source.size(1))[:, h]
        heads.append(F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask))  # (B, T, Dh)
    return F.linear(torch.cat(heads, dim=-1), state["o_proj.weight"], state.get("o_proj.bias"))  # (B, T, D)


# ---------------------------------------------------------------------------------------------
# The catalogue of known wrong implementations (hints). Each has the exercise's signature.
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# Errors with a known cause: a hint instead of a bare traceback line.
# ---------------------------------------------------------------------------------------------
NAMES_HINT = ("create self.q_proj, self.k_proj, self.v_proj, self.o_proj = nn.Linear(d_model, d_model, "
              "bias=bias) and no other parameters: the grader loads weights by these names")
SIZES_HINT = "each projection is nn.Linear(d_model, d_model): one (D, D) weight holds all H heads"
FROM_TORCH_NAMES_HINT = ("load a state dict with MultiHeadAttention's names (q_proj.weight, ..., o_proj.bias), "
                         "and build it with bias=True exactly when torch_mha has biases")
FROM_TORCH_SIZES_HINT = "in_proj_weight (3D, D) splits into three (D, D) blocks along dim 0: .chunk(3)"
VIEW_ERROR = (r"view size is not compatible", "after a transpose the tensor is not contiguous: use "
              ".reshape(...) (or .contiguous().view(...)) instead of .view(...)")
CONTEXT_ERROR = (r"must match the size of tensor", "with `context` (B, S, D) the scores are (B, H, T, S): "
                 "keys and values come from context, queries from x")


def _cross_other_length(call: Call) -> bool:
    """Whether ``call`` runs cross-attention with a context whose length S differs from T."""
    x, context = (call.forward_args or (None,))[0], call.forward_kwargs.get("context")
    return isinstance(x, torch.Tensor) and isinstance(context, torch.Tensor) and context.size(1) != x.size(1)


KV_LENGTH_ERROR = (r"shape '\[[0-9, ]+\]' is invalid for input of size", "keys and values have "
                   "S = context.size(1) tokens, not T = x.size(1): reshape k and v with S (or -1)", _cross_other_length)
DTYPE_ERROR = (r"same dtype|expected scalar type|expected both", "build the module in the dtype (and on "
               "the device) of the weights it copies: .to(torch_mha.in_proj_weight.dtype)")


def with_error_hints(judge: Callable[[Judge], None], known: Sequence[tuple[str, str]] = (VIEW_ERROR,),
                     *, calls: Sequence[int] | None = None,
                     load_hints: tuple[str, str] = (NAMES_HINT, SIZES_HINT)) -> Callable[[Judge], None]:
    """Wrap ``judge``: when one of ``calls`` (default: all) raised an error with a known cause
    (a regex of ``known``, or weights that could not be loaded: ``load_hints`` = (hint for
    missing/unexpected names, hint for wrong sizes)), fail with its hint."""

    def wrapped(j: Judge) -> None:
        for i, o in enumerate(j.outcomes):
            if o.kind != "error" or (calls is not None and i not in calls):
                continue
            message = o.error_message
            if "loading state_dict" in message:
                lines = [ln.strip() for ln in message.splitlines()[1:] if ln.strip()]
                detail = next((ln for ln in lines if "key(s)" in ln), lines[0] if lines else "")
                hint = load_hints[1] if "size mismatch" in detail else load_hints[0]
                j.fail(f"the weights could not be loaded: {detail[:100]}", hint=hint)
            for pattern, hint, *when in known:  # (regex, hint) or (regex, hint, when(call) -> bool)
                if re.search(pattern, message) and (not when or when[0](j.case.calls[i])):
                    j.fail(f"raised {o.error_line()[:110]}", hint=hint)
        judge(j)

    return wrapped


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def random_mha_state(seed: int, d_model: int, bias: bool, dtype: torch.dtype = MODULE_DTYPE
                     ) -> dict[str, torch.Tensor]:
    """Weights by the course's names, of a realistic scale: std 1/sqrt(D) (unit-variance q, k, v
    for unit-variance x), biases std 0.5 so that forgetting one shows."""
    g = make_generator(seed)
    state = {}
    for p in PROJECTIONS:
        state[f"{p}.weight"] = torch.randn(d_model, d_model, generator=g, dtype=dtype) / math.sqrt(d_model)
        if bias:
            state[f"{p}.bias"] = torch.randn(d_model, generator=g, dtype=dtype) * 0.5
    return state


def random_torch_mha_state(seed: int, d_model: int, bias: bool, dtype: torch.dtype = MODULE_DTYPE
                           ) -> dict[str, torch.Tensor]:
    """The same, in nn.MultiheadAttention's names (in_proj_weight (3D, D), out_proj.weight, ...)."""
    return to_torch_state(random_mha_state(seed, d_model, bias, dtype))


def mha_call(d_model: int, num_heads: int, bias: bool, state: dict[str, torch.Tensor], x: torch.Tensor,
             context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> Call:
    """``MultiHeadAttention(d_model, num_heads, bias=bias)`` with ``state``, called on x."""
    kwargs: dict[str, Any] = {}
    if context is not None:
        kwargs["context"] = context
    if mask is not None:
        kwargs["mask"] = mask
    return Call("MultiHeadAttention", (d_model, num_heads), {"bias": bias}, state=state,
                forward_args=(x,), forward_kwargs=kwargs)


def from_torch_calls(num_heads: int, torch_state: dict[str, torch.Tensor], x: torch.Tensor,
                     context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> list[Call]:
    """[mha_from_torch(nn.MultiheadAttention with torch_state)(x, ...), and the learner's own
    MultiHeadAttention with the same weights loaded by name (see the module docstring)]."""
    d_model = torch_state["in_proj_weight"].size(1)
    bias = "in_proj_bias" in torch_state
    module = TorchModule("MultiheadAttention", {"embed_dim": d_model, "num_heads": num_heads, "bias": bias,
                                                "batch_first": True}, torch_state)
    own = mha_call(d_model, num_heads, bias, from_torch_state(torch_state), x, context, mask)
    return [Call("mha_from_torch", (module,), forward_args=own.forward_args, forward_kwargs=own.forward_kwargs),
            own]


def _x(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=make_generator(seed), dtype=dtype)


def _case(exercise: str, title: str, calls: list[Call], judge, seed: int | None = None) -> Case:
    return Case(exercise, title, calls, with_error_hints(judge), seed=seed, mistakes=MISTAKES[exercise])


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------------------------
# Visible cases: split_heads
# ---------------------------------------------------------------------------------------------
def _split_cases() -> list[Case]:
    cases = []
    x = _x(401, 2, 5, 12)  # B=2, T=5, D=12; H=3, Dh=4 (T, H, Dh all differ: shapes tell mistakes apart)

    def chunks(j: Judge, x=x):
        got = j.tensor(shape=(2, 3, 5, 4), dtype=x.dtype)
        j.close(got, _split_oracle(x, 3), oracle="expected")

    cases.append(_case("split_heads", "head h holds columns h·Dh … (h+1)·Dh − 1 of every token, (B, H, T, Dh)",
                       [Call("split_heads", (x, 3))], chunks, seed=401))

    x2 = x.clone()
    x2[:, 3] = _x(402, 2, 12)  # change token 3 only

    def tokens_stay(j: Judge):
        before = j.tensor(0, shape=(2, 3, 5, 4), dtype=torch.float64)
        after = j.tensor(1, shape=(2, 3, 5, 4), dtype=torch.float64)
        changed = [t for t in range(5) if not torch.equal(before[:, :, t], after[:, :, t])]
        j.require(changed == [3], f"changing token 3 of x changed out[:, :, t] for t = {changed}; only "
                  "t = 3 may change (a reshape that mixes tokens passes any shape test)", call=1)

    cases.append(_case("split_heads", "tokens stay tokens: changing token 3 of x changes only out[:, :, 3]",
                       [Call("split_heads", (x, 3)), Call("split_heads", (x2, 3))], tokens_stay, seed=402))

    x3 = _x(403, 3, 1, 8, dtype=torch.float32)

    def edge(j: Judge, x=x3):
        one = j.tensor(0, shape=(3, 1, 1, 8), dtype=torch.float32)
        j.close(one, x[:, None], call=0, oracle="x[:, None] (one head is the whole width)")
        per_col = j.tensor(1, shape=(3, 8, 1, 1), dtype=torch.float32)
        j.close(per_col, _split_oracle(x, 8), call=1, oracle="one column per head")

    cases.append(_case("split_heads", "T = 1, float32, H = 1 (Dh = D) and H = D (Dh = 1)",
                       [Call("split_heads", (x3, 1)), Call("split_heads", (x3, 8))], edge, seed=403))

    bad = _x(404, 2, 3, 18)

    def not_divisible(j: Judge):
        o = j.raised(0)
        if o is None:
            j.fail("returned without an error for d_model = 18, num_heads = 4; expected a ValueError",
                   hint="check d_model % num_heads != 0 first and raise ValueError(...)")
        j.require(o.error_type == "ValueError", f"raised {o.error_line()[:90]}; expected a ValueError",
                  hint="check d_model % num_heads != 0 yourself and raise ValueError(...): an assert or a "
                       "failing view raises other errors")
        j.require("18" in o.error_message and "4" in o.error_message,
                  f"the message {o.error_message.strip()[:70]!r} should give both numbers",
                  hint="say what is wrong with which values, e.g. f\"d_model = {d_model} is not divisible "
                       "by num_heads = {num_heads}\"")

    cases.append(Case("split_heads", "D = 18, H = 4: raises ValueError naming both numbers",
                      [Call("split_heads", (bad, 4))], not_divisible, seed=404))
    return cases


# ---------------------------------------------------------------------------------------------
# Visible cases: merge_heads
# ---------------------------------------------------------------------------------------------
def _merge_cases() -> list[Case]:
    cases = []
    x = _x(411, 2, 3, 5, 4)  # B=2, H=3, T=5, Dh=4

    def concat(j: Judge, x=x):
        got = j.tensor(shape=(2, 5, 12), dtype=x.dtype)
        j.close(got, _concat_heads(x), oracle="Concat(head_1, …, head_H)")

    cases.append(_case("merge_heads", "out[b, t] = Concat(head_1, …, head_H)[b, t], shape (B, T, H·Dh)",
                       [Call("merge_heads", (x,))], concat, seed=411))

    tokens = _x(412, 2, 6, 16, dtype=torch.float32)  # (B, T, D) = (2, 6, 16), H = 4
    split = _split_oracle(tokens, 4).contiguous()  # (B, H, T, Dh)

    def inverse(j: Judge, tokens=tokens):
        got = j.tensor(shape=(2, 6, 16), dtype=torch.float32)
        j.close(got, tokens, atol=0.0, rtol=0.0, oracle="the tokens before the split")

    cases.append(_case("merge_heads", "undoes the split exactly: merge_heads(split(x)) == x (float32)",
                       [Call("merge_heads", (split,))], inverse, seed=412))

    x3 = x.clone()
    x3[:, :, 2] = _x(413, 2, 3, 4)  # token 2 of every head

    def tokens_stay(j: Judge):
        before = j.tensor(0, shape=(2, 5, 12), dtype=torch.float64)
        after = j.tensor(1, shape=(2, 5, 12), dtype=torch.float64)
        changed = [t for t in range(5) if not torch.equal(before[:, t], after[:, t])]
        j.require(changed == [2], f"changing token 2 of every head changed out[:, t] for t = {changed}; "
                  "only t = 2 may change", call=1)

    cases.append(_case("merge_heads", "tokens stay tokens: changing token 2 of the heads changes only out[:, 2]",
                       [Call("merge_heads", (x,)), Call("merge_heads", (x3,))], tokens_stay, seed=413))
    return cases


# ---------------------------------------------------------------------------------------------
# Visible cases: MultiHeadAttention
# ---------------------------------------------------------------------------------------------
MHA_ERRORS = (VIEW_ERROR, CONTEXT_ERROR, KV_LENGTH_ERROR, HALF_FILL_ERROR)
FROM_TORCH_ERRORS = (VIEW_ERROR, DTYPE_ERROR)
FROM_TORCH_LOAD_HINTS = (FROM_TORCH_NAMES_HINT, FROM_TORCH_SIZES_HINT)


def _mha_case(title: str, calls: list[Call], judge, seed: int) -> Case:
    """A MultiHeadAttention case, scored by the core test cell (self-attention without a mask)
    or, when a call passes a mask or a context, by ``test_MultiHeadAttention__cross_and_masks``."""
    masked = any(c.forward_kwargs.get("mask") is not None or c.forward_kwargs.get("context") is not None
                 for c in calls)
    return Case("MultiHeadAttention", title, calls, with_error_hints(judge, MHA_ERRORS), seed=seed,
                mistakes=MISTAKES["MultiHeadAttention"], part="cross_and_masks" if masked else "core")


def _mha_cases() -> list[Case]:
    cases = []
    dt = MODULE_DTYPE

    # 1. self-attention, no mask, no biases: nn.MultiheadAttention
    state = random_mha_state(421, 12, bias=False)
    x = _x(422, 2, 5, 12, dtype=dt)

    def plain(j: Judge, state=state, x=x):
        got = j.tensor(shape=(2, 5, 12), dtype=dt)
        j.close(got, _torch_oracle(to_torch_state(state), 3, x), oracle="nn.MultiheadAttention")

    cases.append(_mha_case(f"self-attention, D = 12, H = 3, no biases ({_dt(dt)}): matches nn.MultiheadAttention",
                           [mha_call(12, 3, False, state, x)], plain, seed=421))

    # 2. biases and a causal mask: nn.MultiheadAttention with the opposite polarity
    state2 = random_mha_state(423, 16, bias=True)
    x2 = _x(424, 2, 6, 16, dtype=dt)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()  # (T, S), True = may attend

    def biased_causal(j: Judge, state=state2, x=x2, mask=causal):
        got = j.tensor(shape=(2, 6, 16), dtype=dt)
        j.close(got, _torch_oracle(to_torch_state(state), 4, x, mask=mask),
                oracle="nn.MultiheadAttention(attn_mask=~mask)")

    cases.append(_mha_case("bias=True, causal mask (T, S) with True = may attend: matches nn.MultiheadAttention "
                           "given attn_mask=~mask", [mha_call(16, 4, True, state2, x2, mask=causal)],
                           biased_causal, seed=423))

    # 3. cross-attention, T != S, no mask
    state3 = random_mha_state(425, 16, bias=True)
    x3 = _x(426, 2, 3, 16, dtype=dt)
    ctx = _x(427, 2, 7, 16, dtype=dt)

    def cross(j: Judge, state=state3, x=x3, ctx=ctx):
        got = j.tensor(shape=(2, 3, 16), dtype=dt)
        j.close(got, _torch_oracle(to_torch_state(state), 2, x, context=ctx),
                oracle="nn.MultiheadAttention(x, context, context)")

    cases.append(_mha_case("cross-attention: queries from x (T = 3), keys/values from context (S = 7)",
                           [mha_call(16, 2, True, state3, x3, context=ctx)], cross, seed=425))

    # 3b. cross-attention with S = T: an answer that uses context only when its length differs passes 3
    x3b = _x(435, 2, 5, 16, dtype=dt)
    ctx3b = _x(436, 2, 5, 16, dtype=dt)

    def cross_same_length(j: Judge, state=state3, x=x3b, ctx=ctx3b):
        got = j.tensor(shape=(2, 5, 16), dtype=dt)
        j.close(got, _torch_oracle(to_torch_state(state), 4, x, context=ctx),
                oracle="nn.MultiheadAttention(x, context, context)")

    cases.append(_mha_case("cross-attention with S = T = 5: keys/values still come from context, not x",
                           [mha_call(16, 4, True, state3, x3b, context=ctx3b)], cross_same_length, seed=435))

    # 4. cross-attention with a padding mask (B, 1, 1, S): per-head F.scaled_dot_product_attention
    lengths = torch.tensor([7, 4])
    pad = (torch.arange(7)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)

    def cross_pad(j: Judge, state=state3, x=x3, ctx=ctx, pad=pad):
        got = j.tensor(shape=(2, 3, 16), dtype=dt)
        j.close(got, _per_head_sdpa_oracle(state, 4, x, context=ctx, mask=pad),
                oracle="Concat(F.scaled_dot_product_attention per head) W_O")

    cases.append(_mha_case("cross-attention with a padding mask (B, 1, 1, S), H = 4: matches "
                           "F.scaled_dot_product_attention head by head",
                           [mha_call(16, 4, True, state3, x3, context=ctx, mask=pad)], cross_pad, seed=425))

    # 5. causality: outputs at t < 4 unchanged when tokens 4, 5 change
    state5 = random_mha_state(428, 8, bias=True)
    x5 = _x(429, 1, 6, 8, dtype=dt)
    x5b = x5.clone()
    x5b[:, 4:] = _x(430, 1, 2, 8, dtype=dt)

    def causality(j: Judge):
        before = j.tensor(0, shape=(1, 6, 8), dtype=dt)
        after = j.tensor(1, shape=(1, 6, 8), dtype=dt)
        j.close(after[:, :4], before[:, :4], name="out[:, :4]", call=1,
                oracle="the output before tokens 4, 5 changed")
        j.require(not torch.allclose(after[:, 4:], before[:, 4:]),
                  "out[:, 4:] did not change when tokens 4, 5 changed", call=1)

    causal6 = torch.ones(6, 6, dtype=torch.bool).tril()
    cases.append(_mha_case("causal mask: outputs at t < 4 don't change when tokens 4, 5 change",
                           [mha_call(8, 2, True, state5, x5, mask=causal6),
                            mha_call(8, 2, True, state5, x5b, mask=causal6)], causality, seed=428))

    # 6. permutation equivariance without a mask
    perm = torch.tensor([3, 0, 4, 1, 2])
    state6 = random_mha_state(431, 8, bias=False)
    x6 = _x(432, 2, 5, 8, dtype=dt)

    def equivariant(j: Judge, perm=perm):
        out = j.tensor(0, shape=(2, 5, 8), dtype=dt)
        out_perm = j.tensor(1, shape=(2, 5, 8), dtype=dt)
        j.close(out_perm, out[:, perm], name="output for x[:, perm]", call=1,
                oracle="the output for x, permuted the same way")

    cases.append(_mha_case("no mask: permuting the tokens permutes the outputs the same way (no positions yet)",
                           [mha_call(8, 4, False, state6, x6), mha_call(8, 4, False, state6, x6[:, perm])],
                           equivariant, seed=431))

    # 7. a query that may attend no key: zero attention output, so o_proj's bias; never NaN
    state7 = random_mha_state(433, 8, bias=True)
    x7 = _x(434, 1, 3, 8, dtype=dt)
    rows = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])

    def empty_row(j: Judge, state=state7, x=x7, rows=rows):
        got = j.tensor(shape=(1, 3, 8), dtype=dt)
        j.require(not bool(torch.isnan(got).any()), "query 1 may attend no key, and the output holds NaN",
                  hint="use the nb01 scaled_dot_product_attention: a row with no allowed key gives zeros")
        expected = _per_head_sdpa_oracle(state, 2, x, mask=rows)
        expected[:, 1] = state["o_proj.bias"]  # o_proj(0) = its bias
        j.close(got, expected, oracle="expected (row 1: o_proj(0) = o_proj.bias)")

    cases.append(_mha_case("a query that may attend no key gives o_proj(0) = o_proj.bias, not NaN",
                           [mha_call(8, 2, True, state7, x7, mask=rows)], empty_row, seed=433))
    return cases


# ---------------------------------------------------------------------------------------------
# Visible cases: mha_from_torch
# ---------------------------------------------------------------------------------------------
def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    atol, rtol = tolerance(b.dtype)
    return torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)


def judge_from_torch(j: Judge, expected: torch.Tensor, oracle: str) -> None:
    """Judge call 0 (mha_from_torch's module) against ``expected``, or, when the learner's own
    MultiHeadAttention (call 1, same weights loaded by name) disagrees with ``expected``, against
    that module: the conversion is then judged on its own (see the module docstring)."""
    got = j.tensor(0, shape=tuple(expected.shape), dtype=expected.dtype)
    own = j.outcomes[1] if len(j.outcomes) > 1 else None
    if own is not None and own.kind == "tensor" and own.tensors[0].shape == expected.shape \
            and own.tensors[0].dtype == expected.dtype and not _same(own.tensors[0], expected):
        expected, oracle = own.tensors[0], "your MultiHeadAttention holding the same weights"
    j.close(got, expected, oracle=oracle)


def from_torch_judge(expected: Callable[[Judge], tuple[torch.Tensor, str]]) -> Callable[[Judge], None]:
    """The judge of an ``mha_from_torch`` case (calls from :func:`from_torch_calls`).

    ``expected(j)`` gives (expected output, name of the oracle). When the converted module
    raises what the learner's own MultiHeadAttention raises too, the feedback says so;
    other errors get the checks' error hints; outputs go to :func:`judge_from_torch`.
    """
    checked = with_error_hints(lambda j: judge_from_torch(j, *expected(j)), FROM_TORCH_ERRORS, calls=(0,),
                               load_hints=FROM_TORCH_LOAD_HINTS)

    def judge(j: Judge) -> None:
        mine, own = j.outcomes[0], j.outcomes[1]
        if mine.kind == "error" and own.kind == "error" and own.error_type == mine.error_type:
            j.fail(f"raised {mine.error_line()[:100]}",
                   "and your MultiHeadAttention raises the same with these weights loaded by name",
                   hint="make exercise 3 (MultiHeadAttention) pass first: the converted module is one")
        checked(j)

    return judge


def _from_torch_case(title: str, num_heads: int, torch_state, x, context=None, mask=None, *, seed: int) -> Case:
    def expected(j: Judge) -> tuple[torch.Tensor, str]:
        return (_torch_oracle(torch_state, num_heads, x, context, mask),
                "nn.MultiheadAttention" + ("(attn_mask=~mask)" if mask is not None else ""))

    return Case("mha_from_torch", title, from_torch_calls(num_heads, torch_state, x, context, mask),
                from_torch_judge(expected), seed=seed, mistakes=MISTAKES["mha_from_torch"])


def _from_torch_cases() -> list[Case]:
    dt = MODULE_DTYPE
    cases = []
    state = random_torch_mha_state(441, 16, bias=True)
    x = _x(442, 2, 5, 16, dtype=dt)
    cases.append(_from_torch_case(f"nn.MultiheadAttention(16, 4, bias=True) ({_dt(dt)}): same outputs",
                                  4, state, x, seed=441))
    state2 = random_torch_mha_state(443, 12, bias=False)
    x2 = _x(444, 1, 4, 12, dtype=dt)
    cases.append(_from_torch_case("bias=False (in_proj_bias and out_proj.bias are None), H = 6",
                                  6, state2, x2, seed=443))
    ctx = _x(445, 2, 6, 16, dtype=dt)
    x3 = x[:, :3]
    cases.append(_from_torch_case("cross-attention: module(x, context=c) equals torch_mha(x, c, c)",
                                  2, state, x3, context=ctx, seed=445))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    cases.append(_from_torch_case("with a mask: module(x, mask=m) equals torch_mha(x, x, x, attn_mask=~m)",
                                  8, state, x, mask=causal, seed=446))
    return cases


_BUILDERS = {
    "split_heads": _split_cases,
    "merge_heads": _merge_cases,
    "MultiHeadAttention": _mha_cases,
    "mha_from_torch": _from_torch_cases,
}


def visible_cases(exercise: str) -> list[Case]:
    """The cases a learner runs under exercise ``exercise`` (the grader runs them too)."""
    if exercise not in _BUILDERS:
        raise KeyError(f"notebook 02 has no exercise {exercise!r}; exercises: {', '.join(EXERCISES)}")
    return _BUILDERS[exercise]()


# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks(EXERCISES, lambda exercise: visible_cases(exercise),
                          "tfcourse.reference.nb02_multi_head_attention", "02_multi_head_attention.ipynb",
                          calls={"MultiHeadAttention": ("split_heads", "merge_heads"),
                                 "mha_from_torch": ("MultiHeadAttention",)})


def check_split_heads(split_heads) -> None:
    """Check ``split_heads(x, num_heads)``: (B, T, D) -> (B, H, T, Dh), ValueError if D % H != 0."""
    run_checks("split_heads", split_heads, visible_cases("split_heads"), notebook=NOTEBOOK)


def check_merge_heads(merge_heads) -> None:
    """Check ``merge_heads(x)``: (B, H, T, Dh) -> (B, T, H·Dh), the inverse of the split."""
    run_checks("merge_heads", merge_heads, visible_cases("merge_heads"), notebook=NOTEBOOK)


def check_MultiHeadAttention(MultiHeadAttention, part: str | None = None) -> None:  # the exercise's own name
    """Check the ``MultiHeadAttention(d_model, num_heads, bias=False)`` module against
    nn.MultiheadAttention, per-head F.scaled_dot_product_attention and properties.

    part: "core" (self-attention without a mask) or "cross_and_masks" (masks and
    cross-attention), the two test cells that score it; None checks both."""
    run_checks("MultiHeadAttention", MultiHeadAttention, visible_cases("MultiHeadAttention"), part=part,
               notebook=NOTEBOOK)


def check_mha_from_torch(mha_from_torch) -> None:
    """Check ``mha_from_torch(torch_mha)``: the returned module computes what torch_mha does."""
    defined = getattr(mha_from_torch, "__globals__", {}).get("MultiHeadAttention")
    run_checks("mha_from_torch", mha_from_torch, visible_cases("mha_from_torch"),
               also={"MultiHeadAttention": defined} if defined is not None else None, notebook=NOTEBOOK)


# ---------------------------------------------------------------------------------------------
# Optional challenge (★★★, 0 points): PackedMultiHeadAttention, one packed q/k/v projection
# ---------------------------------------------------------------------------------------------
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


def _packed_cases() -> list[Case]:
    cases = []
    dt = MODULE_DTYPE

    # 1. blocks, biases, causal mask: nn.MultiheadAttention with in_proj_weight = qkv_proj.weight
    state = random_packed_state(461, 16, 4, True, "blocks")
    x = _x(462, 2, 6, 16, dtype=dt)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()  # (T, T), True = may attend

    def blocks_causal(j: Judge, state=state, x=x, mask=causal):
        got = j.tensor(shape=(2, 6, 16), dtype=dt)
        j.close(got, _torch_oracle(packed_to_torch_state(state, 4, "blocks"), 4, x, mask=mask),
                oracle="nn.MultiheadAttention(attn_mask=~mask), in_proj_weight = qkv_proj.weight")

    cases.append(_packed_case(f"layout='blocks', bias=True, causal mask ({_dt(dt)}): matches nn.MultiheadAttention "
                              "holding qkv_proj.weight as its in_proj_weight",
                              [packed_call(16, 4, True, "blocks", state, x, causal)], blocks_causal, seed=461))

    # 2. the same weights in both layouts give the same outputs (D = 24, H = 4, Dh = 6)
    blocks2 = random_packed_state(463, 24, 4, True, "blocks")
    per_head2 = random_packed_state(463, 24, 4, True, "per_head")
    x2 = _x(464, 2, 5, 24, dtype=dt)

    def both_layouts(j: Judge, state=blocks2, x=x2):
        expected = _torch_oracle(packed_to_torch_state(state, 4, "blocks"), 4, x)
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
    x3 = _x(466, 2, 7, 16, dtype=torch.float32)
    pad = (torch.arange(7)[None, :] < torch.tensor([7, 3])[:, None])[:, None, None, :]  # (B, 1, 1, S)

    def per_head_pad(j: Judge, state=state3, x=x3, pad=pad):
        got = j.tensor(shape=(2, 7, 16), dtype=torch.float32)
        course = from_torch_state(packed_to_torch_state(state, 2, "per_head"))
        j.close(got, _per_head_sdpa_oracle(course, 2, x, mask=pad),
                oracle="Concat(F.scaled_dot_product_attention per head) W_O")

    cases.append(_packed_case("layout='per_head', bias=False, padding mask (B, 1, 1, S), float32",
                              [packed_call(16, 2, False, "per_head", state3, x3, pad)], per_head_pad, seed=465))

    # 4. a query that may attend no key: o_proj(0) = o_proj.bias, never NaN
    state4 = random_packed_state(467, 8, 2, True, "per_head")
    x4 = _x(468, 1, 3, 8, dtype=dt)
    rows = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])

    def empty_row(j: Judge, state=state4, x=x4, rows=rows):
        got = j.tensor(shape=(1, 3, 8), dtype=dt)
        j.require(not bool(torch.isnan(got).any()), "query 1 may attend no key, and the output holds NaN")
        course = from_torch_state(packed_to_torch_state(state, 2, "per_head"))
        expected = _per_head_sdpa_oracle(course, 2, x, mask=rows)
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


_BUILDERS["PackedMultiHeadAttention"] = _packed_cases


def check_PackedMultiHeadAttention(PackedMultiHeadAttention) -> None:  # the exercise's own name
    """Check ``PackedMultiHeadAttention(d_model, num_heads, bias=True, layout="blocks")`` (optional,
    0 points) against nn.MultiheadAttention and per-head F.scaled_dot_product_attention."""
    run_checks("PackedMultiHeadAttention", PackedMultiHeadAttention, visible_cases("PackedMultiHeadAttention"), notebook=NOTEBOOK)
