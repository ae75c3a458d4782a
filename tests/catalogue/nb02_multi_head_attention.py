"""Wrong and correct implementations of notebook 02's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F``, ``nn`` and notebook 01's ``scaled_dot_product_attention`` are defined). Wrong entries are
plausible attempts (they run and mostly return the right types); ``hint`` is the substring of the
catalogued hint (``tfcourse.checks.nb02_multi_head_attention.MISTAKES`` or the checks' error
hints) that the feedback should show, None when no hint fits.

``mha_from_torch`` entries call ``MultiHeadAttention``, as the notebook's cell does: they need the
notebook's other solution cells in their namespace (in the grader, the solutions notebook's).
``MultiHeadAttention`` entries keep the parameter names and the ``bias`` argument working and run
without raising on ``mha_from_torch``'s inputs, so that they cost exactly their own points: the
module ``mha_from_torch`` returns *is* a ``MultiHeadAttention``, so one that cannot hold the weights
by name, or raises, breaks ``mha_from_torch`` too (tests/test_nb02_properties.py checks such modules
in-process instead).
"""

from __future__ import annotations

from textwrap import indent as _indent

from tests.catalogue import entry as _e
from tests.catalogue import reference_source as _reference
from tests.catalogue import variant as _variant
from tests.catalogue import without_blocks as _without

NOTEBOOK = "02_multi_head_attention"


# ---------------------------------------------------------------------------------------------
# split_heads
# ---------------------------------------------------------------------------------------------
_SPLIT = '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, D = x.shape
    if D % num_heads != 0:
        raise ValueError(f"d_model = {D} is not divisible by num_heads = {num_heads}")
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)
'''

SPLIT_WRONG = [
    _e("view to (B, H, T, Dh) without transpose",
       _variant(_SPLIT,
                ("return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)",
                 "return x.view(B, num_heads, T, D // num_heads)")),
       "mixes tokens"),
    _e("forgot the transpose", '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    batch_size, seq_len, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"{d_model} % {num_heads} != 0")
    return x.reshape(batch_size, seq_len, num_heads, d_model // num_heads)
''', "puts the heads before the tokens"),
    _e("strided heads (B, T, Dh, H)", '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    b, t, d = x.shape
    if d % num_heads != 0:
        raise ValueError(f"d_model {d} not divisible by {num_heads} heads")
    head_dim = d // num_heads
    return x.view(b, t, head_dim, num_heads).permute(0, 3, 1, 2)
''', "contiguous columns"),
    _e("(B, H, Dh, T)", '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    b, t, d = x.shape
    if d % num_heads != 0:
        raise ValueError(f"d_model {d} not divisible by {num_heads} heads")
    return x.view(b, t, num_heads, d // num_heads).permute(0, 2, 3, 1)
''', "tokens before features"),
    _e("assert instead of ValueError",
       _variant(_SPLIT, ('''
    if D % num_heads != 0:
        raise ValueError(f"d_model = {D} is not divisible by num_heads = {num_heads}")
''', '    assert D % num_heads == 0, f"{D} is not divisible by {num_heads}"')),
       "an assert or a failing view"),
    _e("no divisibility check", '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, D = x.shape
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)
''', "raise ValueError"),
    _e("ValueError without the numbers",
       _variant(_SPLIT,
                ('ValueError(f"d_model = {D} is not divisible by num_heads = {num_heads}")',
                 'ValueError("d_model must be divisible by num_heads")')),
       "say what is wrong with which values"),
    _e("transposed the batch axis",
       _variant(_SPLIT,
                ("return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)",
                 "return x.view(B, T, num_heads, D // num_heads).transpose(0, 2)")),
       "keep the batch axis first"),
    _e("correct math, no validation", _without(_SPLIT, "if D % num_heads != 0:"), "ValueError"),
]

SPLIT_CORRECT = [
    _e("einops rearrange", '''
from einops import rearrange


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    d_model = x.shape[-1]
    if d_model % num_heads:
        raise ValueError(f"cannot split d_model={d_model} into num_heads={num_heads} equal heads")
    return rearrange(x, "b t (h d) -> b h t d", h=num_heads)
'''),
    _e("unflatten + transpose", '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    if x.size(-1) % num_heads != 0:
        raise ValueError(f"D={x.size(-1)} is not a multiple of H={num_heads}")
    return x.unflatten(-1, (num_heads, x.size(-1) // num_heads)).transpose(1, 2)
'''),
    _e("stack of chunks",
       _variant(_SPLIT, ('''
        raise ValueError(f"d_model = {D} is not divisible by num_heads = {num_heads}")
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)
''', '''
        raise ValueError(f"{D} columns cannot be split into {num_heads} heads")
    return torch.stack(torch.split(x, D // num_heads, dim=-1), dim=1)
'''))),
    _e("reshape + permute", '''
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    batch_size, seq_len, d_model = x.shape
    head_dim, rest = divmod(d_model, num_heads)
    if rest:
        raise ValueError(f"d_model ({d_model}) % num_heads ({num_heads}) = {rest}, expected 0")
    return x.reshape(batch_size, seq_len, num_heads, head_dim).permute(0, 2, 1, 3)
'''),
]


# ---------------------------------------------------------------------------------------------
# merge_heads
# ---------------------------------------------------------------------------------------------
MERGE_WRONG = [
    _e("reshape without transpose", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, T, Dh = x.shape
    return x.reshape(B, T, H * Dh)
''', "mixes tokens across heads"),
    _e("view after transpose", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).view(B, T, H * Dh)
''', "not contiguous"),
    _e("sum over heads", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1)  # combine the heads
''', "not by summing or averaging"),
    _e("mean over heads", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=1)
''', "not by summing or averaging"),
    _e("permute(0, 2, 3, 1)", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, h, t, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)
''', "contiguous columns"),
    _e("batch folded into the tokens", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    h, dh = x.shape[1], x.shape[3]
    return x.transpose(1, 2).reshape(-1, h * dh)
''', "keep the batch axis"),
    _e("flatten(1) after transpose", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).flatten(1)
''', "keeps the token axis"),
]

MERGE_CORRECT = [
    _e("einops rearrange", '''
import einops


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return einops.rearrange(x, "b h t d -> b t (h d)")
'''),
    _e("cat of the heads", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return torch.cat(x.unbind(dim=1), dim=-1)
'''),
    _e("contiguous().view", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * Dh)
'''),
    _e("transpose + flatten(2)", '''
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).flatten(start_dim=2)
'''),
]


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention
# ---------------------------------------------------------------------------------------------
# The constructor is the reference's without its input check.
_MHA_INIT = _without(_reference("nb02_multi_head_attention", "MultiHeadAttention.__init__"),
                     "if d_model % num_heads != 0:")
_MHA = '''
class MultiHeadAttention(nn.Module):
''' + _indent(_MHA_INIT, "    ") + '''
    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
'''

# The last lines of _MHA (and of _PACKED), which the mistakes in the attention itself replace.
_ATTEND_LINES = '''
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
'''

MHA_WRONG = [
    _e("split with view(B, H, T, Dh)",
       _variant(_MHA, ('''
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
''', '''
        S = c.shape[1]
        q = self.q_proj(x).view(B, self.num_heads, T, self.head_dim)
        k = self.k_proj(c).view(B, self.num_heads, S, self.head_dim)
        v = self.v_proj(c).view(B, self.num_heads, S, self.head_dim)
''')),
       "splitting heads"),
    _e("merge without transpose",
       _variant(_MHA,
                ("return self.o_proj(out.transpose(1, 2).reshape(B, T, D))",
                 "return self.o_proj(out.reshape(B, T, D))")),
       "merging heads"),
    _e("scaled by sqrt(d_model)",
       _variant(_MHA,
                (_ATTEND_LINES, '''
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)
        return self.o_proj(out)
''')),
       "not sqrt(d_model)"),
    _e("forgot o_proj",
       _variant(_MHA,
                ("return self.o_proj(out.transpose(1, 2).reshape(B, T, D))",
                 "return out.transpose(1, 2).reshape(B, T, D)")),
       "apply the output projection"),
    _e("keys and values from x",
       _variant(_MHA,
                ("        c = x if context is None else context", None),
                ("k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)",
                 "k = self.k_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)"),
                ("v = self.v_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)",
                 "v = self.v_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)")),
       "keys and values come from `context`"),
    _e("mask inverted (nn.MultiheadAttention habit)",
       _variant(_MHA,
                ("        out, _ = scaled_dot_product_attention(q, k, v, mask)", '''
        if mask is not None:
            mask = ~mask  # True = masked out
        out, _ = scaled_dot_product_attention(q, k, v, mask)
''')),
       "don't invert it"),
    _e("q and k projections swapped",
       _variant(_MHA,
                ("q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)",
                 "q = self.k_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)"),
                ("k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)",
                 "k = self.q_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)")),
       "swapped"),
    _e("mask never used",
       _variant(_MHA,
                ("out, _ = scaled_dot_product_attention(q, k, v, mask)",
                 "out, _ = scaled_dot_product_attention(q, k, v)")),
       "pass `mask` on"),
    _e("always causal (is_causal=True instead of mask)",
       _variant(_MHA,
                ("out, _ = scaled_dot_product_attention(q, k, v, mask)",
                 "out = F.scaled_dot_product_attention(q, k, v, is_causal=True)")),
       "is_causal=True makes every call causal"),
    _e("context used only when its length differs from x's",
       _variant(_MHA,
                ("        c = x if context is None else context", None),
                ("        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)", '''
        # same length as x: this is self-attention
        c = context if context is not None and context.size(1) != T else x
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
''')),
       "whatever its length"),
    _e("q scaled, then nb01 attention scales again",
       _variant(_MHA,
                ("        k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)", '''
        q = q / math.sqrt(self.head_dim)  # scaled dot-product
        k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
''')),
       "already divides by sqrt(Dh)"),
    _e("keys and values reshaped with the query length T",
       _variant(_MHA,
                ("k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)",
                 "k = self.k_proj(c).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)"),
                ("v = self.v_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)",
                 "v = self.v_proj(c).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)")),
       "not T = x.size(1)"),
    _e("(B, T, D) read as (T, B, D)",
       _variant(_MHA, ('''
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
''', '''
        T, B, D = x.shape  # sequence first, as in nn.MultiheadAttention
        S = c.shape[0]
        H, Dh = self.num_heads, self.head_dim
        q = self.q_proj(x).view(T, B, H, Dh).permute(1, 2, 0, 3)  # (B, H, T, Dh)
        k = self.k_proj(c).view(S, B, H, Dh).permute(1, 2, 0, 3)
        v = self.v_proj(c).view(S, B, H, Dh).permute(1, 2, 0, 3)
'''),
                ("return self.o_proj(out.transpose(1, 2).reshape(B, T, D))",
                 "return self.o_proj(out.permute(2, 0, 1, 3).reshape(T, B, D))")),
       "batch first"),
]

MHA_CORRECT = [
    _e("einops rearrange",
       _variant(_MHA,
                ("class MultiHeadAttention(nn.Module):", '''
from einops import rearrange


class MultiHeadAttention(nn.Module):
'''),
                ("        self.d_model = d_model", '''
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} not divisible by num_heads={num_heads}")
'''),
                ("        self.head_dim = d_model // num_heads", None),
                ('''
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(c).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
''', '''
        q = rearrange(self.q_proj(x), "b t (h d) -> b h t d", h=self.num_heads)
        k = rearrange(self.k_proj(c), "b s (h d) -> b h s d", h=self.num_heads)
        v = rearrange(self.v_proj(c), "b s (h d) -> b h s d", h=self.num_heads)
'''),
                ("return self.o_proj(out.transpose(1, 2).reshape(B, T, D))",
                 'return self.o_proj(rearrange(out, "b h t d -> b t (h d)"))'))),
    _e("one fused qkv matmul in forward",
       _variant(_MHA, ('''
        self.d_model = d_model
        self.num_heads = num_heads
''', "        self.d_model, self.num_heads = d_model, num_heads"),
                ("    def forward(self, x, context=None, mask=None):", '''
    def _heads(self, t):
        B, N, _ = t.shape
        return t.view(B, N, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x, context=None, mask=None):
'''),
                ('''
        c = x if context is None else context
        ...
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', '''
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projections])  # (3D, D)
        bias = None if self.q_proj.bias is None else torch.cat([p.bias for p in projections])
        if context is None:  # self-attention: one (3D, D) matmul
            q, k, v = F.linear(x, weight, bias).chunk(3, dim=-1)
        else:  # cross-attention: q from x, k and v in one (2D, D) matmul
            d = self.d_model
            q = self.q_proj(x)
            k, v = F.linear(context, weight[d:], None if bias is None else bias[d:]).chunk(2, dim=-1)
        out, _ = scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v), mask)
        B, H, T, Dh = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * Dh))
'''))),
    _e("scale q first, softmax by hand",
       _variant(_MHA, ('''
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
''', "        self.h = num_heads"),
                ("c = x if context is None else context", "kv = x if context is None else context"),
                ('''
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        ...
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', '''
        S = kv.shape[1]
        dh = D // self.h
        q = self.q_proj(x).reshape(B, T, self.h, dh).permute(0, 2, 1, 3) * dh ** -0.5
        k = self.k_proj(kv).reshape(B, S, self.h, dh).permute(0, 2, 1, 3)
        v = self.v_proj(kv).reshape(B, S, self.h, dh).permute(0, 2, 1, 3)
        scores = q @ k.transpose(-1, -2)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no allowed key -> 0
        out = (w @ v).permute(0, 2, 1, 3).reshape(B, T, D)
        return self.o_proj(out)
'''))),
    _e("attention in float32 for half inputs",
       _variant(_MHA,
                ("        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)", '''
        work = torch.promote_types(x.dtype, torch.float32)  # float16/bfloat16 -> float32
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
'''),
                ("out, _ = scaled_dot_product_attention(q, k, v, mask)",
                 "out, _ = scaled_dot_product_attention(q.to(work), k.to(work), v.to(work), mask)"),
                ("return self.o_proj(out.transpose(1, 2).reshape(B, T, D))",
                 "return self.o_proj(out.to(x.dtype).transpose(1, 2).reshape(B, T, D))"))),
]


# ---------------------------------------------------------------------------------------------
# mha_from_torch
# ---------------------------------------------------------------------------------------------
_FROM_TORCH = '''
def mha_from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    bias = torch_mha.in_proj_bias is not None
    m = MultiHeadAttention(torch_mha.embed_dim, torch_mha.num_heads, bias=bias)
    m = m.to(torch_mha.in_proj_weight.dtype)
    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3)
    state = {"q_proj.weight": w_q, "k_proj.weight": w_k, "v_proj.weight": w_v,
             "o_proj.weight": torch_mha.out_proj.weight.detach()}
    if bias:
        b_q, b_k, b_v = torch_mha.in_proj_bias.detach().chunk(3)
        state |= {"q_proj.bias": b_q, "k_proj.bias": b_k, "v_proj.bias": b_v,
                  "o_proj.bias": torch_mha.out_proj.bias.detach()}
    m.load_state_dict(state)
    return m
'''

# The same, the weights copied in place under torch.no_grad().
_FROM_TORCH_COPY = _variant(_FROM_TORCH, ('''
    state = {"q_proj.weight": w_q, "k_proj.weight": w_k, "v_proj.weight": w_v,
    ...
    m.load_state_dict(state)
''', '''
    with torch.no_grad():
        m.q_proj.weight.copy_(w_q)
        m.k_proj.weight.copy_(w_k)
        m.v_proj.weight.copy_(w_v)
        m.o_proj.weight.copy_(torch_mha.out_proj.weight)
        if bias:
            b_q, b_k, b_v = torch_mha.in_proj_bias.detach().chunk(3)
            m.q_proj.bias.copy_(b_q)
            m.k_proj.bias.copy_(b_k)
            m.v_proj.bias.copy_(b_v)
            m.o_proj.bias.copy_(torch_mha.out_proj.bias)
'''))

FROM_TORCH_WRONG = [
    _e("chunks taken as k, q, v",
       _variant(_FROM_TORCH_COPY,
                ("w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3)",
                 "w_k, w_q, w_v = torch_mha.in_proj_weight.chunk(3)"),
                ("b_q, b_k, b_v = torch_mha.in_proj_bias.detach().chunk(3)",
                 "b_k, b_q, b_v = torch_mha.in_proj_bias.chunk(3)")),
       "stacks [q_proj.weight; k_proj.weight; v_proj.weight]"),
    _e("weights transposed", '''
def mha_from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    d = torch_mha.embed_dim
    bias = torch_mha.in_proj_bias is not None
    m = MultiHeadAttention(d, torch_mha.num_heads, bias=bias).to(torch_mha.in_proj_weight.dtype)
    w = torch_mha.in_proj_weight
    state = {"q_proj.weight": w[:d].T, "k_proj.weight": w[d:2 * d].T,
             "v_proj.weight": w[2 * d:].T, "o_proj.weight": torch_mha.out_proj.weight.T}
    if bias:
        b = torch_mha.in_proj_bias
        state.update({"q_proj.bias": b[:d], "k_proj.bias": b[d:2 * d], "v_proj.bias": b[2 * d:],
                      "o_proj.bias": torch_mha.out_proj.bias})
    m.load_state_dict(state)
    return m
''', "without .T"),
    _e("biases left out", '''
def mha_from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    m = MultiHeadAttention(torch_mha.embed_dim, torch_mha.num_heads)
    m = m.to(torch_mha.in_proj_weight.dtype)
    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3)
    m.load_state_dict({"q_proj.weight": w_q, "k_proj.weight": w_k, "v_proj.weight": w_v,
                       "o_proj.weight": torch_mha.out_proj.weight.detach()})
    return m
''', "build with bias=True and copy them too"),
    _e("one head",
       _variant(_FROM_TORCH,
                ("    bias = torch_mha.in_proj_bias is not None", '''
    d = torch_mha.embed_dim
    bias = torch_mha.in_proj_bias is not None
'''),
                ('''
    m = MultiHeadAttention(torch_mha.embed_dim, torch_mha.num_heads, bias=bias)
    m = m.to(torch_mha.in_proj_weight.dtype)
''', "    m = MultiHeadAttention(d, 1, bias=bias).to(torch_mha.in_proj_weight.dtype)")),
       "torch_mha.num_heads"),
    _e("split along the wrong axis",
       _variant(_FROM_TORCH, ('''
    m = m.to(torch_mha.in_proj_weight.dtype)
    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3)
''', "    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3, dim=1)")),
       "splits into three (D, D) blocks along dim 0"),
    _e("out_proj never copied",
       _variant(_FROM_TORCH_COPY,
                ("        m.o_proj.weight.copy_(torch_mha.out_proj.weight)", None),
                ("            m.o_proj.bias.copy_(torch_mha.out_proj.bias)", None))),
    _e("in_proj_weight read per head",
       _variant(_FROM_TORCH,
                ("    bias = torch_mha.in_proj_bias is not None", '''
    D, H = torch_mha.embed_dim, torch_mha.num_heads
    Dh = D // H
    bias = torch_mha.in_proj_bias is not None
'''),
                ('''
    m = MultiHeadAttention(torch_mha.embed_dim, torch_mha.num_heads, bias=bias)
    m = m.to(torch_mha.in_proj_weight.dtype)
    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3)
''', '''
    m = MultiHeadAttention(D, H, bias=bias).to(torch_mha.in_proj_weight.dtype)
    w = torch_mha.in_proj_weight.detach().view(H, 3 * Dh, D)  # per head: [q_h; k_h; v_h]
    w_q, w_k, w_v = (t.reshape(D, D) for t in w.split(Dh, dim=1))
'''),
                ("        b_q, b_k, b_v = torch_mha.in_proj_bias.detach().chunk(3)", '''
        b = torch_mha.in_proj_bias.detach().view(H, 3 * Dh)
        b_q, b_k, b_v = (t.reshape(D) for t in b.split(Dh, dim=1))
''')),
       "not per-head"),
]

FROM_TORCH_CORRECT = [
    _e("copy_ under no_grad", '''
def mha_from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    has_bias = torch_mha.in_proj_bias is not None
    module = MultiHeadAttention(torch_mha.embed_dim, torch_mha.num_heads, bias=has_bias)
    module.to(device=torch_mha.in_proj_weight.device, dtype=torch_mha.in_proj_weight.dtype)
    weights = torch_mha.in_proj_weight.chunk(3)
    with torch.no_grad():
        for proj, w in zip((module.q_proj, module.k_proj, module.v_proj), weights):
            proj.weight.copy_(w)
        module.o_proj.weight.copy_(torch_mha.out_proj.weight)
        if has_bias:
            for proj, b in zip((module.q_proj, module.k_proj, module.v_proj),
                               torch_mha.in_proj_bias.chunk(3)):
                proj.bias.copy_(b)
            module.o_proj.bias.copy_(torch_mha.out_proj.bias)
    return module
'''),
    _e("load_state_dict with slices", '''
def mha_from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    D = torch_mha.embed_dim
    sd = torch_mha.state_dict()
    bias = "in_proj_bias" in sd and sd["in_proj_bias"] is not None
    mine = MultiHeadAttention(D, torch_mha.num_heads, bias=bias).to(sd["in_proj_weight"].dtype)
    new = {}
    for i, name in enumerate(["q_proj", "k_proj", "v_proj"]):
        new[f"{name}.weight"] = sd["in_proj_weight"][i * D:(i + 1) * D]
        if bias:
            new[f"{name}.bias"] = sd["in_proj_bias"][i * D:(i + 1) * D]
    new["o_proj.weight"] = sd["out_proj.weight"]
    if bias:
        new["o_proj.bias"] = sd["out_proj.bias"]
    mine.load_state_dict(new)
    return mine
'''),
    _e("new Parameters", '''
def mha_from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    bias = torch_mha.in_proj_bias is not None
    m = MultiHeadAttention(torch_mha.embed_dim, torch_mha.num_heads, bias=bias)
    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().clone().chunk(3)
    m.q_proj.weight = nn.Parameter(w_q)
    m.k_proj.weight = nn.Parameter(w_k)
    m.v_proj.weight = nn.Parameter(w_v)
    m.o_proj.weight = nn.Parameter(torch_mha.out_proj.weight.detach().clone())
    if bias:
        b_q, b_k, b_v = torch_mha.in_proj_bias.detach().clone().chunk(3)
        m.q_proj.bias = nn.Parameter(b_q)
        m.k_proj.bias = nn.Parameter(b_k)
        m.v_proj.bias = nn.Parameter(b_v)
        m.o_proj.bias = nn.Parameter(torch_mha.out_proj.bias.detach().clone())
    return m
'''),
]


# ---------------------------------------------------------------------------------------------
# PackedMultiHeadAttention
# ---------------------------------------------------------------------------------------------
# Optional challenge (★★★, 0 points): PackedMultiHeadAttention, layouts "blocks" and "per_head".
_PACKED = '''
class PackedMultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, bias: bool = True, layout: str = "blocks"):
        super().__init__()
        if layout not in ("blocks", "per_head"):
            raise ValueError(f"unknown layout {layout!r}")
        if d_model % num_heads:
            raise ValueError(f"d_model = {d_model} is not divisible by num_heads = {num_heads}")
        self.h, self.dh, self.layout = num_heads, d_model // num_heads, layout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        qkv = self.qkv_proj(x)  # (B, T, 3D)
        if self.layout == "blocks":
            q, k, v = qkv.split(D, dim=-1)  # 3 x (B, T, D)
            q, k, v = (t.view(B, T, self.h, self.dh).transpose(1, 2) for t in (q, k, v))
        else:
            qkv = qkv.view(B, T, self.h, 3 * self.dh).transpose(1, 2)  # (B, H, T, 3Dh)
            q, k, v = qkv.chunk(3, dim=-1)  # 3 x (B, H, T, Dh)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
'''

# The same with one view per layout and a permute.
_PACKED_VIEW = _variant(_PACKED, ('''
        qkv = self.qkv_proj(x)  # (B, T, 3D)
        ...
            q, k, v = qkv.chunk(3, dim=-1)  # 3 x (B, H, T, Dh)
''', '''
        shape = (B, T, 3, self.h, self.dh) if self.layout == "blocks" else (B, T, self.h, 3, self.dh)
        qkv = self.qkv_proj(x).view(shape)
        if self.layout == "per_head":
            qkv = qkv.transpose(2, 3)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
'''))

PACKED_WRONG = [
    _e("layout ignored: always three blocks",
       _variant(_PACKED_VIEW, ('''
        shape = (B, T, 3, self.h, self.dh) if self.layout == "blocks" else (B, T, self.h, 3, self.dh)
        ...
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
''', '''
        q, k, v = self.qkv_proj(x).split(D, dim=-1)  # GPT-2's c_attn split
        q, k, v = (t.view(B, T, self.h, self.dh).transpose(1, 2) for t in (q, k, v))
''')),
       "groups the rows by head"),
    _e("layout ignored: always per head (GPT-NeoX habit)",
       _variant(_PACKED_VIEW, ('''
        shape = (B, T, 3, self.h, self.dh) if self.layout == "blocks" else (B, T, self.h, 3, self.dh)
        ...
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
''', '''
        qkv = self.qkv_proj(x).view(B, T, self.h, 3 * self.dh).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
''')),
       "three blocks of D rows"),
    _e("scaled by sqrt(d_model)",
       _variant(_PACKED_VIEW,
                (_ATTEND_LINES, '''
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
        return self.o_proj((weights @ v).transpose(1, 2).reshape(B, T, D))
''')),
       "not sqrt(d_model)"),
    _e("mask inverted (nn.MultiheadAttention habit)",
       _variant(_PACKED_VIEW,
                ("out, _ = scaled_dot_product_attention(q, k, v, mask)",
                 "out, _ = scaled_dot_product_attention(q, k, v, None if mask is None else ~mask)")),
       "True = may attend"),
    _e("NaN for a query with no allowed key",
       _variant(_PACKED_VIEW,
                ("        out, _ = scaled_dot_product_attention(q, k, v, mask)", '''
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dh)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
''')),
       "not NaN"),
    _e("q and k swapped in the per-head slots",
       _variant(_PACKED,
                ("qkv = self.qkv_proj(x)  # (B, T, 3D)", "qkv = self.qkv_proj(x)"),
                ('''
            q, k, v = qkv.split(D, dim=-1)  # 3 x (B, T, D)
            q, k, v = (t.view(B, T, self.h, self.dh).transpose(1, 2) for t in (q, k, v))
''', "            q, k, v = qkv.view(B, T, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)"),
                ('''
            qkv = qkv.view(B, T, self.h, 3 * self.dh).transpose(1, 2)  # (B, H, T, 3Dh)
            q, k, v = qkv.chunk(3, dim=-1)  # 3 x (B, H, T, Dh)
''', "            k, q, v = qkv.view(B, T, self.h, 3, self.dh).permute(3, 0, 2, 1, 4)"))),
]

PACKED_CORRECT = [
    _e("split per layout, setup cell's attention", _PACKED),
    _e("regroup the rows to blocks, own softmax, extra buffer",
       _variant(_PACKED, ('''
        qkv = self.qkv_proj(x)  # (B, T, 3D)
        ...
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))
''', '''
        w, b = self.qkv_proj.weight, self.qkv_proj.bias
        if self.layout == "per_head":  # rows (H, 3, Dh) -> (3, H, Dh)
            w = w.view(self.h, 3, self.dh, D).transpose(0, 1).reshape(3 * D, D)
            b = None if b is None else b.view(self.h, 3, self.dh).transpose(0, 1).reshape(3 * D)
        q, k, v = F.linear(x, w, b).unflatten(-1, (3, self.h, self.dh)).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) * self.dh ** -0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        self.register_buffer("last_weights", weights.detach(), persistent=False)
        return self.o_proj(torch.einsum("bhts,bhsd->bthd", weights, v).reshape(B, T, D))
'''))),
]


WRONG = {
    "split_heads": SPLIT_WRONG,
    "merge_heads": MERGE_WRONG,
    "MultiHeadAttention": MHA_WRONG,
    "mha_from_torch": FROM_TORCH_WRONG,
    "PackedMultiHeadAttention": PACKED_WRONG,
}

CORRECT = {
    "split_heads": SPLIT_CORRECT,
    "merge_heads": MERGE_CORRECT,
    "MultiHeadAttention": MHA_CORRECT,
    "mha_from_torch": FROM_TORCH_CORRECT,
    "PackedMultiHeadAttention": PACKED_CORRECT,
}
