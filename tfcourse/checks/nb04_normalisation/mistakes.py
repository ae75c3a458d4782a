"""Notebook 04's catalogue of known wrong implementations, with the hint each one earns.

Every function has its exercise's signature (a class for ``RMSNorm``). A hint is shown only when
exactly one catalogued mistake reproduces the answer on every call of the failing case
(``Judge.mistake_hint``), so the visible cases are built to tell these apart: tiny magnitudes
(±1e-3) make eps matter, a non-default eps shows a hard-coded one, fp16 values of a few hundred
overflow when squared in fp16, (B, T, D) inputs show statistics taken over more than D.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from ..hints import Mistake

__all__ = ["HINTS", "MISTAKES"]

_HALF = (torch.float16, torch.bfloat16)


def _up(x: torch.Tensor) -> torch.Tensor:
    """x in the dtype the statistics need: float32 for half input, x's own dtype otherwise."""
    return x.float() if x.dtype in _HALF else x


HINTS = {
    "unbiased": "LayerNorm divides the squared deviations by D (biased variance): x.var(-1, "
                "unbiased=False) or ((x - mean) ** 2).mean(-1); x.var(-1) alone divides by D - 1",
    "eps_outside": "eps goes inside the square root: * torch.rsqrt(var + eps) (LayerNorm) or "
                   "* torch.rsqrt(mean(x ** 2) + eps) (RMSNorm), not / (sqrt(...) + eps)",
    "no_eps": "add eps to the variance before the square root: without it, inputs whose spread is "
              "close to eps (or zero) blow up",
    "rms_no_eps": "add eps to the mean of the squares before the square root: without it, inputs "
                  "whose mean square is close to eps (or zero) blow up",
    "eps_ignored": "use the eps argument you are given: a hard-coded 1e-5 / 1e-6 ignores eps=...",
    "half_stats": "compute the statistics in float32 for float16/bfloat16 input (h = x.float()): "
                  "squares of values above 256 overflow float16 to inf",
    "float32_out": "the statistics are float32, the result is not: cast it back with .to(x.dtype) "
                   "(or .type_as(x)) before returning",
    "float64_down": "upcast half precision only: .float() turns float64 input into float32; keep "
                    "float64 as it is (e.g. h = x.float() if x.dtype in (torch.float16, "
                    "torch.bfloat16) else x)",
    "wrong_axes": "statistics over the last axis only (dim=-1, keepdim=True): each token is "
                  "normalised on its own D features, never together with other tokens",
    "no_affine": "finish with * weight + bias (LayerNorm's learned scale and shift, one per feature)",
    "rms_mean": "RMSNorm does not subtract the mean: x / sqrt(mean(x ** 2) + eps) * weight",
    "gemma": "multiply by weight itself: (1 + weight) is Gemma's variant (its weight starts at 0); "
             "here weight starts at ones and is used as is",
    "no_sqrt": "divide by the root mean square: sqrt(mean(x ** 2) + eps), not by the mean square itself",
    "l2_norm": "RMS = sqrt(mean(x ** 2)), the L2 norm divided by sqrt(D): x.norm(dim=-1) alone is "
               "sqrt(D) times too large",
    "rms_no_weight": "finish with * weight (RMSNorm's learned scale, one per feature)",
    "weight_zeros": "initialise weight to ones (nn.Parameter(torch.ones(dim))): a fresh RMSNorm is "
                    "the plain normalisation; zeros give an output of zeros",
    "norm_twice": "call norm exactly once: norm(norm(...)) applies the norm's weight (and bias) twice",
    "pre_norm_both": "normalise only the sublayer's input: x + sublayer(norm(x)); a second norm on the "
                     "sublayer's output calls norm twice and is not pre-norm",
    "residual_normed": "the residual stream carries x itself: x + sublayer(norm(x)), not "
                       "norm(x) + sublayer(norm(x))",
    "pre_is_post": "pre-norm normalises the sublayer's input: x + sublayer(norm(x)); norm(x + "
                   "sublayer(x)) is post-norm",
    "no_residual": "add the residual: the input x is added to the sublayer's output",
    "norm_after_sublayer": "pre-norm normalises the sublayer's input, not its output: "
                           "x + sublayer(norm(x))",
    "final_norm": "only the sublayer's input is normalised: x + sublayer(norm(x)), with no norm "
                  "around the sum",
    "post_sublayer_only": "post-norm normalises the sum, residual included: norm(x + sublayer(x)), "
                          "not x + norm(sublayer(x))",
    "post_is_pre": "post-norm normalises after the residual add: norm(x + sublayer(x)); "
                   "x + sublayer(norm(x)) is pre-norm",
    "post_norm_before_add": "post-norm normalises after the residual add: norm(x + sublayer(x)); "
                            "norm(x) + sublayer(norm(x)) normalises before it and leaves the sum "
                            "unnormalised",
    "post_normed_input": "the sublayer reads x itself in post-norm: norm(x + sublayer(x)); the "
                         "only norm is the one around the sum",
    "bw_rms_constant": "rms depends on x too: grad_x = (g - x̂ · mean(g · x̂)) / rms with g = "
                       "grad_out · weight; dropping the second term treats rms as a constant",
    "bw_no_weight_in_gx": "the output is x̂ · weight, so the gradient reaching x̂ is grad_out · weight",
    "bw_weight_unsummed": "weight is shared by every token: sum grad_weight (grad_out · x̂) over every "
                          "axis but the last, e.g. .reshape(-1, D).sum(0), so it has weight's shape (D,)",
    "bw_sum_not_mean": "the correction term averages over the D features: mean(g · x̂, -1), "
                       "not sum(g · x̂, -1)",
}


# ---------------------------------------------------------------------------------------------
# layer_norm(x, weight, bias, eps=1e-5)
# ---------------------------------------------------------------------------------------------
def _ln(x, weight, bias, eps=1e-5, *, dims=(-1,), unbiased=False, eps_mode="inside", stats="up",
        affine=True, cast=True):
    h = _up(x) if stats == "up" else (x.float() if stats == "float" else x)
    mu = h.mean(dims, keepdim=True)
    var = h.var(dims, keepdim=True, unbiased=unbiased)
    if eps_mode == "inside":
        y = (h - mu) / torch.sqrt(var + eps)
    elif eps_mode == "outside":
        y = (h - mu) / (torch.sqrt(var) + eps)
    elif eps_mode == "none":
        y = (h - mu) / torch.sqrt(var)
    else:  # hard-coded 1e-5
        y = (h - mu) / torch.sqrt(var + 1e-5)
    if affine:
        y = y * weight + bias
    return y.to(x.dtype) if cast else y


def _ln_td(x, weight, bias, eps=1e-5):
    return _ln(x, weight, bias, eps, dims=(-2, -1) if x.dim() >= 2 else (-1,))


def _ln_all(x, weight, bias, eps=1e-5):
    return _ln(x, weight, bias, eps, dims=tuple(range(x.dim())))


def _ln_no_bias(x, weight, bias, eps=1e-5):
    return _ln(x, weight, torch.zeros_like(bias), eps)


# ---------------------------------------------------------------------------------------------
# rms_norm(x, weight, eps=1e-6)
# ---------------------------------------------------------------------------------------------
def _rms(x, weight, eps=1e-6, *, dims=(-1,), center=False, eps_mode="inside", stats="up", scale="w",
         root="sqrt", cast=True):
    h = _up(x) if stats == "up" else (x.float() if stats == "float" else x)
    if center:
        h = h - h.mean(dims, keepdim=True)
    ms = h.pow(2).mean(dims, keepdim=True)
    if root == "l2":
        y = h / torch.sqrt(h.pow(2).sum(dims, keepdim=True) + eps)
    elif root == "none":
        y = h / (ms + eps)
    elif eps_mode == "inside":
        y = h * torch.rsqrt(ms + eps)
    elif eps_mode == "outside":
        y = h / (torch.sqrt(ms) + eps)
    elif eps_mode == "none":
        y = h / torch.sqrt(ms)
    else:
        y = h * torch.rsqrt(ms + 1e-6)
    if scale == "w":
        y = y * weight
    elif scale == "1+w":
        y = y * (1 + weight)
    return y.to(x.dtype) if cast else y


def _rms_td(x, weight, eps=1e-6):
    return _rms(x, weight, eps, dims=(-2, -1) if x.dim() >= 2 else (-1,))


# ---------------------------------------------------------------------------------------------
# RMSNorm(dim, eps=1e-6)
# ---------------------------------------------------------------------------------------------
class _RMSNorm(nn.Module):
    """RMSNorm with switches that turn on one known mistake (for hints only)."""

    init = 1.0
    fn = staticmethod(lambda x, weight, eps: _rms(x, weight, eps))
    use_eps = True

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.full((dim,), float(self.init)))
        self.eps = eps

    def forward(self, x):
        return self.fn(x, self.weight, self.eps if self.use_eps else 1e-6)


def _rmsnorm_variant(name: str, **flags) -> type[_RMSNorm]:
    return type(name, (_RMSNorm,), flags)


# ---------------------------------------------------------------------------------------------
# pre_norm_residual(x, sublayer, norm) and post_norm_residual(x, sublayer, norm)
# ---------------------------------------------------------------------------------------------
def _pre_residual_normed(x, sublayer, norm):
    h = norm(x)
    return h + sublayer(h)


def _pre_is_post(x, sublayer, norm):
    return norm(x + sublayer(x))


def _pre_no_residual(x, sublayer, norm):
    return sublayer(norm(x))


def _pre_norm_after(x, sublayer, norm):
    return x + norm(sublayer(x))


def _pre_final_norm(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def _pre_norm_twice(x, sublayer, norm):
    return x + sublayer(norm(norm(x)))


def _pre_norm_both(x, sublayer, norm):
    return x + norm(sublayer(norm(x)))


def _post_norm_twice(x, sublayer, norm):
    return norm(norm(x + sublayer(x)))


def _post_sublayer_only(x, sublayer, norm):
    return x + norm(sublayer(x))


def _post_is_pre(x, sublayer, norm):
    return x + sublayer(norm(x))


def _post_no_residual(x, sublayer, norm):
    return norm(sublayer(x))


def _post_normed_input(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def _post_residual_normed(x, sublayer, norm):
    h = norm(x)
    return norm(h + sublayer(h))


def _post_norm_before_add(x, sublayer, norm):
    h = norm(x)
    return h + sublayer(h)


# ---------------------------------------------------------------------------------------------
# rms_norm_backward(grad_out, x, weight, eps=1e-6) -> (grad_x, grad_weight)
# ---------------------------------------------------------------------------------------------
def _bw(grad_out, x, weight, eps=1e-6, *, term=True, weight_in_gx=True, summed=True, reduce="mean"):
    """summed: True (over every axis but the last), False, or the axes summed over instead."""
    d = x.size(-1)
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    xhat = x * r
    gw = grad_out * xhat
    if summed is True:
        grad_weight = gw.reshape(-1, d).sum(0)
    else:
        grad_weight = gw.sum(summed) if summed else gw
    g = grad_out * weight if weight_in_gx else grad_out
    if term:
        inner = (g * xhat).mean(-1, keepdim=True) if reduce == "mean" else (g * xhat).sum(-1, keepdim=True)
        grad_x = r * (g - xhat * inner)
    else:
        grad_x = r * g
    return grad_x, grad_weight


def _bw_sum_first_two(grad_out, x, weight, eps=1e-6):
    return _bw(grad_out, x, weight, eps, summed=(0, 1) if x.dim() >= 2 else (0,))


MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "layer_norm": (
        Mistake("unbiased variance", HINTS["unbiased"], partial(_ln, unbiased=True)),
        Mistake("eps outside the root", HINTS["eps_outside"], partial(_ln, eps_mode="outside")),
        Mistake("eps forgotten", HINTS["no_eps"], partial(_ln, eps_mode="none")),
        Mistake("eps hard-coded", HINTS["eps_ignored"], partial(_ln, eps_mode="fixed")),
        Mistake("statistics in half", HINTS["half_stats"], partial(_ln, stats="input")),
        Mistake("statistics over T and D", HINTS["wrong_axes"], _ln_td),
        Mistake("statistics over everything", HINTS["wrong_axes"], _ln_all),
        Mistake("no weight and bias", HINTS["no_affine"], partial(_ln, affine=False)),
        Mistake("no bias", HINTS["no_affine"], _ln_no_bias),
        Mistake("statistics over axis 0", HINTS["wrong_axes"], partial(_ln, dims=(0,))),
        Mistake("statistics over axis 1", HINTS["wrong_axes"], partial(_ln, dims=(1,))),
    ),
    "rms_norm": (
        Mistake("mean subtracted", HINTS["rms_mean"], partial(_rms, center=True)),
        Mistake("eps outside the root", HINTS["eps_outside"], partial(_rms, eps_mode="outside")),
        Mistake("eps forgotten", HINTS["rms_no_eps"], partial(_rms, eps_mode="none")),
        Mistake("eps hard-coded", HINTS["eps_ignored"], partial(_rms, eps_mode="fixed")),
        Mistake("squares in half", HINTS["half_stats"], partial(_rms, stats="input")),
        Mistake("(1 + w)", HINTS["gemma"], partial(_rms, scale="1+w")),
        Mistake("statistics over T and D", HINTS["wrong_axes"], _rms_td),
        Mistake("statistics over axis 0", HINTS["wrong_axes"], partial(_rms, dims=(0,))),
        Mistake("statistics over axis 1", HINTS["wrong_axes"], partial(_rms, dims=(1,))),
        Mistake("no square root", HINTS["no_sqrt"], partial(_rms, root="none")),
        Mistake("L2 norm", HINTS["l2_norm"], partial(_rms, root="l2")),
        Mistake("no weight", HINTS["rms_no_weight"], partial(_rms, scale="none")),
    ),
    "RMSNorm": (
        Mistake("weight zeros", HINTS["weight_zeros"], _rmsnorm_variant("ZerosRMSNorm", init=0.0)),
        Mistake("(1 + w)", HINTS["gemma"], _rmsnorm_variant(
            "GemmaRMSNorm", fn=staticmethod(lambda x, w, eps: _rms(x, w, eps, scale="1+w")))),
        Mistake("(1 + w), zeros", HINTS["gemma"], _rmsnorm_variant(
            "GemmaZerosRMSNorm", init=0.0, fn=staticmethod(lambda x, w, eps: _rms(x, w, eps, scale="1+w")))),
        Mistake("eps not used", HINTS["eps_ignored"], _rmsnorm_variant("EpsRMSNorm", use_eps=False)),
        Mistake("squares in half", HINTS["half_stats"], _rmsnorm_variant(
            "HalfRMSNorm", fn=staticmethod(lambda x, w, eps: _rms(x, w, eps, stats="input")))),
        Mistake("mean subtracted", HINTS["rms_mean"], _rmsnorm_variant(
            "MeanRMSNorm", fn=staticmethod(lambda x, w, eps: _rms(x, w, eps, center=True)))),
    ),
    "pre_norm_residual": (
        Mistake("residual from norm(x)", HINTS["residual_normed"], _pre_residual_normed),
        Mistake("post-norm", HINTS["pre_is_post"], _pre_is_post),
        Mistake("no residual", HINTS["no_residual"], _pre_no_residual),
        Mistake("norm on the output", HINTS["norm_after_sublayer"], _pre_norm_after),
        Mistake("norm around the sum too", HINTS["final_norm"], _pre_final_norm),
        Mistake("norm applied twice", HINTS["norm_twice"], _pre_norm_twice),
        Mistake("norm on the input and the output", HINTS["pre_norm_both"], _pre_norm_both),
    ),
    "post_norm_residual": (
        Mistake("norm on the sublayer only", HINTS["post_sublayer_only"], _post_sublayer_only),
        Mistake("pre-norm", HINTS["post_is_pre"], _post_is_pre),
        Mistake("no residual", HINTS["no_residual"], _post_no_residual),
        Mistake("sublayer reads norm(x)", HINTS["post_normed_input"], _post_normed_input),
        Mistake("residual from norm(x)", HINTS["post_normed_input"], _post_residual_normed),
        Mistake("norm before the add", HINTS["post_norm_before_add"], _post_norm_before_add),
        Mistake("norm applied twice", HINTS["norm_twice"], _post_norm_twice),
    ),
    "rms_norm_backward": (
        Mistake("rms as a constant", HINTS["bw_rms_constant"], partial(_bw, term=False)),
        Mistake("weight missing in grad_x", HINTS["bw_no_weight_in_gx"], partial(_bw, weight_in_gx=False)),
        Mistake("grad_weight not summed", HINTS["bw_weight_unsummed"], partial(_bw, summed=False)),
        Mistake("grad_weight summed over axis 0 only", HINTS["bw_weight_unsummed"], partial(_bw, summed=(0,))),
        Mistake("grad_weight summed over axes 0 and 1 only", HINTS["bw_weight_unsummed"], _bw_sum_first_two),
        Mistake("grad_weight summed over the last axis", HINTS["bw_weight_unsummed"], partial(_bw, summed=(-1,))),
        Mistake("sum instead of mean", HINTS["bw_sum_not_mean"], partial(_bw, reduce="sum")),
    ),
}
