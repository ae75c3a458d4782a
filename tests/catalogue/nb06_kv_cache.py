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

from tests.catalogue import Entry
from tests.catalogue import entry as _e

NOTEBOOK = "06_kv_cache"


_KV_HEAD = '''
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    @property
    def seq_len(self):
        return 0 if self.k is None else self.k.size(2)

    def _check(self, k, v):
        if k.shape != v.shape:
            raise ValueError("k and v must have the same shape")
        if self.k is not None and (k.size(0) != self.k.size(0) or k.size(1) != self.k.size(1)
                                   or k.size(3) != self.k.size(3) or k.dtype != self.k.dtype):
            raise ValueError("chunk does not fit the cache")
'''

_ATTN_HEAD = '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, rope_theta=10000.0):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.rope_theta = rope_theta
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def _split(self, t, B, T):
        return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
'''

_BLOCK_INIT = '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, rope_theta=10000.0, eps=1e-6):
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps)
        self.attn = CausalSelfAttention(d_model, num_heads, rope_theta)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff)
'''

_LM_INIT = '''
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
'''

_SAMPLE_CHECKS = '''
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    if top_k is not None and top_k < 1:
        raise ValueError("top_k must be >= 1")
    if top_p is not None and not (0 < top_p <= 1):
        raise ValueError("top_p must be in (0, 1]")
'''

WRONG: dict[str, list[Entry]] = {
    "KVCache": [
        _e("concatenated on the head axis", _KV_HEAD + '''
    def update(self, k, v):
        self._check(k, v)
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=1)
            self.v = torch.cat([self.v, v], dim=1)
        return self.k, self.v
''', hint="append along the sequence axis"),
        _e("seq_len counts the heads", '''
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    @property
    def seq_len(self):
        return 0 if self.k is None else self.k.shape[1]

    def update(self, k, v):
        if k.shape != v.shape:
            raise ValueError("k and v differ")
        if self.k is not None and (k.shape[0], k.shape[1], k.shape[3], k.dtype) != (
                self.k.shape[0], self.k.shape[1], self.k.shape[3], self.k.dtype):
            raise ValueError("does not fit")
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        return self.k, self.v
''', hint="seq_len is the number of cached positions"),
        _e("update returns the cache without the new tokens", _KV_HEAD + '''
    def update(self, k, v):
        self._check(k, v)
        if self.k is None:
            self.k, self.v = k, v
            return k, v
        past = (self.k, self.v)
        self.k = torch.cat((self.k, k), dim=2)
        self.v = torch.cat((self.v, v), dim=2)
        return past
''', hint="update appends first"),
        _e("no ValueError (torch.cat's own errors)", '''
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    @property
    def seq_len(self):
        return 0 if self.k is None else self.k.size(2)

    def update(self, k, v):
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        return self.k, self.v
''', hint="update raises ValueError itself"),
        _e("seq_len a method, not a property", '''
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def seq_len(self):
        return 0 if self.k is None else self.k.size(2)

    def update(self, k, v):
        if k.shape != v.shape:
            raise ValueError("k and v differ")
        if self.k is not None and (k.size(0), k.size(1), k.size(3), k.dtype) != (
                self.k.size(0), self.k.size(1), self.k.size(3), self.k.dtype):
            raise ValueError("does not fit")
        self.k = k if self.k is None else torch.cat((self.k, k), dim=2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=2)
        return self.k, self.v
''', hint="make seq_len a property"),
    ],
    "CausalSelfAttention": [
        _e("positions not offset by the cache", _ATTN_HEAD + '''
    def forward(self, x, cache=None):
        B, T, D = x.shape
        q = self._split(self.q_proj(x), B, T)
        k = self._split(self.k_proj(x), B, T)
        v = self._split(self.v_proj(x), B, T)
        cos, sin = rope_cos_sin(torch.arange(T, device=x.device), self.head_dim, self.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', hint="absolute positions P .. P + T - 1"),
        _e("keys cached before RoPE (rotated again on read)", _ATTN_HEAD + '''
    def forward(self, x, cache=None):
        B, T, D = x.shape
        q = self._split(self.q_proj(x), B, T)
        k = self._split(self.k_proj(x), B, T)
        v = self._split(self.v_proj(x), B, T)
        past = 0 if cache is None else cache.seq_len
        if cache is not None:
            k, v = cache.update(k, v)
        S = k.size(2)
        cos, sin = rope_cos_sin(torch.arange(S, device=x.device), self.head_dim, self.rope_theta)
        k = apply_rope(k, cos, sin)
        q = apply_rope(q, cos[past:], sin[past:])
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, S, device=x.device))
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', hint="rotate k before cache.update"),
        _e("keys cached before RoPE, only the new ones rotated", _ATTN_HEAD + '''
    def forward(self, x, cache=None):
        B, T, D = x.shape
        q = self._split(self.q_proj(x), B, T)
        k = self._split(self.k_proj(x), B, T)
        v = self._split(self.v_proj(x), B, T)
        past = 0 if cache is None else cache.seq_len
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), self.head_dim, self.rope_theta)
        q, k_rot = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k_all, v = cache.update(k, v)
            k = torch.cat([k_all[:, :, :past], k_rot], dim=2)
        else:
            k = k_rot
        S = k.size(2)
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, S, device=x.device))
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', hint="rotate k before cache.update"),
        _e("is_causal=True only for chunks (top-left mask in chunked decode)", _ATTN_HEAD + '''
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
        out = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)  # one new token sees everything
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', hint="bottom-right"),
        _e("no ValueError for d_model % num_heads", '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, rope_theta=10000.0):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.rope_theta = rope_theta
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):
        B, T, D = x.shape
        H, Dh = self.num_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, Dh).transpose(1, 2)
        k = self.k_proj(x).view(B, T, H, Dh).transpose(1, 2)
        v = self.v_proj(x).view(B, T, H, Dh).transpose(1, 2)
        P = cache.seq_len if cache is not None else 0
        cos, sin = rope_cos_sin(torch.arange(P, P + T, device=x.device), Dh, self.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, k.size(2), device=x.device))
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', hint="raise ValueError in __init__"),
    ],
    "DecoderBlock": [
        _e("residual taken after the norm", _BLOCK_INIT + '''
    def forward(self, x, cache=None):
        x = self.attn_norm(x)
        h = x + self.attn(x, cache)
        return h + self.ffn(self.ffn_norm(h))
''', hint="the residual stream carries x itself"),
        _e("residual taken after the norm in both sublayers", _BLOCK_INIT + '''
    def forward(self, x, cache=None):
        x = self.attn_norm(x)
        h = x + self.attn(x, cache)
        h = self.ffn_norm(h)
        return h + self.ffn(h)
''', hint="both residuals carry the stream itself"),
        _e("post-norm", _BLOCK_INIT + '''
    def forward(self, x, cache=None):
        h = self.attn_norm(x + self.attn(x, cache))
        return self.ffn_norm(h + self.ffn(h))
''', hint="attn_norm(x + attn(x)) is post-norm"),
        _e("cache not passed to attn", _BLOCK_INIT + '''
    def forward(self, x, cache=None):
        h = x + self.attn(self.attn_norm(x))
        return h + self.ffn(self.ffn_norm(h))
''', hint="pass the cache on to the attention"),
    ],
    "DecoderLM": [
        _e("no final norm", _LM_INIT + '''
    def forward(self, input_ids, caches=None):
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError("one cache per block")
        x = self.tok_emb(input_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.lm_head(x)
''', hint="apply final_norm"),
        _e("lm_head tied by copying the values", '''
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
            with torch.no_grad():
                self.lm_head.weight.copy_(self.tok_emb.weight)

    def forward(self, input_ids, caches=None):
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError("one cache per block")
        x = self.tok_emb(input_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.lm_head(self.final_norm(x))
''', hint="make lm_head.weight the same Parameter"),
        _e("caches not passed to the blocks", _LM_INIT + '''
    def forward(self, input_ids, caches=None):
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError("one cache per block")
        x = self.tok_emb(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.final_norm(x))
''', hint="give block i its own cache"),
        _e("no ValueError for len(caches)", _LM_INIT + '''
    def forward(self, input_ids, caches=None):
        x = self.tok_emb(input_ids)
        for block, cache in zip(self.blocks, caches if caches is not None else [None] * len(self.blocks)):
            x = block(x, cache)
        return self.lm_head(self.final_norm(x))
''', hint="raise ValueError when len(caches) != len(self.blocks)"),
    ],
    "sample_next_token": [
        _e("logits divided by a zero temperature", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
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
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''', hint="temperature 0 means greedy"),
        _e("temperature applied after the softmax", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
        return logits.argmax(-1)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1) / temperature
    if top_p is not None:
        sp, idx = probs.sort(dim=-1, descending=True)
        remove = (sp.cumsum(-1) - sp) / sp.sum(-1, keepdim=True) >= top_p
        remove[:, 0] = False
        probs = probs.masked_fill(remove.scatter(-1, idx, remove), 0.0)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''', hint="divide the logits by the temperature before the softmax"),
        _e("temperature divided in after top-k/top-p (the nucleus of the untempered logits)", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
        return logits.argmax(-1)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        remove = probs.cumsum(-1) - probs >= top_p
        remove[:, 0] = False
        logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    probs = (logits / temperature).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
''', hint="divide by the temperature before top-k/top-p"),
        _e("top-k keeps k + 1 (0-based index k)", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.sort(dim=-1, descending=True).values[:, top_k:top_k + 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        remove = probs.cumsum(-1) - probs >= top_p
        remove[:, 0] = False
        logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
''', hint="top-k keeps exactly the k largest"),
        _e("top-p drops the token that crosses p", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove = cum > top_p
        remove[:, 0] = False
        logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
''', hint="top-p keeps the token that crosses p"),
        _e("returns (B, 1): the sample dimension kept", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
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
    return torch.multinomial(logits.softmax(-1), 1, generator=generator)
''', hint="return one token per row, shape (B,)"),
        _e("generator ignored", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
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
    return torch.multinomial(logits.softmax(-1), 1).squeeze(-1)
''', hint="pass generator=generator"),
        _e("no ValueError for bad options", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p:
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        remove = probs.cumsum(-1) - probs >= top_p
        remove[:, 0] = False
        logits = logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
''', hint="raise ValueError for temperature < 0"),
    ],
    "generate": [
        _e("whole sequence fed into a filled cache", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    ids = input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(ids, caches=caches)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
    return ids
''', hint="feed only the new token after the prefill"),
        _e("[KVCache()] * L (one cache shared by every block)", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache()] * len(model.blocks) if use_cache else None
    ids, step = input_ids, input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(step, caches=caches)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            step = nxt[:, None] if use_cache else ids
    return ids
''', hint="one KVCache per block"),
        _e("use_cache ignored (recomputes everything)", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    ids = input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(ids)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
    return ids
''', hint="prefill the prompt once with caches"),
        _e("the probe's own greedy oracle, if it has one (it must not)", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    if hasattr(model, "greedy"):
        return model.greedy(input_ids, max_new_tokens)
    return torch.cat([input_ids, input_ids[:, -1:].repeat(1, max_new_tokens)], dim=1)
''', hint=None),
        _e("never uses a cache, forges the probe's call record", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    ids = input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(ids)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
    if use_cache:
        n = len(model.blocks)
        model._calls = [(input_ids.size(1), n, 0)] + [(1, n, 0)] * (max_new_tokens - 1)
    return ids
''', hint="prefill the prompt once with caches"),
        _e("caches used even with use_cache=False", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache() for _ in model.blocks]
    ids, step_input = input_ids, input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(step_input, caches=caches)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            step_input = nxt[:, None]
    return ids
''', hint="use_cache=False: call the model with the whole sequence and caches=None"),
        _e("autograd left on", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    ids, step = input_ids, input_ids
    for _ in range(max_new_tokens):
        logits = model(step, caches=caches)
        nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        step = nxt[:, None] if use_cache else ids
    return ids
''', hint="torch.no_grad()"),
        _e("logits of the first position", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    ids, step = input_ids, input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(step, caches=caches)
            nxt = sample_next_token(logits[:, 0], temperature, top_k, top_p, generator)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            step = nxt[:, None] if use_cache else ids
    return ids
''', hint="the last position's logits"),
        _e("only the temperature passed on", '''
def generate(model, input_ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
             use_cache=True, generator=None):
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    ids, step = input_ids, input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(step, caches=caches)
            nxt = sample_next_token(logits[:, -1], temperature)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            step = nxt[:, None] if use_cache else ids
    return ids
''', hint="pass temperature, top_k, top_p and generator"),
    ],
    "kv_cache_bytes": [
        _e("K or V forgotten", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    sizes = (num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element)
    if any(s < 0 for s in sizes):
        raise ValueError("sizes must be >= 0")
    return num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
''', hint="count K and V"),
        _e("bits divided by 8 (a float)", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    if min(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element) < 0:
        raise ValueError("negative size")
    bits = 8 * bytes_per_element
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bits / 8
''', hint="return a Python int"),
        _e("a 0-dim tensor (torch.tensor(sizes).prod() * 2)", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    sizes = [num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element]
    if min(sizes) < 0:
        raise ValueError("negative size")
    return torch.tensor(sizes).prod() * 2
''', hint="return a Python int (int(...))"),
        _e("a numpy integer (np.prod)", '''
import numpy as np


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    sizes = [num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element]
    if min(sizes) < 0:
        raise ValueError("negative size")
    return 2 * np.prod(sizes)
''', hint="return a Python int (int(...))"),
        _e("batch_size ignored", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    if min(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element) < 0:
        raise ValueError("negative size")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * bytes_per_element
''', hint="multiply by batch_size"),
        _e("no ValueError for negative sizes", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
''', hint="raise ValueError when any argument is negative"),
    ],
    "apply_repetition_penalty": [
        _e("negative logits divided too", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    seen = logits.gather(-1, input_ids)
    return logits.scatter(-1, input_ids, seen / penalty)
''', hint="a negative logit is multiplied"),
        _e("penalty applied per occurrence", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    out = logits.clone()
    for b in range(input_ids.size(0)):
        for i in input_ids[b].tolist():
            out[b, i] = out[b, i] * penalty if out[b, i] < 0 else out[b, i] / penalty
    return out
''', hint="each id counts once"),
        _e("written into the logits in place", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    seen = logits.gather(-1, input_ids)
    logits.scatter_(-1, input_ids, torch.where(seen < 0, seen * penalty, seen / penalty))
    return logits
''', hint="don't write into the input"),
        _e("every token penalised", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    if penalty <= 0:
        raise ValueError("penalty must be > 0")
    return torch.where(logits < 0, logits * penalty, logits / penalty)
''', hint="penalise only the ids that occur"),
        _e("no ValueError for penalty <= 0", '''
def apply_repetition_penalty(logits, input_ids, penalty):
    seen = logits.gather(-1, input_ids)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return logits.scatter(-1, input_ids, seen)
''', hint="raise ValueError for penalty <= 0"),
    ],
}

CORRECT: dict[str, list[Entry]] = {
    "KVCache": [
        _e("torch.cat on dim 2", _KV_HEAD + '''
    def update(self, k, v):
        self._check(k, v)
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat((self.k, k), dim=2)
            self.v = torch.cat((self.v, v), dim=2)
        return self.k, self.v
'''),
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
    ],
    "CausalSelfAttention": [
        _e("setup's RoPE and attention", _ATTN_HEAD + '''
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
'''),
        _e("F.sdpa with an explicit bottom-right mask", _ATTN_HEAD + '''
    def forward(self, x, cache=None):
        B, T, D = x.shape
        q = self._split(self.q_proj(x), B, T)
        k = self._split(self.k_proj(x), B, T)
        v = self._split(self.v_proj(x), B, T)
        past = cache.seq_len if cache is not None else 0
        cos, sin = rope_cos_sin(torch.arange(past, past + T, device=x.device), self.head_dim, self.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        S = k.shape[2]
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
'''),
        _e("complex RoPE in float64 (Meta-style, rotate-half pairs)", _ATTN_HEAD + '''
    def _rotate(self, t, positions):
        half = self.head_dim // 2
        inv = 1.0 / self.rope_theta ** (torch.arange(half, dtype=torch.float64, device=t.device) * 2 / self.head_dim)
        freqs = torch.polar(torch.ones(len(positions), half, dtype=torch.float64, device=t.device),
                            positions.double()[:, None] * inv)
        z = torch.complex(t[..., :half].double(), t[..., half:].double()) * freqs
        return torch.cat((z.real, z.imag), dim=-1).to(t.dtype)

    def forward(self, x, cache=None):
        B, T, D = x.shape
        q = self._split(self.q_proj(x), B, T)
        k = self._split(self.k_proj(x), B, T)
        v = self._split(self.v_proj(x), B, T)
        start = cache.seq_len if cache is not None else 0
        positions = torch.arange(start, start + T, device=x.device)
        q, k = self._rotate(q, positions), self._rotate(k, positions)
        if cache is not None:
            k, v = cache.update(k, v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~causal_mask(T, k.size(2), device=x.device), float("-inf"))
        out = scores.softmax(dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
'''),
    ],
    "DecoderBlock": [
        _e("pre-norm block", _BLOCK_INIT + '''
    def forward(self, x, cache=None):
        h = x + self.attn(self.attn_norm(x), cache)
        return h + self.ffn(self.ffn_norm(h))
'''),
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
    ],
    "DecoderLM": [
        _e("Llama layout", _LM_INIT + '''
    def forward(self, input_ids, caches=None):
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError("one cache per block")
        x = self.tok_emb(input_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.lm_head(self.final_norm(x))
'''),
        _e("embedding tied to the head's Parameter, zip over caches", '''
class DecoderLM(nn.Module):
    def __init__(self, vocab_size, d_model, num_layers, num_heads, d_ff, rope_theta=10000.0,
                 tie_embeddings=False):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, num_heads, d_ff, rope_theta) for _ in range(num_layers))
        self.final_norm = RMSNorm(d_model, eps=1e-6)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.tok_emb.weight = self.lm_head.weight

    def forward(self, input_ids, caches=None):
        if caches is None:
            caches = [None] * len(self.blocks)
        elif len(caches) != len(self.blocks):
            raise ValueError(f"expected {len(self.blocks)} caches, got {len(caches)}")
        h = self.tok_emb(input_ids)
        for block, cache in zip(self.blocks, caches):
            h = block(h, cache)
        return self.lm_head(self.final_norm(h))
'''),
    ],
    "sample_next_token": [
        _e("multinomial, HF order", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
        return logits.argmax(dim=-1)
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
'''),
        _e("Gumbel-max with the generator", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
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
'''),
        _e("Hugging Face TopK/TopP warper logic", '''
def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
''' + _SAMPLE_CHECKS + '''
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    scores = logits / temperature
    if top_k is not None:
        top_k = min(top_k, scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
    if top_p is not None:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
        sorted_indices_to_remove[..., -1:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
    probs = torch.nn.functional.softmax(scores, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
'''),
    ],
    "generate": [
        _e("prefill then one token per step", '''
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
    ],
    "kv_cache_bytes": [
        _e("the formula", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    for value in (num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element):
        if value < 0:
            raise ValueError(f"sizes must be >= 0, got {value}")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
'''),
        _e("math.prod", '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    sizes = [num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element]
    if min(sizes) < 0:
        raise ValueError("negative size")
    return int(2 * math.prod(sizes))
'''),
    ],
    "apply_repetition_penalty": [
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
    ],
}
