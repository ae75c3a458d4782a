"""Wrong and correct implementations of notebook 04's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F``, ``nn``, ``Callable``). Wrong entries are plausible attempts; ``hint`` is a substring of the
catalogued hint (``tfcourse.checks.nb04_normalisation.HINTS``) that the feedback should show,
None when no hint fits. Correct entries include the forms public code uses: torch.rsqrt,
x.pow(2).mean, var(unbiased=False), HF's LlamaRMSNorm and Meta's ``_norm(x.float()).type_as(x)``.
``RMSNorm`` entries call the notebook's ``rms_norm`` (as the task asks) unless they say otherwise.
"""

from __future__ import annotations

from tests.catalogue import entry as _e
from tests.catalogue import variant as _variant

NOTEBOOK = "04_normalisation"


# ---------------------------------------------------------------------------------------------
# layer_norm
# ---------------------------------------------------------------------------------------------
_LAYER_NORM = '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mean = h.mean(dim=-1, keepdim=True)
    var = h.var(dim=-1, keepdim=True, unbiased=False)
    y = (h - mean) / torch.sqrt(var + eps)
    return (y * weight + bias).to(x.dtype)
'''

LAYER_NORM_WRONG = [
    _e("unbiased variance (x.var default)", '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mean = h.mean(dim=-1, keepdim=True)
    var = h.var(dim=-1, keepdim=True)
    out = (h - mean) / torch.sqrt(var + eps) * weight + bias
    return out.to(x.dtype)
''', "biased variance"),
    _e("eps outside the root (std + eps)", '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mean = h.mean(-1, keepdim=True)
    std = h.std(-1, keepdim=True, unbiased=False)
    return ((h - mean) / (std + eps) * weight + bias).to(x.dtype)
''', "eps goes inside the square root"),
    _e("statistics over T and D", '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    dims = tuple(range(1, h.dim())) if h.dim() > 1 else (-1,)
    mean = h.mean(dim=dims, keepdim=True)
    var = ((h - mean) ** 2).mean(dim=dims, keepdim=True)
    return ((h - mean) * torch.rsqrt(var + eps) * weight + bias).to(x.dtype)
''', "last axis only"),
    _e("statistics in fp16 (no upcast)", '''
def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias
''', "compute the statistics in float32"),
    _e("float32 output for half input", '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mu = h.mean(-1, keepdim=True)
    var = h.var(-1, keepdim=True, unbiased=False)
    return (h - mu) / torch.sqrt(var + eps) * weight.to(h.dtype) + bias.to(h.dtype)
''', "cast it back"),
    _e("always float32 (float64 loses precision)", '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float()
    mu = h.mean(-1, keepdim=True)
    var = (h - mu).pow(2).mean(-1, keepdim=True)
    y = (h - mu) * torch.rsqrt(var + eps)
    return (y * weight.float() + bias.float()).to(x.dtype)
''', "upcast half precision only"),
    _e("eps hard-coded", '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mu = h.mean(-1, keepdim=True)
    var = (h - mu).pow(2).mean(-1, keepdim=True)
    return ((h - mu) / torch.sqrt(var + 1e-5) * weight + bias).to(x.dtype)
''', "use the eps argument"),
    _e("forgot the bias", '''
def layer_norm(x, weight, bias, eps=1e-5):
    x32 = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
    mean = x32.mean(-1, keepdim=True)
    var = x32.var(-1, keepdim=True, unbiased=False)
    x_hat = (x32 - mean) / torch.sqrt(var + eps)
    return (weight * x_hat).to(x.dtype)
''', "finish with * weight + bias"),
]

LAYER_NORM_CORRECT = [
    _e("var(unbiased=False), sqrt", _LAYER_NORM),
    _e("rsqrt, promote_types", '''
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    centred = h - h.mean(-1, keepdim=True)
    inv_std = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    return (centred * inv_std).to(x.dtype) * weight + bias
'''),
    _e("var_mean, correction=0", '''
def layer_norm(x, weight, bias, eps=1e-5):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    var, mean = torch.var_mean(h, dim=-1, keepdim=True, correction=0)
    return ((h - mean) / (var + eps).sqrt() * weight.to(h.dtype) + bias.to(h.dtype)).type_as(x)
'''),
]


# ---------------------------------------------------------------------------------------------
# rms_norm
# ---------------------------------------------------------------------------------------------
_RMS_NORM = '''
def rms_norm(x, weight, eps=1e-6):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)
'''

RMS_NORM_WRONG = [
    _e("mean subtracted", '''
def rms_norm(x, weight, eps=1e-6):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    h = h - h.mean(-1, keepdim=True)
    rms = torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h / rms * weight).to(x.dtype)
''', "does not subtract the mean"),
    _e("eps outside the root",
       _variant(_RMS_NORM,
                ("    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)", '''
    rms = h.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return (weight * h / (rms + eps)).to(x.dtype)
''')),
       "eps goes inside the square root"),
    _e("squares in fp16", '''
def rms_norm(x, weight, eps=1e-6):
    ms = (x * x).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(ms + eps) * weight
''', "compute the statistics in float32"),
    _e("Gemma's (1 + w)",
       _variant(_RMS_NORM,
                ("    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)", '''
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + weight)).to(x.dtype)
''')),
       "(1 + weight) is Gemma's"),
    _e("HF-style with float32 result", '''
def rms_norm(x, weight, eps=1e-6):
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden
''', "cast it back"),
    _e("x.norm instead of RMS", '''
def rms_norm(x, weight, eps=1e-6):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (h / (h.norm(dim=-1, keepdim=True) + eps) * weight).to(x.dtype)
''', "the L2 norm divided by sqrt(D)"),
    _e("no square root", '''
def rms_norm(x, weight, eps=1e-6):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (h / (h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)
''', "divide by the root mean square"),
    _e("no eps at all", '''
def rms_norm(x, weight, eps=1e-6):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (h / h.pow(2).mean(-1, keepdim=True).sqrt() * weight).to(x.dtype)
''', "add eps to the mean of the squares"),
]

RMS_NORM_CORRECT = [
    _e("rsqrt, upcast half", '''
def rms_norm(x, weight, eps=1e-6):
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)
'''),
    _e("HF LlamaRMSNorm copied", '''
def rms_norm(x, weight, eps=1e-6):
    input_dtype = x.dtype
    hidden_states = x.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)
'''),
    _e("Meta's _norm(x.float()).type_as(x)", '''
def _norm(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x, weight, eps=1e-6):
    output = _norm(x.float(), eps).type_as(x)
    return output * weight
'''),
]


# ---------------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------------
_MODULE = '''
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)
'''

MODULE_WRONG = [
    _e("weight detached in forward (never trains)",
       _variant(_MODULE,
                ("return rms_norm(x, self.weight, self.eps)",
                 "return rms_norm(x, self.weight.detach(), self.eps)  # no grad needed for a scale?")),
       "cut the graph"),
    _e("weight initialised to zeros",
       _variant(_MODULE,
                ("self.weight = nn.Parameter(torch.ones(dim))",
                 "self.weight = nn.Parameter(torch.zeros(dim))")),
       "initialise weight to ones"),
    _e("weight as a plain tensor",
       _variant(_MODULE, ("self.weight = nn.Parameter(torch.ones(dim))", "self.weight = torch.ones(dim)")),
       "make weight an nn.Parameter"),
    _e("Gemma: zeros and (1 + w)",
       _variant(_MODULE,
                ("self.weight = nn.Parameter(torch.ones(dim))",
                 "self.weight = nn.Parameter(torch.zeros(dim))"),
                ("return rms_norm(x, self.weight, self.eps)",
                 "return rms_norm(x, 1 + self.weight, self.eps)")),
       "(1 + weight) is Gemma's"),
    _e("eps not passed on",
       _variant(_MODULE, ("return rms_norm(x, self.weight, self.eps)", "return rms_norm(x, self.weight)")),
       "use the eps argument"),
    _e("a bias too",
       _variant(_MODULE,
                ("        self.weight = nn.Parameter(torch.ones(dim))", '''
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
'''),
                ("return rms_norm(x, self.weight, self.eps)",
                 "return rms_norm(x, self.weight, self.eps) + self.bias")),
       "only parameter"),
    _e("parameter named gamma",
       _variant(_MODULE,
                ("self.weight = nn.Parameter(torch.ones(dim))",
                 "self.gamma = nn.Parameter(torch.ones(dim))"),
                ("return rms_norm(x, self.weight, self.eps)", "return rms_norm(x, self.gamma, self.eps)")),
       "name the parameter weight"),
    # the right formula in x's own dtype: float16 squares of |x| ~ 500 overflow; it loses the half
    # cell only (tests/test_proportional_points.py grades it)
    _e("correct math, no half-precision handling",
       _variant(_MODULE, ("return rms_norm(x, self.weight, self.eps)",
                          "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight")),
       "statistics in float32"),
]

MODULE_CORRECT = [
    _e("calls rms_norm",
       _variant(_MODULE,
                ("def __init__(self, dim, eps=1e-6):", "def __init__(self, dim: int, eps: float = 1e-6):"),
                ("return rms_norm(x, self.weight, self.eps)",
                 "return rms_norm(x, self.weight, eps=self.eps)"))),
    _e("HF LlamaRMSNorm (own forward, extra attribute)", '''
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
'''),
]


# ---------------------------------------------------------------------------------------------
# pre_norm_residual
# ---------------------------------------------------------------------------------------------
PRE_NORM_WRONG = [
    _e("residual from the normalised tensor", '''
def pre_norm_residual(x, sublayer, norm):
    x = norm(x)
    return x + sublayer(x)
''', "the residual stream carries x itself"),
    _e("post-norm written instead", '''
def pre_norm_residual(x, sublayer, norm):
    return norm(x + sublayer(x))
''', "is post-norm"),
    _e("no residual", '''
def pre_norm_residual(x, sublayer, norm):
    h = norm(x)
    return sublayer(h)
''', "add the residual"),
    _e("norm applied to the sublayer output", '''
def pre_norm_residual(x, sublayer, norm):
    return x + norm(sublayer(x))
''', "not its output"),
    _e("normalised twice (norm around the sum too)", '''
def pre_norm_residual(x, sublayer, norm):
    out = x + sublayer(norm(x))
    return norm(out)
''', "no norm around the sum"),
    _e("norm on the sublayer's input and on its output", '''
def pre_norm_residual(x, sublayer, norm):
    return x + norm(sublayer(norm(x)))
''', "normalise only the sublayer's input"),
]

PRE_NORM_CORRECT = [
    _e("one line", '''
def pre_norm_residual(x, sublayer, norm):
    return x + sublayer(norm(x))
'''),
    _e("named steps", '''
def pre_norm_residual(x: torch.Tensor, sublayer: Callable, norm: Callable) -> torch.Tensor:
    residual = x
    h = norm(x)
    h = sublayer(h)
    return residual + h
'''),
]


# ---------------------------------------------------------------------------------------------
# post_norm_residual
# ---------------------------------------------------------------------------------------------
POST_NORM_WRONG = [
    _e("post-norm on the sublayer output only", '''
def post_norm_residual(x, sublayer, norm):
    return x + norm(sublayer(x))
''', "residual included"),
    _e("pre-norm written instead", '''
def post_norm_residual(x, sublayer, norm):
    return x + sublayer(norm(x))
''', "is pre-norm"),
    _e("no residual", '''
def post_norm_residual(x, sublayer, norm):
    return norm(sublayer(x))
''', "add the residual"),
    _e("norm called on the input as well", '''
def post_norm_residual(x, sublayer, norm):
    h = norm(x)
    return norm(h + sublayer(h))
''', "the sublayer reads x itself"),
    _e("norm applied twice", '''
def post_norm_residual(x, sublayer, norm):
    h = norm(x + sublayer(x))
    return norm(h)
''', "call norm exactly once"),
    _e("normalised input as the residual, no norm after the add", '''
def post_norm_residual(x, sublayer, norm):
    return norm(x) + sublayer(norm(x))
''', "normalises after the residual add"),
]

POST_NORM_CORRECT = [
    _e("one line", '''
def post_norm_residual(x, sublayer, norm):
    return norm(x + sublayer(x))
'''),
    _e("named steps", '''
def post_norm_residual(x: torch.Tensor, sublayer: Callable, norm: Callable) -> torch.Tensor:
    h = sublayer(x)
    h = h + x
    return norm(h)
'''),
]


# ---------------------------------------------------------------------------------------------
# rms_norm_backward
# ---------------------------------------------------------------------------------------------
_BACKWARD = '''
def rms_norm_backward(grad_out, x, weight, eps=1e-6):
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    xhat = x * r
    g = grad_out * weight
    grad_x = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    grad_weight = (grad_out * xhat).reshape(-1, x.shape[-1]).sum(0)
    return grad_x, grad_weight
'''

# The last lines of _BACKWARD, which three mistakes replace.
_GRAD_WEIGHT_LINES = '''
    grad_weight = (grad_out * xhat).reshape(-1, x.shape[-1]).sum(0)
    return grad_x, grad_weight
'''

BACKWARD_WRONG = [
    _e("rms treated as a constant", '''
def rms_norm_backward(grad_out, x, weight, eps=1e-6):
    rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    grad_x = grad_out * weight / rms
    grad_weight = (grad_out * x / rms).reshape(-1, x.shape[-1]).sum(0)
    return grad_x, grad_weight
''', "rms depends on x too"),
    _e("grad_weight not summed",
       _variant(_BACKWARD, (_GRAD_WEIGHT_LINES, "    return grad_x, grad_out * xhat")),
       "weight is shared by every token"),
    _e("sum instead of mean in the correction",
       _variant(_BACKWARD,
                ("grad_x = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))",
                 "grad_x = r * (g - xhat * (g * xhat).sum(-1, keepdim=True))"),
                ("grad_weight = (grad_out * xhat).reshape(-1, x.shape[-1]).sum(0)",
                 "grad_weight = (grad_out * xhat).flatten(0, -2).sum(0) if x.dim() > 1 else grad_out * xhat")),
       "averages over the D features"),
    _e("forgot the weight in grad_x", '''
def rms_norm_backward(grad_out, x, weight, eps=1e-6):
    D = x.shape[-1]
    r = torch.rsqrt((x ** 2).sum(-1, keepdim=True) / D + eps)
    xhat = x * r
    grad_x = r * (grad_out - xhat * (grad_out * xhat).mean(-1, keepdim=True))
    grad_weight = (grad_out * xhat).reshape(-1, D).sum(dim=0)
    return grad_x, grad_weight
''', "the gradient reaching x̂ is grad_out · weight"),
    _e("grad_weight summed over the last axis",
       _variant(_BACKWARD, (_GRAD_WEIGHT_LINES, "    return grad_x, (grad_out * xhat).sum(-1)")),
       "over every axis but the last"),
    _e("grad_weight summed over the first axis only",
       _variant(_BACKWARD, (_GRAD_WEIGHT_LINES, "    return grad_x, (grad_out * xhat).sum(dim=0)")),
       "sum grad_weight (grad_out · x̂) over every axis but the last"),
]

BACKWARD_CORRECT = [
    _e("x̂ form", _BACKWARD),
    _e("rms form, sum over leading axes", '''
def rms_norm_backward(grad_out, x, weight, eps=1e-6):
    D = x.shape[-1]
    rms = torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    g = grad_out * weight
    dot = (g * x).sum(dim=-1, keepdim=True)
    grad_x = g / rms - x * dot / (D * rms ** 3)
    grad_weight = (grad_out * x / rms).reshape(-1, D).sum(dim=0)
    return grad_x, grad_weight
'''),
]


WRONG = {
    "layer_norm": LAYER_NORM_WRONG,
    "rms_norm": RMS_NORM_WRONG,
    "RMSNorm": MODULE_WRONG,
    "pre_norm_residual": PRE_NORM_WRONG,
    "post_norm_residual": POST_NORM_WRONG,
    "rms_norm_backward": BACKWARD_WRONG,
}

CORRECT = {
    "layer_norm": LAYER_NORM_CORRECT,
    "rms_norm": RMS_NORM_CORRECT,
    "RMSNorm": MODULE_CORRECT,
    "pre_norm_residual": PRE_NORM_CORRECT,
    "post_norm_residual": POST_NORM_CORRECT,
    "rms_norm_backward": BACKWARD_CORRECT,
}
