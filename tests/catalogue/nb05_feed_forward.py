"""Wrong and correct implementations of notebook 05's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F``, ``nn``, ``RMSNorm``). Wrong entries are plausible attempts; ``hint`` is a substring of the
catalogued hint (``tfcourse.checks.nb05_feed_forward.HINTS`` and the load hints of ``cases.py``)
that the feedback should show, None when no hint fits. Correct entries include the forms public
code uses: torch.special.erf and ndtr, nn.GELU, Hugging Face's LlamaMLP (act_fn = SiLU), Meta's
width code verbatim, Hugging Face's Mixtral expert loop (one_hot mask, float32 router softmax,
index_add_), the softmax of the K selected logits, one_hot counts for the balance loss.

The wrong ``gelu`` and ``SwiGLU`` entries also show that one bug costs points once: the course's
``FeedForward`` calls ``gelu`` and its ``MoE`` builds ``SwiGLU`` experts, and both keep their
points through the grader (the course's ``gelu`` / ``SwiGLU`` stand in).
"""

from __future__ import annotations

from tests.catalogue import entry as _e
from tests.catalogue import variant as _variant
from tests.catalogue import without_blocks as _without

NOTEBOOK = "05_feed_forward"


# ---------------------------------------------------------------------------------------------
# gelu
# ---------------------------------------------------------------------------------------------
_GELU = '''
def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(approximate)
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if approximate == "none":
        y = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    else:
        y = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    return y.to(x.dtype)
'''

GELU_WRONG = [
    _e("tanh form for the default", '''
def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(approximate)
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    return y.to(x.dtype)
''', 'approximate="none" is the exact form'),
    _e("forms swapped", _variant(_GELU, ('if approximate == "none":', 'if approximate == "tanh":')),
       'approximate="none" is the exact form'),
    _e("erf(x) without dividing by sqrt(2)",
       _variant(_GELU,
                ("y = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))", "y = 0.5 * h * (1 + torch.erf(h))")),
       "divide x by √2 inside erf"),
    _e("quick GELU x * sigmoid(1.702 x)", '''
def gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))
    if approximate != "none":
        raise ValueError(approximate)
    return x * torch.sigmoid(1.702 * x)
''', "quick GELU"),
    _e("no ValueError for an unknown approximate", '''
def gelu(x, approximate="none"):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if approximate == "tanh":
        y = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    else:
        y = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    return y.to(x.dtype)
''', "raise ValueError when approximate"),
    _e("always in float32 (float64 loses precision)",
       _variant(_GELU,
                ("h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x", "h = x.float()"),
                ("y = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))",
                 "y = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))"),
                ("y = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))",
                 "y = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))"),
                ("return y.to(x.dtype)", "return y.type_as(x)")),
       "upcast half precision only"),
    _e("tanh form without the cubic term",
       _variant(_GELU,
                ("h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x",
                 "h = x.to(torch.promote_types(x.dtype, torch.float32))"),
                ("h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))",
                 "h * (1 + torch.tanh(math.sqrt(2 / math.pi) * h))")),
       "has a cubic term"),
    _e("correct math, no validation", _without(_GELU, 'if approximate not in ("none", "tanh"):'), "ValueError"),
]

GELU_CORRECT = [
    _e("erf, math.sqrt, upcast half",
       _variant(_GELU,
                ("raise ValueError(approximate)",
                 'raise ValueError(f"unknown approximate {approximate!r}")'),
                ("y = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))",
                 "out = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))"),
                ("y = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))",
                 "out = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))"),
                ("return y.to(x.dtype)", "return out.to(x.dtype)"))),
    _e("torch.special.erf, computed in half", '''
def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    if approximate == "none":
        return x * 0.5 * (1.0 + torch.special.erf(x * (1.0 / math.sqrt(2.0))))
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + torch.tanh(inner))
    raise ValueError(approximate)
'''),
    _e("x * Phi(x) with torch.special.ndtr", '''
def gelu(x, approximate="none"):
    if approximate not in {"none", "tanh"}:
        raise ValueError("approximate must be 'none' or 'tanh'")
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        return (0.5 * h * (1 + torch.tanh(c * (h + 0.044715 * h ** 3)))).to(x.dtype)
    return (h * torch.special.ndtr(h)).to(x.dtype)
'''),
]


# ---------------------------------------------------------------------------------------------
# FeedForward
# ---------------------------------------------------------------------------------------------
_FFN = '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, bias=True):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        return self.down_proj(gelu(self.up_proj(x)))
'''

FFN_WRONG = [
    _e("tanh GELU inside",
       _variant(_FFN,
                ("return self.down_proj(gelu(self.up_proj(x)))",
                 'return self.down_proj(gelu(self.up_proj(x), approximate="tanh"))  # GPT-2\'s gelu_new')),
       "FeedForward uses the exact GELU"),
    _e("ReLU (the 2017 Transformer)",
       _variant(_FFN,
                ("return self.down_proj(gelu(self.up_proj(x)))",
                 "return self.down_proj(torch.relu(self.up_proj(x)))")),
       "not ReLU"),
    _e("layers named fc1 / fc2",
       _variant(_FFN,
                ("self.up_proj = nn.Linear(d_model, d_ff, bias=bias)",
                 "self.fc1 = nn.Linear(d_model, d_ff, bias=bias)"),
                ("self.down_proj = nn.Linear(d_ff, d_model, bias=bias)",
                 "self.fc2 = nn.Linear(d_ff, d_model, bias=bias)"),
                ("return self.down_proj(gelu(self.up_proj(x)))", "return self.fc2(gelu(self.fc1(x)))")),
       "name the two layers up_proj and down_proj"),
    _e("nn.Sequential",
       _variant(_FFN,
                ("self.up_proj = nn.Linear(d_model, d_ff, bias=bias)",
                 "self.net = nn.Sequential(nn.Linear(d_model, d_ff, bias=bias), nn.GELU(),"),
                ("        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)",
                 "                                 nn.Linear(d_ff, d_model, bias=bias))"),
                ("return self.down_proj(gelu(self.up_proj(x)))", "return self.net(x)")),
       "name the two layers up_proj and down_proj"),
    _e("bias argument ignored",
       _variant(_FFN,
                ("self.up_proj = nn.Linear(d_model, d_ff, bias=bias)",
                 "self.up_proj = nn.Linear(d_model, d_ff)"),
                ("self.down_proj = nn.Linear(d_ff, d_model, bias=bias)",
                 "self.down_proj = nn.Linear(d_ff, d_model)")),
       "pass bias=bias to both nn.Linear layers"),
    _e("GELU after the second layer",
       _variant(_FFN,
                ("return self.down_proj(gelu(self.up_proj(x)))",
                 "return gelu(self.down_proj(self.up_proj(x)))")),
       "GELU goes between the layers"),
]

FFN_CORRECT = [
    _e("calls gelu",
       _variant(_FFN,
                ("def __init__(self, d_model, d_ff, bias=True):",
                 "def __init__(self, d_model: int, d_ff: int, bias: bool = True):"),
                ("        return self.down_proj(gelu(self.up_proj(x)))", '''
        h = self.up_proj(x)
        h = gelu(h)
        return self.down_proj(h)
'''))),
    _e("nn.GELU module, F.gelu-equivalent",
       _variant(_FFN,
                ("        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)", '''
        self.act = nn.GELU()
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
'''),
                ("return self.down_proj(gelu(self.up_proj(x)))",
                 "return self.down_proj(self.act(self.up_proj(x)))"))),
]


# ---------------------------------------------------------------------------------------------
# SwiGLU
# ---------------------------------------------------------------------------------------------
_SWIGLU = '''
class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
'''

SWIGLU_WRONG = [
    _e("SwiGLU computed in float32 inside",
       _variant(_SWIGLU,
                ("        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))", '''
        gate, up = self.gate_proj(x).float(), self.up_proj(x).float()  # "stable" float32 SiLU
        return self.down_proj((gate * torch.sigmoid(gate) * up).to(x.dtype))
''')),
       "off by float32 rounding"),
    _e("sigmoid gate (GLU)",
       _variant(_SWIGLU,
                ("return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))",
                 "return self.down_proj(torch.sigmoid(self.gate_proj(x)) * self.up_proj(x))")),
       "alone is GLU"),
    _e("SiLU after the product",
       _variant(_SWIGLU,
                ("return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))",
                 "return self.down_proj(F.silu(self.gate_proj(x) * self.up_proj(x)))")),
       "SiLU goes on the gate branch before the product"),
    _e("gate and up swapped",
       _variant(_SWIGLU,
                ("return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))",
                 "return self.down_proj(self.gate_proj(x) * F.silu(self.up_proj(x)))")),
       "the SiLU goes on gate_proj's output"),
    _e("Meta's names w1 / w2 / w3",
       _variant(_SWIGLU,
                ("self.gate_proj = nn.Linear(d_model, d_ff, bias=False)",
                 "self.w1 = nn.Linear(d_model, d_ff, bias=False)"),
                ("self.up_proj = nn.Linear(d_model, d_ff, bias=False)",
                 "self.w2 = nn.Linear(d_ff, d_model, bias=False)"),
                ("self.down_proj = nn.Linear(d_ff, d_model, bias=False)",
                 "self.w3 = nn.Linear(d_model, d_ff, bias=False)"),
                ("return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))",
                 "return self.w2(F.silu(self.w1(x)) * self.w3(x))")),
       "name the three layers gate_proj, up_proj and down_proj"),
    _e("layers with biases",
       _variant(_SWIGLU,
                ("self.gate_proj = nn.Linear(d_model, d_ff, bias=False)",
                 "self.gate_proj = nn.Linear(d_model, d_ff)"),
                ("self.up_proj = nn.Linear(d_model, d_ff, bias=False)",
                 "self.up_proj = nn.Linear(d_model, d_ff)"),
                ("self.down_proj = nn.Linear(d_ff, d_model, bias=False)",
                 "self.down_proj = nn.Linear(d_ff, d_model)")),
       "have no bias"),
    _e("GELU gate (GeGLU)",
       _variant(_SWIGLU,
                ("return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))",
                 "return self.down_proj(F.gelu(self.gate_proj(x)) * self.up_proj(x))")),
       "GeGLU"),
]

SWIGLU_CORRECT = [
    _e("F.silu",
       _variant(_SWIGLU,
                ("def __init__(self, d_model, d_ff):", "def __init__(self, d_model: int, d_ff: int):"))),
    _e("HF LlamaMLP copied (act_fn = SiLU)", '''
class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.hidden_size = d_model
        self.intermediate_size = d_ff
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj
'''),
    _e("x * sigmoid(x) by hand",
       _variant(_SWIGLU,
                ("        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))", '''
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))
'''))),
]


# ---------------------------------------------------------------------------------------------
# swiglu_hidden_dim
# ---------------------------------------------------------------------------------------------
_HIDDEN = '''
def swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None):
    if not isinstance(d_model, int) or not isinstance(multiple_of, int) or d_model <= 0 or multiple_of <= 0:
        raise ValueError("d_model and multiple_of must be positive ints")
    hidden = int(2 * 4 * d_model / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)
'''

HIDDEN_WRONG = [
    _e("numpy int64 returned",
       _variant(_HIDDEN,
                ("def swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None):", '''
import numpy as np

def swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None):
'''),
                ('raise ValueError("d_model and multiple_of must be positive ints")',
                 'raise ValueError("positive ints only")'),
                ("return multiple_of * ((hidden + multiple_of - 1) // multiple_of)",
                 "return np.int64(multiple_of * np.ceil(hidden / multiple_of))")),
       "a numpy int64 is not a Python int"),
    _e("rounded down",
       _variant(_HIDDEN,
                ("return multiple_of * ((hidden + multiple_of - 1) // multiple_of)",
                 "return (hidden // multiple_of) * multiple_of")),
       "round UP to a multiple"),
    _e("multiplier applied after rounding",
       _variant(_HIDDEN,
                ("    if ffn_dim_multiplier is not None:", '''
    hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
    if ffn_dim_multiplier is not None:
'''),
                ("return multiple_of * ((hidden + multiple_of - 1) // multiple_of)", "return hidden")),
       "apply ffn_dim_multiplier before rounding"),
    _e("numpy ceil (a float comes back)",
       _variant(_HIDDEN,
                ("def swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None):", '''
import numpy as np


def swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None):
'''),
                ("return multiple_of * ((hidden + multiple_of - 1) // multiple_of)",
                 "return multiple_of * np.ceil(hidden / multiple_of)")),
       "return a Python int"),
    _e("no validation",
       _without(_HIDDEN, "if not isinstance(d_model, int) or not isinstance(multiple_of, int) or d_model <= 0 or multiple_of <= 0:"),
       "raise ValueError when d_model or multiple_of"),
    _e("assert instead of ValueError",
       _variant(_HIDDEN, ('''
    if not isinstance(d_model, int) or not isinstance(multiple_of, int) or d_model <= 0 or multiple_of <= 0:
        raise ValueError("d_model and multiple_of must be positive ints")
''', '''
    assert isinstance(d_model, int) and d_model > 0
    assert isinstance(multiple_of, int) and multiple_of > 0
''')),
       "raise ValueError when d_model or multiple_of"),
    _e("4 * d_model without the two thirds",
       _variant(_HIDDEN,
                ("hidden = int(2 * 4 * d_model / 3)", "hidden = 4 * d_model"),
                ("return multiple_of * ((hidden + multiple_of - 1) // multiple_of)",
                 "return multiple_of * math.ceil(hidden / multiple_of)")),
       "start from two thirds of 4·D"),
    _e("correct math, no validation",
       _without(_HIDDEN, "if not isinstance(d_model, int) or not isinstance(multiple_of, int) or d_model <= 0 or multiple_of <= 0:"),
       "ValueError"),
]

HIDDEN_CORRECT = [
    _e("Meta's code", '''
def swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None):
    if type(d_model) is not int or d_model <= 0:
        raise ValueError(f"d_model must be a positive int, got {d_model!r}")
    if type(multiple_of) is not int or multiple_of <= 0:
        raise ValueError(f"multiple_of must be a positive int, got {multiple_of!r}")
    hidden_dim = 4 * d_model
    hidden_dim = int(2 * hidden_dim / 3)
    # custom dim factor multiplier
    if ffn_dim_multiplier is not None:
        hidden_dim = int(ffn_dim_multiplier * hidden_dim)
    hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
    return hidden_dim
'''),
    _e("math.ceil", '''
def swiglu_hidden_dim(d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    for v in (d_model, multiple_of):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError("expected a positive int")
    h = int(8 * d_model / 3)
    if ffn_dim_multiplier is not None:
        h = int(h * ffn_dim_multiplier)
    return math.ceil(h / multiple_of) * multiple_of
'''),
]


# ---------------------------------------------------------------------------------------------
# MoE
# ---------------------------------------------------------------------------------------------
_MOE = '''
class MoE(nn.Module):
    def __init__(self, d_model, d_ff, num_experts, top_k):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError("top_k")
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList([SwiGLU(d_model, d_ff) for _ in range(num_experts)])

    def forward(self, x):
        h = x.reshape(-1, x.size(-1))
        router_logits = self.gate(h)
        probs = torch.softmax(router_logits, dim=-1)
        weights, idx = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(h)
        for e in range(self.num_experts):
            tok, slot = torch.where(idx == e)
            y.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])
        return y.reshape(x.shape), router_logits
'''

# The same MoE in another hand: x.shape, Tensor.softmax, enumerate(self.experts), empty experts skipped.
_MOE_ENUMERATE = _variant(_MOE,
                          ("h = x.reshape(-1, x.size(-1))", "h = x.reshape(-1, x.shape[-1])"),
                          ("probs = torch.softmax(router_logits, dim=-1)",
                           "probs = router_logits.softmax(-1)"),
                          ("for e in range(self.num_experts):", "for e, expert in enumerate(self.experts):"),
                          ("            y.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])", '''
            if len(tok):
                y.index_add_(0, tok, expert(h[tok]) * weights[tok, slot, None])
'''))

MOE_WRONG = [
    _e("top-k weights not renormalised",
       _variant(_MOE,
                ("        h = x.reshape(-1, x.size(-1))", '''
        B, T, D = x.shape
        h = x.reshape(-1, D)
'''),
                ('''
        weights, idx = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
''', "        weights, idx = torch.topk(probs, self.top_k, dim=-1)"),
                ('''
            y.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])
        return y.reshape(x.shape), router_logits
''', '''
            if len(tok) > 0:
                y[tok] += self.experts[e](h[tok]) * weights[tok, slot].unsqueeze(-1)
        return y.reshape(B, T, D), router_logits
''')),
       "renormalise the K kept weights"),
    _e("every expert on every token",
       _variant(_MOE,
                ("h = x.reshape(-1, x.size(-1))", "h = x.reshape(-1, x.shape[-1])"),
                ('''
        probs = torch.softmax(router_logits, dim=-1)
        ...
            y.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])
''', '''
        probs = F.softmax(router_logits, dim=-1)
        top, idx = probs.topk(self.top_k, dim=-1)
        dense = torch.zeros_like(probs).scatter(1, idx, top / top.sum(-1, keepdim=True))  # (N, E)
        outs = torch.stack([expert(h) for expert in self.experts], dim=1)  # (N, E, D)
        y = (dense.unsqueeze(-1) * outs).sum(dim=1)
''')),
       "call each expert only on the tokens routed to it"),
    _e("router_logits returned as (B, T, E)",
       _variant(_MOE_ENUMERATE, ('''
        h = x.reshape(-1, x.shape[-1])
        router_logits = self.gate(h)
        probs = router_logits.softmax(-1)
''', '''
        router_logits = self.gate(x)  # (B, T, E)
        probs = router_logits.softmax(dim=-1)
'''),
                ("y = torch.zeros_like(h)", "y = torch.zeros_like(x)"),
                ('''
            tok, slot = torch.where(idx == e)
            if len(tok):
                y.index_add_(0, tok, expert(h[tok]) * weights[tok, slot, None])
        return y.reshape(x.shape), router_logits
''', '''
            mask = (idx == e)  # (B, T, K)
            b, t, k = torch.where(mask)
            if b.numel():
                y[b, t] += expert(x[b, t]) * weights[b, t, k, None]
        return y, router_logits
''')),
       "return router_logits as (N, E)"),
    _e("softmax over the tokens",
       _variant(_MOE,
                ("probs = torch.softmax(router_logits, dim=-1)",
                 "probs = torch.softmax(router_logits, dim=0)")),
       "softmax over the E experts of each token"),
    _e("top-k of the smallest",
       _variant(_MOE,
                ("weights, idx = probs.topk(self.top_k, dim=-1)",
                 "weights, idx = torch.topk(probs, self.top_k, dim=-1, largest=False)")),
       "K largest probabilities"),
    _e("expert layers called directly (HF fused style)",
       _variant(_MOE,
                ("weights, idx = probs.topk(self.top_k, dim=-1)",
                 "weights, idx = torch.topk(probs, self.top_k, dim=-1)"),
                ("for e in range(self.num_experts):", "for e, expert in enumerate(self.experts):"),
                ("            y.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])", '''
            cur = h[tok]
            out = expert.down_proj(F.silu(expert.gate_proj(cur)) * expert.up_proj(cur))
            y.index_add_(0, tok, out * weights[tok, slot, None])
''')),
       "call each expert module itself"),
    _e("experts in a plain Python list",
       _variant(_MOE,
                ("nn.ModuleList([SwiGLU(d_model, d_ff) for _ in range(num_experts)])",
                 "[SwiGLU(d_model, d_ff) for _ in range(num_experts)]"),
                ('''
        probs = torch.softmax(router_logits, dim=-1)
        weights, idx = probs.topk(self.top_k, dim=-1)
''', "        weights, idx = torch.softmax(router_logits, dim=-1).topk(self.top_k, dim=-1)")),
       "a plain list registers no parameters"),
    _e("router probabilities detached",
       _variant(_MOE_ENUMERATE,
                ("probs = router_logits.softmax(-1)",
                 'probs = torch.softmax(router_logits.detach(), -1)  # "the router is not an expert"')),
       "the router learns through y"),
    _e("dense forward, then expert(h[idx]) to fake the counts",
       _variant(_MOE_ENUMERATE,
                ("            tok, slot = torch.where(idx == e)", '''
            out = expert.forward(h)  # every token (faster than gathering, isn't it?)
            tok, slot = torch.where(idx == e)
'''),
                ("                y.index_add_(0, tok, expert(h[tok]) * weights[tok, slot, None])", '''
                expert(h[tok])  # so that the row counter sees the routed tokens
                y.index_add_(0, tok, out[tok] * weights[tok, slot, None])
''')),
       "call each expert only on the tokens routed to it"),
    # issue 25's forgery of the row counter: the class's forward on every token (not wrapped by an
    # instance attribute), one throwaway call with the routed rows; the probe experts' NaN shows it
    _e("type(expert).forward on every token, a throwaway call with the routed rows",
       _variant(_MOE_ENUMERATE,
                ("            tok, slot = torch.where(idx == e)", '''
            out = type(expert).forward(expert, h)  # the counter wraps expert.forward only
            tok, slot = torch.where(idx == e)
'''),
                ("                y.index_add_(0, tok, expert(h[tok]) * weights[tok, slot, None])", '''
                _ = expert(h[tok])  # the routed number of rows, thrown away
                y.index_add_(0, tok, out[tok] * weights[tok, slot, None])
''')),
       "call each expert only on the tokens routed to it"),
    _e("every expert on every token, torch.where keeps the routed rows",
       _variant(_MOE,
                ("            y.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])", '''
            w = torch.zeros(h.size(0), dtype=h.dtype, device=h.device).index_put((tok,), weights[tok, slot])
            routed = torch.zeros(h.size(0), dtype=torch.bool, device=h.device).index_fill(0, tok, True)
            y = y + torch.where(routed[:, None], self.experts[e](h) * w[:, None], torch.zeros_like(h))
''')),
       "call each expert only on the tokens routed to it"),
    _e("top-k over the tokens (dim=0)",
       _variant(_MOE_ENUMERATE,
                ("weights, idx = probs.topk(self.top_k, dim=-1)",
                 "weights, idx = probs.topk(self.top_k, dim=0)")),
       "top-K per token is over the experts"),
    _e("no check of top_k",
       _variant(_MOE, ('''
        if not 1 <= top_k <= num_experts:
            raise ValueError("top_k")
''', None),
                ('''
        probs = torch.softmax(router_logits, dim=-1)
        weights, idx = probs.topk(self.top_k, dim=-1)
''', "        weights, idx = torch.softmax(router_logits, dim=-1).topk(self.top_k, dim=-1)")),
       "raise ValueError unless 1 <= top_k <= num_experts"),
    _e("correct math, no validation", _without(_MOE, "if not 1 <= top_k <= num_experts:"), "ValueError"),
]

MOE_CORRECT = [
    _e("grouped dispatch: tokens sorted by expert, one chunk per expert (split by counts)",
       _variant(_MOE, ('''
        y = torch.zeros_like(h)
        ...
        return y.reshape(x.shape), router_logits
''', '''
        flat = idx.reshape(-1)  # (N*K,) the expert of every (token, slot)
        order = flat.argsort(stable=True)
        token = order // self.top_k
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        chunks = h[token].split(counts)
        outs = torch.cat([expert(chunk) for expert, chunk in zip(self.experts, chunks)])
        y = torch.zeros_like(h).index_add(0, token, outs * weights.reshape(-1)[order, None])
        return y.reshape(x.shape), router_logits
'''))),
    _e("Hugging Face Mixtral loop (one_hot mask, float32 softmax)", '''
class MoE(nn.Module):
    def __init__(self, d_model, d_ff, num_experts, top_k):
        super().__init__()
        if top_k < 1 or top_k > num_experts:
            raise ValueError("need 1 <= top_k <= num_experts")
        self.num_experts = num_experts
        self.top_k = top_k
        self.gate = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList([SwiGLU(d_model, d_ff) for _ in range(self.num_experts)])

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits
'''),
    _e("softmax over the K selected logits", '''
class MoE(nn.Module):
    def __init__(self, d_model, d_ff, num_experts, top_k):
        super().__init__()
        if not (1 <= top_k <= num_experts):
            raise ValueError("bad top_k")
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d_model, d_ff) for _ in range(num_experts))

    def forward(self, x):
        B, T, D = x.shape
        h = x.reshape(B * T, D)
        logits = self.gate(h)  # (N, E)
        top_logits, top_idx = logits.topk(self.top_k, dim=-1)
        w = F.softmax(top_logits, dim=-1)  # same as renormalising the top-K probabilities
        out = torch.zeros_like(h)
        for e in range(self.num_experts):
            rows, slots = (top_idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            out[rows] += w[rows, slots, None] * self.experts[e](h[rows])
        return out.view(B, T, D), logits
'''),
    _e("expert.forward(h[idx])",
       _variant(_MOE,
                ("h = x.reshape(-1, x.size(-1))", "h = x.reshape(-1, x.shape[-1])"),
                ('''
        probs = torch.softmax(router_logits, dim=-1)
        weights, idx = probs.topk(self.top_k, dim=-1)
''', "        weights, idx = router_logits.softmax(dim=-1).topk(self.top_k, dim=-1)"),
                ("            y.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])", '''
            if tok.numel():
                y = y.index_add(0, tok, self.experts[e].forward(h[tok]) * weights[tok, slot, None])
'''))),
    _e("one token at a time",
       _variant(_MOE,
                ('raise ValueError("top_k")', 'raise ValueError("top_k must be in [1, num_experts]")'),
                ("h = x.reshape(-1, x.size(-1))", "h = x.reshape(-1, x.shape[-1])"),
                ('''
        probs = torch.softmax(router_logits, dim=-1)
        ...
        return y.reshape(x.shape), router_logits
''', '''
        p = router_logits.softmax(dim=-1)
        w, idx = p.topk(self.top_k)
        w = w / w.sum(-1, keepdim=True)
        rows = []
        for n in range(h.shape[0]):
            rows.append(sum(w[n, k] * self.experts[int(idx[n, k])](h[n]) for k in range(self.top_k)))
        return torch.stack(rows).reshape(x.shape), router_logits
'''))),
]


# ---------------------------------------------------------------------------------------------
# load_balancing_loss
# ---------------------------------------------------------------------------------------------
_BALANCE = '''
def load_balancing_loss(router_logits, top_k):
    N, E = router_logits.shape
    probs = torch.softmax(router_logits, dim=-1)
    idx = probs.topk(top_k, dim=-1).indices
    f = torch.bincount(idx.flatten(), minlength=E).to(probs.dtype) / (N * top_k)
    P = probs.mean(0)
    return E * (f * P).sum()
'''

# Hugging Face's load_balancing_loss_func (transformers' Mixtral), as the entries that name it copy it.
_BALANCE_HF = '''
def load_balancing_loss(router_logits, top_k):
    num_experts = router_logits.shape[-1]
    routing_weights = torch.nn.functional.softmax(router_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = torch.nn.functional.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.to(routing_weights.dtype), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts
'''

# The last lines of _BALANCE, which two mistakes replace.
_BALANCE_RETURN = '''
    P = probs.mean(0)
    return E * (f * P).sum()
'''

BALANCE_WRONG = [
    _e("without the factor E",
       _variant(_BALANCE,
                ("P = probs.mean(0)", "P = probs.mean(dim=0)"),
                ("return E * (f * P).sum()", "return (f * P).sum()")),
       "multiply by the number of experts E"),
    _e("Hugging Face's load_balancing_loss_func (divides by N)", _BALANCE_HF, "Hugging Face's load_balancing_loss_func divides by N"),
    _e("HF's float32 computation, not cast back", '''
def load_balancing_loss(router_logits, top_k):
    num_experts = router_logits.shape[-1]
    routing_weights = torch.nn.functional.softmax(router_logits, dim=-1, dtype=torch.float)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    counts = torch.bincount(selected_experts.reshape(-1), minlength=num_experts).float()
    tokens_per_expert = counts / selected_experts.numel()
    return num_experts * torch.sum(tokens_per_expert * routing_weights.mean(dim=0))
''', "a float32 softmax is fine, a float32 result is not"),
    _e("f from the probabilities", '''
def load_balancing_loss(router_logits, top_k):
    E = router_logits.shape[-1]
    probs = router_logits.softmax(-1)
    P = probs.mean(0)
    f = probs.mean(0)  # fraction routed to each expert
    return E * (f * P).sum()
''', "f_e counts the top-K assignments"),
    _e("only the first choice counted", '''
def load_balancing_loss(router_logits, top_k):
    N, E = router_logits.shape
    probs = torch.softmax(router_logits, dim=-1)
    first = probs.argmax(dim=-1)
    f = torch.bincount(first, minlength=E).to(probs.dtype) / N
    return E * (f * probs.mean(0)).sum()
''', "count all K slots"),
    _e("returned as a Python float",
       _variant(_BALANCE, (_BALANCE_RETURN, "    return (E * (f * probs.mean(0)).sum()).item()")),
       "return plain torch.Tensor"),
    _e("loss rebuilt from .item()",
       _variant(_BALANCE,
                ("idx = probs.topk(top_k, dim=-1).indices",
                 "counts = torch.bincount(probs.topk(top_k, dim=-1).indices.flatten(), minlength=E)"),
                ("torch.bincount(idx.flatten(), minlength=E).to(probs.dtype)", "counts"),
                ("return E * (f * P).sum()",
                 "return torch.tensor(E * (f * P).sum().item(), dtype=router_logits.dtype)")),
       "cut the graph"),
    _e("straight-through f (differentiable counts)",
       _variant(_BALANCE, ('''
    idx = probs.topk(top_k, dim=-1).indices
    f = torch.bincount(idx.flatten(), minlength=E).to(probs.dtype) / (N * top_k)
''', '''
    mask = F.one_hot(probs.topk(top_k, dim=-1).indices, E).sum(1).to(probs.dtype)  # (N, E)
    mask = mask + probs - probs.detach()  # let the balance gradient reach the counts too
    f = mask.sum(0) / (N * top_k)
''')),
       "f is a count and carries no gradient"),
    _e("P from the kept probabilities only",
       _variant(_BALANCE,
                ("    idx = probs.topk(top_k, dim=-1).indices", '''
    top, idx = probs.topk(top_k, dim=-1)
    kept = torch.zeros_like(probs).scatter(1, idx, top)  # (N, E): the routed probabilities
'''),
                ("P = probs.mean(0)", "P = kept.mean(0)")),
       "not only of the probabilities kept"),
    _e("top-k over the tokens (dim=0)",
       _variant(_BALANCE,
                ("idx = probs.topk(top_k, dim=-1).indices", "idx = probs.topk(top_k, dim=0).indices")),
       "not dim=0"),
    _e("per-expert loss vector", _variant(_BALANCE, (_BALANCE_RETURN, "    return E * f * probs.mean(0)")),
       "return one number"),
]

BALANCE_CORRECT = [
    _e("bincount",
       _variant(_BALANCE, ('''
    f = torch.bincount(idx.flatten(), minlength=E).to(probs.dtype) / (N * top_k)
    P = probs.mean(0)
    return E * (f * P).sum()
''', '''
    f = torch.bincount(idx.reshape(-1), minlength=E).to(probs.dtype) / (N * top_k)
    return E * torch.sum(f * probs.mean(dim=0))
'''))),
    _e("HF's older one_hot formula divided by K, float32 softmax",
       _variant(_BALANCE_HF,
                ("routing_weights = torch.nn.functional.softmax(router_logits, dim=-1)",
                 "routing_weights = torch.nn.functional.softmax(router_logits, dim=-1, dtype=torch.float)"),
                ("torch.nn.functional.one_hot(selected_experts, num_experts)",
                 "torch.nn.functional.one_hot(selected_experts, num_experts)  # (N, K, E)"),
                ("torch.mean(expert_mask.to(routing_weights.dtype), dim=0)",
                 "torch.mean(expert_mask.float(), dim=0)  # (K, E)"),
                ("return overall_loss * num_experts",
                 "return (overall_loss * num_experts / top_k).to(router_logits.dtype)  # HF's sum over K slots / K"))),
]


# ---------------------------------------------------------------------------------------------
# route_with_capacity
# ---------------------------------------------------------------------------------------------
_CAPACITY = '''
def route_with_capacity(router_logits, top_k, capacity):
    if capacity < 0:
        raise ValueError("capacity")
    probs = torch.softmax(router_logits, dim=-1)
    weights, idx = probs.topk(top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    onehot = F.one_hot(idx.T.reshape(-1), router_logits.shape[-1])
    position = (onehot.cumsum(0) * onehot).sum(-1)
    kept = (position <= capacity).reshape(top_k, -1).T
    return idx, weights, kept
'''

CAPACITY_WRONG = [
    _e("offered token by token", '''
def route_with_capacity(router_logits, top_k, capacity):
    if capacity < 0:
        raise ValueError("capacity")
    probs = router_logits.softmax(-1)
    w, idx = probs.topk(top_k, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    kept = torch.zeros_like(idx, dtype=torch.bool)
    count = {}
    for n in range(idx.shape[0]):
        for k in range(top_k):
            e = int(idx[n, k])
            if count.get(e, 0) < capacity:
                kept[n, k] = True
                count[e] = count.get(e, 0) + 1
    return idx, w, kept
''', "offer the assignments slot by slot"),
    _e("one fewer kept per expert",
       _variant(_CAPACITY,
                ("position = (onehot.cumsum(0) * onehot).sum(-1)",
                 "position = (onehot.cumsum(0) * onehot).sum(-1)  # 1, 2, 3, ..."),
                ("kept = (position <= capacity).reshape(top_k, -1).T",
                 "kept = (position < capacity).reshape(top_k, -1).T")),
       "an expert accepts the first `capacity` assignments"),
    _e("weights renormalised after dropping",
       _variant(_CAPACITY,
                ("    weights = weights / weights.sum(dim=-1, keepdim=True)", None),
                ("    return idx, weights, kept", '''
    weights = weights * kept
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-9)
    return idx, weights, kept
''')),
       "dropping does not change the weights"),
    _e("weights not renormalised",
       _variant(_CAPACITY, ("    weights = weights / weights.sum(dim=-1, keepdim=True)", None)),
       "renormalise the K kept weights"),
    _e("kept as 0/1 integers",
       _variant(_CAPACITY,
                ("kept = (position <= capacity).reshape(top_k, -1).T",
                 "kept = (position <= capacity).long().reshape(top_k, -1).T")),
       "kept is a bool tensor"),
]

CAPACITY_CORRECT = [
    _e("a loop over the queue", '''
def route_with_capacity(router_logits, top_k, capacity):
    if capacity < 0:
        raise ValueError("capacity must be >= 0")
    probs = torch.softmax(router_logits.float(), dim=-1)
    w, idx = torch.topk(probs, top_k, dim=-1)
    w = (w / w.sum(dim=-1, keepdim=True)).to(router_logits.dtype)
    kept = torch.zeros(idx.shape, dtype=torch.bool, device=idx.device)
    used = [0] * router_logits.shape[-1]
    for k in range(top_k):
        for n in range(idx.shape[0]):
            e = idx[n, k].item()
            if used[e] < capacity:
                used[e] += 1
                kept[n, k] = True
    return idx, w, kept
'''),
    _e("cumsum over the slot-major one_hot", '''
def route_with_capacity(router_logits, top_k, capacity):
    if capacity < 0:
        raise ValueError("negative capacity")
    N, E = router_logits.shape
    probs = router_logits.softmax(dim=-1)
    weights, expert_index = probs.topk(top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    order = F.one_hot(expert_index.t().reshape(-1), E)  # (K*N, E)
    seen_before = order.cumsum(dim=0) - order  # assignments to the same expert offered earlier
    kept = ((seen_before * order).sum(-1) < capacity).view(top_k, N).t()
    return expert_index, weights, kept
'''),
]


WRONG = {
    "gelu": GELU_WRONG,
    "FeedForward": FFN_WRONG,
    "SwiGLU": SWIGLU_WRONG,
    "swiglu_hidden_dim": HIDDEN_WRONG,
    "MoE": MOE_WRONG,
    "load_balancing_loss": BALANCE_WRONG,
    "route_with_capacity": CAPACITY_WRONG,
}

CORRECT = {
    "gelu": GELU_CORRECT,
    "FeedForward": FFN_CORRECT,
    "SwiGLU": SWIGLU_CORRECT,
    "swiglu_hidden_dim": HIDDEN_CORRECT,
    "MoE": MOE_CORRECT,
    "load_balancing_loss": BALANCE_CORRECT,
    "route_with_capacity": CAPACITY_CORRECT,
}
