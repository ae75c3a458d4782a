"""Notebook 01's catalogue of known wrong implementations: each function or class has the
exercise's own signature, and ``MISTAKES`` gives the hint the feedback shows when an answer behaves
like one of them (:meth:`tfcourse.checks.case.Judge.mistake_hint`).
"""

from __future__ import annotations

import math
from functools import partial

import torch

from ..hints import Mistake

__all__ = ["MISTAKES", "NEG_INF", "sdpa_variant"]

NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# The catalogue of known wrong implementations (hints). Each has the exercise's signature.
# ---------------------------------------------------------------------------------------------
def _softmax_no_shift(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_dim0(x, dim=-1):
    return torch.nan_to_num(torch.softmax(x, dim=0), nan=0.0)


def _softmax_last_axis(x, dim=-1):
    return torch.nan_to_num(torch.softmax(x, dim=-1), nan=0.0)  # right but for `dim`


def _softmax_nan_rows(x, dim=-1):
    return torch.softmax(x, dim=dim)  # an all -inf slice gives 0/0 = nan


def _softmax_global_sum(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum()


def _softmax_unnormalised(x, dim=-1):
    return torch.exp(x - x.amax(dim=dim, keepdim=True))


def _zero_empty(e, total):
    return torch.where(total > 0, e / total, torch.zeros_like(e))


def _softmax_negative_dim_last(x, dim=-1):
    dim = x.dim() - 1 if dim < 0 else dim  # every negative dim read as the last axis
    return torch.nan_to_num(torch.softmax(x, dim=dim), nan=0.0)


def _softmax_clamped_inputs(x, dim=-1):
    return torch.softmax(x.clamp(min=-1e9), dim=dim)  # an all -inf slice becomes uniform


def _softmax_global_shift(x, dim=-1):
    e = torch.exp(x - x.max())  # one max for the whole tensor
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_global_shift_guarded(x, dim=-1):
    e = torch.exp(x - x.max())
    return _zero_empty(e, e.sum(dim=dim, keepdim=True))


def _softmax_clamped_shift(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).clamp(min=0))  # max(0, slice max)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_clamped_shift_guarded(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).clamp(min=0))
    return _zero_empty(e, e.sum(dim=dim, keepdim=True))


def _jac_elementwise(p):
    return torch.diag(p) - p * p


def _jac_diagonal_only(p):
    return torch.diag(p * (1 - p))


def _jac_sign_flipped(p):
    return torch.outer(p, p) - torch.diag(p)


def _jac_no_diag(p):
    return -torch.outer(p, p)


def _jac_outer_one_minus(p):
    return torch.outer(p, 1 - p)


def _jac_vector(p):
    return p * (1 - p)


def _jac_of_softmax_of_p(p):
    s = torch.softmax(p, dim=0)  # p taken for logits
    return torch.diag(s) - torch.outer(s, s)


def sdpa_variant(q, k, v, mask=None, *, scale=None, softmax_dim=-1, fill=NEG_INF, invert=False, zero_rows=True):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        allowed = ~mask if invert else mask
        scores = torch.where(allowed, scores, torch.full_like(scores, fill))
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask is not None and zero_rows:
        allowed = ~mask if invert else mask
        weights = torch.where(allowed.any(-1, keepdim=True), weights, torch.zeros_like(weights))
    return weights @ v, weights


def _sdpa_no_scale(q, k, v, mask=None):
    return sdpa_variant(q, k, v, mask, scale=1.0)


def _sdpa_scale_by_dh(q, k, v, mask=None):
    return sdpa_variant(q, k, v, mask, scale=1 / q.size(-1))


def _sdpa_scale_by_width(q, k, v, mask=None):
    # dividing by sqrt(D) = sqrt(H * Dh) instead of sqrt(Dh)
    width = q.size(-1) * (q.size(-3) if q.dim() >= 3 else 1)
    return sdpa_variant(q, k, v, mask, scale=1 / math.sqrt(width))


def _sdpa_wrong_axis(q, k, v, mask=None):
    return sdpa_variant(q, k, v, mask, softmax_dim=-2, zero_rows=False)


def _sdpa_inverted_mask(q, k, v, mask=None):
    return sdpa_variant(q, k, v, mask, invert=True)


def _sdpa_fill_zero(q, k, v, mask=None):
    return sdpa_variant(q, k, v, mask, fill=0.0)


def _sdpa_nan_rows(q, k, v, mask=None):
    return sdpa_variant(q, k, v, mask, zero_rows=False)


def _sdpa_finite_fill(q, k, v, mask=None):
    return sdpa_variant(q, k, v, mask, fill=-1e9, zero_rows=False)


def _sdpa_mask_after_softmax(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # zeroed, not renormalised
    return weights @ v, weights


def _causal_top_left(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril()


def _causal_inverted(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    return ~torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(t_k - t_q)


def _causal_strict(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(t_k - t_q - 1)


def _causal_transposed(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_k, t_q, dtype=torch.bool, device=device).triu(t_q - t_k)


def _padding_inverted(lengths, t_k):
    return (torch.arange(t_k)[None, :] >= lengths[:, None])[:, None, None, :]


def _padding_flat(lengths, t_k):
    return torch.arange(t_k)[None, :] < lengths[:, None]


def _padding_off_by_one(lengths, t_k):
    return (torch.arange(t_k)[None, :] <= lengths[:, None])[:, None, None, :]


def _padding_left(lengths, t_k):
    return (torch.arange(t_k)[None, :] >= (t_k - lengths)[:, None])[:, None, None, :]


def _padding_width_max(lengths, t_k):
    return (torch.arange(int(lengths.max()))[None, :] < lengths[:, None])[:, None, None, :]


def _padding_query_axis(lengths, t_k):
    return (torch.arange(t_k)[None, :] < lengths[:, None])[:, None, :, None]


_HINT_SHIFT = ("shift each slice by its own max along `dim` (x.amax(dim, keepdim=True)), not by one max of "
               "the whole tensor or by max(0, slice max): a slice far below the shift underflows to 0")


MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "softmax": (
        Mistake("nan rows", "an all -inf slice gives 0/0 = nan: return zeros there "
                "(the max of that slice is -inf; don't subtract it)", _softmax_nan_rows),
        Mistake("global sum", "normalise each slice along `dim` (sum with keepdim=True), not the whole tensor",
                _softmax_global_sum),
        Mistake("unnormalised", "after exp, divide by the sum along `dim` so each slice sums to 1",
                _softmax_unnormalised),
        Mistake("ignores dim", "use the `dim` argument, not a hard-coded -1", _softmax_last_axis),
        Mistake("dim 0", "the softmax is taken along `dim`; this looks like axis 0", _softmax_dim0),
        Mistake("negative dim as the last axis", "a negative `dim` counts from the end: dim=-2 is the axis "
                "x.dim() - 2, not the last one (x.amax(dim=dim, keepdim=True) handles any dim)",
                _softmax_negative_dim_last),
        Mistake("no max shift", "exp(1000) overflows to inf: subtract the max along `dim` before exp",
                _softmax_no_shift),
        Mistake("-inf clamped to a finite number", "an all -inf slice must give zeros: clamping -inf to a "
                "finite number makes that slice uniform", _softmax_clamped_inputs),
        Mistake("global max shift", _HINT_SHIFT, _softmax_global_shift),
        Mistake("global max shift, empty slices zeroed", _HINT_SHIFT, _softmax_global_shift_guarded),
        Mistake("shift by max(0, slice max)", _HINT_SHIFT, _softmax_clamped_shift),
        Mistake("shift by max(0, slice max), empty slices zeroed", _HINT_SHIFT, _softmax_clamped_shift_guarded),
    ),
    "softmax_jacobian": (
        Mistake("elementwise", "p pᵀ is an outer product (N, N): torch.outer(p, p), not p * p",
                _jac_elementwise),
        Mistake("diagonal only", "off-diagonal entries are -p_i p_j, not 0", _jac_diagonal_only),
        Mistake("sign", "the sign is flipped: J = diag(p) - p pᵀ", _jac_sign_flipped),
        Mistake("no diagonal term", "add diag(p): J = diag(p) - p pᵀ", _jac_no_diag),
        Mistake("outer(p, 1-p)", "p_i(1-p_i) holds on the diagonal only; off-diagonal is -p_i p_j",
                _jac_outer_one_minus),
        Mistake("softmax of p", "p is already softmax(z): build J from p itself, without applying softmax "
                "again", _jac_of_softmax_of_p),
        Mistake("vector p(1-p)", "p(1 - p) is only the diagonal of J: return the (N, N) matrix "
                "diag(p) - p pᵀ (off-diagonal entries -p_i p_j)", _jac_vector),
    ),
    "scaled_dot_product_attention": (
        Mistake("no scale", "divide the scores by sqrt(Dh) = sqrt(q.size(-1))", _sdpa_no_scale),
        Mistake("scale by Dh", "divide the scores by sqrt(Dh) once, not by Dh (scaling q and then the scores "
                "divides by sqrt(Dh) twice, which is Dh)", _sdpa_scale_by_dh),
        Mistake("scale by D", "divide by sqrt of the per-head width q.size(-1), not the model width",
                _sdpa_scale_by_width),
        Mistake("wrong axis", "take the softmax over the keys (dim=-1): each query's weights sum to 1",
                _sdpa_wrong_axis),
        Mistake("inverted mask", "True means 'may attend' (the SDPA convention): fill -inf where "
                "the mask is False", _sdpa_inverted_mask),
        Mistake("fill zero", "fill blocked scores with -inf, not 0: exp(0) = 1 still gives them weight",
                _sdpa_fill_zero),
        Mistake("nan rows", "a query with no allowed key must get zero weights and a zero output, not NaN",
                _sdpa_nan_rows),
        Mistake("finite fill", "with a finite fill such as -1e9 a query with no allowed key gets uniform "
                "weights, not zeros: fill with -inf and zero the rows with no allowed key", _sdpa_finite_fill),
        Mistake("mask after softmax", "apply the mask before the softmax (blocked scores = -inf): zeroing "
                "weights afterwards leaves rows that no longer sum to 1", _sdpa_mask_after_softmax),
    ),
    "causal_mask": (
        Mistake("top-left", "align the mask bottom-right: query i sits at position S - T + i, so it may "
                "attend keys j <= S - T + i (is_causal=True in PyTorch is top-left)", _causal_top_left),
        Mistake("inverted", "True means 'may attend': a query may attend itself and earlier keys",
                _causal_inverted),
        Mistake("strict", "a query may attend its own position too: j <= S - T + i, not <", _causal_strict),
        Mistake("transposed", "the mask is (T, S): rows are queries, columns keys", _causal_transposed),
    ),
    "padding_mask": (
        Mistake("inverted", "True means 'may attend': True for real keys j < lengths[b], False for padding",
                _padding_inverted),
        Mistake("flat", "return shape (B, 1, 1, S) so it broadcasts over heads and queries", _padding_flat),
        Mistake("off by one", "keys 0 .. lengths[b]-1 are real: use j < lengths[b]", _padding_off_by_one),
        Mistake("query axis", "padding hides keys (the last axis, S), not queries", _padding_query_axis),
        Mistake("left padding", "the course pads on the right: keys 0 .. lengths[b]-1 are the real ones, "
                "the padding comes after them", _padding_left),
        Mistake("width lengths.max()", "the mask has t_k columns (S keys), whatever the longest sequence",
                _padding_width_max),
    ),
}


# ---------------------------------------------------------------------------------------------
# Optional challenge (★★★, 0 points): memory_efficient_attention, an online-softmax attention
# that walks over key/value chunks and never stores the (T, S) scores.
# ---------------------------------------------------------------------------------------------
def _mea(q, k, v, mask=None, *, chunk_size=128, rescale_out=True, rescale_sum=True, shift=True,
         guard=True, drop_remainder=False):
    t, s = q.size(-2), k.size(-2)
    if mask is not None:
        mask = mask.expand(torch.broadcast_shapes(mask.shape, (t, s)))
    m = torch.full((*q.shape[:-1], 1), NEG_INF, dtype=q.dtype)
    total = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype)
    acc = torch.zeros((*q.shape[:-1], v.size(-1)), dtype=q.dtype)
    stop = s - chunk_size + 1 if drop_remainder else s
    for start in range(0, stop, chunk_size):
        scores = q @ k[..., start:start + chunk_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask[..., start:start + chunk_size], NEG_INF)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True)) if shift else torch.zeros_like(m)
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new)) if guard else m_new
        p = torch.exp(scores - safe)
        alpha = torch.exp(m - safe) if shift else torch.ones_like(m)
        total = (alpha if rescale_sum else 1) * total + p.sum(-1, keepdim=True)
        acc = (alpha if rescale_out else 1) * acc + p @ v[..., start:start + chunk_size, :]
        m = m_new
    if guard:
        return torch.where(total > 0, acc / total, torch.zeros_like(acc))
    return acc / total


_HINT_RESCALE = ("when the running max grows from m to m', multiply both the running sum and the "
                 "running output by exp(m - m') before adding the new chunk")
MISTAKES["memory_efficient_attention"] = (
    Mistake("no rescaling", _HINT_RESCALE, partial(_mea, rescale_out=False, rescale_sum=False)),
    Mistake("sum not rescaled", "the running sum needs the factor exp(m - m') too, like the running "
            "output: both were accumulated relative to the old max", partial(_mea, rescale_sum=False)),
    Mistake("output not rescaled", "the running output needs the factor exp(m - m') too, like the "
            "running sum: both were accumulated relative to the old max",
            partial(_mea, rescale_out=False)),
    Mistake("remainder dropped", "the last chunk may be shorter than chunk_size: loop over "
            "range(0, S, chunk_size) so the keys after the last full chunk are not dropped",
            partial(_mea, drop_remainder=True)),
    Mistake("no running max", "exp of raw scores overflows for large scores: subtract the running max "
            "(and rescale what you accumulated when it grows)", partial(_mea, shift=False)),
    Mistake("nan rows", "while a query has seen only masked keys its max is -inf, and -inf - (-inf) = "
            "nan: shift by 0 there, and return zeros for a query with no allowed key",
            partial(_mea, guard=False)),
)
