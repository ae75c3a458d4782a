"""Notebook 07's catalogue of known wrong implementations, with the hint each one earns.

Every entry has its exercise's signature (a class for ``GroupedQueryAttention``, ``LatentCache``
and ``MultiHeadLatentAttention``). A hint is shown only when exactly one catalogued mistake
reproduces the answer on every call of the failing case (``Judge.mistake_hint``); an answer that
raised is explained by a mistake that raises the same exception with the same message
(``cases.error_hint``).

The modules are built from the setup cell's components (``causal_mask``,
``scaled_dot_product_attention``, ``rope_cos_sin``, ``apply_rope``, ``RMSNorm``, ``KVCache``), so
a catalogued mistake computes what a learner's cell with that mistake computes. Correct
``repeat_kv``, ``LatentCache`` and ``GroupedQueryAttention`` live here too: an
``Instance("LatentCache")`` or ``Instance("KVCache")`` of a mistake's run is looked up in this
module's globals, and a wrong ``mha_to_gqa`` builds this module's ``GroupedQueryAttention``.
Nothing here imports notebook 07's reference (the grader's child may import this package and
cannot).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from tfcourse.reference.nb01_attention import causal_mask, scaled_dot_product_attention
from tfcourse.reference.nb03_positional_encodings import apply_rope, rope_cos_sin
from tfcourse.reference.nb04_normalisation import RMSNorm
from tfcourse.reference.nb06_kv_cache import KVCache

from ..hints import Mistake
from .mla_mistakes import MLAForward, MLAMistakes

__all__ = ["HINTS", "MISTAKES", "KVCache", "LatentCache", "GroupedQueryAttention", "repeat_kv"]

HINTS = {
    # repeat_kv
    "tile": "query head h reads KV head h // n_rep: repeat each KV head n_rep times in place "
            "(x.repeat_interleave(n_rep, dim=1)); x.repeat(1, n_rep, 1, 1) tiles the heads "
            "(0, 1, 0, 1, ...)",
    "repeat_dim": "repeat along the head axis, dim 1 of (B, G, S, Dh): the result is (B, G·n_rep, S, Dh)",
    "repeat_error": "raise ValueError when n_rep < 1",
    "repeat_copy_grad": "return a tensor with x's values and dtype: no arithmetic on x",
    # GroupedQueryAttention
    "kv_size": "k_proj and v_proj map D -> G·Dh = num_kv_heads·head_dim (only q_proj has H·Dh "
               "outputs): nn.Linear(d_model, num_kv_heads * head_dim, bias=False)",
    "thirds": "q, k and v have different widths in GQA (H·Dh, G·Dh, G·Dh): split a fused "
              "projection at those sizes (torch.split(qkv, [H*Dh, G*Dh, G*Dh], -1)), not into "
              "equal thirds",
    "cache_repeated": "cache the G KV heads, not the repeated ones: k, v = cache.update(k, v) with "
                      "(B, G, T, Dh), then repeat_kv (saving that memory is the point of GQA)",
    "gqa_offset": "with a cache the new tokens sit at absolute positions P .. P + T - 1 "
                  "(P = cache.seq_len before update): rope_cos_sin(torch.arange(P, P + T), ...)",
    "gqa_top_left": "with a cache the causal mask is bottom-right: query i sees keys j <= P + i; "
                    "F.scaled_dot_product_attention(is_causal=True) is top-left when T != S: pass "
                    "causal_mask(T, S) as the mask",
    "head_dim": "use the head_dim argument when it is given (head_dim = d_model // num_heads only "
                "when it is None): q_proj is D -> H·head_dim, o_proj H·head_dim -> D",
    "gqa_errors": "raise ValueError in __init__ when num_heads % num_kv_heads != 0, and when head_dim is "
                  "None and d_model % num_heads != 0",
    "gqa_scale_d": "scale the scores by 1/sqrt(head_dim), the per-head width",
    "gqa_pre_rope_cache": "rotate k before cache.update: the cache holds keys after RoPE",
    # LatentCache
    "lc_axis": "append along the sequence axis: torch.cat((self.c_kv, c_kv), dim=1) for (B, S, Dc) "
               "tensors (dim=2 is the width)",
    "lc_return_new": "update returns the whole cache (B, P + T, Dc) and (B, P + T, dr), old and new "
                     "positions, not only what it was given",
    "lc_seq_len": "seq_len counts cached positions (c_kv.size(1)), not update calls or the width",
    "lc_validate": "update raises ValueError itself when c_kv and k_rope differ in B or T, or when B, "
                   "the width or the dtype differ from what is cached",
    "lc_swap": "update returns (c_kv, k_rope) in that order, and c_kv grows with c_kv, k_rope "
               "with k_rope",
    "lc_property": "make seq_len a property (@property above def seq_len): it is read as "
                   "cache.seq_len, without parentheses",
    # MultiHeadLatentAttention
    "mla_scale": "MLA scales the scores by 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), the width "
                 "of q·k, not 1/sqrt(qk_nope_head_dim)",
    "rope_nope": "only the qk_rope_head_dim part carries position: RoPE rotates q_rope and k_rope "
                 "(tables of width dr), never q_nope, k_nope or the latent",
    "mla_rope_latent": "RoPE never touches the latent c_kv: it stays position-free so that it is cached "
                       "once and W_uk can be absorbed; rotate only q_rope and the shared k_rope (width dr)",
    "mla_kv_split": "kv_b_proj's output is per head: view it as (B, S, H, dn + dv), then split the last "
                    "axis into k_nope (dn) and v (dv); it is not [K of all heads | V of all heads]",
    "absorb_shapes": "in the absorbed path every product meets Dc with Dc: q_nope (B, H, T, dn) @ W_uk "
                     "(H, dn, Dc) -> (B, H, T, Dc), and the weighted latent (B, H, T, Dc) @ W_uvᵀ "
                     "(W_uv.transpose(-1, -2), (H, Dc, dv)) -> (B, H, T, dv)",
    "per_head_rope": "kv_a_proj_with_mqa is D -> Dc + dr: the rope key is ONE head of width dr "
                     "shared by all heads (broadcast it), not H heads of width dr",
    "absorb_transposed": "kv_b_proj.weight is (H·(dn + dv), Dc) (nn.Linear stores out × in): view it "
                         "as (H, dn + dv, Dc) without transposing; W_uk = w[:, :dn], W_uv = w[:, dn:]",
    "latent_norm": "normalise the latent: c_kv = kv_a_layernorm(c_kv) before it is cached and "
                   "up-projected",
    "mla_full_cache": "the LatentCache holds the normalised latent c_kv (B, S, Dc) and the rotated "
                      "shared key (B, S, dr) only: update it before kv_b_proj and recompute K and V "
                      "from what it returns",
    "mla_interleaved": "the course's MLA (Hugging Face with rope_interleave=False) pairs dims i and "
                       "i + dr/2 (rotate-half: rope_cos_sin and apply_rope), not the interleaved "
                       "(2i, 2i+1) pairs of DeepSeek's official code",
    "mla_offset": "with a cache the new tokens sit at absolute positions P .. P + T - 1 "
                  "(P = cache.seq_len before update) for q_rope and k_rope",
    "absorb_calls": "with absorb=True, K and V are never built per head: never call self.kv_b_proj(...) "
                    "and never multiply the latent by its weight (F.linear, @, einsum); fold W_uk into the "
                    "query (q_nope @ W_uk) and apply W_uv after attention ((weights @ c_kv) @ W_uvᵀ)",
    "mla_pre_rope_cache": "rotate k_rope before cache.update: the cache holds the shared key after "
                          "RoPE, at its own position",
    "q_norm": "with q_lora_rank, q = q_b_proj(q_a_layernorm(q_a_proj(x))): the query latent is "
              "normalised too",
    "mla_mask": "mask the future with the bottom-right causal_mask(T, S) (True = may attend)",
    # attention_cache_bytes_per_token
    "bytes_two": "K and V are both cached: mha/mqa/gqa count 2 · L · (heads) · Dh · bytes",
    "mla_heads": "MLA caches one latent (Dc) and one shared rope key (dr) per token and layer, for "
                 "all heads together: L · (Dc + dr) · bytes, no factor H",
    "mla_two": "MLA caches the latent c_kv and the rope key k_rope, not K and V: L · (Dc + dr) · bytes, "
               "no factor 2",
    "gqa_heads": "gqa caches the G = num_kv_heads KV heads (mqa one): 2 · L · G · Dh · bytes, not H",
    "bytes_int": "return a Python int (int(...) of it): a byte count is exact; a float, a numpy integer "
                 "or a 0-dim tensor is not a Python int",
    "bytes_errors": "raise ValueError for an unknown kind, for gqa without num_kv_heads and for mla "
                    "without kv_lora_rank or qk_rope_head_dim",
    # mha_to_gqa
    "pool_first": "mean-pool each group: the new KV head g is the mean of the R old heads "
                  "g·R .. g·R + R - 1 (Ainslie et al.), not the first of them",
    "pool_sum": "mean-pool, don't sum: divide the group's sum by R (weight.view(G, R, Dh, D).mean(1))",
    "pool_strided": "group consecutive heads: KV head g pools heads g·R .. g·R + R - 1 (query head h "
                    "reads KV head h // R), not heads g, g + G, g + 2G, ...",
    "pool_inplace": "return a NEW GroupedQueryAttention and leave the input module unchanged (build "
                    "one and copy the weights into it)",
    "pool_errors": "raise ValueError when mha.num_kv_heads != mha.num_heads (not MHA) or when num_heads "
                   "% num_kv_heads != 0",
}


# ---------------------------------------------------------------------------------------------
# repeat_kv
# ---------------------------------------------------------------------------------------------
def repeat_kv(x, n_rep):
    """A correct repeat_kv (what the catalogued modules below use)."""
    if n_rep < 1:
        raise ValueError("n_rep must be >= 1")
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def _rk_tile(x, n_rep):
    if n_rep < 1:
        raise ValueError("n_rep must be >= 1")
    return x.repeat(1, n_rep, 1, 1)


def _rk_seq_axis(x, n_rep):
    if n_rep < 1:
        raise ValueError("n_rep must be >= 1")
    return x.repeat_interleave(n_rep, dim=2)


def _rk_last_axis(x, n_rep):
    if n_rep < 1:
        raise ValueError("n_rep must be >= 1")
    return x.repeat_interleave(n_rep, dim=-1)


def _rk_no_error(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)


def _rk_hf_swapped(x, n_rep):
    if n_rep < 1:
        raise ValueError("n_rep must be >= 1")
    b, g, s, dh = x.shape
    return x[:, None].expand(b, n_rep, g, s, dh).reshape(b, g * n_rep, s, dh)


# ---------------------------------------------------------------------------------------------
# GroupedQueryAttention
# ---------------------------------------------------------------------------------------------
def _gqa_class(*, tile: bool = False, kv_h: bool = False, thirds: bool = False, cache_repeated: bool = False,
               offset: bool = True, top_left: bool = False, ignore_head_dim: bool = False,
               validate: bool = True, scale_d: bool = False, pre_rope_cache: bool = False) -> type:
    class GQA(nn.Module):
        def __init__(self, d_model, num_heads, num_kv_heads, head_dim=None, rope_theta=10000.0):
            super().__init__()
            if validate and num_heads % num_kv_heads != 0:
                raise ValueError("num_heads must be a multiple of num_kv_heads")
            if head_dim is None or ignore_head_dim:
                if d_model % num_heads != 0:
                    raise ValueError("d_model must be divisible by num_heads")
                head_dim = d_model // num_heads
            self.d_model = d_model
            self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
            self.n_rep = max(num_heads // num_kv_heads, 1)
            self.rope_theta = rope_theta
            kv_heads = num_heads if kv_h else num_kv_heads
            self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=False)
            self.k_proj = nn.Linear(d_model, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(d_model, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(num_heads * head_dim, d_model, bias=False)

        def forward(self, x, cache=None):
            b, t, _ = x.shape
            h, g, dh = self.num_heads, self.num_kv_heads, self.head_dim
            if thirds:
                qkv = torch.cat((self.q_proj(x), self.k_proj(x), self.v_proj(x)), dim=-1)
                q, k, v = qkv.chunk(3, dim=-1)
                q = q.reshape(b, t, h, dh).transpose(1, 2)
                k = k.reshape(b, t, g, dh).transpose(1, 2)
                v = v.reshape(b, t, g, dh).transpose(1, 2)
            else:
                q = self.q_proj(x).view(b, t, h, dh).transpose(1, 2)  # (B, H, T, Dh)
                k = self.k_proj(x).view(b, t, g, dh).transpose(1, 2)  # (B, G, T, Dh)
                v = self.v_proj(x).view(b, t, g, dh).transpose(1, 2)  # (B, G, T, Dh)
            past = 0 if cache is None else cache.seq_len
            start = past if offset else 0
            cos, sin = rope_cos_sin(torch.arange(start, start + t, device=x.device), dh, self.rope_theta)
            q = apply_rope(q, cos, sin)
            if pre_rope_cache and cache is not None:
                k, v = cache.update(k, v)
                cos_all, sin_all = rope_cos_sin(torch.arange(k.size(2), device=x.device), dh, self.rope_theta)
                k = apply_rope(k, cos_all, sin_all)
            else:
                k = apply_rope(k, cos, sin)
            rep = (lambda z: z.repeat(1, self.n_rep, 1, 1)) if tile else (lambda z: repeat_kv(z, self.n_rep))
            if cache_repeated:
                k, v = rep(k), rep(v)
                if cache is not None:
                    k, v = cache.update(k, v)
            else:
                if cache is not None and not pre_rope_cache:
                    k, v = cache.update(k, v)
                k, v = rep(k), rep(v)
            s = k.size(2)
            if top_left:
                mask = torch.ones(t, s, dtype=torch.bool, device=x.device).tril()
            else:
                mask = causal_mask(t, s, device=x.device)
            if scale_d:
                q = q * math.sqrt(dh) / math.sqrt(self.d_model)
            out, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, Dh)
            return self.o_proj(out.transpose(1, 2).reshape(b, t, h * dh))

    return GQA


GroupedQueryAttention = _gqa_class()


# ---------------------------------------------------------------------------------------------
# LatentCache
# ---------------------------------------------------------------------------------------------
def _latent_cache_class(*, axis: int = 1, returns: str = "all", seq_len: str = "positions",
                        validate: bool = True, swap: bool = False, prop: bool = True) -> type:
    class Cache:
        def __init__(self):
            self.c_kv = None
            self.k_rope = None
            self.updates = 0

        def _len(self):
            if self.c_kv is None:
                return 0
            return self.updates if seq_len == "updates" else self.c_kv.size(1 if seq_len == "positions" else 2)

        def update(self, c_kv, k_rope):
            if validate:
                if c_kv.shape[:2] != k_rope.shape[:2]:
                    raise ValueError("c_kv and k_rope differ in B or T")
                if self.c_kv is not None and (c_kv.size(0) != self.c_kv.size(0) or c_kv.size(2) != self.c_kv.size(2)
                                              or k_rope.size(2) != self.k_rope.size(2)
                                              or c_kv.dtype != self.c_kv.dtype or k_rope.dtype != self.k_rope.dtype):
                    raise ValueError("does not fit the cache")
            self.updates += 1
            if self.c_kv is None:
                self.c_kv, self.k_rope = c_kv, k_rope
            else:
                self.c_kv = torch.cat((self.c_kv, c_kv), dim=axis)
                self.k_rope = torch.cat((self.k_rope, k_rope), dim=axis)
            if returns == "new":
                return c_kv, k_rope
            return (self.k_rope, self.c_kv) if swap else (self.c_kv, self.k_rope)

    if prop:
        Cache.seq_len = property(Cache._len)
    else:
        Cache.seq_len = Cache._len
    return Cache


LatentCache = _latent_cache_class()


# ---------------------------------------------------------------------------------------------
# MultiHeadLatentAttention
# ---------------------------------------------------------------------------------------------
def _rope_interleaved(x, positions, theta):
    """Rotate pairs (2i, 2i+1) in place as DeepSeek's official code does (complex numbers in
    float32, precompute_freqs_cis), x (..., T, dr)."""
    dr = x.size(-1)
    freqs = 1.0 / (theta ** (torch.arange(0, dr, 2, device=x.device).float() / dr))
    angles = torch.outer(positions.float(), freqs)  # (T, dr/2)
    rot = torch.polar(torch.ones_like(angles), angles)
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)


def _mla_class(*, scale: str = "both", rope_nope: bool = False, per_head_rope: bool = False,
               absorb_mode: str = "ok", latent_norm: bool = True, cache_mode: str = "latent",
               interleaved: bool = False, offset: bool = True, q_norm: bool = True, rope_latent: bool = False,
               kv_split: str = "per_head") -> type:
    mistakes = MLAMistakes(scale=scale, rope_nope=rope_nope, per_head_rope=per_head_rope,
                           absorb_mode=absorb_mode, latent_norm=latent_norm, cache_mode=cache_mode,
                           interleaved=interleaved, offset=offset, q_norm=q_norm, rope_latent=rope_latent,
                           kv_split=kv_split)

    class MLA(nn.Module):
        def __init__(self, d_model, num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                     q_lora_rank=None, rope_theta=10000.0):
            super().__init__()
            self.num_heads, self.kv_lora_rank, self.q_lora_rank = num_heads, kv_lora_rank, q_lora_rank
            self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = (qk_nope_head_dim, qk_rope_head_dim,
                                                                             v_head_dim)
            self.rope_theta = rope_theta
            qk = qk_nope_head_dim + qk_rope_head_dim
            if q_lora_rank is None:
                self.q_proj = nn.Linear(d_model, num_heads * qk, bias=False)
            else:
                self.q_a_proj = nn.Linear(d_model, q_lora_rank, bias=False)
                self.q_a_layernorm = RMSNorm(q_lora_rank, eps=1e-6)
                self.q_b_proj = nn.Linear(q_lora_rank, num_heads * qk, bias=False)
            rope_width = num_heads * qk_rope_head_dim if per_head_rope else qk_rope_head_dim
            self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + rope_width, bias=False)
            self.kv_a_layernorm = RMSNorm(kv_lora_rank, eps=1e-6)
            self.kv_b_proj = nn.Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), bias=False)
            self.o_proj = nn.Linear(num_heads * v_head_dim, d_model, bias=False)

        def _rope(self, x, positions):
            if interleaved:
                return _rope_interleaved(x, positions, self.rope_theta)
            cos, sin = rope_cos_sin(positions, x.size(-1), self.rope_theta)
            return apply_rope(x, cos, sin)

        def forward(self, x, cache=None, absorb=False):
            return MLAForward(self, mistakes, x, cache).output(absorb)

    return MLA


MultiHeadLatentAttention = _mla_class()


# ---------------------------------------------------------------------------------------------
# attention_cache_bytes_per_token
# ---------------------------------------------------------------------------------------------
def _bytes_fn(*, two: bool = True, mla: str = "ok", gqa_h: bool = False, as_float: bool = False,
              errors: bool = True) -> Callable:
    def attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, num_kv_heads=None,
                                        kv_lora_rank=None, qk_rope_head_dim=None, bytes_per_element=2):
        f = 2 if two else 1
        if kind == "mha":
            n = f * num_layers * num_heads * head_dim * bytes_per_element
        elif kind == "mqa":
            n = f * num_layers * head_dim * bytes_per_element
        elif kind == "gqa":
            if num_kv_heads is None and errors:
                raise ValueError("gqa needs num_kv_heads")
            g = num_heads if gqa_h or num_kv_heads is None else num_kv_heads
            n = f * num_layers * g * head_dim * bytes_per_element
        elif kind == "mla":
            if (kv_lora_rank is None or qk_rope_head_dim is None) and errors:
                raise ValueError("mla needs kv_lora_rank and qk_rope_head_dim")
            width = (kv_lora_rank or 0) + (qk_rope_head_dim or 0)
            n = num_layers * width * bytes_per_element
            if mla == "heads":
                n *= num_heads
            elif mla == "two":
                n *= 2
        else:
            if errors:
                raise ValueError(f"unknown kind {kind!r}")
            n = 0
        return float(n) if as_float else n

    return attention_cache_bytes_per_token


# ---------------------------------------------------------------------------------------------
# mha_to_gqa
# ---------------------------------------------------------------------------------------------
def _to_gqa_fn(*, pool: str = "mean", inplace: bool = False, validate: bool = True) -> Callable:
    def mha_to_gqa(mha, num_kv_heads):
        if validate and (mha.num_kv_heads != mha.num_heads or mha.num_heads % num_kv_heads != 0):
            raise ValueError("mha must be MHA and num_heads a multiple of num_kv_heads")
        h, dh = mha.num_heads, mha.head_dim
        d = mha.q_proj.in_features
        r = h // num_kv_heads

        def pooled(weight):
            if pool == "strided":
                w = weight.view(r, num_kv_heads, dh, d).mean(0)
            else:
                w = weight.view(num_kv_heads, r, dh, d)
                w = w[:, 0] if pool == "first" else (w.sum(1) if pool == "sum" else w.mean(1))
            return w.reshape(num_kv_heads * dh, d)

        with torch.no_grad():
            k, v = pooled(mha.k_proj.weight), pooled(mha.v_proj.weight)
            if inplace:
                mha.num_kv_heads, mha.n_rep = num_kv_heads, r
                mha.k_proj = nn.Linear(d, num_kv_heads * dh, bias=False).to(k.dtype)
                mha.v_proj = nn.Linear(d, num_kv_heads * dh, bias=False).to(k.dtype)
                mha.k_proj.weight.copy_(k)
                mha.v_proj.weight.copy_(v)
                return mha
            new = GroupedQueryAttention(d, h, num_kv_heads, head_dim=dh).to(device=k.device, dtype=k.dtype)
            new.q_proj.weight.copy_(mha.q_proj.weight)
            new.o_proj.weight.copy_(mha.o_proj.weight)
            new.k_proj.weight.copy_(k)
            new.v_proj.weight.copy_(v)
        return new

    return mha_to_gqa


MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "repeat_kv": (
        Mistake(".repeat tiling", HINTS["tile"], _rk_tile),
        Mistake("HF expand on the wrong axis (tiling)", HINTS["tile"], _rk_hf_swapped),
        Mistake("repeat on the sequence axis", HINTS["repeat_dim"], _rk_seq_axis),
        Mistake("repeat on the last axis", HINTS["repeat_dim"], _rk_last_axis),
        Mistake("no ValueError", HINTS["repeat_error"], _rk_no_error),
    ),
    "GroupedQueryAttention": (
        Mistake(".repeat tiling", HINTS["tile"], _gqa_class(tile=True)),
        Mistake("k/v sized H·Dh", HINTS["kv_size"], _gqa_class(kv_h=True)),
        Mistake("fused QKV in equal thirds", HINTS["thirds"], _gqa_class(thirds=True)),
        Mistake("cache holds repeated heads", HINTS["cache_repeated"], _gqa_class(cache_repeated=True)),
        Mistake("positions not offset", HINTS["gqa_offset"], _gqa_class(offset=False)),
        Mistake("top-left mask", HINTS["gqa_top_left"], _gqa_class(top_left=True)),
        Mistake("head_dim ignored", HINTS["head_dim"], _gqa_class(ignore_head_dim=True)),
        Mistake("no ValueError", HINTS["gqa_errors"], _gqa_class(validate=False)),
        Mistake("scaled by sqrt(D)", HINTS["gqa_scale_d"], _gqa_class(scale_d=True)),
        Mistake("keys cached before RoPE", HINTS["gqa_pre_rope_cache"], _gqa_class(pre_rope_cache=True)),
    ),
    "LatentCache": (
        Mistake("cat on the width", HINTS["lc_axis"], _latent_cache_class(axis=2)),
        Mistake("returns the new chunk", HINTS["lc_return_new"], _latent_cache_class(returns="new")),
        Mistake("seq_len counts updates", HINTS["lc_seq_len"], _latent_cache_class(seq_len="updates")),
        Mistake("seq_len is the width", HINTS["lc_seq_len"], _latent_cache_class(seq_len="width")),
        Mistake("no validation", HINTS["lc_validate"], _latent_cache_class(validate=False)),
        Mistake("returns (k_rope, c_kv)", HINTS["lc_swap"], _latent_cache_class(swap=True)),
    ),
    "MultiHeadLatentAttention": (
        Mistake("scaled by sqrt(dn)", HINTS["mla_scale"], _mla_class(scale="dn")),
        Mistake("RoPE on the nope part", HINTS["rope_nope"], _mla_class(rope_nope=True)),
        Mistake("per-head rope key", HINTS["per_head_rope"], _mla_class(per_head_rope=True)),
        Mistake("absorbed with transposed W", HINTS["absorb_transposed"], _mla_class(absorb_mode="transposed")),
        Mistake("absorb computes K and V", HINTS["absorb_calls"], _mla_class(absorb_mode="naive")),
        Mistake("absorb builds K and V from the weight", HINTS["absorb_calls"], _mla_class(absorb_mode="weight")),
        Mistake("latent norm forgotten", HINTS["latent_norm"], _mla_class(latent_norm=False)),
        Mistake("cache holds full K/V", HINTS["mla_full_cache"], _mla_class(cache_mode="full")),
        Mistake("k_rope cached before RoPE", HINTS["mla_pre_rope_cache"], _mla_class(cache_mode="pre_rope")),
        Mistake("interleaved pairs", HINTS["mla_interleaved"], _mla_class(interleaved=True)),
        Mistake("positions not offset", HINTS["mla_offset"], _mla_class(offset=False)),
        Mistake("q latent not normalised", HINTS["q_norm"], _mla_class(q_norm=False)),
        Mistake("RoPE on the latent", HINTS["mla_rope_latent"], _mla_class(rope_latent=True)),
        Mistake("kv_b_proj read as [K of all heads | V of all heads]", HINTS["mla_kv_split"],
                _mla_class(kv_split="blocks")),
    ),
    "attention_cache_bytes_per_token": (
        Mistake("no factor 2", HINTS["bytes_two"], _bytes_fn(two=False)),
        Mistake("mla per head", HINTS["mla_heads"], _bytes_fn(mla="heads")),
        Mistake("mla times 2", HINTS["mla_two"], _bytes_fn(mla="two")),
        Mistake("gqa with H heads", HINTS["gqa_heads"], _bytes_fn(gqa_h=True)),
        Mistake("float", HINTS["bytes_int"], _bytes_fn(as_float=True)),
        Mistake("no ValueError", HINTS["bytes_errors"], _bytes_fn(errors=False)),
    ),
    "mha_to_gqa": (
        Mistake("first head of each group", HINTS["pool_first"], _to_gqa_fn(pool="first")),
        Mistake("sum instead of mean", HINTS["pool_sum"], _to_gqa_fn(pool="sum")),
        Mistake("strided groups", HINTS["pool_strided"], _to_gqa_fn(pool="strided")),
        Mistake("modifies the input", HINTS["pool_inplace"], _to_gqa_fn(inplace=True)),
        Mistake("no ValueError", HINTS["pool_errors"], _to_gqa_fn(validate=False)),
    ),
}
