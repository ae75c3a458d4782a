"""The forward pass of notebook 07's catalogued wrong ``MultiHeadLatentAttention`` classes
(``_mla_class`` in mistakes.py), step by step: each mistake is a flag of :class:`MLAMistakes`,
read by the step it changes. The classes themselves (their parameters, ``_rope``) stay in
mistakes.py, whose globals an ``Instance("LatentCache")`` of a mistake's run is looked up in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tfcourse.reference.nb01_attention import causal_mask, scaled_dot_product_attention

__all__ = ["MLAForward", "MLAMistakes"]


@dataclass(frozen=True)
class MLAMistakes:
    """The flags of mistakes.py's ``_mla_class``, one per mistake (the defaults: none)."""

    scale: str = "both"
    rope_nope: bool = False
    per_head_rope: bool = False
    absorb_mode: str = "ok"
    latent_norm: bool = True
    cache_mode: str = "latent"
    interleaved: bool = False
    offset: bool = True
    q_norm: bool = True
    rope_latent: bool = False  # RoPE also rotates the latent c_kv (at the new tokens' positions)
    kv_split: str = "per_head"  # "blocks": kv_b_proj's output read as [all heads' K | all heads' V]


class MLAForward:
    """One forward call of an ``_mla_class`` module ``m`` on ``x`` (B, T, D), step by step; each
    step does what the flags of ``mistakes`` say."""

    def __init__(self, m, mistakes: MLAMistakes, x, cache):
        self.m, self.mistakes, self.x, self.cache = m, mistakes, x, cache
        self.b, self.t, _ = x.shape
        self.h, self.dc = m.num_heads, m.kv_lora_rank
        self.dn, self.dr, self.dv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim

    def output(self, absorb):
        b, t, h, dn, dr, dv = self.b, self.t, self.h, self.dn, self.dr, self.dv
        q_nope, q_rope = self._queries()
        c_kv, k_rope = self._latent()
        positions = self._positions()
        if self.mistakes.rope_latent:
            c_kv = self.m._rope(c_kv[:, None], positions)[:, 0]
        q_nope, q_rope = self._rotate_queries(q_nope, q_rope, positions)
        k_rope = self._rotate_keys(k_rope, positions)
        c_kv, k_rope = self._cached(c_kv, k_rope)
        s = c_kv.size(1)
        scale_by = 1 / math.sqrt(dn if self.mistakes.scale == "dn" else dn + dr)
        k_rope_h = self._rope_heads(k_rope, s)
        if absorb and self.mistakes.absorb_mode not in ("naive", "weight") and not self.mistakes.rope_nope:
            out = self._absorbed(q_nope, q_rope, c_kv, k_rope_h, s, scale_by)
        else:
            out = self._expanded(absorb, q_nope, q_rope, c_kv, k_rope_h, s)
        return self.m.o_proj(out.transpose(1, 2).reshape(b, t, h * dv))

    def _queries(self):
        """(q_nope, q_rope) of the new tokens: (B, H, T, dn), (B, H, T, dr)."""
        m, x = self.m, self.x
        if m.q_lora_rank is None:
            q = m.q_proj(x)
        else:
            qa = m.q_a_proj(x)
            q = m.q_b_proj(m.q_a_layernorm(qa) if self.mistakes.q_norm else qa)
        q = q.view(self.b, self.t, self.h, self.dn + self.dr).transpose(1, 2)  # (B, H, T, dn + dr)
        return q.split([self.dn, self.dr], dim=-1)

    def _latent(self):
        """(c_kv, k_rope) of the new tokens: the latent (B, T, Dc) and the shared rotary key."""
        rope_width = self.h * self.dr if self.mistakes.per_head_rope else self.dr
        c_kv, k_rope = self.m.kv_a_proj_with_mqa(self.x).split([self.dc, rope_width], dim=-1)
        if self.mistakes.latent_norm:
            c_kv = self.m.kv_a_layernorm(c_kv)  # (B, T, Dc)
        return c_kv, k_rope

    def _positions(self):
        past = 0 if self.cache is None else self.cache.seq_len
        start = past if self.mistakes.offset else 0
        return torch.arange(start, start + self.t, device=self.x.device)

    def _rotate_queries(self, q_nope, q_rope, positions):
        if self.mistakes.rope_nope:
            qf = self.m._rope(torch.cat((q_nope, q_rope), dim=-1), positions)
            return qf[..., :self.dn], qf[..., self.dn:]
        return q_nope, self.m._rope(q_rope, positions)

    def _rotate_keys(self, k_rope, positions):
        b, t, h, dr = self.b, self.t, self.h, self.dr
        if self.mistakes.per_head_rope:
            k_rope = self.m._rope(k_rope.view(b, t, h, dr).transpose(1, 2), positions)  # (B, H, T, dr)
            return k_rope.transpose(1, 2).reshape(b, t, h * dr)
        if self.mistakes.cache_mode != "pre_rope" and not self.mistakes.rope_nope:
            return self.m._rope(k_rope[:, None], positions)[:, 0]  # (B, T, dr)
        return k_rope

    def _cached(self, c_kv, k_rope):
        """(c_kv, k_rope) of every position so far, once the cache (if any) has the new ones."""
        if self.cache is not None and self.mistakes.cache_mode in ("latent", "pre_rope"):
            c_kv, k_rope = self.cache.update(c_kv, k_rope)
        if self.mistakes.cache_mode == "pre_rope":
            k_rope = self.m._rope(k_rope[:, None], torch.arange(k_rope.size(1), device=self.x.device))[:, 0]
        return c_kv, k_rope

    def _rope_heads(self, k_rope, s):
        """The rotary keys for every head: (B, H, S, dr)."""
        b, h, dr = self.b, self.h, self.dr
        if self.mistakes.per_head_rope:
            return k_rope.view(b, s, h, dr).transpose(1, 2)  # (B, H, S, dr)
        return k_rope[:, None].expand(b, h, s, dr)  # (B, H, S, dr)

    def _absorbed(self, q_nope, q_rope, c_kv, k_rope_h, s, scale_by):
        """Attention on the latent itself, kv_b_proj's weight absorbed: (B, H, T, dv)."""
        h, dc, dn, dv = self.h, self.dc, self.dn, self.dv
        w = self.m.kv_b_proj.weight
        if self.mistakes.kv_split == "blocks":
            w_uk, w_uv = w[: h * dn].view(h, dn, dc), w[h * dn:].view(h, dv, dc)
        else:
            w = w.T.reshape(h, dn + dv, dc) if self.mistakes.absorb_mode == "transposed" else w.view(h, dn + dv, dc)
            w_uk, w_uv = w[:, :dn], w[:, dn:]  # (H, dn, Dc), (H, dv, Dc)
        lat = c_kv[:, None]  # (B, 1, S, Dc)
        scores = (q_nope @ w_uk) @ lat.transpose(-1, -2) + q_rope @ k_rope_h.transpose(-1, -2)
        scores = scores * scale_by
        mask = causal_mask(self.t, s, device=self.x.device)
        scores = scores.masked_fill(~mask, float("-inf"))
        return (torch.softmax(scores, dim=-1) @ lat) @ w_uv.transpose(-1, -2)  # (B, H, T, dv)

    def _expanded(self, absorb, q_nope, q_rope, c_kv, k_rope_h, s):
        """Attention on keys and values expanded from the latent by kv_b_proj: (B, H, T, dv)."""
        b, t, h, dn, dr, dv = self.b, self.t, self.h, self.dn, self.dr, self.dv
        m, x = self.m, self.x
        if absorb and self.mistakes.absorb_mode == "weight":  # the naive path through the weight
            kv = torch.nn.functional.linear(c_kv, m.kv_b_proj.weight)
        else:
            kv = m.kv_b_proj(c_kv)
        if self.mistakes.kv_split == "blocks":
            k_all, v_all = kv.split([h * dn, h * dv], dim=-1)
            k_nope, v = k_all.view(b, s, h, dn).transpose(1, 2), v_all.view(b, s, h, dv).transpose(1, 2)
        else:
            kv = kv.view(b, s, h, dn + dv).transpose(1, 2)
            k_nope, v = kv.split([dn, dv], dim=-1)
        if self.mistakes.rope_nope:
            k_full = m._rope(torch.cat((k_nope, k_rope_h), dim=-1), torch.arange(s, device=x.device))
        else:
            k_full = torch.cat((k_nope, k_rope_h), dim=-1)  # (B, H, S, dn + dr)
        if self.cache is not None and self.mistakes.cache_mode == "full":
            kf, vf = self.cache.update(k_full.transpose(1, 2).reshape(b, s, -1),
                                       v.transpose(1, 2).reshape(b, s, -1))
            k_full = kf.view(b, -1, h, dn + dr).transpose(1, 2)
            v = vf.view(b, -1, h, dv).transpose(1, 2)
            s = k_full.size(2)
        q_full = torch.cat((q_nope, q_rope), dim=-1)
        if self.mistakes.scale == "dn":
            q_full = q_full * math.sqrt(dn + dr) / math.sqrt(dn)
        out, _ = scaled_dot_product_attention(q_full, k_full, v, causal_mask(t, s, device=x.device))
        return out
