"""The catalogue of known wrong implementations of notebook 03's relative positions on the
scores (``alibi_slopes``, ``alibi_bias``, ``relative_position_bucket``), with their hints: the
part of ``MISTAKES`` (mistakes.py) these three exercises hold.

As in mistakes.py, each function has its exercise's signature and is self-contained.
"""

from __future__ import annotations

import math

import torch

from ..hints import Mistake

__all__ = ["RELATIVE_MISTAKES"]


# ---------------------------------------------------------------------------------------------
# 7. alibi_slopes
# ---------------------------------------------------------------------------------------------
def _pow2(n: int, *, h0: int = 1, eight: float = 8.0) -> list[float]:
    return [2.0 ** (-eight * h / n) for h in range(h0, n + h0)]


def _press(n: int, *, pick=lambda s, k: s[0::2][:k], pow2=_pow2) -> list[float]:
    if n & (n - 1) == 0:
        return pow2(n)
    p = 2 ** math.floor(math.log2(n))
    return pow2(p) + pick(_press(2 * p, pick=pick, pow2=pow2), n - p)


def _f32(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _slopes_pow2_everywhere(num_heads):
    return _f32(_pow2(num_heads))


def _slopes_even_h(num_heads):
    return _f32(_press(num_heads, pick=lambda s, k: s[1::2][:k]))


def _slopes_first_of_2n(num_heads):
    return _f32(_press(num_heads, pick=lambda s, k: s[:k]))


def _slopes_from_zero(num_heads):
    return _f32(_press(num_heads, pow2=lambda n: _pow2(n, h0=0)))


def _slopes_no_eight(num_heads):
    return _f32(_press(num_heads, pow2=lambda n: _pow2(n, eight=1.0)))


def _slopes_reversed(num_heads):
    return _f32(_press(num_heads)[::-1])


def _slopes_sorted(num_heads):
    return _f32(sorted(_press(num_heads), reverse=True))


def _slopes_sorted_ascending(num_heads):
    return _f32(sorted(_press(num_heads)))


def _slopes_power_above(num_heads):
    n = 2 ** math.ceil(math.log2(num_heads))
    return _f32(_pow2(n)[:num_heads])


# ---------------------------------------------------------------------------------------------
# 8. alibi_bias
# ---------------------------------------------------------------------------------------------
def _bias(num_heads, t_q, t_k=None, *, form="right"):
    s = t_q if t_k is None else t_k
    slopes = _f32(_press(num_heads))[:, None, None]
    q = torch.arange(t_q, dtype=torch.float32)[:, None] + (0 if form == "top-left" else s - t_q)
    k = torch.arange(s, dtype=torch.float32)[None, :]
    if form == "bloom":
        return (slopes * k).expand(num_heads, t_q, s).contiguous()
    if form == "abs":
        return -slopes * (q - k).abs()
    if form == "plus":
        return slopes * (q - k)
    if form == "masked":
        return (-slopes * (q - k)).masked_fill(k > q, float("-inf"))
    if form == "last":  # every row measured from the last key, S − 1 (BLOOM's form shifted)
        return (-slopes * (s - 1 - k)).expand(num_heads, t_q, s).contiguous()
    return -slopes * (q - k)


def _bias_bloom(num_heads, t_q, t_k=None):
    return _bias(num_heads, t_q, t_k, form="bloom")


def _bias_abs(num_heads, t_q, t_k=None):
    return _bias(num_heads, t_q, t_k, form="abs")


def _bias_top_left(num_heads, t_q, t_k=None):
    return _bias(num_heads, t_q, t_k, form="top-left")


def _bias_plus(num_heads, t_q, t_k=None):
    return _bias(num_heads, t_q, t_k, form="plus")


def _bias_pow2_slopes(num_heads, t_q, t_k=None):
    s = t_q if t_k is None else t_k
    slopes = _f32(_pow2(num_heads))[:, None, None]
    q = torch.arange(t_q, dtype=torch.float32)[:, None] + (s - t_q)
    return -slopes * (q - torch.arange(s, dtype=torch.float32)[None, :])


def _bias_masked(num_heads, t_q, t_k=None):
    return _bias(num_heads, t_q, t_k, form="masked")


def _bias_from_last_key(num_heads, t_q, t_k=None):
    return _bias(num_heads, t_q, t_k, form="last")


def _bias_square(num_heads, t_q, t_k=None):
    return _bias(num_heads, t_q)


# ---------------------------------------------------------------------------------------------
# 9. relative_position_bucket (Hugging Face's T5Attention._relative_position_bucket, varied)
# ---------------------------------------------------------------------------------------------
def _t5(relative_position, bidirectional=True, num_buckets=32, max_distance=128, *, clamp=1, halve=True,
        direction=1, future=False, log_base="ratio", rounding="floor", half_offset=False, uni_abs=False,
        offset_ge0=False, exact_plus=0):
    rel = direction * relative_position
    buckets = torch.zeros_like(rel, dtype=torch.long)
    if bidirectional:
        if halve:
            num_buckets //= 2
        upper = rel >= 0 if offset_ge0 else rel > 0
        buckets = buckets + upper.long() * (num_buckets // 2 if half_offset else num_buckets)
        rel = rel.abs()
    else:
        rel = rel.abs() if uni_abs else torch.clamp(rel, min=0) if future else -torch.clamp(rel, max=0)
    max_exact = num_buckets // 2 + exact_plus
    is_small = rel < max_exact
    scale = math.log(max_distance / max_exact) if log_base == "ratio" else math.log(max_distance)
    value = torch.log(rel.float() / max_exact) / scale * (num_buckets - max_exact)
    value = value.round() if rounding == "round" else value
    large = max_exact + value.long()
    large = torch.clamp(large, max=num_buckets - clamp)
    return (buckets + torch.where(is_small, rel, large)).long()


def _t5_clamp_off_by_one(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, clamp=0)


def _t5_not_halved(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, halve=False)


def _t5_not_halved_half_offset(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, halve=False, half_offset=True)


def _t5_query_minus_key(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, direction=-1)


def _t5_future(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, future=True)


def _t5_log_max_distance(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, log_base="max")


def _t5_rounded(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, rounding="round")


def _t5_unidirectional_abs(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, uni_abs=True)


def _t5_offset_at_zero(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, offset_ge0=True)


def _t5_max_exact_plus_one(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return _t5(relative_position, bidirectional, num_buckets, max_distance, exact_plus=1)


# ---------------------------------------------------------------------------------------------
# The catalogue of these three exercises
# ---------------------------------------------------------------------------------------------
HINT_ASCENDING = "list the slopes from the largest, 2^(−8/H), down to the smallest"

RELATIVE_MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "alibi_slopes": (
        Mistake("power-of-two rule for every H", "2^(−8h/H) is the rule for H a power of two only: otherwise "
                "take the n = 2^floor(log2 H) slopes of n heads, then every other slope of 2n heads "
                "(h = 1, 3, 5, …)", _slopes_pow2_everywhere),
        Mistake("even h of 2n", "the extra slopes are the slopes of 2n heads at odd h (1, 3, 5, …), "
                "i.e. slopes_2n[0::2], not [1::2]", _slopes_even_h),
        Mistake("first of 2n", "take every other slope of 2n heads (slopes_2n[0::2]), not the first H − n",
                _slopes_first_of_2n),
        Mistake("h from 0", "h runs from 1 to H: the first slope is 2^(−8/H), not 1", _slopes_from_zero),
        Mistake("no 8", "the slopes are 2^(−8h/H): the exponent has the factor 8 (the last slope is 2^−8)",
                _slopes_no_eight),
        Mistake("ascending", HINT_ASCENDING, _slopes_reversed),
        Mistake("sorted ascending", HINT_ASCENDING, _slopes_sorted_ascending),
        Mistake("sorted", "keep Press et al.'s order, not one list sorted by size: the n slopes of n heads "
                "first, then the extra ones (every other slope of 2n heads) after them", _slopes_sorted),
        Mistake("power above", "start from the closest power of two below H (n = 2^floor(log2 H)), then add "
                "every other slope of 2n heads", _slopes_power_above),
    ),
    "alibi_bias": (
        Mistake("BLOOM's slope·k_pos", "BLOOM's slope · k_pos gives the same attention after the softmax "
                "but a different tensor: the bias is −slope · (q_pos − k_pos)", _bias_bloom),
        Mistake("|q − k|", "−slope·|q_pos − k_pos| is not the bias: use −slope · (q_pos − k_pos) for every "
                "(i, j), positive above the diagonal (the causal mask removes those)", _bias_abs),
        Mistake("top-left", "queries sit at the end (bottom-right, as the causal mask): q_pos = S − T + i, "
                "not i", _bias_top_left),
        Mistake("sign", "the bias is −slope · (q_pos − k_pos): keys further in the past get a more negative "
                "bias", _bias_plus),
        Mistake("t_k ignored", "S = t_k when it is given: the bias is (H, T, S)", _bias_square),
        Mistake("power-of-two slopes for every H", "take the slopes from alibi_slopes(num_heads): 2^(−8h/H) "
                "holds only when H is a power of two", _bias_pow2_slopes),
        Mistake("masked above the diagonal", "return the bias for every (i, j), without −inf: keys after the "
                "query get a positive bias here, and the causal mask (added separately) removes them",
                _bias_masked),
        Mistake("distance from the last key", "measure each row from its own query: −slope · (q_pos − k_pos) "
                "with q_pos = S − T + i; −slope · (S − 1 − k_pos) is the last query's row repeated",
                _bias_from_last_key),
    ),
    "relative_position_bucket": (
        Mistake("clamp off by one", "clamp the large buckets to num_buckets − 1 (num_buckets after halving "
                "when bidirectional): the last bucket index is one below the count", _t5_clamp_off_by_one),
        Mistake("not halved", "with bidirectional=True each direction gets num_buckets // 2 buckets: halve "
                "num_buckets first (positive distances add num_buckets // 2)", _t5_not_halved),
        Mistake("not halved, offset halved", "with bidirectional=True each direction gets num_buckets // 2 "
                "buckets: halve num_buckets first (positive distances add num_buckets // 2)",
                _t5_not_halved_half_offset),
        Mistake("query − key", "relative_position = key_pos − query_pos: positive means the key comes "
                "after the query (the upper half of the buckets when bidirectional)", _t5_query_minus_key),
        Mistake("future kept", "with bidirectional=False only keys before the query count: use "
                "−min(relative_position, 0), so every key after the query falls in bucket 0", _t5_future),
        Mistake("log(max_distance)", "the large buckets grow with log(n / max_exact) / log(max_distance / "
                "max_exact), not / log(max_distance)", _t5_log_max_distance),
        Mistake("rounded", "the large buckets are truncated (.to(torch.long)), not rounded", _t5_rounded),
        Mistake("|d| when unidirectional", "with bidirectional=False use −min(relative_position, 0), not "
                "|relative_position|: keys after the query all fall in bucket 0", _t5_unidirectional_abs),
        Mistake("offset for d = 0", "only keys after the query (relative_position > 0, not ≥ 0) get the "
                "offset num_buckets // 2: distance 0 stays in bucket 0", _t5_offset_at_zero),
        Mistake("max_exact + 1", "max_exact = num_buckets // 2 (num_buckets after halving when "
                "bidirectional): exactly half of a direction's buckets are exact", _t5_max_exact_plus_one),
    ),
}
