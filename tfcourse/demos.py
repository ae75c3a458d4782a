"""Small constructed examples that the notebooks' demo cells show.

They live here, not in a notebook cell, so that every demo cell can build what it shows on its
own (cells run in any order after the setup cells) and so that two cells never drift apart.

Notation (docs/conventions.md): B batch, T query length, S key length, D model width, H heads,
Dh head width.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["HEAD_NAMES", "TOKENS", "blocked_future", "hand_built_layer"]

# Notebook 02, section 6: a sentence whose words have readable features, and four head jobs.
TOKENS = ["<s>", "the", "cat", "sat", "on", "the", "mat", ".", "the", "cat", "was", "tired"]
HEAD_NAMES = ["previous token", "first token", "subject", "same word"]


def blocked_future(n: int) -> torch.Tensor:
    """Causal mask in ``nn.MultiheadAttention``'s polarity, (n, n) bool, ``True`` = may NOT attend."""
    return torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)  # (T, T)


def hand_built_layer() -> tuple[torch.Tensor, nn.MultiheadAttention]:
    """Token states of ``TOKENS`` and a causal 4-head layer whose heads do ``HEAD_NAMES``.

    Returns ``x`` (1, T, 32) float32 and an ``nn.MultiheadAttention(32, 4, bias=False,
    batch_first=True)`` in eval mode; call it with ``attn_mask=blocked_future(T)``. Each token's
    state holds a constant 1, "is the first token", word classes (noun, animal, verb, function
    word, adjective), its position as cos/sin pairs of 4 frequencies, and the identity of the two
    repeated words. Head h's queries and keys (rows 8h … 8h + 7 of the q and k weights, in
    ``nn.Linear``'s (out, in) layout, i.e. W_Qᵀ and W_Kᵀ) read different features:

    - head 0, previous token: q_t is the position of t − 1 (a rotation of t's cos/sin pairs by one
      step, which is linear), k_s the position of s;
    - head 1, first token: every query is the constant feature, only the first token has the key;
    - head 2, subject: verbs and adjectives look for an animal noun, others rest on the first token;
    - head 3, same word: a word looks for copies of itself, others rest on the first token.

    W_V and W_O are identities, so each head returns the (features of the) tokens it attends.
    Source: built for this course; the head types follow Clark et al. 2019 (syntax), Wang et al.
    2022 (duplicate-token), Olsson et al. 2022 (previous-token) and Xiao et al. 2023 (sinks).
    """
    features = ["one", "first", "noun", "animal", "verb", "function", "adjective"]
    kinds = {"<s>": ["first"], "cat": ["noun", "animal"], "mat": ["noun"], "sat": ["verb"],
             "was": ["verb"], "tired": ["adjective"]}
    col = {name: i for i, name in enumerate(features)}  # columns 0-6
    freqs = [0.3, 0.6, 1.2, 2.4]
    pos = len(features)  # columns 7-14: cos, sin of each frequency
    repeated = ["the", "cat"]
    word = pos + 2 * len(freqs)  # columns 15-16: which repeated word
    d_model, num_heads = 32, 4
    head_dim = d_model // num_heads  # 8
    sharp = math.sqrt(head_dim)  # undo attention's 1/sqrt(Dh): the strengths below are raw scores

    x = torch.zeros(len(TOKENS), d_model)  # (T, D)
    for t, tok in enumerate(TOKENS):
        x[t, col["one"]] = 1.0
        for kind in kinds.get(tok, ["function"]):
            x[t, col[kind]] = 1.0
        for f, w in enumerate(freqs):
            x[t, pos + 2 * f], x[t, pos + 2 * f + 1] = math.cos(w * t), math.sin(w * t)
        if tok in repeated:
            x[t, word + repeated.index(tok)] = 1.0

    q_weight = torch.zeros(d_model, d_model)  # (D, D) = W_Qᵀ, (out, in): rows 8h … 8h + 7 are head h
    k_weight = torch.zeros(d_model, d_model)  # (D, D) = W_Kᵀ
    for f, w in enumerate(freqs):  # head 0 (rows 0-7): rotate the position back by one step
        r = 2 * f
        q_weight[r, pos + r], q_weight[r, pos + r + 1] = 3 * sharp * math.cos(w), 3 * sharp * math.sin(w)
        q_weight[r + 1, pos + r] = -3 * sharp * math.sin(w)
        q_weight[r + 1, pos + r + 1] = 3 * sharp * math.cos(w)
        k_weight[r, pos + r], k_weight[r + 1, pos + r + 1] = 1.0, 1.0
    q_weight[8, col["one"]], k_weight[8, col["first"]] = 6 * sharp, 1.0  # head 1 (rows 8-15)
    q_weight[16, col["verb"]] = q_weight[16, col["adjective"]] = 6 * sharp  # head 2 (rows 16-23)
    k_weight[16, col["animal"]] = 1.0
    q_weight[17, col["one"]], k_weight[17, col["first"]] = 4 * sharp, 1.0
    for i in range(len(repeated)):  # head 3 (rows 24-31)
        q_weight[24 + i, word + i], k_weight[24 + i, word + i] = 6 * sharp, 1.0
    q_weight[26, col["one"]], k_weight[26, col["first"]] = 4 * sharp, 1.0

    layer = nn.MultiheadAttention(d_model, num_heads, bias=False, batch_first=True).eval()
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.cat([q_weight, k_weight, torch.eye(d_model)]))  # (3D, D): W_V = I
        layer.out_proj.weight.copy_(torch.eye(d_model))  # (D, D): W_O = I
    return x[None], layer  # (1, T, D)
