"""Notebook 01's visible cases: oracles that do not hand out the answer (PyTorch built-ins:
``torch.softmax``, ``torch.autograd.functional.jacobian``, ``F.scaled_dot_product_attention``,
``torch.tril``) and properties (rows sum to 1, causality, no NaN on fully masked rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ...device import make_generator
from ..call import DEVICE, Call
from ..case import Case, Judge
from ..protocol import NotebookChecks
from ..shared import half_precision_errors
from .mistakes import MISTAKES, NEG_INF, sdpa_variant

__all__ = ["NOTEBOOK"]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("01_attention", calls={"scaled_dot_product_attention": ("softmax",)})


def _rejects(what: str, hint: str) -> Callable[[Judge], None]:
    """A judge: the case's call raised ValueError ("<what>; expected ValueError, but ...")."""

    def judge(j: Judge) -> None:
        got = j.raised()
        j.require(got is not None and got.error_type == "ValueError",
                  f"{what}; expected ValueError, but "
                  + (f"it raised {got.error_line()[:80]}" if got else "nothing was raised"), hint=hint)

    return judge


def _case(exercise: str, title: str, calls: list[Call], judge, seed: int | None = None,
          part: str = "core") -> Case:
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise], part=part)


@NOTEBOOK.exercise("softmax", parts=("core", "half"))
def _softmax_cases() -> list[Case]:
    """Check ``softmax(x, dim=-1)``.

    part: "core" (float64/float32, any dim, large logits, -inf slices) or "half" (float16 logits),
    the two test cells that score it; None checks both."""
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

    # half precision (the `half` test cell): logits of spread 4 with masked entries, in float16
    h = (torch.randn(3, 4, 9, generator=make_generator(106)) * 4).to(torch.float16)
    h[2, :, :4] = NEG_INF

    def half(j: Judge, h=h):
        half_precision_errors(j)
        got = j.tensor(shape=h.shape, dtype=torch.float16)
        j.close(got, torch.softmax(h.double(), dim=-1), tol_dtype=torch.float16, oracle="torch.softmax in float64")

    cases.append(_case("softmax", "float16 logits with -inf entries (as models run attention): float16 out, close to "
                       "float64", [Call("softmax", (h,))], half, seed=106, part="half"))
    return cases


@NOTEBOOK.exercise("softmax_jacobian", parts=("core", "validation"))
def _jacobian_cases() -> list[Case]:
    """Check ``softmax_jacobian(p)`` against autodiff and its properties."""
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

    rejects_matrix = _rejects("p of shape (2, 3) is not a vector",
                              "check p.dim() == 1 first and raise ValueError otherwise (the shape contract)")

    cases.append(_case("softmax_jacobian", "raises ValueError when p is not 1-D",
                       [Call("softmax_jacobian", (batch,))], rejects_matrix, seed=203, part="validation"))
    return cases


def _qkv(seed: int, batch: tuple[int, ...], t: int, s: int, dh: int, dv: int, dtype=torch.float64):
    g = make_generator(seed)
    q = torch.randn(*batch, t, dh, generator=g, dtype=dtype)
    k = torch.randn(*batch, s, dh, generator=g, dtype=dtype)
    v = torch.randn(*batch, s, dv, generator=g, dtype=dtype)
    return q, k, v


@NOTEBOOK.exercise("scaled_dot_product_attention", parts=("core", "masks", "half"))
def _sdpa_cases() -> list[Case]:
    """Check ``scaled_dot_product_attention(q, k, v, mask=None)`` against PyTorch and properties:
    part "core" (no mask), "masks" (masks, fully masked rows, causality) or "half" (float16 and
    bfloat16 inputs, with and without masks)."""
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
                       [Call(name, (q6, k6, v6), {"mask": mask6})], half, seed=309, part="half"))
    return cases


@NOTEBOOK.exercise("causal_mask", parts=("core", "validation"))
def _causal_cases() -> list[Case]:
    """Check ``causal_mask(t_q, t_k=None, *, device=None)`` (bottom-right aligned)."""
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

    rejects_fewer_keys = _rejects("T = 4 queries but S = 2 keys",
                                  "S counts the cached keys plus the T new ones, so S >= T: raise "
                                  "ValueError when t_k < t_q")

    cases.append(_case("causal_mask", "raises ValueError when S < T (t_q = 4, t_k = 2)",
                       [Call("causal_mask", (4, 2))], rejects_fewer_keys, part="validation"))
    return cases


@NOTEBOOK.exercise("padding_mask")
def _padding_cases() -> list[Case]:
    """Check ``padding_mask(lengths, t_k)``."""
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


@NOTEBOOK.exercise("memory_efficient_attention")
def _memory_efficient_cases() -> list[Case]:
    """Check ``memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128)`` (optional
    challenge) against ``F.scaled_dot_product_attention`` on chunk sizes that do and do not divide
    S, masks, fully masked rows and large scores."""
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
        j.close(out, sdpa_variant(q, k, v, rows)[0], oracle="softmax attention with zero rows")

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

    rejects_chunk_zero = _rejects("chunk_size = 0",
                                  "check chunk_size >= 1 first and raise ValueError otherwise (the contract)")

    cases.append(_case(name, "raises ValueError when chunk_size < 1",
                       [Call(name, (q4, k4, v4), {"chunk_size": 0})], rejects_chunk_zero, seed=605))
    return cases
