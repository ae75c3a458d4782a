"""Wrong and correct implementations of notebook 07's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``copy``, ``math``,
``torch``, ``F``, ``nn``, ``causal_mask``, ``scaled_dot_product_attention``, ``rope_cos_sin``,
``apply_rope``, ``RMSNorm``, ``KVCache``). Wrong entries are plausible attempts; ``hint`` is a
substring of the catalogued hint (``tfcourse.checks.nb07_gqa_mla.HINTS``) that the feedback should
show, None when no hint fits. Correct entries include the forms public code uses: Hugging Face's
repeat_kv (expand + reshape), F.scaled_dot_product_attention with enable_gqa=True or an explicit
bottom-right mask, Hugging Face's DeepseekV3Attention logic (float32 softmax and RMSNorm
statistics, additive mask), an einsum absorbed path, a cache that keeps a list of chunks.

Through the real grader every wrong entry must lose its own exercise's points only: a broken
``repeat_kv`` must not cost ``GroupedQueryAttention``, a broken ``LatentCache`` must not cost
``MultiHeadLatentAttention`` (the cases build the learner's cache), a broken
``GroupedQueryAttention`` must not cost ``mha_to_gqa``: the course's versions stand in.
"""

from __future__ import annotations

from textwrap import indent as _indent

from tests.catalogue import entry as _e
from tests.catalogue import reference_source as _reference
from tests.catalogue import variant as _variant
from tests.catalogue import without_blocks as _without
from tests.catalogue.nb06_kv_cache import cache_opening as _cache_opening

NOTEBOOK = "07_gqa_mla"


# ---------------------------------------------------------------------------------------------
# repeat_kv
# ---------------------------------------------------------------------------------------------
_REPEAT_CHECK = '''
def repeat_kv(x, n_rep):
    if n_rep < 1:
        raise ValueError("n_rep must be at least 1")
'''

REPEAT_WRONG = [
    _e(".repeat tiling", _REPEAT_CHECK + "    return x.repeat(1, n_rep, 1, 1)\n", "x.repeat(1, n_rep, 1, 1) tiles"),
    _e("repeat_interleave on the sequence axis", _REPEAT_CHECK + "    return x.repeat_interleave(n_rep, dim=2)\n",
       "repeat along the head axis"),
    _e("no ValueError", '''
def repeat_kv(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=1)
''', "raise ValueError when n_rep < 1"),
    _e("expand on the last axis, then reshape", _REPEAT_CHECK + '''
    B, G, S, Dh = x.shape
    return x[..., None].expand(B, G, S, Dh, n_rep).reshape(B, G * n_rep, S, Dh)
'''),
    _e("correct math, no validation",
       _variant(_REPEAT_CHECK, ('    if n_rep < 1:', None),
                               ('        raise ValueError("n_rep must be at least 1")', None))
       + "    return x.repeat_interleave(n_rep, dim=1)\n",
       "ValueError"),
]

REPEAT_CORRECT = [
    _e("repeat_interleave", _REPEAT_CHECK + '''
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=1)  # (B, G * n_rep, S, Dh)
'''),
    _e("Hugging Face expand + reshape", _REPEAT_CHECK + '''
    batch, num_key_value_heads, slen, head_dim = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return x.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)
'''),
]

# ---------------------------------------------------------------------------------------------
# GroupedQueryAttention
# ---------------------------------------------------------------------------------------------
# The constructor is the reference's, with a learner's signature and ValueError messages.
_GQA_INIT = _variant(
    _reference("nb07_gqa_mla", "GroupedQueryAttention.__init__"),
    ('''
def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int | None = None,
             rope_theta: float = 10000.0):
''', "def __init__(self, d_model, num_heads, num_kv_heads, head_dim=None, rope_theta=10000.0):"),
    ("if num_kv_heads < 1 or num_heads % num_kv_heads != 0:", "if num_heads % num_kv_heads != 0:"),
    ('f"num_heads = {num_heads} must be a multiple of num_kv_heads = {num_kv_heads}"',
     '"num_heads must be a multiple of num_kv_heads"'),
    ('f"d_model = {d_model} is not divisible by num_heads = {num_heads}"', '"d_model must be divisible by num_heads"'),
    ("  # R: query heads per KV head", ""))
_GQA = '''
class GroupedQueryAttention(nn.Module):
''' + _indent(_GQA_INIT, "    ") + '''
    def forward(self, x, cache=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        past = 0 if cache is None else cache.seq_len
        positions = torch.arange(past, past + T, device=x.device)
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        k = repeat_kv(k, self.n_rep)
        v = repeat_kv(v, self.n_rep)
        mask = causal_mask(T, k.size(2), device=x.device)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        out = out.transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)
        return self.o_proj(out)
'''

_REPEAT_LINES = '''
        k = repeat_kv(k, self.n_rep)
        v = repeat_kv(v, self.n_rep)
'''
_CACHE_LINES = '''
        if cache is not None:
            k, v = cache.update(k, v)
'''

GQA_WRONG = [
    _e(".repeat tiling instead of repeat_kv", _variant(_GQA, (_REPEAT_LINES, '''
        k = k.repeat(1, self.n_rep, 1, 1)
        v = v.repeat(1, self.n_rep, 1, 1)
''')), "x.repeat(1, n_rep, 1, 1) tiles"),
    _e("k and v projections sized H·Dh", _variant(_GQA, (
        "self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)",
        "self.k_proj = nn.Linear(d_model, num_heads * head_dim, bias=False)"), (
        "self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)",
        "self.v_proj = nn.Linear(d_model, num_heads * head_dim, bias=False)")), "k_proj and v_proj map D -> G·Dh"),
    _e("fused QKV split into equal thirds", _variant(_GQA, ('''
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
''', '''
        qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        q, k, v = qkv.chunk(3, dim=-1)
        q = q.reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.reshape(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.reshape(B, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
''')), "split a fused projection at those sizes"),
    _e("cache holding the repeated heads", _variant(_GQA, (_CACHE_LINES.strip("\n") + "\n" + _REPEAT_LINES.strip("\n"), '''
        k = repeat_kv(k, self.n_rep)
        v = repeat_kv(v, self.n_rep)
        if cache is not None:
            k, v = cache.update(k, v)
''')), "cache the G KV heads, not the repeated ones"),
    _e("positions not offset by the cache", _variant(_GQA, (
        "positions = torch.arange(past, past + T, device=x.device)",
        "positions = torch.arange(T, device=x.device)")), "absolute positions P .. P + T - 1"),
    _e("correct math, no validation",
       _without(_GQA, "if num_heads % num_kv_heads != 0:", "if d_model % num_heads != 0:"),
       "ValueError"),
]

GQA_CORRECT = [
    _e("repeat_kv and the course's attention", _GQA),
    _e("F.scaled_dot_product_attention with enable_gqa=True", _variant(_GQA, (_REPEAT_LINES.rstrip("\n") + '''
        mask = causal_mask(T, k.size(2), device=x.device)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
''', '''
        mask = causal_mask(T, k.size(2), device=x.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
'''))),
]

# ---------------------------------------------------------------------------------------------
# LatentCache
# ---------------------------------------------------------------------------------------------
_LC = _cache_opening("LatentCache", "c_kv", "k_rope", 1) + '''
    def update(self, c_kv, k_rope):
        if c_kv.shape[:2] != k_rope.shape[:2]:
            raise ValueError("c_kv and k_rope must have the same B and T")
        if self.c_kv is None:
            self.c_kv, self.k_rope = c_kv, k_rope
        else:
            if (c_kv.size(0) != self.c_kv.size(0) or c_kv.size(2) != self.c_kv.size(2)
                    or k_rope.size(2) != self.k_rope.size(2) or c_kv.dtype != self.c_kv.dtype
                    or k_rope.dtype != self.k_rope.dtype):
                raise ValueError("the chunk does not fit the cache")
            self.c_kv = torch.cat([self.c_kv, c_kv], dim=1)
            self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)
        return self.c_kv, self.k_rope
'''

LC_WRONG = [
    _e("cat on the last axis", _variant(_LC, ("self.c_kv = torch.cat([self.c_kv, c_kv], dim=1)",
                                               "self.c_kv = torch.cat([self.c_kv, c_kv], dim=-1)"),
                                        ("self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)",
                                         "self.k_rope = torch.cat([self.k_rope, k_rope], dim=-1)")),
       "append along the sequence axis"),
    _e("returns only the new chunk", _variant(_LC, ("        return self.c_kv, self.k_rope",
                                                    "        return c_kv, k_rope")), "update returns the whole cache"),
    _e("seq_len counts the updates", _variant(_LC, ('''
    def __init__(self):
        self.c_kv = None
        self.k_rope = None
''', '''
    def __init__(self):
        self.c_kv = None
        self.k_rope = None
        self.n = 0
'''), ("        return 0 if self.c_kv is None else self.c_kv.size(1)", "        return self.n"),
        ("        if self.c_kv is None:\n            self.c_kv, self.k_rope = c_kv, k_rope",
         "        self.n += 1\n        if self.c_kv is None:\n            self.c_kv, self.k_rope = c_kv, k_rope")),
       "seq_len counts cached positions"),
    _e("no validation", _variant(_LC, ("return 0 if self.c_kv is None else self.c_kv.size(1)",
                                       "return 0 if self.c_kv is None else self.c_kv.shape[1]"), ('''
        if c_kv.shape[:2] != k_rope.shape[:2]:
            raise ValueError("c_kv and k_rope must have the same B and T")
''', None), ('''
            if (c_kv.size(0) != self.c_kv.size(0) or c_kv.size(2) != self.c_kv.size(2)
                    ...
                raise ValueError("the chunk does not fit the cache")
''', None)), "update raises ValueError itself"),
    _e("correct math, no validation",
       _variant(_LC, ("        if c_kv.shape[:2] != k_rope.shape[:2]:", None),
                     ('            raise ValueError("c_kv and k_rope must have the same B and T")', None),
                     ("""            if (c_kv.size(0) != self.c_kv.size(0) or c_kv.size(2) != self.c_kv.size(2)
...
                raise ValueError("the chunk does not fit the cache")""", None)),
       "ValueError"),
]

LC_CORRECT = [
    _e("torch.cat", _LC),
    _e("a list of chunks, concatenated when read", '''
class LatentCache:
    def __init__(self):
        self._c, self._k = [], []

    @property
    def c_kv(self):
        return torch.cat(self._c, dim=1) if self._c else None

    @property
    def k_rope(self):
        return torch.cat(self._k, dim=1) if self._k else None

    @property
    def seq_len(self):
        return sum(c.shape[1] for c in self._c)

    def update(self, c_kv, k_rope):
        B, T = c_kv.shape[:2]
        if tuple(k_rope.shape[:2]) != (B, T):
            raise ValueError("c_kv and k_rope differ in B or T")
        if self._c:
            c0, k0 = self._c[0], self._k[0]
            if B != c0.shape[0] or c_kv.shape[2] != c0.shape[2] or k_rope.shape[2] != k0.shape[2]:
                raise ValueError("shape does not match the cache")
            if c_kv.dtype != c0.dtype or k_rope.dtype != k0.dtype:
                raise ValueError("dtype does not match the cache")
        self._c.append(c_kv)
        self._k.append(k_rope)
        return self.c_kv, self.k_rope
'''),
]

# ---------------------------------------------------------------------------------------------
# MultiHeadLatentAttention
# ---------------------------------------------------------------------------------------------
_MLA_ABSORBED = '''
            w = self.kv_b_proj.weight.view(H, dn + dv, Dc)
            w_uk, w_uv = w[:, :dn], w[:, dn:]
            q_lat = q_nope @ w_uk
            scores = q_lat @ c_kv[:, None].transpose(-1, -2) + q_rope @ k_rope[:, None].transpose(-1, -2)
            scores = (scores * scale).masked_fill(~mask, float("-inf"))
            attn = torch.softmax(scores, dim=-1)
            out = (attn @ c_kv[:, None]) @ w_uv.transpose(-1, -2)
'''

# The constructor is the reference's, with a learner's signature and a local qk_head_dim.
_MLA_INIT = _variant(
    _reference("nb07_gqa_mla", "MultiHeadLatentAttention.__init__"),
    ('''
def __init__(self, d_model: int, num_heads: int, kv_lora_rank: int, qk_nope_head_dim: int,
             qk_rope_head_dim: int, v_head_dim: int, q_lora_rank: int | None = None,
             rope_theta: float = 10000.0):
''', '''
def __init__(self, d_model, num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
             q_lora_rank=None, rope_theta=10000.0):
'''),
    ("    self.qk_head_dim = qk_nope_head_dim + qk_rope_head_dim", None),
    ("q_out = num_heads * self.qk_head_dim", "qk_head_dim = qk_nope_head_dim + qk_rope_head_dim"),
    (", q_out,", ", num_heads * qk_head_dim,"))
_MLA = '''
class MultiHeadLatentAttention(nn.Module):
''' + _indent(_MLA_INIT, "    ") + '''
    def forward(self, x, cache=None, absorb=False):
        B, T, _ = x.shape
        H, Dc = self.num_heads, self.kv_lora_rank
        dn, dr, dv = self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim
        if self.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, T, H, dn + dr).transpose(1, 2)
        q_nope, q_rope = torch.split(q, [dn, dr], dim=-1)
        c_kv, k_rope = torch.split(self.kv_a_proj_with_mqa(x), [Dc, dr], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        past = 0 if cache is None else cache.seq_len
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), dr, self.rope_theta)
        q_rope = apply_rope(q_rope, cos, sin)
        k_rope = apply_rope(k_rope[:, None], cos, sin)[:, 0]
        if cache is not None:
            c_kv, k_rope = cache.update(c_kv, k_rope)
        S = c_kv.size(1)
        mask = causal_mask(T, S, device=x.device)
        scale = 1.0 / math.sqrt(dn + dr)
        if absorb:
''' + _MLA_ABSORBED.lstrip("\n") + '''        else:
            kv = self.kv_b_proj(c_kv).view(B, S, H, dn + dv).transpose(1, 2)
            k_nope, v = torch.split(kv, [dn, dv], dim=-1)
            k = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)
            out, _ = scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k, v, mask)
        out = out.transpose(1, 2).reshape(B, T, H * dv)
        return self.o_proj(out)
'''

MLA_WRONG = [
    _e("absorb=True computing K and V per head in the layouts (B, H, dn, S) and (B, H, dv, S)",
       _variant(_MLA, ('''
            q_lat = q_nope @ w_uk
            scores = q_lat @ c_kv[:, None].transpose(-1, -2) + q_rope @ k_rope[:, None].transpose(-1, -2)
''', '''
            k_t = torch.einsum("hdc,bsc->bhds", w_uk, c_kv)
            v_t = torch.einsum("hdc,bsc->bhds", w_uv, c_kv)
            scores = q_nope @ k_t + q_rope @ k_rope[:, None].transpose(-1, -2)
'''), ("out = (attn @ c_kv[:, None]) @ w_uv.transpose(-1, -2)", 'out = torch.einsum("bhts,bhvs->bhtv", attn, v_t)')),
       "K and V are never built per head"),
    _e("RoPE on the latent c_kv too",
       _variant(_MLA, ("        k_rope = apply_rope(k_rope[:, None], cos, sin)[:, 0]", '''
        k_rope = apply_rope(k_rope[:, None], cos, sin)[:, 0]
        cos_c, sin_c = rope_cos_sin(torch.arange(past, past + T, device=x.device), Dc, self.rope_theta)
        c_kv = apply_rope(c_kv[:, None], cos_c, sin_c)[:, 0]
''')),
       "RoPE never touches the latent c_kv"),
    _e("kv_b_proj's output split as [K of all heads | V of all heads]",
       _variant(_MLA, ('''
            kv = self.kv_b_proj(c_kv).view(B, S, H, dn + dv).transpose(1, 2)
            k_nope, v = torch.split(kv, [dn, dv], dim=-1)
''', '''
            k_all, v_all = torch.split(self.kv_b_proj(c_kv), [H * dn, H * dv], dim=-1)
            k_nope = k_all.view(B, S, H, dn).transpose(1, 2)
            v = v_all.view(B, S, H, dv).transpose(1, 2)
''')),
       "kv_b_proj's output is per head"),
    _e("absorbed: the weighted latent times W_uv, not its transpose",
       _variant(_MLA, ("out = (attn @ c_kv[:, None]) @ w_uv.transpose(-1, -2)", "out = (attn @ c_kv[:, None]) @ w_uv")),
       "every product meets Dc with Dc"),
    _e("scaled by sqrt(qk_nope_head_dim) only", _variant(_MLA, (
        "scale = 1.0 / math.sqrt(dn + dr)", "scale = 1.0 / math.sqrt(dn)"), ('''
            out, _ = scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k, v, mask)
''', '''
            out = F.scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k, v, attn_mask=mask,
                                                 scale=scale)
''')), "not 1/sqrt(qk_nope_head_dim)"),
    _e("RoPE on the whole query and key", _variant(_MLA, ('''
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), dr, self.rope_theta)
        q_rope = apply_rope(q_rope, cos, sin)
        k_rope = apply_rope(k_rope[:, None], cos, sin)[:, 0]
''', ""), ('''
            out, _ = scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k, v, mask)
''', '''
            cos, sin = rope_cos_sin(torch.arange(S, device=x.device), dn + dr, self.rope_theta)
            q = apply_rope(torch.cat([q_nope, q_rope], dim=-1), cos[-T:], sin[-T:])
            k = apply_rope(k, cos, sin)
            out, _ = scaled_dot_product_attention(q, k, v, mask)
''')), "only the qk_rope_head_dim part carries position"),
    _e("a rope key per head", _variant(_MLA, (
        "self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=False)",
        "self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + num_heads * qk_rope_head_dim, bias=False)"), (
        "c_kv, k_rope = torch.split(self.kv_a_proj_with_mqa(x), [Dc, dr], dim=-1)",
        "c_kv, k_rope = torch.split(self.kv_a_proj_with_mqa(x), [Dc, H * dr], dim=-1)")),
       "the rope key is ONE head of width dr"),
    _e("absorbed path with the transposed up-projection", _variant(_MLA, (
        "w = self.kv_b_proj.weight.view(H, dn + dv, Dc)", "w = self.kv_b_proj.weight.T.reshape(H, dn + dv, Dc)")),
       "view it as (H, dn + dv, Dc) without transposing"),
    _e("latent norm forgotten", _variant(_MLA, ("        c_kv = self.kv_a_layernorm(c_kv)\n", "")),
       "normalise the latent"),
    _e("cache storing the full K and V", _variant(_MLA, (_CACHE_LINES.replace("k, v", "c_kv, k_rope"), ""), (
        "            k = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)\n", '''
            k = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)
            if cache is not None:
                k_all, v_all = cache.update(k.transpose(1, 2).reshape(B, S, -1), v.transpose(1, 2).reshape(B, S, -1))
                S = k_all.size(1)
                k = k_all.view(B, S, H, dn + dr).transpose(1, 2)
                v = v_all.view(B, S, H, dv).transpose(1, 2)
                mask = causal_mask(T, S, device=x.device)
''')), "holds the normalised latent c_kv (B, S, Dc) and the rotated shared key (B, S, dr) only"),
    _e("interleaved RoPE pairs (DeepSeek's official code)", _variant(_MLA, ('''
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), dr, self.rope_theta)
        q_rope = apply_rope(q_rope, cos, sin)
        k_rope = apply_rope(k_rope[:, None], cos, sin)[:, 0]
''', '''
        freqs = 1.0 / (self.rope_theta ** (torch.arange(0, dr, 2, device=x.device).float() / dr))
        angles = torch.outer(torch.arange(past, past + T, device=x.device).float(), freqs)
        rot = torch.polar(torch.ones_like(angles), angles)

        def rope(t):
            tc = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2).contiguous())
            return torch.view_as_real(tc * rot).flatten(-2).to(t.dtype)

        q_rope = rope(q_rope)
        k_rope = rope(k_rope)
''')), "not the interleaved"),
    _e("interleaved pairs in x's dtype (real arithmetic)", _variant(_MLA, ('''
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), dr, self.rope_theta)
        q_rope = apply_rope(q_rope, cos, sin)
        k_rope = apply_rope(k_rope[:, None], cos, sin)[:, 0]
''', '''
        inv = 1.0 / (self.rope_theta ** (torch.arange(0, dr, 2, device=x.device, dtype=x.dtype) / dr))
        ang = torch.arange(past, past + T, device=x.device, dtype=x.dtype)[:, None] * inv
        c, s = ang.cos(), ang.sin()

        def rope(t):
            a, b = t[..., 0::2], t[..., 1::2]
            return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)

        q_rope = rope(q_rope)
        k_rope = rope(k_rope)
''')), "not the interleaved"),
    _e("positions not offset by the cache", _variant(_MLA, (
        "torch.arange(past, past + T, device=x.device), dr", "torch.arange(T, device=x.device), dr")),
       "(P = cache.seq_len before update) for q_rope and k_rope"),
    # issue 25's forgeries of the shape watcher, run in the learner's process: the naive path with
    # torch's function modes switched off (the watcher also runs as a dispatch mode, below them), and
    # the watcher's pieces replaced in sys.modules inside the grader's child (bound at import: no effect)
    _e("absorbed: the naive path inside torch._C.DisableTorchFunction()", _variant(_MLA, (_MLA_ABSORBED, '''
            with torch._C.DisableTorchFunction():  # switches off torch's function modes
                kv = F.linear(c_kv, self.kv_b_proj.weight).view(B, S, H, dn + dv).transpose(1, 2)
                k_nope, v = torch.split(kv, [dn, dv], dim=-1)
                k = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)
                out, _ = scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k, v, mask)
''')), "never multiply the latent by its weight"),
    _e("absorbed: the naive path after replacing the checks' watcher in sys.modules", '''
import sys

if sys.argv and sys.argv[0].endswith("child.py"):  # only in the grader's child, as a forger would aim
    def _watch_nothing(patterns):
        return (lambda: None), (lambda *exc: None), (lambda: None)

    for _name in ("tfcourse.checks.evidence", "tfcourse.checks.call"):
        _mod = sys.modules.get(_name)
        if _mod is None:
            continue
        _mod.watch_shapes = _watch_nothing
        _mod.shape_matches = lambda shape, pattern: False
        if hasattr(_mod, "ShapeWatch"):
            _mod.ShapeWatch.outcome = lambda self: None
        if hasattr(_mod, "RowCounter"):
            _mod.RowCounter.counts = lambda self: torch.zeros(len(self.rows), dtype=torch.int64)

''' + _variant(_MLA, (_MLA_ABSORBED, '''
            kv = F.linear(c_kv, self.kv_b_proj.weight).view(B, S, H, dn + dv).transpose(1, 2)
            k_nope, v = torch.split(kv, [dn, dv], dim=-1)
            k = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)
            out, _ = scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k, v, mask)
''')), "never multiply the latent by its weight"),
    _e("absorbed: K and V per head through the weight (F.linear), then the naive attention", _variant(_MLA, (
        _MLA_ABSORBED, '''
            kv = F.linear(c_kv, self.kv_b_proj.weight).view(B, S, H, dn + dv).transpose(1, 2)
            k_nope, v = torch.split(kv, [dn, dv], dim=-1)
            k = torch.cat([k_nope, k_rope[:, None].expand(B, H, S, dr)], dim=-1)
            out, _ = scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), k, v, mask)
''')), "never multiply the latent by its weight"),
]

_HF_MLA = '''
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class MultiHeadLatentAttention(nn.Module):
    """DeepseekV3Attention (Hugging Face transformers, rope_interleave=False), eager attention."""

    def __init__(self, d_model, num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                 q_lora_rank=None, rope_theta=10000.0):
        super().__init__()
        self.num_heads = num_heads
        self.q_lora_rank = q_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.kv_lora_rank = kv_lora_rank
        self.v_head_dim = v_head_dim
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        self.rope_theta = rope_theta
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(d_model, q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(q_lora_rank)
            self.q_b_proj = nn.Linear(q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank)
        self.kv_b_proj = nn.Linear(kv_lora_rank, self.num_heads * (qk_nope_head_dim + v_head_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * v_head_dim, d_model, bias=False)
        self.scaling = self.qk_head_dim ** (-0.5)
        inv_freq = 1.0 / (rope_theta ** (torch.arange(0, qk_rope_head_dim, 2, dtype=torch.int64).float()
                                         / qk_rope_head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, cache=None, absorb=False):
        batch_size, seq_length = x.shape[:-1]
        query_shape = (batch_size, seq_length, -1, self.qk_head_dim)
        if self.q_lora_rank is None:
            q_states = self.q_proj(x)
        else:
            q_states = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_states = q_states.view(query_shape).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        compressed_kv = self.kv_a_proj_with_mqa(x)
        kv_nope, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        kv_nope = self.kv_a_layernorm(kv_nope)
        past = 0 if cache is None else cache.seq_len
        position_ids = torch.arange(past, past + seq_length, device=x.device)
        freqs = position_ids[:, None].float() * self.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q_rot = (q_rot * cos) + (rotate_half(q_rot) * sin)
        k_rot = k_rot[:, None]
        k_rot = ((k_rot * cos) + (rotate_half(k_rot) * sin))[:, 0]
        if cache is not None:
            kv_nope, k_rot = cache.update(kv_nope, k_rot)
        S = kv_nope.shape[1]
        causal = torch.full((seq_length, S), float("-inf"), dtype=x.dtype, device=x.device)
        causal = torch.triu(causal, diagonal=S - seq_length + 1)
        if absorb:
            w = self.kv_b_proj.weight.view(self.num_heads, -1, self.kv_lora_rank)
            w_uk, w_uv = w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim :]
            q_lat = torch.einsum("bhtd,hdc->bhtc", q_pass, w_uk)
            attn_weights = (torch.einsum("bhtc,bsc->bhts", q_lat, kv_nope)
                            + torch.einsum("bhtr,bsr->bhts", q_rot, k_rot)) * self.scaling
            attn_weights = attn_weights + causal
            attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q_pass.dtype)
            o_lat = torch.einsum("bhts,bsc->bhtc", attn_weights, kv_nope)
            attn_output = torch.einsum("bhtc,hvc->bthv", o_lat, w_uv)
        else:
            key_shape = (batch_size, S, -1, self.qk_nope_head_dim + self.v_head_dim)
            kv = self.kv_b_proj(kv_nope).view(key_shape).transpose(1, 2)
            k_pass, value_states = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
            k_rot = k_rot[:, None].expand(*k_pass.shape[:-1], -1)
            query_states = torch.cat((q_pass, q_rot), dim=-1)
            key_states = torch.cat((k_pass, k_rot), dim=-1)
            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
            attn_weights = attn_weights + causal
            attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
            attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        return self.o_proj(attn_output)
'''

MLA_CORRECT = [
    _e("naive and absorbed, the course's pieces", _MLA),
    _e("Hugging Face DeepseekV3Attention logic, einsum absorbed path", _HF_MLA),
]

# ---------------------------------------------------------------------------------------------
# attention_cache_bytes_per_token
# ---------------------------------------------------------------------------------------------
_BYTES = '''
def attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, num_kv_heads=None,
                                    kv_lora_rank=None, qk_rope_head_dim=None, bytes_per_element=2):
    if kind == "mha":
        return 2 * num_layers * num_heads * head_dim * bytes_per_element
    if kind == "mqa":
        return 2 * num_layers * head_dim * bytes_per_element
    if kind == "gqa":
        if num_kv_heads is None:
            raise ValueError("gqa needs num_kv_heads")
        return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element
    if kind == "mla":
        if kv_lora_rank is None or qk_rope_head_dim is None:
            raise ValueError("mla needs kv_lora_rank and qk_rope_head_dim")
        return num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element
    raise ValueError(f"unknown kind {kind!r}")
'''

BYTES_WRONG = [
    _e("K and V not both counted", _variant(_BYTES, ("return 2 * num_layers * num_heads", "return num_layers * num_heads"),
                                            ("return 2 * num_layers * head_dim", "return num_layers * head_dim"),
                                            ("return 2 * num_layers * num_kv_heads", "return num_layers * num_kv_heads")),
       "K and V are both cached"),
    _e("mla counted per head", _variant(_BYTES, ("return num_layers * (kv_lora_rank", "return num_layers * num_heads * (kv_lora_rank")),
       "for all heads together"),
    _e("returns a float", '''
def attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, num_kv_heads=None,
                                    kv_lora_rank=None, qk_rope_head_dim=None, bytes_per_element=2):
    heads = {"mha": num_heads, "mqa": 1, "gqa": num_kv_heads}
    if kind in heads:
        if heads[kind] is None:
            raise ValueError("gqa needs num_kv_heads")
        return 2.0 * num_layers * heads[kind] * head_dim * bytes_per_element
    if kind == "mla":
        if kv_lora_rank is None or qk_rope_head_dim is None:
            raise ValueError("mla needs kv_lora_rank and qk_rope_head_dim")
        return float(num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element)
    raise ValueError(kind)
''', "return a Python int"),
    _e("np.prod of the sizes (a numpy integer)", '''
import numpy as np


def attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, num_kv_heads=None,
                                    kv_lora_rank=None, qk_rope_head_dim=None, bytes_per_element=2):
    if kind == "gqa" and num_kv_heads is None:
        raise ValueError("gqa needs num_kv_heads")
    if kind == "mla":
        if kv_lora_rank is None or qk_rope_head_dim is None:
            raise ValueError("mla needs kv_lora_rank and qk_rope_head_dim")
        return np.prod([num_layers, kv_lora_rank + qk_rope_head_dim, bytes_per_element])
    heads = {"mha": num_heads, "mqa": 1, "gqa": num_kv_heads}
    if kind not in heads:
        raise ValueError(f"unknown kind {kind!r}")
    return np.prod([2, num_layers, heads[kind], head_dim, bytes_per_element])
''', "a numpy integer or a 0-dim tensor is not a Python int"),
    _e("no ValueError", '''
def attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, num_kv_heads=None,
                                    kv_lora_rank=None, qk_rope_head_dim=None, bytes_per_element=2):
    if kind == "mla":
        return num_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element
    kv_heads = {"mha": num_heads, "mqa": 1}.get(kind, num_kv_heads)
    return 2 * num_layers * kv_heads * head_dim * bytes_per_element
''', "raise ValueError for an unknown kind"),
    _e("correct math, no validation",
       _variant(_BYTES, ("        if num_kv_heads is None:", None),
                        ('            raise ValueError("gqa needs num_kv_heads")', None),
                        ("        if kv_lora_rank is None or qk_rope_head_dim is None:", None),
                        ('            raise ValueError("mla needs kv_lora_rank and qk_rope_head_dim")', None),
                        ('    raise ValueError(f"unknown kind {kind!r}")', None)),
       "ValueError"),
]

BYTES_CORRECT = [
    _e("if chain", _BYTES),
    _e("a table of per-layer widths", '''
def attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, num_kv_heads=None,
                                    kv_lora_rank=None, qk_rope_head_dim=None, bytes_per_element=2):
    if kind == "gqa" and num_kv_heads is None:
        raise ValueError("gqa needs num_kv_heads")
    if kind == "mla" and (kv_lora_rank is None or qk_rope_head_dim is None):
        raise ValueError("mla needs kv_lora_rank and qk_rope_head_dim")
    widths = {
        "mha": lambda: 2 * num_heads * head_dim,      # K and V, every head
        "mqa": lambda: 2 * head_dim,                  # one KV head
        "gqa": lambda: 2 * num_kv_heads * head_dim,   # G KV heads
        "mla": lambda: kv_lora_rank + qk_rope_head_dim,
    }
    if kind not in widths:
        raise ValueError(f"kind must be one of {sorted(widths)}")
    return int(num_layers * widths[kind]() * bytes_per_element)
'''),
]

# ---------------------------------------------------------------------------------------------
# mha_to_gqa
# ---------------------------------------------------------------------------------------------
_TO_GQA = '''
def mha_to_gqa(mha, num_kv_heads):
    if mha.num_kv_heads != mha.num_heads:
        raise ValueError("mha must have as many KV heads as query heads")
    if mha.num_heads % num_kv_heads != 0:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    H, Dh = mha.num_heads, mha.head_dim
    D = mha.q_proj.in_features
    R = H // num_kv_heads
    gqa = GroupedQueryAttention(D, H, num_kv_heads, head_dim=Dh).to(mha.q_proj.weight.dtype)
    with torch.no_grad():
        gqa.q_proj.weight.copy_(mha.q_proj.weight)
        gqa.o_proj.weight.copy_(mha.o_proj.weight)
        for name in ("k_proj", "v_proj"):
            w = getattr(mha, name).weight.view(num_kv_heads, R, Dh, D)
            getattr(gqa, name).weight.copy_(w.mean(dim=1).reshape(num_kv_heads * Dh, D))
    return gqa
'''

TO_GQA_WRONG = [
    _e("first head of each group", _variant(_TO_GQA, ("w.mean(dim=1)", "w[:, 0]")), "not the first of them"),
    _e("sum instead of mean", _variant(_TO_GQA, ("w.mean(dim=1)", "w.sum(dim=1)")), "mean-pool, don't sum"),
    _e("strided groups", _variant(_TO_GQA, ("w = getattr(mha, name).weight.view(num_kv_heads, R, Dh, D)",
                                            "w = getattr(mha, name).weight.view(R, num_kv_heads, Dh, D)"),
                                  ("w.mean(dim=1)", "w.mean(dim=0)")), "group consecutive heads"),
    _e("modifies the input module", '''
def mha_to_gqa(mha, num_kv_heads):
    if mha.num_kv_heads != mha.num_heads or mha.num_heads % num_kv_heads:
        raise ValueError("expected MHA and H divisible by num_kv_heads")
    H, Dh = mha.num_heads, mha.head_dim
    D = mha.q_proj.in_features
    R = H // num_kv_heads
    with torch.no_grad():
        for name in ("k_proj", "v_proj"):
            w = getattr(mha, name).weight.view(num_kv_heads, R, Dh, D).mean(dim=1)
            new = nn.Linear(D, num_kv_heads * Dh, bias=False).to(w.dtype)
            new.weight.copy_(w.reshape(num_kv_heads * Dh, D))
            setattr(mha, name, new)
    mha.num_kv_heads = num_kv_heads
    mha.n_rep = R
    return mha
''', "leave the input module unchanged"),
]


TO_GQA_CORRECT = [
    _e("a new GroupedQueryAttention, weights copied", _TO_GQA),
    _e("deepcopy, then a loop over the groups", '''
def mha_to_gqa(mha, num_kv_heads):
    if mha.num_kv_heads != mha.num_heads or mha.num_heads % num_kv_heads != 0:
        raise ValueError("mha must be MHA and num_heads a multiple of num_kv_heads")
    gqa = copy.deepcopy(mha)
    R = mha.num_heads // num_kv_heads
    Dh = mha.head_dim
    for name in ("k_proj", "v_proj"):
        old = getattr(mha, name).weight.detach()
        rows = [old[g * R * Dh:(g + 1) * R * Dh].view(R, Dh, -1).mean(0) for g in range(num_kv_heads)]
        layer = nn.Linear(old.shape[1], num_kv_heads * Dh, bias=False).to(old.dtype)
        layer.weight = nn.Parameter(torch.cat(rows, dim=0))
        setattr(gqa, name, layer)
    gqa.num_kv_heads = num_kv_heads
    gqa.n_rep = R
    return gqa
'''),
]

WRONG = {
    "repeat_kv": REPEAT_WRONG,
    "GroupedQueryAttention": GQA_WRONG,
    "LatentCache": LC_WRONG,
    "MultiHeadLatentAttention": MLA_WRONG,
    "attention_cache_bytes_per_token": BYTES_WRONG,
    "mha_to_gqa": TO_GQA_WRONG,
}

CORRECT = {
    "repeat_kv": REPEAT_CORRECT,
    "GroupedQueryAttention": GQA_CORRECT,
    "LatentCache": LC_CORRECT,
    "MultiHeadLatentAttention": MLA_CORRECT,
    "attention_cache_bytes_per_token": BYTES_CORRECT,
    "mha_to_gqa": TO_GQA_CORRECT,
}
