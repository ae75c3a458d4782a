"""Checks for notebook 07, MQA, GQA and MLA.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones judged against the
reference solution) in a sandbox. ``cases.py`` holds the cases and their float64 oracles (GQA
with ``F.scaled_dot_product_attention(enable_gqa=True)``, MLA written with torch's pieces, both
on the whole sequence: cached == uncached, absorbed == naive), ``mistakes.py`` the catalogue of
known wrong implementations whose hints the feedback shows.

Call graph (one bug costs points once): ``GroupedQueryAttention`` calls ``repeat_kv``;
``MultiHeadLatentAttention`` is checked with the learner's ``LatentCache`` (the cases build it);
``mha_to_gqa`` builds a ``GroupedQueryAttention``. A callee that fails its own checks is replaced
by the course's version while the caller is checked.
"""

from __future__ import annotations

from ..run import NotebookChecks, run_checks
from .cases import EXERCISES, visible_cases
from .mistakes import HINTS, MISTAKES

__all__ = [
    "EXERCISES",
    "HINTS",
    "MISTAKES",
    "NOTEBOOK",
    "check_GroupedQueryAttention",
    "check_LatentCache",
    "check_MultiHeadLatentAttention",
    "check_attention_cache_bytes_per_token",
    "check_mha_to_gqa",
    "check_repeat_kv",
    "visible_cases",
]

NOTEBOOK = NotebookChecks(
    EXERCISES, lambda exercise: visible_cases(exercise), "tfcourse.reference.nb07_gqa_mla", "07_gqa_mla.ipynb",
    calls={"GroupedQueryAttention": ("repeat_kv",),
           "MultiHeadLatentAttention": ("LatentCache",),
           "mha_to_gqa": ("GroupedQueryAttention", "repeat_kv")})


def _run(exercise: str, obj, part: str | None = None) -> None:
    run_checks(exercise, obj, visible_cases(exercise), part=part, notebook=NOTEBOOK)


def check_repeat_kv(repeat_kv) -> None:
    """Check ``repeat_kv(x, n_rep)``: (B, G, S, Dh) -> (B, G·n_rep, S, Dh), head h = KV head h // n_rep."""
    _run("repeat_kv", repeat_kv)


def check_GroupedQueryAttention(GroupedQueryAttention, part: str | None = None) -> None:
    """Check ``GroupedQueryAttention(d_model, num_heads, num_kv_heads, head_dim=None, rope_theta=10000.0)``.

    part: "core" (no cache: G = H, G = 1, 1 < G < H, a given head_dim) or "cache" (a KVCache holding
    the G rotated KV heads; cached == uncached); None: both."""
    _run("GroupedQueryAttention", GroupedQueryAttention, part)


def check_LatentCache(LatentCache) -> None:
    """Check ``LatentCache()``: c_kv/k_rope None when empty, update appends on the sequence axis and
    returns the whole cache, seq_len counts positions, ValueError for chunks that do not fit."""
    _run("LatentCache", LatentCache)


def check_MultiHeadLatentAttention(MultiHeadLatentAttention, part: str | None = None) -> None:
    """Check ``MultiHeadLatentAttention(d_model, num_heads, kv_lora_rank, qk_nope_head_dim,
    qk_rope_head_dim, v_head_dim, q_lora_rank=None, rope_theta=10000.0)``.

    part: "core" (naive, no cache), "cache" (a LatentCache holding the latent and the rotated
    shared key) or "absorb" (absorb=True == naive, kv_b_proj never called); None: all."""
    _run("MultiHeadLatentAttention", MultiHeadLatentAttention, part)


def check_attention_cache_bytes_per_token(attention_cache_bytes_per_token) -> None:
    """Check ``attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, ...)`` for
    mha, mqa, gqa and mla (a Python int)."""
    _run("attention_cache_bytes_per_token", attention_cache_bytes_per_token)


def check_mha_to_gqa(mha_to_gqa) -> None:
    """Check ``mha_to_gqa(mha, num_kv_heads)`` (optional, 0 points): mean-pooled KV heads, a new module."""
    _run("mha_to_gqa", mha_to_gqa)
