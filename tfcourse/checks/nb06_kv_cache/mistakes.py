"""Notebook 06's catalogue of known wrong implementations, with the hint each one earns.

Every entry has its exercise's signature (a class for ``KVCache`` and the modules). A hint is
shown only when exactly one catalogued mistake reproduces the answer on every call of the failing
case (``Judge.mistake_hint``). Sampling is random, so ``sample_next_token``'s mistakes are also
given as distributions (``SAMPLING``): a statistical case names the one mistake whose
distribution its frequencies fit (``sampling.py``). The hints' words are ``HINTS``, in
hint_texts.py.

The modules here are built from the setup cell's components (``causal_mask``,
``scaled_dot_product_attention``, ``rope_cos_sin``, ``apply_rope``, ``RMSNorm``, ``SwiGLU`` from
notebooks 01-05), so a catalogued mistake computes exactly what a learner's cell with that mistake
computes. Correct ``KVCache``, ``CausalSelfAttention``, ``DecoderBlock`` and ``sample_next_token``
live here too: a catalogued wrong ``DecoderLM`` builds this module's ``DecoderBlock``, a wrong
``generate`` uses this module's ``KVCache`` (an ``Instance("KVCache")`` of a mistake's run is looked
up in this module's globals). Nothing here imports notebook 06's reference (the grader's child
imports this package and cannot).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.reference.nb01_attention import causal_mask, scaled_dot_product_attention
from tfcourse.reference.nb03_positional_encodings import apply_rope, rope_cos_sin
from tfcourse.reference.nb04_normalisation import RMSNorm
from tfcourse.reference.nb05_feed_forward import SwiGLU

from ..hints import Mistake
from .hint_texts import HINTS

__all__ = ["MISTAKES", "SAMPLING", "filtered_probs"]


# ---------------------------------------------------------------------------------------------
# KVCache
# ---------------------------------------------------------------------------------------------
class KVCache:
    """A correct cache (what the catalogued modules and generate loops below use)."""

    def __init__(self):
        self.k = None
        self.v = None

    @property
    def seq_len(self):
        return 0 if self.k is None else self.k.size(2)

    def update(self, k, v):
        if k.shape != v.shape:
            raise ValueError("k and v differ")
        if self.k is None:
            self.k, self.v = k, v
        else:
            if (k.size(0), k.size(1), k.size(3)) != (self.k.size(0), self.k.size(1), self.k.size(3)) \
                    or k.dtype != self.k.dtype:
                raise ValueError("does not fit the cache")
            self.k = torch.cat((self.k, k), dim=2)
            self.v = torch.cat((self.v, v), dim=2)
        return self.k, self.v


def _cache_class(*, axis: int = 2, seq_len: str = "positions", returns: str = "all", swap: bool = False,
                 validate: bool = True, prop: bool = True) -> type:
    class Cache:
        def __init__(self):
            self.k = None
            self.v = None
            self.updates = 0

        def _len(self):
            if self.k is None:
                return 0
            if seq_len == "heads":
                return self.k.size(1)
            if seq_len == "updates":
                return self.updates
            return self.k.size(2)

        def update(self, k, v):
            if validate:
                if k.shape != v.shape:
                    raise ValueError("k and v differ")
                if self.k is not None and ((k.size(0), k.size(1), k.size(3)) != (self.k.size(0), self.k.size(1),
                                                                                 self.k.size(3))
                                           or k.dtype != self.k.dtype):
                    raise ValueError("does not fit the cache")
            old = (self.k, self.v)
            self.updates += 1
            if self.k is None:
                self.k, self.v = (v, k) if swap else (k, v)
            else:
                self.k = torch.cat((self.k, v if swap else k), dim=axis)
                self.v = torch.cat((self.v, k if swap else v), dim=axis)
            if returns == "new":
                return k, v
            if returns == "old" and old[0] is not None:
                return old
            return self.k, self.v

    if prop:
        Cache.seq_len = property(Cache._len)
    else:
        Cache.seq_len = Cache._len
    Cache.__name__ = Cache.__qualname__ = "KVCache"
    return Cache


# ---------------------------------------------------------------------------------------------
# CausalSelfAttention
# ---------------------------------------------------------------------------------------------
def _rope_interleaved(x, positions, base):
    dh = x.size(-1)
    inv = 1.0 / (base ** (torch.arange(0, dh, 2, dtype=torch.float32, device=x.device) / dh))
    ang = positions.to(torch.float32)[:, None] * inv  # (T, Dh/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def _attention_class(*, positions: str = "offset", cache_keys: str = "rotated", mask: str = "bottom_right",
                     scale: str = "dh", rope_v: bool = False, pairing: str = "half", theta: str = "given",
                     o_proj: bool = True, validate: bool = True, merge: str = "transpose",
                     rope: bool = True, split: str = "h_dh") -> type:
    class Attention(nn.Module):
        def __init__(self, d_model, num_heads, rope_theta=10000.0):
            super().__init__()
            if validate and d_model % num_heads != 0:
                raise ValueError("d_model % num_heads")
            self.num_heads = num_heads
            self.head_dim = d_model // num_heads
            self.rope_theta = rope_theta if theta == "given" else 10000.0
            self.q_proj = nn.Linear(d_model, d_model, bias=False)
            self.k_proj = nn.Linear(d_model, d_model, bias=False)
            self.v_proj = nn.Linear(d_model, d_model, bias=False)
            self.o_proj = nn.Linear(d_model, d_model, bias=False)

        def _rope(self, x, pos):
            if not rope:
                return x
            if pairing == "interleaved":
                return _rope_interleaved(x, pos, self.rope_theta)
            cos, sin = rope_cos_sin(pos, self.head_dim, self.rope_theta)
            return apply_rope(x, cos, sin)

        def forward(self, x, cache=None):
            b, t, d = x.shape
            h, dh = self.num_heads, d // self.num_heads
            if split == "h_dh":
                q, k, v = (p(x).view(b, t, h, dh).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
            else:  # view(B, T, Dh, H): head h gets every H-th column instead of its own Dh block
                q, k, v = (p(x).view(b, t, dh, h).permute(0, 3, 1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
            past = 0 if cache is None or positions == "zero" else cache.seq_len
            pos = torch.arange(past, past + t, device=x.device)
            q = self._rope(q, pos)
            if rope_v:
                v = self._rope(v, pos)
            if cache_keys == "raw" and cache is not None:
                k, v = cache.update(k, v)
                k = self._rope(k, torch.arange(k.size(2), device=x.device))
            else:
                k = self._rope(k, pos)
                if cache is not None:
                    k, v = cache.update(k, v)
            s = k.size(2)
            if mask == "top_left" or (mask == "top_left_multi" and t > 1):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                     scale=None if scale == "dh" else 1 / math.sqrt(d))
            else:
                qq = q if scale == "dh" else q * math.sqrt(dh) / math.sqrt(d)
                m = None if mask == "none" else causal_mask(t, s, device=x.device)
                out, _ = scaled_dot_product_attention(qq, k, v, m)
            out = out.transpose(1, 2).reshape(b, t, d) if merge == "transpose" else out.reshape(b, t, d)
            return self.o_proj(out) if o_proj else out

    Attention.__name__ = Attention.__qualname__ = "CausalSelfAttention"
    return Attention


CausalSelfAttention = _attention_class()


# ---------------------------------------------------------------------------------------------
# DecoderBlock
# ---------------------------------------------------------------------------------------------
def _block_class(*, residual: str = "x", pass_cache: bool = True, ffn_residual: str = "h",
                 ffn_input: str = "h", eps_passed: bool = True, theta_passed: bool = True,
                 attn_norm: bool = True) -> type:
    class Block(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, rope_theta=10000.0, eps=1e-6):
            super().__init__()
            e = eps if eps_passed else 1e-6
            self.attn_norm = RMSNorm(d_model, e)
            self.attn = CausalSelfAttention(d_model, num_heads, rope_theta if theta_passed else 10000.0)
            self.ffn_norm = RMSNorm(d_model, e)
            self.ffn = SwiGLU(d_model, d_ff)

        def forward(self, x, cache=None):
            c = cache if pass_cache else None
            if residual == "post":
                h = self.attn_norm(x + self.attn(x, c))
                return self.ffn_norm(h + self.ffn(h))
            n = self.attn_norm(x) if attn_norm else x
            h = (n if residual == "normed" else x) + self.attn(n, c)
            m = self.ffn_norm(h if ffn_input == "h" else x)
            f = self.ffn(m)
            return {"h": h, "x": x, "normed": m}[ffn_residual] + f

    Block.__name__ = Block.__qualname__ = "DecoderBlock"
    return Block


DecoderBlock = _block_class()


# ---------------------------------------------------------------------------------------------
# DecoderLM
# ---------------------------------------------------------------------------------------------
def _lm_class(*, final_norm: bool = True, tie: str = "param", caches: str = "each", check_len: bool = True,
              emb_scale: bool = False, softmax: bool = False, theta_passed: bool = True) -> type:
    class LM(nn.Module):
        def __init__(self, vocab_size, d_model, num_layers, num_heads, d_ff, rope_theta=10000.0,
                     tie_embeddings=False):
            super().__init__()
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            theta = rope_theta if theta_passed else 10000.0
            self.blocks = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, theta) for _ in range(num_layers))
            self.final_norm = RMSNorm(d_model, 1e-6)
            self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
            if tie == "always" or (tie == "param" and tie_embeddings):
                self.lm_head.weight = self.tok_emb.weight
            elif tie == "copy" and tie_embeddings:
                self.lm_head.weight.data.copy_(self.tok_emb.weight.data)

        def forward(self, input_ids, caches=None):
            if check_len and caches is not None and len(caches) != len(self.blocks):
                raise ValueError("one cache per block")
            x = self.tok_emb(input_ids)
            if emb_scale:
                x = x * math.sqrt(x.size(-1))
            for i, block in enumerate(self.blocks):
                if caches is None or caches_mode == "none":
                    c = None
                else:
                    c = caches[0] if caches_mode == "first" else caches[i]
                x = block(x, c)
            if final_norm:
                x = self.final_norm(x)
            out = self.lm_head(x)
            return out.softmax(-1) if softmax else out

    caches_mode = caches
    LM.__name__ = LM.__qualname__ = "DecoderLM"
    return LM


# ---------------------------------------------------------------------------------------------
# sample_next_token: each mistake as the distribution it samples from
# ---------------------------------------------------------------------------------------------
def filtered_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, *, temp: str = "divide", k_shift: int = 0,
                   topp: str = "keep_crossing", order: str = "k_then_p") -> torch.Tensor:
    """The distribution (B, V) float64 a sampler draws from (temperature > 0), in the contract's
    order (temperature, top-k, top-p) unless a mistake's option says otherwise.

    temp: "divide" | "after" (softmax, then / T: no effect) | "multiply" | "late" (top-k/top-p on
    the untempered logits, / T only before the final softmax). k_shift: top-k keeps
    k + k_shift. topp: "keep_crossing" | "drop_crossing" | "extra" (one token more) | "unsorted"
    (cumulative mass in vocabulary order) | "gather" (unsorted with gather(-1, order), which
    permutes again instead of undoing the sort). order: "k_then_p" | "p_then_k" (nucleus of the
    unfiltered distribution)."""
    x = logits.to(torch.float64)
    if temp == "divide":
        x = x / temperature
    elif temp == "multiply":
        x = x * temperature

    def top_k_filter(s):
        if top_k is None:
            return s
        k = max(min(top_k + k_shift, s.size(-1)), 1)
        kth = torch.topk(s, k, dim=-1).values[:, -1:]
        return s.masked_fill(s < kth, float("-inf"))

    def top_p_filter(s):
        if top_p is None or top_p >= 1:
            return s
        if topp == "unsorted":
            probs = s.softmax(-1)
            before = probs.cumsum(-1) - probs
            drop = before >= top_p
            first = torch.zeros_like(drop)
            first.scatter_(-1, probs.argmax(-1, keepdim=True), True)
            return s.masked_fill(drop & ~first, float("-inf"))
        sorted_s, order_ = s.sort(dim=-1, descending=True)
        probs = sorted_s.softmax(-1)
        cum = probs.cumsum(-1)
        if topp == "drop_crossing":
            drop = cum > top_p
        elif topp == "extra":
            drop = (cum - probs - probs.roll(1, -1).masked_fill(
                torch.arange(probs.size(-1), device=probs.device) == 0, 0.0)) >= top_p
        else:
            drop = (cum - probs) >= top_p
        drop[:, 0] = False
        sorted_s = sorted_s.masked_fill(drop, float("-inf"))
        if topp == "gather":
            return sorted_s.gather(-1, order_)
        return torch.empty_like(sorted_s).scatter(-1, order_, sorted_s)

    if order == "k_then_p":
        x = top_p_filter(top_k_filter(x))
    else:
        x = top_k_filter(x).masked_fill(top_p_filter(x) == float("-inf"), float("-inf"))
    if temp == "late":
        x = x / temperature
    probs = x.softmax(-1)
    return probs / probs.sum(-1, keepdim=True) if temp == "after" else probs


def _sampler(*, zero: str = "argmax", use_generator: bool = True, validate: bool = True,
             **options) -> Callable:
    def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        if validate:
            if temperature < 0 or (top_k is not None and top_k < 1) or (top_p is not None and not 0 < top_p <= 1):
                raise ValueError("bad sampling option")
        if temperature == 0 and zero == "argmax":
            return logits.argmax(-1)
        if temperature == 0:
            probs = (logits / 0.0).softmax(-1)
        else:
            probs = filtered_probs(logits, temperature, top_k, top_p, **options)
        return torch.multinomial(probs.to(torch.promote_types(logits.dtype, torch.float32)), 1,
                                 generator=generator if use_generator else None).squeeze(-1)

    return sample_next_token


sample_next_token = _sampler()

# The distributions of the catalogued sampling mistakes (hint key, filtered_probs options): a
# statistical case names the one whose distribution its frequencies fit.
SAMPLING: dict[str, dict] = {
    "temp_after": {"temp": "after"},
    "temp_multiply": {"temp": "multiply"},
    "temp_late": {"temp": "late"},
    "topk_extra": {"k_shift": 1},
    "topk_short": {"k_shift": -1},
    "topp_drop": {"topp": "drop_crossing"},
    "topp_extra": {"topp": "extra"},
    "topp_unsorted": {"topp": "unsorted"},
    "topp_first": {"order": "p_then_k"},
    "topp_gather": {"topp": "gather"},
}


# ---------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------
def _generator(*, feed: str = "new", caches: str = "once", row: int = -1, options: bool = True,
               greedy: bool = False, no_grad: bool = True, uncached: str = "none") -> Callable:
    def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None, use_cache=True,
                 generator=None):
        ids = input_ids
        cs = None
        if use_cache and caches == "once":
            cs = [KVCache() for _ in model.blocks]
        elif use_cache and caches == "shared":
            cs = [KVCache()] * len(model.blocks)
        cached = use_cache and caches != "never"
        step = ids
        ctx = torch.no_grad() if no_grad else torch.enable_grad()
        with ctx:
            for _ in range(max_new_tokens):
                if use_cache and caches == "per_step":
                    cs = [KVCache() for _ in model.blocks]
                if not cached and uncached == "fresh":
                    cs = [KVCache() for _ in model.blocks]
                logits = model(step, caches=cs)
                last = logits[:, row]
                if greedy:
                    token = last.argmax(-1)
                elif options:
                    token = sample_next_token(last, temperature, top_k, top_p, generator)
                else:
                    token = sample_next_token(last)
                ids = torch.cat((ids, token[:, None]), dim=1)
                if not cached or feed == "whole":
                    step = ids
                elif feed == "prompt_last":
                    step = input_ids[:, -1:]
                else:
                    step = token[:, None]
        return ids

    return generate


# ---------------------------------------------------------------------------------------------
# kv_cache_bytes and apply_repetition_penalty
# ---------------------------------------------------------------------------------------------
def _kv_bytes(*, factor: int = 2, bits: bool = False, batch: bool = True, as_float: bool = False,
              validate: bool = True) -> Callable:
    def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
        if validate and min(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element) < 0:
            raise ValueError("negative")
        n = factor * num_layers * num_kv_heads * head_dim * seq_len * (batch_size if batch else 1) \
            * bytes_per_element * (8 if bits else 1)
        return float(n) if as_float else int(n)

    return kv_cache_bytes


def _penalty(*, negative: str = "multiply", repeats: bool = False, scope: str = "seen",
             positive: str = "divide", validate: bool = True) -> Callable:
    def apply_repetition_penalty(logits, input_ids, penalty):
        if validate and penalty <= 0:
            raise ValueError("penalty")
        out = logits.clone()
        for b in range(logits.size(0)):
            ids = input_ids[b].tolist() if repeats else sorted(set(input_ids[b].tolist()))
            if scope == "all":
                ids = list(range(logits.size(1)))
            for i in ids:
                x = out[b, i]
                if x < 0:
                    out[b, i] = x * penalty if negative == "multiply" else x / penalty
                else:
                    out[b, i] = x / penalty if positive == "divide" else x * penalty
        return out

    return apply_repetition_penalty


def _m(name: str, hint: str, fn: Callable) -> Mistake:
    return Mistake(name, HINTS[hint], fn)


MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "KVCache": (
        _m("seq_len counts the heads", "seq_len_heads", _cache_class(seq_len="heads")),
        _m("seq_len counts the updates", "seq_len_updates", _cache_class(seq_len="updates")),
        _m("update returns only the new k, v", "return_new", _cache_class(returns="new")),
        _m("update returns the cache before appending", "return_old", _cache_class(returns="old")),
        _m("k and v swapped", "kv_swapped", _cache_class(swap=True)),
        _m("concatenated on the head axis", "cat_axis", _cache_class(axis=1)),
        _m("concatenated on the last axis", "cat_axis", _cache_class(axis=3)),
    ),
    "CausalSelfAttention": (
        _m("positions not offset by the cache", "positions_offset", _attention_class(positions="zero")),
        _m("keys cached before RoPE", "pre_rope_cache", _attention_class(cache_keys="raw")),
        _m("is_causal=True (top-left)", "top_left", _attention_class(mask="top_left")),
        _m("is_causal=True for T > 1 (top-left chunks)", "top_left", _attention_class(mask="top_left_multi")),
        _m("no causal mask", "no_mask", _attention_class(mask="none")),
        _m("scaled by sqrt(d_model)", "scale_d", _attention_class(scale="d")),
        _m("RoPE on v too", "rope_v", _attention_class(rope_v=True)),
        _m("interleaved RoPE pairs", "interleaved", _attention_class(pairing="interleaved")),
        _m("rope_theta ignored", "theta", _attention_class(theta="fixed")),
        _m("no o_proj", "no_o_proj", _attention_class(o_proj=False)),
        _m("heads merged without transpose", "merge_view", _attention_class(merge="view")),
        _m("no RoPE", "no_rope", _attention_class(rope=False)),
        _m("heads split with view(B, T, Dh, H)", "split_view", _attention_class(split="dh_h")),
    ),
    "DecoderBlock": (
        _m("residual from the normalised x", "residual_normed", _block_class(residual="normed")),
        _m("residual from the normalised x in both sublayers", "residual_normed_both",
           _block_class(residual="normed", ffn_residual="normed")),
        _m("post-norm", "post_norm", _block_class(residual="post")),
        _m("cache not passed to attn", "block_cache", _block_class(pass_cache=False)),
        _m("second residual from x", "ffn_residual_x", _block_class(ffn_residual="x")),
        _m("ffn reads x", "ffn_input_x", _block_class(ffn_input="x")),
        _m("eps not passed", "eps", _block_class(eps_passed=False)),
        _m("rope_theta not passed", "block_theta", _block_class(theta_passed=False)),
        _m("only the FFN's input normalised", "attn_unnormed", _block_class(attn_norm=False)),
    ),
    "DecoderLM": (
        _m("no final norm", "final_norm", _lm_class(final_norm=False)),
        _m("always tied", "always_tied", _lm_class(tie="always")),
        _m("caches not passed to the blocks", "lm_caches", _lm_class(caches="none")),
        _m("caches[0] for every block", "lm_shared_cache", _lm_class(caches="first")),
        _m("embedding scaled by sqrt(D)", "emb_scale", _lm_class(emb_scale=True)),
        _m("softmax in forward", "lm_softmax", _lm_class(softmax=True)),
        _m("rope_theta not passed to the blocks", "lm_theta", _lm_class(theta_passed=False)),
    ),
    "sample_next_token": (
        _m("logits / 0 at temperature 0", "zero_temp", _sampler(zero="divide")),
        *(_m(f"distribution: {key}", key, _sampler(**opts)) for key, opts in SAMPLING.items()),
        _m("generator ignored", "no_generator", _sampler(use_generator=False)),
        _m("no ValueError for bad options", "sample_errors", _sampler(validate=False)),
    ),
    "generate": (
        _m("whole sequence into a filled cache", "whole_into_cache", _generator(feed="whole")),
        _m("[KVCache()] * L", "shared_caches", _generator(caches="shared")),
        _m("new caches every step", "fresh_caches", _generator(caches="per_step")),
        _m("the prompt's last token again", "no_advance", _generator(feed="prompt_last")),
        _m("use_cache ignored", "ignores_cache", _generator(caches="never")),
        _m("logits[:, 0]", "first_row", _generator(row=0)),
        _m("options not passed", "gen_options", _generator(options=False)),
        _m("always argmax", "always_greedy", _generator(greedy=True)),
        _m("autograd on", "no_grad", _generator(no_grad=False)),
    ),
    "kv_cache_bytes": (
        _m("K or V forgotten", "kv_both", _kv_bytes(factor=1)),
        _m("bits", "bits", _kv_bytes(bits=True)),
        _m("batch ignored", "batch", _kv_bytes(batch=False)),
        _m("float", "int", _kv_bytes(as_float=True)),
        _m("no ValueError", "kv_negative", _kv_bytes(validate=False)),
    ),
    "apply_repetition_penalty": (
        _m("negative logits divided", "rp_negative", _penalty(negative="divide")),
        _m("penalty per occurrence", "rp_repeats", _penalty(repeats=True)),
        _m("every token penalised", "rp_all", _penalty(scope="all")),
        _m("positive logits multiplied", "rp_inverted", _penalty(positive="multiply")),
        _m("no ValueError", "rp_penalty_error", _penalty(validate=False)),
    ),
}
