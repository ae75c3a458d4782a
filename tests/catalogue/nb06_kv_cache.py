"""Wrong and correct implementations of notebook 06's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F``, ``nn``, ``causal_mask``, ``scaled_dot_product_attention``, ``rope_cos_sin``,
``apply_rope``, ``RMSNorm``, ``SwiGLU``). Wrong entries are plausible attempts; ``hint`` is a
substring of the catalogued hint (``tfcourse.checks.nb06_kv_cache.HINTS``) that the feedback
should show, None when no hint fits. Correct entries include the forms public code uses: a
preallocated cache, Hugging Face's DynamicCache lists, F.scaled_dot_product_attention with an
explicit bottom-right mask, complex (Meta-style) RoPE angles in float64, Gumbel-max sampling,
HF's TopK/TopP warpers, torch.inference_mode.

Through the real grader every wrong entry must lose its own exercise's points only: a broken
``KVCache`` must not cost ``CausalSelfAttention``, ``DecoderBlock``, ``DecoderLM`` or ``generate``
(the cases build the learner's cache), and a broken ``CausalSelfAttention`` must not cost
``DecoderBlock`` or ``DecoderLM`` (the chain DecoderLM -> DecoderBlock -> CausalSelfAttention):
the course's versions stand in.
"""

from __future__ import annotations

from textwrap import indent as _indent

from tests.catalogue import entry as _e
from tests.catalogue import reference_source as _reference
from tests.catalogue import variant as _variant
from tests.catalogue import without_blocks as _without

NOTEBOOK = "06_kv_cache"


# ---------------------------------------------------------------------------------------------
# KVCache
# ---------------------------------------------------------------------------------------------
def cache_opening(name: str, first: str, second: str, seq_dim: int) -> str:
    """The opening of a cache class that keeps two tensors: both None until the first update, and
    ``seq_len`` the first one's length along ``seq_dim``. This notebook's KVCache (k, v; dim 2) and
    notebook 07's LatentCache (c_kv, k_rope; dim 1) start alike."""
    return f'''
class {name}:
    def __init__(self):
        self.{first} = None
        self.{second} = None

    @property
    def seq_len(self):
        return 0 if self.{first} is None else self.{first}.size({seq_dim})
'''


_KV = cache_opening("KVCache", "k", "v", 2) + '''
    def _check(self, k, v):
        if k.shape != v.shape:
            raise ValueError("k and v must have the same shape")
        if self.k is not None and (k.size(0) != self.k.size(0) or k.size(1) != self.k.size(1)
                                   or k.size(3) != self.k.size(3) or k.dtype != self.k.dtype):
            raise ValueError("chunk does not fit the cache")

    def update(self, k, v):
        self._check(k, v)
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat((self.k, k), dim=2)
            self.v = torch.cat((self.v, v), dim=2)
        return self.k, self.v
'''

# The same cache with the checks written inside update and one torch.cat line per tensor.
_KV_INLINE = _variant(_KV,
                      ("def _check(self, k, v):", "def update(self, k, v):"),
                      ('''
            raise ValueError("k and v must have the same shape")
    ...
            self.v = torch.cat((self.v, v), dim=2)
''', '''
            raise ValueError("k and v differ")
        if self.k is not None and (k.size(0), k.size(1), k.size(3), k.dtype) != (
                self.k.size(0), self.k.size(1), self.k.size(3), self.k.dtype):
            raise ValueError("does not fit")
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
'''))

KV_WRONG = [
    _e("concatenated on the head axis",
       _variant(_KV,
                ("self.k = torch.cat((self.k, k), dim=2)", "self.k = torch.cat([self.k, k], dim=1)"),
                ("self.v = torch.cat((self.v, v), dim=2)", "self.v = torch.cat([self.v, v], dim=1)")),
       "append along the sequence axis"),
    _e("seq_len counts the heads",
       _variant(_KV_INLINE,
                ("return 0 if self.k is None else self.k.size(2)",
                 "return 0 if self.k is None else self.k.shape[1]"),
                ("not None and (k.size(0), k.size(1), k.size(3), k.dtype) !=",
                 "not None and (k.shape[0], k.shape[1], k.shape[3], k.dtype) !="),
                ("self.k.size(0), self.k.size(1), self.k.size(3), self.k.dtype):",
                 "self.k.shape[0], self.k.shape[1], self.k.shape[3], self.k.dtype):")),
       "seq_len is the number of cached positions"),
    _e("update returns the cache without the new tokens",
       _variant(_KV, ('''
        else:
            self.k = torch.cat((self.k, k), dim=2)
            self.v = torch.cat((self.v, v), dim=2)
        return self.k, self.v
''', '''
            return k, v
        past = (self.k, self.v)
        self.k = torch.cat((self.k, k), dim=2)
        self.v = torch.cat((self.v, v), dim=2)
        return past
''')),
       "update appends first"),
    _e("no ValueError (torch.cat's own errors)",
       _variant(_KV_INLINE, ('''
        if k.shape != v.shape:
        ...
            raise ValueError("does not fit")
''', None)),
       "update raises ValueError itself"),
    _e("seq_len a method, not a property", _variant(_KV_INLINE, ("    @property", None)),
       "make seq_len a property"),
    _e("correct math, no validation",
       _variant(_KV, ('        self._check(k, v)', None)),
       "ValueError"),
]

KV_CORRECT = [
    _e("torch.cat on dim 2", _KV),
    _e("preallocated buffer that doubles", '''
class KVCache:
    def __init__(self):
        self._k = None
        self._v = None
        self._len = 0

    @property
    def seq_len(self):
        return self._len

    @property
    def k(self):
        return None if self._k is None else self._k[:, :, :self._len]

    @property
    def v(self):
        return None if self._v is None else self._v[:, :, :self._len]

    def update(self, k, v):
        if k.shape != v.shape:
            raise ValueError("k and v must have the same shape")
        B, G, T, Dh = k.shape
        if self._k is None:
            self._k = k.new_zeros(B, G, max(16, T), Dh)
            self._v = v.new_zeros(B, G, max(16, T), Dh)
        elif (B, G, Dh) != (self._k.size(0), self._k.size(1), self._k.size(3)) or k.dtype != self._k.dtype:
            raise ValueError("chunk does not fit the cache")
        need = self._len + T
        if need > self._k.size(2):
            cap = max(need, 2 * self._k.size(2))
            grow_k = self._k.new_zeros(B, G, cap, Dh)
            grow_v = self._v.new_zeros(B, G, cap, Dh)
            grow_k[:, :, :self._len] = self._k[:, :, :self._len]
            grow_v[:, :, :self._len] = self._v[:, :, :self._len]
            self._k, self._v = grow_k, grow_v
        self._k[:, :, self._len:need] = k
        self._v[:, :, self._len:need] = v
        self._len = need
        return self.k, self.v
'''),
    _e("Hugging Face DynamicCache style (lists of chunks)", '''
class KVCache:
    def __init__(self):
        self.key_chunks, self.value_chunks = [], []
        self.k = self.v = None

    @property
    def seq_len(self):
        return sum(c.shape[-2] for c in self.key_chunks)

    def update(self, k, v):
        if k.shape != v.shape:
            raise ValueError("k and v must have the same shape")
        if self.k is not None:
            B, G, _, Dh = self.k.shape
            if k.shape[0] != B or k.shape[1] != G or k.shape[-1] != Dh or k.dtype != self.k.dtype:
                raise ValueError("chunk does not fit the cache")
        self.key_chunks.append(k)
        self.value_chunks.append(v)
        self.k = torch.cat(self.key_chunks, dim=-2)
        self.v = torch.cat(self.value_chunks, dim=-2)
        return self.k, self.v
'''),
    # Writing into its arguments is noted, not scored (docs/grading.md); the probe model that checks
    # generate gives every layer's cache fresh tensors, so generate keeps its points too.
    _e("copies cached, then k and v zeroed in place (a note, no points lost)", _variant(
        _KV, ("            self.k, self.v = k, v", "            self.k, self.v = k.clone(), v.clone()"),
        ("        return self.k, self.v", "        k.zero_()\n        v.zero_()\n        return self.k, self.v"))),
]


# ---------------------------------------------------------------------------------------------
# CausalSelfAttention
# ---------------------------------------------------------------------------------------------
# The constructor is the reference's, with a learner's signature and message.
_ATTN_INIT = _variant(_reference("nb06_kv_cache", "CausalSelfAttention.__init__"),
                      ("(self, d_model: int, num_heads: int, rope_theta: float = 10000.0)",
                       "(self, d_model, num_heads, rope_theta=10000.0)"),
                      ("if d_model % num_heads != 0:", "if d_model % num_heads:"),
                      ('ValueError(f"d_model = {d_model} is not divisible by num_heads = {num_heads}")',
                       'ValueError("d_model must be divisible by num_heads")'))
_ATTN = '''
class CausalSelfAttention(nn.Module):
''' + _indent(_ATTN_INIT, "    ") + '''
    def _split(self, t, B, T):
        return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, cache=None):
        B, T, D = x.shape
        q = self._split(self.q_proj(x), B, T)
        k = self._split(self.k_proj(x), B, T)
        v = self._split(self.v_proj(x), B, T)
        past = 0 if cache is None else cache.seq_len
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), self.head_dim, self.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
'''

ATTN_WRONG = [
    _e("heads split with view(B, T, Dh, H)",
       _variant(_ATTN, ("return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)",
                        "return t.view(B, T, self.head_dim, self.num_heads).permute(0, 3, 1, 2)")),
       "split the heads with view(B, T, H, Dh)"),
    _e("positions not offset by the cache",
       _variant(_ATTN, ('''
        past = 0 if cache is None else cache.seq_len
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), self.head_dim, self.rope_theta)
''', "        cos, sin = rope_cos_sin(torch.arange(T, device=x.device), self.head_dim, self.rope_theta)")),
       "absolute positions P .. P + T - 1"),
    _e("keys cached before RoPE (rotated again on read)",
       _variant(_ATTN, ('''
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), self.head_dim, self.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
''', None),
                ("        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))", '''
        S = k.size(2)
        cos, sin = rope_cos_sin(torch.arange(S, device=x.device), self.head_dim, self.rope_theta)
        k = apply_rope(k, cos, sin)
        q = apply_rope(q, cos[past:], sin[past:])
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, S, device=x.device))
''')),
       "rotate k before cache.update"),
    _e("keys cached before RoPE, only the new ones rotated",
       _variant(_ATTN,
                ("q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)",
                 "q, k_rot = apply_rope(q, cos, sin), apply_rope(k, cos, sin)"),
                ('''
            k, v = cache.update(k, v)
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))
''', '''
            k_all, v = cache.update(k, v)
            k = torch.cat([k_all[:, :, :past], k_rot], dim=2)
        else:
            k = k_rot
        S = k.size(2)
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, S, device=x.device))
''')),
       "rotate k before cache.update"),
    _e("is_causal=True only for chunks (top-left mask in chunked decode)",
       _variant(_ATTN,
                ("out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))",
                 "out = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)  # one new token sees everything")),
       "bottom-right"),
    _e("no ValueError for d_model % num_heads",
       _variant(_ATTN, ('''
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
''', None),
                ('''
    def _split(self, t, B, T):
        return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, cache=None):
''', "    def forward(self, x, cache=None):"),
                ('''
        q = self._split(self.q_proj(x), B, T)
        ...
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), self.head_dim, self.rope_theta)
''', '''
        H, Dh = self.num_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, Dh).transpose(1, 2)
        k = self.k_proj(x).view(B, T, H, Dh).transpose(1, 2)
        v = self.v_proj(x).view(B, T, H, Dh).transpose(1, 2)
        P = cache.seq_len if cache is not None else 0
        cos, sin = rope_cos_sin(torch.arange(P, P + T, device=x.device), Dh, self.rope_theta)
''')),
       "raise ValueError in __init__"),
    _e("correct math, no validation", _without(_ATTN, "if d_model % num_heads:"), "ValueError"),
]

ATTN_CORRECT = [
    _e("setup's RoPE and attention", _ATTN),
    _e("F.sdpa with an explicit bottom-right mask",
       _variant(_ATTN,
                ("past = 0 if cache is None else cache.seq_len",
                 "past = cache.seq_len if cache is not None else 0"),
                ("        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))", '''
        S = k.shape[2]
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
'''))),
    _e("complex RoPE in float64 (Meta-style, rotate-half pairs)",
       _variant(_ATTN,
                ("    def forward(self, x, cache=None):", '''
    def _rotate(self, t, positions):
        half = self.head_dim // 2
        inv = 1.0 / self.rope_theta ** (torch.arange(half, dtype=torch.float64, device=t.device) * 2 / self.head_dim)
        freqs = torch.polar(torch.ones(len(positions), half, dtype=torch.float64, device=t.device),
                            positions.double()[:, None] * inv)
        z = torch.complex(t[..., :half].double(), t[..., half:].double()) * freqs
        return torch.cat((z.real, z.imag), dim=-1).to(t.dtype)

    def forward(self, x, cache=None):
'''),
                ('''
        past = 0 if cache is None else cache.seq_len
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), self.head_dim, self.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
''', '''
        start = cache.seq_len if cache is not None else 0
        positions = torch.arange(start, start + T, device=x.device)
        q, k = self._rotate(q, positions), self._rotate(k, positions)
'''),
                ("        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))", '''
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~causal_mask(T, k.size(2), device=x.device), float("-inf"))
        out = scores.softmax(dim=-1) @ v
'''))),
]


# ---------------------------------------------------------------------------------------------
# DecoderBlock
# ---------------------------------------------------------------------------------------------
_BLOCK = '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, rope_theta=10000.0, eps=1e-6):
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps)
        self.attn = CausalSelfAttention(d_model, num_heads, rope_theta)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff)

    def forward(self, x, cache=None):
        h = x + self.attn(self.attn_norm(x), cache)
        return h + self.ffn(self.ffn_norm(h))
'''

BLOCK_WRONG = [
    _e("only the FFN's input normalised",
       _variant(_BLOCK, ("h = x + self.attn(self.attn_norm(x), cache)", "h = x + self.attn(x, cache)")),
       "pre-norm normalises the input of both sublayers"),
    _e("residual taken after the norm",
       _variant(_BLOCK,
                ("        h = x + self.attn(self.attn_norm(x), cache)", '''
        x = self.attn_norm(x)
        h = x + self.attn(x, cache)
''')),
       "the residual stream carries x itself"),
    _e("residual taken after the norm in both sublayers",
       _variant(_BLOCK, ('''
        h = x + self.attn(self.attn_norm(x), cache)
        return h + self.ffn(self.ffn_norm(h))
''', '''
        x = self.attn_norm(x)
        h = x + self.attn(x, cache)
        h = self.ffn_norm(h)
        return h + self.ffn(h)
''')),
       "both residuals carry the stream itself"),
    _e("post-norm",
       _variant(_BLOCK,
                ("h = x + self.attn(self.attn_norm(x), cache)",
                 "h = self.attn_norm(x + self.attn(x, cache))"),
                ("return h + self.ffn(self.ffn_norm(h))", "return self.ffn_norm(h + self.ffn(h))")),
       "attn_norm(x + attn(x)) is post-norm"),
    _e("cache not passed to attn",
       _variant(_BLOCK,
                ("h = x + self.attn(self.attn_norm(x), cache)", "h = x + self.attn(self.attn_norm(x))")),
       "pass the cache on to the attention"),
]

BLOCK_CORRECT = [
    _e("pre-norm block", _BLOCK),
    _e("torch.nn.RMSNorm for the norms", '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, rope_theta=10000.0, eps=1e-6):
        super().__init__()
        self.attn_norm = nn.RMSNorm(d_model, eps=eps)
        self.attn = CausalSelfAttention(d_model, num_heads, rope_theta=rope_theta)
        self.ffn_norm = nn.RMSNorm(d_model, eps=eps)
        self.ffn = SwiGLU(d_model, d_ff)

    def forward(self, x, cache=None):
        residual = x
        x = residual + self.attn(self.attn_norm(x), cache=cache)
        residual = x
        return residual + self.ffn(self.ffn_norm(x))
'''),
]


# ---------------------------------------------------------------------------------------------
# DecoderLM
# ---------------------------------------------------------------------------------------------
_LM = '''
class DecoderLM(nn.Module):
    def __init__(self, vocab_size, d_model, num_layers, num_heads, d_ff, rope_theta=10000.0,
                 tie_embeddings=False):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList([DecoderBlock(d_model, num_heads, d_ff, rope_theta)
                                     for _ in range(num_layers)])
        self.final_norm = RMSNorm(d_model, 1e-6)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

    def forward(self, input_ids, caches=None):
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError("one cache per block")
        x = self.tok_emb(input_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.lm_head(self.final_norm(x))
'''

LM_WRONG = [
    _e("rope_theta not passed to the blocks",
       _variant(_LM, ("DecoderBlock(d_model, num_heads, d_ff, rope_theta)", "DecoderBlock(d_model, num_heads, d_ff)")),
       "pass rope_theta on to every block"),
    _e("no final norm", _variant(_LM, ("return self.lm_head(self.final_norm(x))", "return self.lm_head(x)")),
       "apply final_norm"),
    _e("lm_head tied by copying the values",
       _variant(_LM,
                ("            self.lm_head.weight = self.tok_emb.weight", '''
            with torch.no_grad():
                self.lm_head.weight.copy_(self.tok_emb.weight)
''')),
       "make lm_head.weight the same Parameter"),
    _e("caches not passed to the blocks",
       _variant(_LM,
                ("for i, block in enumerate(self.blocks):", "for block in self.blocks:"),
                ("x = block(x, None if caches is None else caches[i])", "x = block(x)")),
       "give block i its own cache"),
    _e("no ValueError for len(caches)",
       _variant(_LM, ('''
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError("one cache per block")
''', None),
                ('''
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
''', '''
        for block, cache in zip(self.blocks, caches if caches is not None else [None] * len(self.blocks)):
            x = block(x, cache)
''')),
       "raise ValueError when len(caches) != len(self.blocks)"),
    _e("correct math, no validation",
       _without(_LM, "if caches is not None and len(caches) != len(self.blocks):"),
       "ValueError"),
]

LM_CORRECT = [
    _e("Llama layout", _LM),
    _e("embedding tied to the head's Parameter, zip over caches",
       _variant(_LM, ('''
        self.blocks = nn.ModuleList([DecoderBlock(d_model, num_heads, d_ff, rope_theta)
                                     for _ in range(num_layers)])
        self.final_norm = RMSNorm(d_model, 1e-6)
''', '''
        self.blocks = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, rope_theta) for _ in range(num_layers))
        self.final_norm = RMSNorm(d_model, eps=1e-6)
'''),
                ("self.lm_head.weight = self.tok_emb.weight", "self.tok_emb.weight = self.lm_head.weight"),
                ('''
        if caches is not None and len(caches) != len(self.blocks):
        ...
        return self.lm_head(self.final_norm(x))
''', '''
        if caches is None:
            caches = [None] * len(self.blocks)
        elif len(caches) != len(self.blocks):
            raise ValueError(f"expected {len(self.blocks)} caches, got {len(caches)}")
        h = self.tok_emb(input_ids)
        for block, cache in zip(self.blocks, caches):
            h = block(h, cache)
        return self.lm_head(self.final_norm(h))
'''))),
]


# ---------------------------------------------------------------------------------------------
# sample_next_token
# ---------------------------------------------------------------------------------------------
_SAMPLE = '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):

    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    if top_k is not None and top_k < 1:
        raise ValueError("top_k must be >= 1")
    if top_p is not None and not (0 < top_p <= 1):
        raise ValueError("top_p must be in (0, 1]")

    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        remove = probs.cumsum(-1) - probs >= top_p
        remove[:, 0] = False
        logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
'''


# the base's top-k and top-p blocks, which an entry swaps
_SAMPLE_TOP_K = """    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
"""
_SAMPLE_TOP_P = """    if top_p is not None:
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        remove = probs.cumsum(-1) - probs >= top_p
        remove[:, 0] = False
        logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
"""
assert _SAMPLE_TOP_K + _SAMPLE_TOP_P in _SAMPLE

SAMPLE_WRONG = [
    _e("top-p before top-k (the nucleus of the whole distribution)",
       _variant(_SAMPLE, (_SAMPLE_TOP_K + _SAMPLE_TOP_P, _SAMPLE_TOP_P + _SAMPLE_TOP_K)),
       "apply top-k first, then top-p"),
    _e("the sort undone with gather(-1, order)",
       _variant(_SAMPLE, ('logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))',
                          'logits = sorted_logits.masked_fill(remove, float("-inf")).gather(-1, idx)')),
       "undo the sort with scatter"),
    _e("logits divided by a zero temperature",
       _variant(_SAMPLE, ('''
    if temperature == 0:
        return logits.argmax(-1)
''', None),
                ("    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)", '''
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''')),
       "temperature 0 means greedy"),
    _e("temperature applied after the softmax",
       _variant(_SAMPLE,
                ("    logits = logits / temperature", None),
                ("    if top_p is not None:", '''
    probs = logits.softmax(-1) / temperature
    if top_p is not None:
'''),
                ('''
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        remove = probs.cumsum(-1) - probs >= top_p
''', '''
        sp, idx = probs.sort(dim=-1, descending=True)
        remove = (sp.cumsum(-1) - sp) / sp.sum(-1, keepdim=True) >= top_p
'''),
                ('logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))',
                 "probs = probs.masked_fill(remove.scatter(-1, idx, remove), 0.0)"),
                ("return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)",
                 "return torch.multinomial(probs, 1, generator=generator).squeeze(-1)")),
       "divide the logits by the temperature before the softmax"),
    _e("temperature divided in after top-k/top-p (the nucleus of the untempered logits)",
       _variant(_SAMPLE,
                ("    logits = logits / temperature", None),
                ("    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)", '''
    probs = (logits / temperature).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''')),
       "divide by the temperature before top-k/top-p"),
    _e("top-k keeps k + 1 (0-based index k)",
       _variant(_SAMPLE,
                ("if top_k is not None:", "if top_k is not None and top_k < logits.size(-1):"),
                ("kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]",
                 "kth = logits.sort(dim=-1, descending=True).values[:, top_k:top_k + 1]")),
       "top-k keeps exactly the k largest"),
    _e("top-p drops the token that crosses p",
       _variant(_SAMPLE,
                ("probs = sorted_logits.softmax(-1)", "cum = sorted_logits.softmax(-1).cumsum(-1)"),
                ("remove = probs.cumsum(-1) - probs >= top_p", "remove = cum > top_p")),
       "top-p keeps the token that crosses p"),
    _e("returns (B, 1): the sample dimension kept",
       _variant(_SAMPLE,
                ("return logits.argmax(-1)", "return logits.argmax(-1, keepdim=True)"),
                ("torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)",
                 "torch.multinomial(logits.softmax(-1), 1, generator=generator)")),
       "return one token per row, shape (B,)"),
    _e("generator ignored",
       _variant(_SAMPLE,
                ("torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)",
                 "torch.multinomial(logits.softmax(-1), 1).squeeze(-1)")),
       "pass generator=generator"),
    _e("no ValueError for bad options",
       _variant(_SAMPLE, ('''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
...
    if temperature == 0:
''', '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature <= 0:
'''),
                ("if top_k is not None:", "if top_k:"),
                ("if top_p is not None:", "if top_p:")),
       "raise ValueError for temperature < 0"),
    # correct math that writes into the caller's logits: it loses the unwritten cell only
    # (tests/test_unwritten_cell.py grades it, and the forgeries of the old in-child detector)
    _e("logits divided in place (logits /= temperature)",
       _variant(_SAMPLE, ("    logits = logits / temperature", "    logits /= temperature")),
       "clone first"),
    _e("correct math, no validation",
       _without(_SAMPLE, "if temperature < 0:", "if top_k is not None and top_k < 1:", "if top_p is not None and not (0 < top_p <= 1):"),
       "ValueError"),
]

SAMPLE_CORRECT = [
    _e("multinomial, HF order",
       _variant(_SAMPLE, ("return logits.argmax(-1)", "return logits.argmax(dim=-1)"))),
    _e("Gumbel-max with the generator",
       _variant(_SAMPLE, ('''
        return logits.argmax(-1)
    ...
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
''', '''
        return logits.argmax(dim=-1)
    scores = logits.double() / temperature
    if top_k is not None and top_k < scores.size(-1):
        scores[scores < scores.topk(top_k, dim=-1).values[:, -1:]] = float("-inf")
    if top_p is not None and top_p < 1:
        s, order = scores.sort(dim=-1, descending=True)
        p = s.softmax(-1)
        drop = (p.cumsum(-1) - p) >= top_p
        drop[:, 0] = False
        s[drop] = float("-inf")
        scores = s.gather(-1, order.argsort(-1))
    u = torch.rand(scores.shape, generator=generator, dtype=torch.float64, device=scores.device)
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
    return (scores + gumbel).argmax(dim=-1)
'''))),
    _e("Hugging Face TopK/TopP warper logic",
       _variant(_SAMPLE,
                ("return logits.argmax(-1)", "return torch.argmax(logits, dim=-1)"),
                ("logits = logits / temperature", "scores = logits / temperature"),
                ('''
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
''', '''
        top_k = min(top_k, scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
'''),
                ('''
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
    ...
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
''', '''
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
        sorted_indices_to_remove[..., -1:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
    probs = torch.nn.functional.softmax(scores, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
'''))),
]


# ---------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------
_GENERATE = '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    ids, step = input_ids, input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(step, caches=caches)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            step = nxt[:, None] if use_cache else ids
    return ids
'''

# The loop without caches: the whole sequence through the model at every step (use_cache ignored).
_GENERATE_NO_CACHE = _variant(_GENERATE, ('''
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    ids, step = input_ids, input_ids
''', "    ids = input_ids"),
                              ("logits = model(step, caches=caches)", "logits = model(ids)"),
                              ("            step = nxt[:, None] if use_cache else ids", None))

GENERATE_WRONG = [
    _e("whole sequence fed into a filled cache",
       _variant(_GENERATE_NO_CACHE,
                ("    ids = input_ids", '''
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    ids = input_ids
'''),
                ("logits = model(ids)", "logits = model(ids, caches=caches)")),
       "feed only the new token after the prefill"),
    _e("[KVCache()] * L (one cache shared by every block)",
       _variant(_GENERATE,
                ("caches = [KVCache() for _ in model.blocks] if use_cache else None",
                 "caches = [KVCache()] * len(model.blocks) if use_cache else None")),
       "one KVCache per block"),
    _e("use_cache ignored (recomputes everything)", _GENERATE_NO_CACHE, "prefill the prompt once with caches"),
    _e("new caches at every step",
       _variant(_GENERATE,
                ("    caches = [KVCache() for _ in model.blocks] if use_cache else None", None),
                ("            logits = model(step, caches=caches)", """
            caches = [KVCache() for _ in model.blocks] if use_cache else None
            logits = model(step, caches=caches)
""")),
       "create the caches once, before the loop"),
    _e("the probe's own greedy oracle, if it has one (it must not)", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    if hasattr(model, "greedy"):
        return model.greedy(input_ids, max_new_tokens)
    return torch.cat([input_ids, input_ids[:, -1:].repeat(1, max_new_tokens)], dim=1)
'''),
    _e("never uses a cache, forges the probe's call record",
       _variant(_GENERATE_NO_CACHE,
                ("    return ids", '''
    if use_cache:
        n = len(model.blocks)
        model._calls = [(input_ids.size(1), n, 0)] + [(1, n, 0)] * (max_new_tokens - 1)
    return ids
''')),
       "prefill the prompt once with caches"),
    # issue 25's forgeries of the old call record (run in the learner's process): the probe's
    # module's _RECORDS rewritten, or the model's class swapped for one with a fake `record`. The
    # cache_use part now reads the calls off the tokens of a probe whose logits depend on them.
    _e("recomputes every step, rewrites the probe module's _RECORDS",
       _variant(_GENERATE_NO_CACHE,
                ("    return ids", '''
    import sys
    records = getattr(sys.modules.get(type(model).__module__), "_RECORDS", None)
    if use_cache and records is not None:
        n = len(model.blocks)
        records[model] = [(input_ids.size(1), n, 0)] + [(1, n, 0)] * (max_new_tokens - 1)
    return ids
''')),
       "prefill the prompt once with caches"),
    _e("recomputes every step, swaps model.__class__ for one with a fake record",
       _variant(_GENERATE_NO_CACHE,
                ("    return ids", '''
    if use_cache:
        n, t = len(model.blocks), input_ids.size(1)

        class Forged(type(model)):
            @property
            def record(self):
                return torch.tensor([(t, n, 0)] + [(1, n, 0)] * (max_new_tokens - 1))

        model.__class__ = Forged
    return ids
''')),
       "prefill the prompt once with caches"),
    _e("caches used even with use_cache=False",
       _variant(_GENERATE,
                ("caches = [KVCache() for _ in model.blocks] if use_cache else None",
                 "caches = [KVCache() for _ in model.blocks]"),
                ("ids, step = input_ids, input_ids", "ids, step_input = input_ids, input_ids"),
                ("logits = model(step, caches=caches)", "logits = model(step_input, caches=caches)"),
                ("step = nxt[:, None] if use_cache else ids", "step_input = nxt[:, None]")),
       "use_cache=False: call the model with the whole sequence and caches=None"),
    _e("autograd left on",
       _variant(_GENERATE, ('''
    with torch.no_grad():
    ...
            step = nxt[:, None] if use_cache else ids
''', '''
    for _ in range(max_new_tokens):
        logits = model(step, caches=caches)
        nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        step = nxt[:, None] if use_cache else ids
''')),
       "torch.no_grad()"),
    _e("logits of the first position",
       _variant(_GENERATE,
                ("nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)",
                 "nxt = sample_next_token(logits[:, 0], temperature, top_k, top_p, generator)")),
       "the last position's logits"),
    _e("only the temperature passed on",
       _variant(_GENERATE,
                ("sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)",
                 "sample_next_token(logits[:, -1], temperature)")),
       "pass temperature, top_k, top_p and generator"),
]

GENERATE_CORRECT = [
    _e("prefill then one token per step", _GENERATE),
    _e("prefill before the loop, then decode steps (nanoGPT/HF style, a list of new tokens)", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    if max_new_tokens == 0:
        return input_ids
    with torch.no_grad():
        if not use_cache:
            ids = input_ids
            for _ in range(max_new_tokens):
                nxt = sample_next_token(model(ids, caches=None)[:, -1], temperature, top_k, top_p, generator)
                ids = torch.cat((ids, nxt.unsqueeze(1)), dim=1)
            return ids
        past = [KVCache() for _ in model.blocks]
        logits = model(input_ids, caches=past)  # prefill
        new = []
        for step in range(max_new_tokens):
            nxt = sample_next_token(logits[:, -1, :], temperature, top_k, top_p, generator)
            new.append(nxt)
            if step + 1 < max_new_tokens:
                logits = model(nxt.view(-1, 1), caches=past)  # decode
    return torch.cat([input_ids, torch.stack(new, dim=1)], dim=1)
'''),
    _e("inference_mode, the step's input chosen per iteration", '''
@torch.inference_mode()
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache() for _ in range(len(model.blocks))] if use_cache else None
    out = input_ids.clone()
    for i in range(max_new_tokens):
        inputs = out if (i == 0 or not use_cache) else out[:, -1:]
        logits = model(inputs, caches)
        token = sample_next_token(logits[:, -1, :], temperature=temperature, top_k=top_k, top_p=top_p,
                                  generator=generator)
        out = torch.cat((out, token.unsqueeze(-1)), dim=-1)
    return out
'''),
]


# ---------------------------------------------------------------------------------------------
# kv_cache_bytes
# ---------------------------------------------------------------------------------------------
_BYTES = '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    if min(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element) < 0:
        raise ValueError("negative size")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
'''

# The same with the sizes in a list (math.prod).
_BYTES_SIZES = _variant(_BYTES,
                        ("    if min(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element) < 0:", '''
    sizes = [num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element]
    if min(sizes) < 0:
'''),
                        ("return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element",
                         "return int(2 * math.prod(sizes))"))

BYTES_WRONG = [
    _e("K or V forgotten", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    sizes = (num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element)
    if any(s < 0 for s in sizes):
        raise ValueError("sizes must be >= 0")
    return num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
''', "count K and V"),
    _e("bits divided by 8 (a float)",
       _variant(_BYTES,
                ("    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element", '''
    bits = 8 * bytes_per_element
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bits / 8
''')),
       "return a Python int"),
    _e("a 0-dim tensor (torch.tensor(sizes).prod() * 2)",
       _variant(_BYTES_SIZES, ("return int(2 * math.prod(sizes))", "return torch.tensor(sizes).prod() * 2")),
       "return a Python int (int(...))"),
    _e("a numpy integer (np.prod)",
       _variant(_BYTES_SIZES,
                ("def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):", '''
import numpy as np


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
'''),
                ("return int(2 * math.prod(sizes))", "return 2 * np.prod(sizes)")),
       "return a Python int (int(...))"),
    _e("batch_size ignored",
       _variant(_BYTES, ("seq_len * batch_size * bytes_per_element", "seq_len * bytes_per_element")),
       "multiply by batch_size"),
    _e("no ValueError for negative sizes", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
''', "raise ValueError when any argument is negative"),
    _e("correct math, no validation",
       _without(_BYTES, "if min(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element) < 0:"),
       "ValueError"),
]

BYTES_CORRECT = [
    _e("the formula", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    for value in (num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element):
        if value < 0:
            raise ValueError(f"sizes must be >= 0, got {value}")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
'''),
    _e("math.prod", _BYTES_SIZES),
]


# ---------------------------------------------------------------------------------------------
# apply_repetition_penalty
# ---------------------------------------------------------------------------------------------
_PENALTY = '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    seen = logits.gather(-1, input_ids)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits.scatter(-1, input_ids, seen)
'''

PENALTY_WRONG = [
    _e("negative logits divided too",
       _variant(_PENALTY, ('''
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits.scatter(-1, input_ids, seen)
''', "    return logits.scatter(-1, input_ids, seen / penalty)")),
       "a negative logit is multiplied"),
    _e("penalty applied per occurrence", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    out = logits.clone()
    for b in range(input_ids.size(0)):
        for i in input_ids[b].tolist():
            out[b, i] = out[b, i] * penalty if out[b, i] < 0 else out[b, i] / penalty
    return out
''', "each id counts once"),
    _e("written into the logits in place", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    seen = logits.gather(-1, input_ids)
    logits.scatter_(-1, input_ids, torch.where(seen < 0, seen * penalty, seen / penalty))
    return logits
''', "don't write into the input"),
    _e("every token penalised", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    return torch.where(logits < 0, logits * penalty, logits / penalty)
''', "penalise only the ids that occur"),
    _e("no ValueError for penalty <= 0", _without(_PENALTY, "if penalty <= 0:"), "raise ValueError for penalty <= 0"),
]

PENALTY_CORRECT = [
    _e("HF gather/where/scatter", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    score = torch.gather(logits, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(1, input_ids, score)
'''),
    _e("a mask of the seen ids", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError(f"penalty must be positive, got {penalty}")
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter(1, input_ids, True)
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)
'''),
]


WRONG = {
    "KVCache": KV_WRONG,
    "CausalSelfAttention": ATTN_WRONG,
    "DecoderBlock": BLOCK_WRONG,
    "DecoderLM": LM_WRONG,
    "sample_next_token": SAMPLE_WRONG,
    "generate": GENERATE_WRONG,
    "kv_cache_bytes": BYTES_WRONG,
    "apply_repetition_penalty": PENALTY_WRONG,
}

CORRECT = {
    "KVCache": KV_CORRECT,
    "CausalSelfAttention": ATTN_CORRECT,
    "DecoderBlock": BLOCK_CORRECT,
    "DecoderLM": LM_CORRECT,
    "sample_next_token": SAMPLE_CORRECT,
    "generate": GENERATE_CORRECT,
    "kv_cache_bytes": BYTES_CORRECT,
    "apply_repetition_penalty": PENALTY_CORRECT,
}
