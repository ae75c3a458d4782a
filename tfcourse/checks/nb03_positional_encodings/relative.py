"""Visible cases of notebook 03's relative positions on the scores: ALiBi (``alibi_slopes``,
``alibi_bias``) and T5's buckets (``relative_position_bucket``), and the float64 oracles they judge
with: ``alibi_slopes`` against Press et al.'s own ``get_slopes`` code (start · ratio^i), the bias
against its definition, the buckets against Hugging Face's T5 code and their properties. They
register after cases.py's exercises (this module imports it), as in the notebook.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..call import Call
from ..case import Case, Judge
from .cases import F32, F64, NOTEBOOK, make_case, require_value_error, returned_tensor

__all__ = ["alibi_oracle", "bucket_oracle", "press_slopes"]


# ---------------------------------------------------------------------------------------------
# oracles (float64)
# ---------------------------------------------------------------------------------------------
def press_slopes(n: int) -> list[float]:
    """Press et al.'s ``get_slopes`` (github.com/ofirpress/attention_with_linear_biases)."""
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + press_slopes(2 * closest)[0::2][: n - closest]


def alibi_oracle(num_heads: int, t_q: int, t_k: int | None = None) -> torch.Tensor:
    s = t_q if t_k is None else t_k
    slopes = torch.tensor(press_slopes(num_heads), dtype=F64)[:, None, None]
    q_pos = torch.arange(t_q, dtype=F64)[:, None] + (s - t_q)
    k_pos = torch.arange(s, dtype=F64)[None, :]
    return -slopes * (q_pos - k_pos)


def bucket_oracle(rel: torch.Tensor, bidirectional: bool = True, num_buckets: int = 32,
                  max_distance: int = 128) -> torch.Tensor:
    """T5's bucketing, as Hugging Face's ``T5Attention._relative_position_bucket`` writes it."""
    buckets = torch.zeros(rel.shape, dtype=torch.long)
    rel = rel.long()
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(rel < max_exact, rel, large)


# ---------------------------------------------------------------------------------------------
# 7. alibi_slopes
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("alibi_slopes", parts=("core", "other_head_counts", "validation"))
def _slopes_cases() -> list[Case]:
    """Check ``alibi_slopes(num_heads)`` against Press et al.'s code: part "core" (powers of two),
    "other_head_counts" (6, 12, 20 heads) or "validation" (ValueError for 0); None checks all."""
    name = "alibi_slopes"

    def slopes(counts: Sequence[int]):
        def judge(j: Judge) -> None:
            for call, h in enumerate(counts):
                got = returned_tensor(j, call, shape=(h,), dtype=F32)
                j.close(got, torch.tensor(press_slopes(h), dtype=F64), name=f"slopes for H = {h}", call=call,
                        atol=1e-8, rtol=1e-6, oracle="Press et al.", tol_dtype=F32)
        return judge

    powers, others = (1, 2, 4, 8, 16), (6, 12, 20)

    def bad(j: Judge) -> None:
        require_value_error(j, "num_heads = 0", "raise ValueError when num_heads < 1")

    return [
        make_case(name, "H = 1, 2, 4, 8, 16 (powers of two): 2^(−8h/H) for h = 1 … H",
                  [Call(name, (h,)) for h in powers], slopes(powers)),
        make_case(name, "H = 6, 12, 20: the slopes of the power of two below, then every other slope of twice it",
                      [Call(name, (h,)) for h in others], slopes(others), part="other_head_counts"),
        Case(name, "num_heads = 0: raises ValueError", [Call(name, (0,))], bad, part="validation"),
    ]


# ---------------------------------------------------------------------------------------------
# 8. alibi_bias
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("alibi_bias")
def _bias_cases() -> list[Case]:
    """Check ``alibi_bias(num_heads, t_q, t_k=None)`` = −slope·(q_pos − k_pos), bottom-right positions."""
    name = "alibi_bias"
    cases = []
    for h, t_q, t_k, what in ((4, 5, None, "H = 4, T = S = 5"),
                              (6, 3, 7, "H = 6, T = 3 queries, S = 7 keys (4 cached)"),
                              (8, 1, 6, "H = 8, one query (a decode step), S = 6")):
        s = t_q if t_k is None else t_k

        def judge(j: Judge, h=h, t_q=t_q, t_k=t_k, s=s) -> None:
            got = returned_tensor(j, shape=(h, t_q, s), dtype=F32)
            j.close(got, alibi_oracle(h, t_q, t_k), oracle="the definition",
                    tol_dtype=F32)

        args = (h, t_q) if t_k is None else (h, t_q, t_k)
        cases.append(make_case(name, f"{what}: −slope_h · (q_pos − k_pos), bottom-right positions",
                               [Call(name, args)], judge))
    return cases


# ---------------------------------------------------------------------------------------------
# 9. relative_position_bucket
# ---------------------------------------------------------------------------------------------
def _bucket_judge(bidirectional: bool, num_buckets: int, max_distance: int, call: int = 0):
    def judge(j: Judge) -> None:
        rel = j.case.calls[call].args[0]
        got = returned_tensor(j, call, shape=rel.shape, dtype=torch.long, hint="return torch.long bucket indices "
                              "(.long() at the end; torch.where of int32 and int64 gives int64)")
        lo, hi = int(got.min()), int(got.max())
        j.require(lo >= 0 and hi < num_buckets, f"buckets range {lo} … {hi}; they must lie in [0, "
                  f"{num_buckets}) for num_buckets = {num_buckets}", call=call)
        want = bucket_oracle(rel, bidirectional, num_buckets, max_distance)
        wrong = (got != want).nonzero()
        if len(wrong):
            idx = tuple(int(i) for i in wrong[0])
            j.fail(f"{len(wrong)} of {got.numel()} buckets differ; first at relative_position = "
                   f"{int(rel[idx])}: got {int(got[idx])}, expected {int(want[idx])}",
                   hint=lambda: j.mistake_hint(call))
    return judge


def _bucket_properties(j: Judge) -> None:
    """Defaults, bidirectional: range, exact region, monotone, saturated at max_distance."""
    rel = j.case.calls[0].args[0]
    got = returned_tensor(j, shape=rel.shape, dtype=torch.long, hint="return torch.long bucket indices")
    lo, hi = int(got.min()), int(got.max())
    j.require(lo >= 0 and hi < 32, f"buckets range {lo} … {hi}; they must lie in [0, 32) for num_buckets = 32")
    for d, b in zip(rel.tolist(), got.tolist(), strict=True):
        want = (16 if d > 0 else 0) + abs(d)
        if abs(d) < 8 and b != want:
            j.require(False, f"relative_position = {d} is in the exact region (|d| < 8 = num_buckets // 4): "
                      f"expected bucket {want}, got {b}")
    for positive, offset in ((True, 16), (False, 0)):
        side = rel > 0 if positive else rel <= 0
        dist, order = rel[side].abs().sort()
        seq = got[side][order]
        drops = (seq[1:] < seq[:-1]).nonzero().flatten()
        which = "positive" if positive else "negative"
        j.require(len(drops) == 0, f"buckets of {which} distances must not decrease as |distance| grows; they "
                  f"do at |distance| = {int(dist[int(drops[0]) + 1]) if len(drops) else 0}")
        far = seq[dist >= 128]
        j.require(bool((far == offset + 15).all()), f"every {which} distance with |d| ≥ max_distance = 128 "
                  f"shares the last bucket {offset + 15}; got {sorted(set(far.tolist()))[:6]}")


@NOTEBOOK.exercise("relative_position_bucket", parts=("core", "unidirectional"))
def _bucket_cases() -> list[Case]:
    """Check ``relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
    max_distance=128)`` against T5's buckets and their properties: part "core" (bidirectional) or
    "unidirectional"; None checks both."""
    name = "relative_position_bucket"
    wide = torch.arange(-200, 201)
    grid = torch.arange(9)[None, :] - torch.arange(6)[:, None] * 7  # key − query, (6, 9)
    past = torch.arange(-300, 40)
    return [
        make_case(name, "relative positions −200 … 200, defaults: buckets in [0, 32), exact below 8, monotone in "
                  "|distance|, saturated from 128 on", [Call(name, (wide,))], _bucket_properties),
        make_case(name, "relative positions −200 … 200, defaults: equal to T5's buckets",
                      [Call(name, (wide,))], _bucket_judge(True, 32, 128)),
        make_case(name, "a (6, 9) grid of key − query positions, num_buckets = 16, max_distance = 40",
                          [Call(name, (grid,), {"num_buckets": 16, "max_distance": 40})], _bucket_judge(True, 16, 40)),
        # each unidirectional case also runs the answer bidirectionally (not judged there): it tells a
        # key − query sign error apart from keeping future keys, which agree when unidirectional
        make_case(name, "bidirectional=False, −300 … 39, defaults: future keys in bucket 0, past ones in 0 … 31",
                              [Call(name, (wide,)), Call(name, (past,), {"bidirectional": False})],
                              _bucket_judge(False, 32, 128, call=1), part="unidirectional"),
        make_case(name, "bidirectional=False, num_buckets = 8, max_distance = 20",
                                  [Call(name, (wide,)), Call(name, (past,), {"bidirectional": False, "num_buckets": 8,
                                                                             "max_distance": 20})],
                                  _bucket_judge(False, 8, 20, call=1), part="unidirectional"),
    ]
