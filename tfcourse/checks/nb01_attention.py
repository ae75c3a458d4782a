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

import torch
import torch.nn.functional as F

from ..device import make_generator
from ._calls import DEVICE, Call
from ._core import Case, Judge, Mistake, run_checks

__all__ = [
    "EXERCISES",
    "MISTAKES",
    "check_causal_mask",
    "check_padding_mask",
    "check_scaled_dot_product_attention",
    "check_softmax",
    "check_softmax_jacobian",
    "visible_cases",
]

EXERCISES = ("softmax", "softmax_jacobian", "scaled_dot_product_attention", "causal_mask", "padding_mask")

NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# The catalogue of known wrong implementations (hints). Each has the exercise's signature.
# ---------------------------------------------------------------------------------------------
def _softmax_no_shift(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_dim0(x, dim=-1):
    return torch.softmax(x, dim=0)


def _softmax_last_axis(x, dim=-1):
    return torch.softmax(x, dim=-1)


def _softmax_nan_rows(x, dim=-1):
    return torch.softmax(x, dim=dim)  # an all -inf slice gives 0/0 = nan


def _softmax_global_sum(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum()


def _softmax_unnormalised(x, dim=-1):
    return torch.exp(x - x.amax(dim=dim, keepdim=True))


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


def _padding_query_axis(lengths, t_k):
    return (torch.arange(t_k)[None, :] < lengths[:, None])[:, None, :, None]


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
        Mistake("no max shift", "exp(1000) overflows to inf: subtract the max along `dim` before exp",
                _softmax_no_shift),
    ),
    "softmax_jacobian": (
        Mistake("elementwise", "p pᵀ is an outer product (N, N): torch.outer(p, p), not p * p",
                _jac_elementwise),
        Mistake("diagonal only", "off-diagonal entries are -p_i p_j, not 0", _jac_diagonal_only),
        Mistake("sign", "the sign is flipped: J = diag(p) - p pᵀ", _jac_sign_flipped),
        Mistake("no diagonal term", "add diag(p): J = diag(p) - p pᵀ", _jac_no_diag),
        Mistake("outer(p, 1-p)", "p_i(1-p_i) holds on the diagonal only; off-diagonal is -p_i p_j",
                _jac_outer_one_minus),
    ),
    "scaled_dot_product_attention": (
        Mistake("no scale", "divide the scores by sqrt(Dh) = sqrt(q.size(-1))", _sdpa_no_scale),
        Mistake("scale by Dh", "divide by sqrt(Dh), not by Dh", _sdpa_scale_by_dh),
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
    ),
}


# ---------------------------------------------------------------------------------------------
# Visible cases: oracles and properties only.
# ---------------------------------------------------------------------------------------------
def _case(exercise: str, title: str, calls: list[Call], judge, seed: int | None = None) -> Case:
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise])


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

    cases.append(_case("softmax", "uses `dim` (here dim=1) and keeps float32",
                       [Call("softmax", (y,), {"dim": 1})], other_dim, seed=102))

    big = torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -1002.0]], dtype=torch.float64)

    def large_logits(j: Judge, big=big):
        got = j.tensor(shape=big.shape, dtype=big.dtype)
        j.require(bool(torch.isfinite(got).all()), "large logits (±1000) gave inf or NaN")
        j.close(got, torch.softmax(big, dim=-1), oracle="torch.softmax")

    cases.append(_case("softmax", "is stable for large logits such as 1000", [Call("softmax", (big,))],
                       large_logits))

    masked = torch.tensor([[NEG_INF, NEG_INF, NEG_INF], [0.0, NEG_INF, 1.0]], dtype=torch.float64)

    def all_neg_inf(j: Judge, masked=masked):
        got = j.tensor(shape=masked.shape, dtype=masked.dtype)
        expected = torch.stack([torch.zeros(3, dtype=torch.float64), torch.softmax(masked[1], -1)])
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
                  f"each row should sum to 0 (probabilities always sum to 1); largest |row sum| "
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
                       [Call(name, (q2, k2, v2), {"mask": mask})], with_mask, seed=302))

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
                       [Call(name, (q3, k3, v3), {"mask": rows})], empty_row, seed=304))

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
                       causal, seed=305))

    q5, k5, v5 = _qkv(308, (), 1, 5, 16, 16, dtype=torch.float32)

    def decode_step(j: Judge, q=q5, k=k5, v=v5):
        out = j.tensor(n=2, names=names, shape=(1, 16), dtype=torch.float32)
        j.close(out, F.scaled_dot_product_attention(q, k, v), name="out", oracle="F.scaled_dot_product_attention")

    cases.append(_case(name, "one query, no batch axes, float32 (a decode step)",
                       [Call(name, (q5, k5, v5))], decode_step, seed=308))
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


def check_softmax(softmax) -> None:
    """Check ``softmax(x, dim=-1)``; raises CheckFailed with feedback, prints one line on success."""
    run_checks("softmax", softmax, visible_cases("softmax"))


def check_softmax_jacobian(softmax_jacobian) -> None:
    """Check ``softmax_jacobian(p)`` against autodiff and its properties."""
    run_checks("softmax_jacobian", softmax_jacobian, visible_cases("softmax_jacobian"))


def check_scaled_dot_product_attention(scaled_dot_product_attention) -> None:
    """Check ``scaled_dot_product_attention(q, k, v, mask=None)`` against PyTorch and properties."""
    run_checks("scaled_dot_product_attention", scaled_dot_product_attention,
               visible_cases("scaled_dot_product_attention"))


def check_causal_mask(causal_mask) -> None:
    """Check ``causal_mask(t_q, t_k=None, *, device=None)`` (bottom-right aligned)."""
    run_checks("causal_mask", causal_mask, visible_cases("causal_mask"))


def check_padding_mask(padding_mask) -> None:
    """Check ``padding_mask(lengths, t_k)``."""
    run_checks("padding_mask", padding_mask, visible_cases("padding_mask"))
