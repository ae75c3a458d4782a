"""Checks for notebook 01, scaled dot-product attention.

Each ``check_<name>(fn)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. Visible cases judge with oracles that do not hand out the
answer: PyTorch built-ins (``torch.softmax``, ``torch.autograd.functional.jacobian``,
``F.scaled_dot_product_attention``, ``torch.tril``) and properties (rows sum to 1, causality,
no NaN on fully masked rows). ``MISTAKES`` is the catalogue of known wrong implementations whose
hints the feedback shows.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from ..device import make_generator
from .call import DEVICE, Call
from .case import Case, Judge
from .hints import Mistake
from .run import NotebookChecks, run_checks

__all__ = [
    "EXERCISES",
    "HALF_FILL_ERROR",
    "MISTAKES",
    "check_causal_mask",
    "check_memory_efficient_attention",
    "check_padding_mask",
    "check_scaled_dot_product_attention",
    "check_softmax",
    "check_softmax_jacobian",
    "half_precision_errors",
    "visible_cases",
]

EXERCISES = ("softmax", "softmax_jacobian", "scaled_dot_product_attention", "causal_mask", "padding_mask",
             "memory_efficient_attention")

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


def _sdpa(q, k, v, mask=None, *, scale=None, softmax_dim=-1, fill=NEG_INF, invert=False, zero_rows=True):
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
    return _sdpa(q, k, v, mask, scale=1.0)


def _sdpa_scale_by_dh(q, k, v, mask=None):
    return _sdpa(q, k, v, mask, scale=1 / q.size(-1))


def _sdpa_scale_by_width(q, k, v, mask=None):
    # dividing by sqrt(D) = sqrt(H * Dh) instead of sqrt(Dh)
    width = q.size(-1) * (q.size(-3) if q.dim() >= 3 else 1)
    return _sdpa(q, k, v, mask, scale=1 / math.sqrt(width))


def _sdpa_wrong_axis(q, k, v, mask=None):
    return _sdpa(q, k, v, mask, softmax_dim=-2, zero_rows=False)


def _sdpa_inverted_mask(q, k, v, mask=None):
    return _sdpa(q, k, v, mask, invert=True)


def _sdpa_fill_zero(q, k, v, mask=None):
    return _sdpa(q, k, v, mask, fill=0.0)


def _sdpa_nan_rows(q, k, v, mask=None):
    return _sdpa(q, k, v, mask, zero_rows=False)


def _sdpa_finite_fill(q, k, v, mask=None):
    return _sdpa(q, k, v, mask, fill=-1e9, zero_rows=False)


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

# An exception that filling with a float32 constant raises on float16 scores (the reference works).
HALF_FILL_ERROR = (r"cannot be converted to type .*without overflow",
                   "fill blocked scores with float(\"-inf\") (or torch.finfo(scores.dtype).min), not a "
                   "float32 constant such as -1e9: float16 holds at most 65504")

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
# Visible cases: oracles and properties only.
# ---------------------------------------------------------------------------------------------
def half_precision_errors(j: Judge) -> None:
    """Fail with a hint when a call raised what a float32 constant (a -1e9 fill) raises on
    float16 input, where the reference works."""
    for o in j.outcomes:
        if o.kind == "error" and re.search(HALF_FILL_ERROR[0], o.error_message):
            j.fail(f"raised {o.error_line()[:100]}", "on half-precision input, where the reference works",
                   hint=HALF_FILL_ERROR[1])


def _case(exercise: str, title: str, calls: list[Call], judge, seed: int | None = None,
          part: str = "core") -> Case:
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise], part=part)


def _softmax_cases() -> list[Case]:
    cases = []
    x = torch.randn(2, 3, 5, generator=make_generator(101), dtype=torch.float64) * 3

    def matches_torch(j: Judge, x=x):
        got = j.tensor(shape=x.shape, dtype=x.dtype)
        j.close(got, torch.softmax(x, dim=-1), oracle="torch.softmax")

    cases.append(_case("softmax", "matches torch.softmax along the last axis", [Call("softmax", (x,))],
                       matches_torch, seed=101))

    y = torch.randn(3, 4, 2, generator=make_generator(102), dtype=torch.float32)

    def other_dim(j: Judge, y=y):
        got = j.tensor(shape=y.shape, dtype=y.dtype)
        sums = got.sum(dim=1)
        j.require(torch.allclose(sums, torch.ones_like(sums), atol=1e-5),
                  f"slices along dim=1 should sum to 1; sums range {float(sums.min()):.4g}..{float(sums.max()):.4g}")
        j.close(got, torch.softmax(y, dim=1), oracle="torch.softmax")
        y2 = y.transpose(0, 1)  # (4, 3, 2): dim=-2 is the axis of size 3
        got2 = j.tensor(1, shape=y2.shape, dtype=y2.dtype)
        j.close(got2, torch.softmax(y2, dim=-2), name="output for dim=-2", call=1, oracle="torch.softmax")

    cases.append(_case("softmax", "uses `dim` (here dim=1, then dim=-2) and keeps float32",
                       [Call("softmax", (y,), {"dim": 1}), Call("softmax", (y.transpose(0, 1).contiguous(),),
                                                                {"dim": -2})], other_dim, seed=102))

    big = torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -1002.0]], dtype=torch.float64)
    # moderate logits as well: they tell a shift by one global max (right here) from a sum over
    # the whole tensor (wrong here), which give the same answer on `big`
    moderate = torch.tensor([[2.0, 1.0, 0.0], [-1.0, -2.0, -3.0]], dtype=torch.float64)

    def large_logits(j: Judge, big=big, moderate=moderate):
        got = j.tensor(shape=big.shape, dtype=big.dtype)
        j.require(bool(torch.isfinite(got).all()), "large logits (±1000) gave inf or NaN")
        j.close(got, torch.softmax(big, dim=-1), oracle="torch.softmax")
        j.close(j.tensor(1, shape=moderate.shape, dtype=moderate.dtype), torch.softmax(moderate, dim=-1),
                name="output for moderate logits", call=1, oracle="torch.softmax")

    cases.append(_case("softmax", "is stable for large logits such as 1000 (each row shifted by its own max)",
                       [Call("softmax", (big,)), Call("softmax", (moderate,))], large_logits))

    # row 2 lies far below the others: only a shift by each row's own max keeps it finite
    masked = torch.tensor([[NEG_INF, NEG_INF, NEG_INF], [0.0, NEG_INF, 1.0], [-1000.0, -999.0, NEG_INF]],
                          dtype=torch.float64)

    def all_neg_inf(j: Judge, masked=masked):
        got = j.tensor(shape=masked.shape, dtype=masked.dtype)
        expected = torch.cat([torch.zeros(1, 3, dtype=torch.float64), torch.softmax(masked[1:], -1)])
        j.close(got, expected, oracle="expected")

    cases.append(_case("softmax", "an all -inf slice gives zeros, not NaN", [Call("softmax", (masked,))],
                       all_neg_inf))
    return cases


def _jacobian_cases() -> list[Case]:
    cases = []
    z = torch.randn(5, generator=make_generator(201), dtype=torch.float64)
    p = torch.softmax(z, -1)

    def matches_autodiff(j: Judge, z=z, p=p):
        got = j.tensor(shape=(5, 5), dtype=p.dtype)
        j.close(got, torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), z),
                oracle="autograd jacobian")

    cases.append(_case("softmax_jacobian", "matches autograd's Jacobian of softmax",
                       [Call("softmax_jacobian", (p,))], matches_autodiff, seed=201))

    p2 = torch.softmax(torch.tensor([2.0, 0.0]), -1)

    def two_tokens(j: Judge, p2=p2):
        got = j.tensor(shape=(2, 2), dtype=torch.float32)
        # logits [2, 0]: p = 0.881/0.119, dp0/dz0 = 0.881 * 0.119 = 0.105
        expected = torch.tensor([[0.10499, -0.10499], [-0.10499, 0.10499]])
        j.close(got, expected, atol=1e-4, oracle="worked example")

    cases.append(_case("softmax_jacobian", "the two-token example: p = [0.881, 0.119] gives 0.105",
                       [Call("softmax_jacobian", (p2,))], two_tokens))

    p3 = torch.softmax(torch.randn(7, generator=make_generator(202)) * 2, -1)

    def properties(j: Judge, p3=p3):
        got = j.tensor(shape=(7, 7), dtype=p3.dtype)
        j.require(torch.allclose(got, got.T, atol=1e-6), "the Jacobian should be symmetric (J = Jᵀ)")
        rows = got.sum(-1)
        j.require(torch.allclose(rows, torch.zeros_like(rows), atol=1e-5),
                  f"each row should sum to 0 (adding one constant to every score changes nothing); "
                  f"largest |row sum| "
                  f"{float(rows.abs().max()):.3g}")

    cases.append(_case("softmax_jacobian", "is symmetric with rows summing to 0 (float32)",
                       [Call("softmax_jacobian", (p3,))], properties, seed=202))
    batch = torch.softmax(torch.randn(2, 3, generator=make_generator(203), dtype=torch.float64), -1)

    def rejects_matrix(j: Judge):
        got = j.raised()
        j.require(got is not None and got.error_type == "ValueError",
                  "p of shape (2, 3) is not a vector; expected ValueError, but "
                  + (f"it raised {got.error_line()[:80]}" if got else "nothing was raised"),
                  hint="check p.dim() == 1 first and raise ValueError otherwise (the shape contract)")

    cases.append(_case("softmax_jacobian", "raises ValueError when p is not 1-D",
                       [Call("softmax_jacobian", (batch,))], rejects_matrix, seed=203))
    return cases


def _qkv(seed: int, batch: tuple[int, ...], t: int, s: int, dh: int, dv: int, dtype=torch.float64):
    g = make_generator(seed)
    q = torch.randn(*batch, t, dh, generator=g, dtype=dtype)
    k = torch.randn(*batch, s, dh, generator=g, dtype=dtype)
    v = torch.randn(*batch, s, dv, generator=g, dtype=dtype)
    return q, k, v


def _sdpa_cases() -> list[Case]:
    cases = []
    name = "scaled_dot_product_attention"
    names = ("out", "weights")
    q, k, v = _qkv(301, (2, 3), 4, 6, 8, 5)

    def no_mask(j: Judge, q=q, k=k, v=v):
        out = j.tensor(n=2, names=names, shape=(2, 3, 4, 5), dtype=q.dtype)
        weights = j.tensor(index=1, n=2, names=names, shape=(2, 3, 4, 6), dtype=q.dtype)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        j.close(weights, torch.softmax(scores, -1), name="weights", index=1, oracle="softmax(q kᵀ/√Dh)")
        j.close(out, F.scaled_dot_product_attention(q, k, v), name="out", oracle="F.scaled_dot_product_attention")

    cases.append(_case(name, "matches F.scaled_dot_product_attention without a mask (T ≠ S, Dv ≠ Dh)",
                       [Call(name, (q, k, v))], no_mask, seed=301))

    q2, k2, v2 = _qkv(302, (2,), 5, 7, 4, 4)
    mask = torch.rand(2, 5, 7, generator=make_generator(303)) > 0.4
    mask[..., 0] = True  # every query may attend at least one key

    def with_mask(j: Judge, q=q2, k=k2, v=v2, mask=mask):
        out = j.tensor(n=2, names=names, shape=(2, 5, 4), dtype=q.dtype)
        weights = j.tensor(index=1, n=2, names=names, shape=(2, 5, 7), dtype=q.dtype)
        j.require(not bool(weights[~mask].abs().gt(0).any()),
                  "weights are non-zero where the mask is False", call=0)
        j.close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), name="out",
                oracle="F.scaled_dot_product_attention")

    cases.append(_case(name, "honours a boolean mask (True = may attend) like F.scaled_dot_product_attention",
                       [Call(name, (q2, k2, v2), {"mask": mask})], with_mask, seed=302, part="masks"))

    q3, k3, v3 = _qkv(304, (1,), 3, 4, 4, 4)
    rows = torch.tensor([[True, True, False, False], [False, False, False, False], [True, True, True, True]])

    def empty_row(j: Judge, q=q3, k=k3, v=v3, rows=rows):
        out = j.tensor(n=2, names=names, shape=(1, 3, 4), dtype=q.dtype)
        weights = j.tensor(index=1, n=2, names=names, shape=(1, 3, 4), dtype=q.dtype)
        j.require(not bool(torch.isnan(out).any() or torch.isnan(weights).any()),
                  "query 1 may attend no key, and the result holds NaN there")
        j.require(bool((weights[0, 1] == 0).all() and (out[0, 1] == 0).all()),
                  "query 1 may attend no key: its weights and output row must be zeros")

    cases.append(_case(name, "a query with no allowed key gets zero weights and output, not NaN",
                       [Call(name, (q3, k3, v3), {"mask": rows})], empty_row, seed=304, part="masks"))

    q4, k4, v4 = _qkv(305, (2,), 6, 6, 4, 3)
    k4b, v4b = k4.clone(), v4.clone()
    k4b[:, 4:] = torch.randn(2, 2, 4, generator=make_generator(306), dtype=torch.float64)
    v4b[:, 4:] = torch.randn(2, 2, 3, generator=make_generator(307), dtype=torch.float64)
    tril = torch.ones(6, 6, dtype=torch.bool).tril()

    def causal(j: Judge):
        before = j.tensor(0, n=2, names=names, shape=(2, 6, 3), dtype=torch.float64)
        after = j.tensor(1, n=2, names=names, shape=(2, 6, 3), dtype=torch.float64)
        j.close(after[:, :4], before[:, :4], name="out[:, :4]", call=1,
                oracle="the output before keys 4, 5 changed")

    cases.append(_case(name, "with a causal mask, outputs at t < 4 don't change when keys/values 4, 5 change",
                       [Call(name, (q4, k4, v4), {"mask": tril}), Call(name, (q4, k4b, v4b), {"mask": tril})],
                       causal, seed=305, part="masks"))

    q5, k5, v5 = _qkv(308, (), 1, 5, 16, 16, dtype=torch.float32)

    def decode_step(j: Judge, q=q5, k=k5, v=v5):
        out = j.tensor(n=2, names=names, shape=(1, 16), dtype=torch.float32)
        j.close(out, F.scaled_dot_product_attention(q, k, v), name="out", oracle="F.scaled_dot_product_attention")

    cases.append(_case(name, "one query, no batch axes, float32 (a decode step)",
                       [Call(name, (q5, k5, v5))], decode_step, seed=308))

    q6, k6, v6 = (t.to(torch.float16) for t in _qkv(309, (2,), 4, 6, 8, 8, dtype=torch.float32))
    mask6 = torch.ones(4, 6, dtype=torch.bool).tril(2)  # causal, bottom-right aligned

    def half(j: Judge, q=q6, k=k6, v=v6, mask=mask6):
        half_precision_errors(j)
        out = j.tensor(n=2, names=names, shape=(2, 4, 8), dtype=torch.float16)
        expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
        j.close(out, expected, name="out", tol_dtype=torch.float16,
                oracle="F.scaled_dot_product_attention in float64")

    cases.append(_case(name, "float16 with a causal mask (as models run attention): float16 out, close to float64",
                       [Call(name, (q6, k6, v6), {"mask": mask6})], half, seed=309, part="masks"))
    return cases


def _causal_cases() -> list[Case]:
    cases = []

    def square(j: Judge):
        got = j.tensor(shape=(5, 5), dtype=torch.bool)
        j.close(got, torch.ones(5, 5, dtype=torch.bool).tril(), name="mask", oracle="torch.tril")

    cases.append(_case("causal_mask", "T = S = 5: lower triangle, diagonal included",
                       [Call("causal_mask", (5,))], square))

    def rectangular(j: Judge):
        got = j.tensor(shape=(2, 6), dtype=torch.bool)
        j.close(got, torch.ones(2, 6, dtype=torch.bool).tril(diagonal=4), name="mask",
                oracle="bottom-right aligned (query i may attend j <= S - T + i)")

    cases.append(_case("causal_mask", "T = 2, S = 6 (4 cached tokens): bottom-right aligned",
                       [Call("causal_mask", (2, 6))], rectangular))

    def decode(j: Judge):
        got = j.tensor(shape=(1, 4), dtype=torch.bool)
        j.close(got, torch.ones(1, 4, dtype=torch.bool), name="mask",
                oracle="all True (the newest token sees the whole cache)")

    cases.append(_case("causal_mask", "T = 1, S = 4 (one decode step) sees every key",
                       [Call("causal_mask", (1,), {"t_k": 4, "device": DEVICE})], decode))

    def rejects_fewer_keys(j: Judge):
        got = j.raised()
        j.require(got is not None and got.error_type == "ValueError",
                  "T = 4 queries but S = 2 keys; expected ValueError, but "
                  + (f"it raised {got.error_line()[:80]}" if got else "nothing was raised"),
                  hint="S counts the cached keys plus the T new ones, so S >= T: raise ValueError "
                       "when t_k < t_q")

    cases.append(_case("causal_mask", "raises ValueError when S < T (t_q = 4, t_k = 2)",
                       [Call("causal_mask", (4, 2))], rejects_fewer_keys))
    return cases


def _padding_cases() -> list[Case]:
    cases = []
    lengths = torch.tensor([3, 1, 5])

    def basic(j: Judge, lengths=lengths):
        got = j.tensor(shape=(3, 1, 1, 5), dtype=torch.bool)
        expected = (torch.arange(5)[None, :] < lengths[:, None])[:, None, None, :]
        j.close(got, expected, name="mask", oracle="expected")

    cases.append(_case("padding_mask", "lengths [3, 1, 5], S = 5 gives (B, 1, 1, S), True for real keys",
                       [Call("padding_mask", (lengths, 5))], basic))

    short = torch.tensor([0, 2], dtype=torch.int32)

    def empty(j: Judge):
        got = j.tensor(shape=(2, 1, 1, 3), dtype=torch.bool)
        expected = torch.tensor([[False, False, False], [True, True, False]])[:, None, None, :]
        j.close(got, expected, name="mask", oracle="expected")

    cases.append(_case("padding_mask", "a sequence of length 0 has no real key (int32 lengths)",
                       [Call("padding_mask", (short, 3))], empty))
    return cases


_BUILDERS = {
    "softmax": _softmax_cases,
    "softmax_jacobian": _jacobian_cases,
    "scaled_dot_product_attention": _sdpa_cases,
    "causal_mask": _causal_cases,
    "padding_mask": _padding_cases,
}


def visible_cases(exercise: str) -> list[Case]:
    """The cases a learner runs under exercise ``exercise`` (the grader runs them too)."""
    if exercise not in _BUILDERS:
        raise KeyError(f"notebook 01 has no exercise {exercise!r}; exercises: {', '.join(EXERCISES)}")
    return _BUILDERS[exercise]()


# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks(EXERCISES, lambda exercise: visible_cases(exercise), "tfcourse.reference.nb01_attention",
                          "01_attention.ipynb", calls={"scaled_dot_product_attention": ("softmax",)})


def check_softmax(softmax) -> None:
    """Check ``softmax(x, dim=-1)``; raises CheckFailed with feedback, prints one line on success."""
    run_checks("softmax", softmax, visible_cases("softmax"), notebook=NOTEBOOK)


def check_softmax_jacobian(softmax_jacobian) -> None:
    """Check ``softmax_jacobian(p)`` against autodiff and its properties."""
    run_checks("softmax_jacobian", softmax_jacobian, visible_cases("softmax_jacobian"), notebook=NOTEBOOK)


def check_scaled_dot_product_attention(scaled_dot_product_attention, part: str | None = None) -> None:
    """Check ``scaled_dot_product_attention(q, k, v, mask=None)`` against PyTorch and properties.

    part: "core" (no mask) or "masks" (masks, fully masked rows, causality), the two test cells
    that score it; None checks both."""
    run_checks("scaled_dot_product_attention", scaled_dot_product_attention,
               visible_cases("scaled_dot_product_attention"), part=part, notebook=NOTEBOOK)


def check_causal_mask(causal_mask) -> None:
    """Check ``causal_mask(t_q, t_k=None, *, device=None)`` (bottom-right aligned)."""
    run_checks("causal_mask", causal_mask, visible_cases("causal_mask"), notebook=NOTEBOOK)


def check_padding_mask(padding_mask) -> None:
    """Check ``padding_mask(lengths, t_k)``."""
    run_checks("padding_mask", padding_mask, visible_cases("padding_mask"), notebook=NOTEBOOK)


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


def _mea_no_rescale(q, k, v, mask=None, *, chunk_size=128):
    return _mea(q, k, v, mask, chunk_size=chunk_size, rescale_out=False, rescale_sum=False)


def _mea_sum_not_rescaled(q, k, v, mask=None, *, chunk_size=128):
    return _mea(q, k, v, mask, chunk_size=chunk_size, rescale_sum=False)


def _mea_out_not_rescaled(q, k, v, mask=None, *, chunk_size=128):
    return _mea(q, k, v, mask, chunk_size=chunk_size, rescale_out=False)


def _mea_remainder_dropped(q, k, v, mask=None, *, chunk_size=128):
    return _mea(q, k, v, mask, chunk_size=chunk_size, drop_remainder=True)


def _mea_no_max(q, k, v, mask=None, *, chunk_size=128):
    return _mea(q, k, v, mask, chunk_size=chunk_size, shift=False)


def _mea_nan_rows(q, k, v, mask=None, *, chunk_size=128):
    return _mea(q, k, v, mask, chunk_size=chunk_size, guard=False)


_HINT_RESCALE = ("when the running max grows from m to m', multiply both the running sum and the "
                 "running output by exp(m - m') before adding the new chunk")
MISTAKES["memory_efficient_attention"] = (
    Mistake("no rescaling", _HINT_RESCALE, _mea_no_rescale),
    Mistake("sum not rescaled", "the running sum needs the factor exp(m - m') too, like the running "
            "output: both were accumulated relative to the old max", _mea_sum_not_rescaled),
    Mistake("output not rescaled", "the running output needs the factor exp(m - m') too, like the "
            "running sum: both were accumulated relative to the old max", _mea_out_not_rescaled),
    Mistake("remainder dropped", "the last chunk may be shorter than chunk_size: loop over "
            "range(0, S, chunk_size) so the keys after the last full chunk are not dropped",
            _mea_remainder_dropped),
    Mistake("no running max", "exp of raw scores overflows for large scores: subtract the running max "
            "(and rescale what you accumulated when it grows)", _mea_no_max),
    Mistake("nan rows", "while a query has seen only masked keys its max is -inf, and -inf - (-inf) = "
            "nan: shift by 0 there, and return zeros for a query with no allowed key", _mea_nan_rows),
)


def _memory_efficient_cases() -> list[Case]:
    name = "memory_efficient_attention"
    cases = []

    def against(expected_fn, shape, dtype, oracle):
        def judge(j: Judge) -> None:
            out = j.tensor(shape=shape, dtype=dtype)
            j.require(bool(torch.isfinite(out).all()), "the output holds inf or NaN")
            j.close(out, expected_fn(), oracle=oracle)
        return judge

    q, k, v = _qkv(601, (2, 3), 4, 7, 8, 5)
    cases.append(_case(name, "no mask, S = 7 keys in chunks of 3 (the last chunk is shorter)",
                       [Call(name, (q, k, v), {"chunk_size": 3})],
                       against(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v),
                               (2, 3, 4, 5), torch.float64, "F.scaled_dot_product_attention"),
                       seed=601))

    q2, k2, v2 = _qkv(602, (2,), 5, 10, 4, 6)
    mask = torch.rand(2, 5, 10, generator=make_generator(603)) > 0.5
    mask[..., 9] = True  # every query may attend the last key: the first chunks may be all masked
    mask[0, 0, :9] = False  # query 0 of sequence 0 sees only the last key
    cases.append(_case(name, "a boolean mask (True = may attend), chunks of 4",
                       [Call(name, (q2, k2, v2), {"mask": mask, "chunk_size": 4})],
                       against(lambda q=q2, k=k2, v=v2, m=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                               (2, 5, 6), torch.float64, "F.scaled_dot_product_attention"),
                       seed=602))

    q3, k3, v3 = _qkv(604, (1,), 3, 7, 4, 4)
    rows = torch.tensor([[True, False, False, False, False, False, True],
                         [False] * 7,
                         [False, False, False, True, True, False, False]])

    def empty_row(j: Judge, q=q3, k=k3, v=v3, rows=rows):
        out = j.tensor(shape=(1, 3, 4), dtype=torch.float64)
        j.require(not bool(torch.isnan(out).any()), "query 1 may attend no key, and the output holds NaN")
        j.require(bool((out[0, 1] == 0).all()), "query 1 may attend no key: its output row must be zeros")
        j.close(out, _sdpa(q, k, v, rows)[0], oracle="softmax attention with zero rows")

    cases.append(_case(name, "a query with no allowed key gets a zero row (chunks of 2)",
                       [Call(name, (q3, k3, v3), {"mask": rows, "chunk_size": 2})], empty_row, seed=604))

    q4, k4, v4 = _qkv(605, (), 1, 5, 16, 16, dtype=torch.float32)
    cases.append(_case(name, "T = 1, no batch axes, float32, default chunk_size (one chunk)",
                       [Call(name, (q4, k4, v4))],
                       against(lambda q=q4, k=k4, v=v4: F.scaled_dot_product_attention(q, k, v),
                               (1, 16), torch.float32, "F.scaled_dot_product_attention"),
                       seed=605))

    q5, k5, v5 = _qkv(606, (2,), 6, 9, 8, 8, dtype=torch.float32)
    q5 = q5 * 100  # scores in the hundreds: exp of a raw score overflows
    cases.append(_case(name, "scores ×100 (float32) stay finite, chunks of 2",
                       [Call(name, (q5, k5, v5), {"chunk_size": 2})],
                       against(lambda q=q5, k=k5, v=v5: F.scaled_dot_product_attention(q, k, v),
                               (2, 6, 8), torch.float32, "F.scaled_dot_product_attention"),
                       seed=606))

    q6, k6, v6 = _qkv(607, (3,), 4, 6, 4, 3)
    tril = torch.ones(4, 6, dtype=torch.bool).tril(2)
    cases.append(_case(name, "chunk_size = 1 with a causal mask",
                       [Call(name, (q6, k6, v6), {"mask": tril, "chunk_size": 1})],
                       against(lambda q=q6, k=k6, v=v6, m=tril: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                               (3, 4, 3), torch.float64, "F.scaled_dot_product_attention"),
                       seed=607))

    def rejects_chunk_zero(j: Judge):
        got = j.raised()
        j.require(got is not None and got.error_type == "ValueError",
                  "chunk_size = 0; expected ValueError, but "
                  + (f"it raised {got.error_line()[:80]}" if got else "nothing was raised"),
                  hint="check chunk_size >= 1 first and raise ValueError otherwise (the contract)")

    cases.append(_case(name, "raises ValueError when chunk_size < 1",
                       [Call(name, (q4, k4, v4), {"chunk_size": 0})], rejects_chunk_zero, seed=605))
    return cases


_BUILDERS["memory_efficient_attention"] = _memory_efficient_cases


def check_memory_efficient_attention(memory_efficient_attention) -> None:
    """Check ``memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128)`` (optional
    challenge) against ``F.scaled_dot_product_attention`` on chunk sizes that do and do not divide
    S, masks, fully masked rows and large scores."""
    run_checks("memory_efficient_attention", memory_efficient_attention,
               visible_cases("memory_efficient_attention"), notebook=NOTEBOOK)
