"""Notebook 05's catalogue of known wrong implementations, with the hint each one earns (the
hints' words are ``HINTS``, in hint_texts.py).

Every function has its exercise's signature (a class for the modules). A hint is shown only when
exactly one catalogued mistake reproduces the answer on every call of the failing case
(``Judge.mistake_hint``), so the visible cases are built to tell these apart: float64 inputs up
to |x| = 8 separate the exact GELU from its tanh form (they differ by up to 4.7e-4), random
weights separate the gate and up branches, Llama's real widths separate the roundings, top_k = 2
separates renormalised weights from raw ones and balanced routing separates Switch's N·K
normalisation from Hugging Face's N.

This module must not import the course's reference solutions (the grader's child imports the
checks package and cannot see them): the experts of the MoE mistakes are its own SwiGLU.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ..hints import Mistake
from .hint_texts import HINTS

__all__ = ["MISTAKES"]

_HALF = (torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# gelu(x, approximate="none")
# ---------------------------------------------------------------------------------------------
def _up(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _erf_form(h):
    return 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))


def _tanh_form(h):
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))


def _gelu(x, approximate, exact=_erf_form, tanh=_tanh_form, up=_up, cast=True):
    if approximate not in ("none", "tanh"):
        raise ValueError("approximate must be 'none' or 'tanh'")
    h = up(x)
    y = exact(h) if approximate == "none" else tanh(h)
    return y.to(x.dtype) if cast else y


def _gelu_tanh_always(x, approximate="none"):
    return _gelu(x, approximate, exact=_tanh_form)


def _gelu_erf_always(x, approximate="none"):
    return _gelu(x, approximate, tanh=_erf_form)


def _gelu_no_sqrt2(x, approximate="none"):
    return _gelu(x, approximate, exact=lambda h: 0.5 * h * (1.0 + torch.erf(h)))


def _gelu_no_half(x, approximate="none"):
    return _gelu(x, approximate, exact=lambda h: h * (1.0 + torch.erf(h / math.sqrt(2.0))))


def _gelu_quick(x, approximate="none"):
    return _gelu(x, approximate, exact=lambda h: h * torch.sigmoid(1.702 * h))


def _gelu_silu(x, approximate="none"):
    return _gelu(x, approximate, exact=lambda h: h * torch.sigmoid(h))


def _gelu_no_cube(x, approximate="none"):
    return _gelu(x, approximate, tanh=lambda h: 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * h)))


def _gelu_tanh_constant(x, approximate="none"):  # sqrt(2) / pi instead of sqrt(2 / pi)
    return _gelu(x, approximate, tanh=lambda h: 0.5 * h * (1.0 + torch.tanh(
        math.sqrt(2.0) / math.pi * (h + 0.044715 * h.pow(3)))))


def _gelu_float32(x, approximate="none"):
    return _gelu(x, approximate, up=lambda h: h.float())


def _gelu_float32_out(x, approximate="none"):
    return _gelu(x, approximate, cast=False)


# ---------------------------------------------------------------------------------------------
# FeedForward(d_model, d_ff, bias=True)
# ---------------------------------------------------------------------------------------------
class _FeedForward(nn.Module):
    """FeedForward with an activation switch (for hints only)."""

    def __init__(self, d_model: int, d_ff: int, bias: bool = True):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def act(self, h):
        return F.gelu(h)

    def forward(self, x):
        return self.down_proj(self.act(self.up_proj(x)))


def _ff_variant(name: str, act=None, forward=None) -> type[_FeedForward]:
    body = {}
    if act is not None:
        body["act"] = lambda self, h: act(h)
    if forward is not None:
        body["forward"] = forward
    return type(name, (_FeedForward,), body)


_FF_TANH = _ff_variant("TanhFeedForward", act=lambda h: F.gelu(h, approximate="tanh"))
_FF_RELU = _ff_variant("ReluFeedForward", act=F.relu)
_FF_SILU = _ff_variant("SiluFeedForward", act=F.silu)
_FF_NONE = _ff_variant("LinearFeedForward", act=lambda h: h)
_FF_AFTER = _ff_variant("GeluAfterFeedForward", forward=lambda self, x: F.gelu(self.down_proj(self.up_proj(x))))
_FF_BOTH = _ff_variant("GeluTwiceFeedForward",
                       forward=lambda self, x: F.gelu(self.down_proj(F.gelu(self.up_proj(x)))))


# ---------------------------------------------------------------------------------------------
# SwiGLU(d_model, d_ff)
# ---------------------------------------------------------------------------------------------
class _SwiGLU(nn.Module):
    """SwiGLU with a switch for how the two branches combine (for hints; correct by default)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def combine(self, gate, up):
        return F.silu(gate) * up

    def forward(self, x):
        return self.down_proj(self.combine(self.gate_proj(x), self.up_proj(x)))


def _swiglu_variant(name: str, combine) -> type[_SwiGLU]:
    return type(name, (_SwiGLU,), {"combine": lambda self, gate, up: combine(gate, up)})


_GLU = _swiglu_variant("GLU", lambda g, u: torch.sigmoid(g) * u)
_SILU_AFTER = _swiglu_variant("SiluAfterSwiGLU", lambda g, u: F.silu(g * u))
_SWAPPED = _swiglu_variant("SwappedSwiGLU", lambda g, u: F.silu(u) * g)
_GEGLU = _swiglu_variant("GeGLU", lambda g, u: F.gelu(g) * u)
_GEGLU_TANH = _swiglu_variant("GeGLUTanh", lambda g, u: F.gelu(g, approximate="tanh") * u)
_BILINEAR = _swiglu_variant("Bilinear", lambda g, u: g * u)
_SILU_BOTH = _swiglu_variant("SiluBothSwiGLU", lambda g, u: F.silu(g) * F.silu(u))


# ---------------------------------------------------------------------------------------------
# swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None)
# ---------------------------------------------------------------------------------------------
def _width(d_model, multiple_of=256, ffn_dim_multiplier=None, *, start=lambda d: int(2 * 4 * d / 3),
           rounding="up", multiplier="before", validate=True):
    if validate:
        for value in (d_model, multiple_of):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError("must be a positive int")
    hidden = start(d_model)
    if ffn_dim_multiplier is not None and multiplier == "before":
        hidden = int(ffn_dim_multiplier * hidden)
    if rounding == "up":
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
    elif rounding == "down":
        hidden = multiple_of * (hidden // multiple_of)
    elif rounding == "nearest":
        hidden = multiple_of * round(hidden / multiple_of)
    elif rounding == "fixed":
        hidden = 256 * ((hidden + 255) // 256)
    if ffn_dim_multiplier is not None and multiplier == "after":
        hidden = int(ffn_dim_multiplier * hidden)
    return hidden


def _width_multiplier_after_int(d_model, multiple_of=256, ffn_dim_multiplier=None):
    hidden = _width(d_model, multiple_of, None)
    return hidden if ffn_dim_multiplier is None else int(ffn_dim_multiplier * hidden)


def _width_multiplier_ignored(d_model, multiple_of=256, ffn_dim_multiplier=None):
    return _width(d_model, multiple_of, None)


# ---------------------------------------------------------------------------------------------
# MoE(d_model, d_ff, num_experts, top_k)
# ---------------------------------------------------------------------------------------------
class _MoE(nn.Module):
    """Mixtral-style MoE with switches that turn on one known mistake (for hints only)."""

    softmax_dim = -1
    largest = True
    renorm = True
    dense = False
    flat_logits = True
    use_softmax = True
    weighted = True
    parts = False
    detach = False
    topk_dim = -1

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError("need 1 <= top_k <= num_experts")
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(_SwiGLU(d_model, d_ff) for _ in range(num_experts))

    def _expert(self, e: int, h: torch.Tensor) -> torch.Tensor:
        expert = self.experts[e]
        if self.parts:  # the expert's layers called directly: its own forward never runs
            return expert.down_proj(F.silu(expert.gate_proj(h)) * expert.up_proj(h))
        return expert(h)

    def forward(self, x):
        h = x.reshape(-1, x.size(-1))
        logits = self.gate(h)
        routed = logits.detach() if self.detach else logits
        if self.use_softmax:
            probs = torch.softmax(routed.to(torch.promote_types(x.dtype, torch.float32)), dim=self.softmax_dim)
        else:
            probs = routed
        top, index = probs.topk(self.top_k, dim=self.topk_dim, largest=self.largest)
        if self.renorm:
            top = top / top.sum(dim=-1, keepdim=True)
        if not self.weighted:
            top = torch.ones_like(top)
        top = top.to(x.dtype)
        y = torch.zeros_like(h)
        for e in range(self.num_experts):
            token, slot = torch.where(index == e)
            if self.dense:
                w = torch.zeros(h.size(0), dtype=x.dtype, device=x.device)
                w[token] = top[token, slot]
                y = y + self._expert(e, h) * w[:, None]
            elif token.numel():
                y = y.index_add(0, token, self._expert(e, h[token]) * top[token, slot, None])
        logits_out = logits if self.flat_logits else logits.reshape(*x.shape[:-1], -1)
        return y.reshape(x.shape), logits_out


def _moe_variant(name: str, **flags) -> type[_MoE]:
    return type(name, (_MoE,), flags)


# ---------------------------------------------------------------------------------------------
# load_balancing_loss(router_logits, top_k)
# ---------------------------------------------------------------------------------------------
def _balance(router_logits, top_k, *, factor="E", norm="NK", f_kind="count", p_kind="softmax", total=True,
             topk_dim=-1):
    n, e = router_logits.shape
    probs = torch.softmax(router_logits.to(torch.promote_types(router_logits.dtype, torch.float32)), dim=-1)
    index = probs.topk(top_k, dim=-1).indices
    if topk_dim == 0:  # the top K tokens of each expert: (K, E) indices of tokens
        index = probs.topk(top_k, dim=0).indices
    if f_kind == "count":
        f = torch.bincount(index.reshape(-1), minlength=e).to(probs.dtype)
    elif f_kind == "straight":  # straight-through: the counts' value, the probabilities' gradient
        mask = F.one_hot(index, e).sum(1).to(probs.dtype)  # (N, E)
        f = (mask + probs - probs.detach()).sum(0)
    elif f_kind == "ratio":  # the counts weighted by p / p.detach(): the value of a count, a gradient
        mask = F.one_hot(index, e).sum(1).to(probs.dtype)  # (N, E)
        f = (mask * probs / probs.detach()).sum(0)
    elif f_kind == "top1":
        f = torch.bincount(index[:, 0], minlength=e).to(probs.dtype) * top_k
    else:  # soft: the mean probability, times N·K so the division below gives P
        f = probs.mean(0) * n * top_k
    f = f / (n * top_k if norm == "NK" else n)
    if p_kind == "softmax":
        P = probs.mean(0)
    elif p_kind == "logits":
        P = router_logits.to(probs.dtype).mean(0)
    elif p_kind == "kept":  # only the top-K probabilities, the others as 0
        P = torch.zeros_like(probs).scatter(1, index, probs.gather(1, index)).mean(0)
    else:  # softmax over the tokens
        P = torch.softmax(router_logits.to(probs.dtype), dim=0).mean(0)
    loss = f * P if not total else (f * P).sum()
    return ((e if factor == "E" else 1) * loss).to(router_logits.dtype)


# ---------------------------------------------------------------------------------------------
# route_with_capacity(router_logits, top_k, capacity)
# ---------------------------------------------------------------------------------------------
def _route(router_logits, top_k, capacity, *, order="slot", first=1, renorm="before", largest=True):
    if capacity < 0:
        raise ValueError("capacity must be >= 0")
    e = router_logits.size(-1)
    probs = torch.softmax(router_logits.to(torch.promote_types(router_logits.dtype, torch.float32)), dim=-1)
    weights, index = probs.topk(top_k, dim=-1, largest=True)
    if not largest:  # the same K experts, listed in ascending probability
        weights, index = weights.flip(-1), index.flip(-1)
    if renorm != "never":
        weights = weights / weights.sum(dim=-1, keepdim=True)
    flat = index.T.reshape(-1) if order == "slot" else index.reshape(-1)
    onehot = F.one_hot(flat, e)
    position = (onehot.cumsum(0) * onehot).sum(-1)
    kept = position <= capacity - (1 - first)
    kept = kept.reshape(top_k, -1).T if order == "slot" else kept.reshape(-1, top_k)
    if renorm == "after":  # dropped slots zeroed, the kept ones renormalised again
        weights = weights * kept
        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    elif renorm == "zeroed":
        weights = weights * kept
    return index, weights.to(router_logits.dtype), kept


MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "gelu": (
        Mistake("tanh form for approximate='none'", HINTS["tanh_for_exact"], _gelu_tanh_always),
        Mistake("erf form for approximate='tanh'", HINTS["erf_for_tanh"], _gelu_erf_always),
        Mistake("erf(x) without /√2", HINTS["no_sqrt2"], _gelu_no_sqrt2),
        Mistake("no 0.5", HINTS["no_half"], _gelu_no_half),
        Mistake("x·σ(1.702x)", HINTS["quick_gelu"], _gelu_quick),
        Mistake("SiLU", HINTS["silu_not_gelu"], _gelu_silu),
        Mistake("tanh without the cube", HINTS["no_cube"], _gelu_no_cube),
        Mistake("√2/π inside tanh", HINTS["tanh_constant"], _gelu_tanh_constant),
        Mistake("always float32", HINTS["float64_down"], _gelu_float32),
    ),
    "FeedForward": (
        Mistake("tanh GELU", HINTS["ff_tanh"], _FF_TANH),
        Mistake("ReLU", HINTS["ff_relu"], _FF_RELU),
        Mistake("SiLU", HINTS["ff_silu"], _FF_SILU),
        Mistake("no activation", HINTS["ff_no_act"], _FF_NONE),
        Mistake("GELU after down_proj", HINTS["ff_act_after"], _FF_AFTER),
        Mistake("GELU twice", HINTS["ff_act_both"], _FF_BOTH),
    ),
    "SwiGLU": (
        Mistake("sigmoid gate (GLU)", HINTS["glu_sigmoid"], _GLU),
        Mistake("SiLU after the product", HINTS["silu_after"], _SILU_AFTER),
        Mistake("gate and up swapped", HINTS["gate_up_swapped"], _SWAPPED),
        Mistake("GELU gate", HINTS["geglu"], _GEGLU),
        Mistake("tanh-GELU gate", HINTS["geglu"], _GEGLU_TANH),
        Mistake("no activation", HINTS["bilinear"], _BILINEAR),
        Mistake("SiLU on both branches", HINTS["silu_both"], _SILU_BOTH),
    ),
    "swiglu_hidden_dim": (
        Mistake("rounded down", HINTS["round_down"], partial(_width, rounding="down")),
        Mistake("rounded to the nearest", HINTS["round_down"], partial(_width, rounding="nearest")),
        Mistake("multiplier after rounding", HINTS["multiplier_after"], partial(_width, multiplier="after")),
        Mistake("multiplier after rounding, int", HINTS["multiplier_after"], _width_multiplier_after_int),
        Mistake("multiplier ignored", HINTS["multiplier_ignored"], _width_multiplier_ignored),
        Mistake("4·D without 2/3", HINTS["no_two_thirds"], partial(_width, start=lambda d: 4 * d)),
        Mistake("2/3·D without 4", HINTS["no_four"], partial(_width, start=lambda d: int(2 * d / 3))),
        Mistake("multiple of 256 always", HINTS["multiple_ignored"], partial(_width, rounding="fixed")),
    ),
    "MoE": (
        Mistake("top-K weights not renormalised", HINTS["no_renorm"], _moe_variant("NoRenormMoE", renorm=False)),
        Mistake("top-K of the smallest", HINTS["smallest"], _moe_variant("SmallestMoE", largest=False)),
        Mistake("softmax over the tokens", HINTS["softmax_tokens"], _moe_variant("TokenSoftmaxMoE", softmax_dim=0)),
        Mistake("router logits (B, T, E)", HINTS["logits_btE"], _moe_variant("BTEMoE", flat_logits=False)),
        Mistake("every expert on every token", HINTS["dense"], _moe_variant("DenseMoE", dense=True)),
        Mistake("no softmax", HINTS["no_softmax"], _moe_variant("NoSoftmaxMoE", use_softmax=False)),
        Mistake("expert outputs not weighted", HINTS["unweighted"], _moe_variant("UnweightedMoE", weighted=False)),
        Mistake("expert layers called directly", HINTS["expert_parts"], _moe_variant("PartsMoE", parts=True)),
        Mistake("router detached", HINTS["router_detached"], _moe_variant("DetachedMoE", detach=True)),
        Mistake("top-K over the tokens", HINTS["topk_tokens"], _moe_variant("TokenTopkMoE", topk_dim=0)),
    ),
    "load_balancing_loss": (
        Mistake("no factor E", HINTS["no_E"], partial(_balance, factor="1")),
        Mistake("HF's N normalisation", HINTS["hf_norm"], partial(_balance, norm="N")),
        Mistake("f from the probabilities", HINTS["soft_f"], partial(_balance, f_kind="soft")),
        Mistake("only the first slot counted", HINTS["top1_f"], partial(_balance, f_kind="top1")),
        Mistake("P from the logits", HINTS["P_logits"], partial(_balance, p_kind="logits")),
        Mistake("softmax over the tokens", HINTS["P_tokens"], partial(_balance, p_kind="tokens")),
        Mistake("per-expert vector", HINTS["per_expert"], partial(_balance, total=False)),
        Mistake("straight-through f", HINTS["f_gradient"], partial(_balance, f_kind="straight")),
        Mistake("f = counts · p / p.detach()", HINTS["f_gradient"], partial(_balance, f_kind="ratio")),
        Mistake("P of the kept probabilities", HINTS["P_kept"], partial(_balance, p_kind="kept")),
        Mistake("top-K over the tokens", HINTS["topk_tokens_loss"], partial(_balance, topk_dim=0)),
    ),
    "route_with_capacity": (
        Mistake("token by token", HINTS["token_major"], partial(_route, order="token")),
        Mistake("one fewer kept", HINTS["off_by_one"], partial(_route, first=0)),
        Mistake("renormalised after dropping", HINTS["renorm_after"], partial(_route, renorm="after")),
        Mistake("dropped weights zeroed", HINTS["renorm_after"], partial(_route, renorm="zeroed")),
        Mistake("not renormalised", HINTS["no_renorm"], partial(_route, renorm="never")),
        Mistake("ascending order", HINTS["ascending"], partial(_route, largest=False)),
    ),
}
