"""Checks for notebook 06, causal decoding and the KV cache.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution where the answer is deterministic) in a sandbox. ``cases.py`` holds the cases
and their oracles (the attention, block and model written with torch's own pieces and run on the
whole sequence: cached == uncached; sampling frequencies against the softmax of the filtered
logits), ``mistakes.py`` the catalogue of known wrong implementations whose hints the feedback
shows, ``probes.py`` the tiny deterministic model ``generate`` is checked on.

Call graph (one bug costs points once): the cases build the learner's ``KVCache`` for
``CausalSelfAttention``, ``DecoderBlock`` and ``DecoderLM`` (and ``generate`` builds its own);
``DecoderBlock`` builds ``CausalSelfAttention``, ``DecoderLM`` builds ``DecoderBlock`` (hence
``CausalSelfAttention``); ``generate`` calls ``sample_next_token``. A callee that fails its own
checks is replaced by the course's version while the caller is checked. The chain is listed
transitively, since a stand-in ``DecoderBlock`` builds whatever ``CausalSelfAttention`` its
namespace holds.
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
    "check_CausalSelfAttention",
    "check_DecoderBlock",
    "check_DecoderLM",
    "check_KVCache",
    "check_apply_repetition_penalty",
    "check_generate",
    "check_kv_cache_bytes",
    "check_sample_next_token",
    "visible_cases",
]

NOTEBOOK = NotebookChecks(
    EXERCISES, lambda exercise: visible_cases(exercise), "tfcourse.reference.nb06_kv_cache", "06_kv_cache.ipynb",
    calls={"CausalSelfAttention": ("KVCache",),
           "DecoderBlock": ("CausalSelfAttention", "KVCache"),
           "DecoderLM": ("DecoderBlock", "CausalSelfAttention", "KVCache"),
           "generate": ("KVCache", "sample_next_token")})


def _run(exercise: str, obj, part: str | None = None) -> None:
    run_checks(exercise, obj, visible_cases(exercise), part=part, notebook=NOTEBOOK)


def check_KVCache(KVCache) -> None:  # the exercise's own name
    """Check ``KVCache()``: k/v None when empty, ``update(k, v)`` appends on the sequence axis and
    returns the whole cache, ``seq_len`` counts positions, ValueError for chunks that do not fit."""
    _run("KVCache", KVCache)


def check_CausalSelfAttention(CausalSelfAttention, part: str | None = None) -> None:
    """Check ``CausalSelfAttention(d_model, num_heads, rope_theta=10000.0)``.

    part: "core" (no cache: SDPA with RoPE and a causal mask, float64/float32) or "cache" (prefill,
    one-token steps and chunks == the no-cache rows; cache.k holds the rotated keys); None: both."""
    _run("CausalSelfAttention", CausalSelfAttention, part)


def check_DecoderBlock(DecoderBlock) -> None:
    """Check ``DecoderBlock(d_model, num_heads, d_ff, rope_theta=10000.0, eps=1e-6)``, with and
    without a cache, against the pre-norm block written with torch's pieces."""
    _run("DecoderBlock", DecoderBlock)


def check_DecoderLM(DecoderLM, part: str | None = None) -> None:
    """Check ``DecoderLM(vocab_size, d_model, num_layers, num_heads, d_ff, rope_theta=10000.0,
    tie_embeddings=False)``. part: "core" (no cache) or "cache_and_tied"; None: both."""
    _run("DecoderLM", DecoderLM, part)


def check_sample_next_token(sample_next_token, part: str | None = None) -> None:
    """Check ``sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None)``.

    part: "core" (greedy, temperature, the generator, errors) or "filters" (top-k, top-p); None:
    both. Sampling is judged statistically (20 000 draws per row, tolerance in the message)."""
    _run("sample_next_token", sample_next_token, part)


def check_generate(generate, part: str | None = None) -> None:
    """Check ``generate(model, input_ids, max_new_tokens, ...)`` on a probe model.

    part: "core" (greedy with and without the cache) or "cache_use" (how the model is called,
    the sampling options, the generator); None: both."""
    _run("generate", generate, part)


def check_kv_cache_bytes(kv_cache_bytes) -> None:
    """Check ``kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1,
    bytes_per_element=2)`` = 2·L·G·Dh·S·B·bytes (a Python int)."""
    _run("kv_cache_bytes", kv_cache_bytes)


def check_apply_repetition_penalty(apply_repetition_penalty) -> None:
    """Check ``apply_repetition_penalty(logits, input_ids, penalty)`` (optional, 0 points)."""
    _run("apply_repetition_penalty", apply_repetition_penalty)
