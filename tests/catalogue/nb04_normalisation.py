"""Wrong and correct implementations of notebook 04's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F``, ``nn``, ``Callable``). Wrong entries are plausible attempts; ``hint`` is a substring of the
catalogued hint (``tfcourse.checks.nb04_normalisation.HINTS``) that the feedback should show,
None when no hint fits. Correct entries include the forms public code uses: torch.rsqrt,
x.pow(2).mean, var(unbiased=False), HF's LlamaRMSNorm and Meta's ``_norm(x.float()).type_as(x)``.
``RMSNorm`` entries call the notebook's ``rms_norm`` (as the task asks) unless they say otherwise.
"""

from __future__ import annotations

from tests.catalogue import Entry
from tests.catalogue import entry as _e

NOTEBOOK = "04_normalisation"


WRONG: dict[str, list[Entry]] = {
    "layer_norm": [
        _e("unbiased variance (x.var default)", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                mean = h.mean(dim=-1, keepdim=True)
                var = h.var(dim=-1, keepdim=True)
                out = (h - mean) / torch.sqrt(var + eps) * weight + bias
                return out.to(x.dtype)
            ''', hint="biased variance"),
        _e("eps outside the root (std + eps)", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                mean = h.mean(-1, keepdim=True)
                std = h.std(-1, keepdim=True, unbiased=False)
                return ((h - mean) / (std + eps) * weight + bias).to(x.dtype)
            ''', hint="eps goes inside the square root"),
        _e("statistics over T and D", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                dims = tuple(range(1, h.dim())) if h.dim() > 1 else (-1,)
                mean = h.mean(dim=dims, keepdim=True)
                var = ((h - mean) ** 2).mean(dim=dims, keepdim=True)
                return ((h - mean) * torch.rsqrt(var + eps) * weight + bias).to(x.dtype)
            ''', hint="last axis only"),
        _e("statistics in fp16 (no upcast)", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                mean = x.mean(dim=-1, keepdim=True)
                var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
                return (x - mean) / torch.sqrt(var + eps) * weight + bias
            ''', hint="compute the statistics in float32"),
        _e("float32 output for half input", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                mu = h.mean(-1, keepdim=True)
                var = h.var(-1, keepdim=True, unbiased=False)
                return (h - mu) / torch.sqrt(var + eps) * weight.to(h.dtype) + bias.to(h.dtype)
            ''', hint="cast it back"),
        _e("always float32 (float64 loses precision)", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                h = x.float()
                mu = h.mean(-1, keepdim=True)
                var = (h - mu).pow(2).mean(-1, keepdim=True)
                y = (h - mu) * torch.rsqrt(var + eps)
                return (y * weight.float() + bias.float()).to(x.dtype)
            ''', hint="upcast half precision only"),
        _e("eps hard-coded", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                mu = h.mean(-1, keepdim=True)
                var = (h - mu).pow(2).mean(-1, keepdim=True)
                return ((h - mu) / torch.sqrt(var + 1e-5) * weight + bias).to(x.dtype)
            ''', hint="use the eps argument"),
        _e("forgot the bias", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                x32 = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
                mean = x32.mean(-1, keepdim=True)
                var = x32.var(-1, keepdim=True, unbiased=False)
                x_hat = (x32 - mean) / torch.sqrt(var + eps)
                return (weight * x_hat).to(x.dtype)
            ''', hint="finish with * weight + bias"),
    ],
    "rms_norm": [
        _e("mean subtracted", '''
            def rms_norm(x, weight, eps=1e-6):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                h = h - h.mean(-1, keepdim=True)
                rms = torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
                return (h / rms * weight).to(x.dtype)
            ''', hint="does not subtract the mean"),
        _e("eps outside the root", '''
            def rms_norm(x, weight, eps=1e-6):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                rms = h.pow(2).mean(dim=-1, keepdim=True).sqrt()
                return (weight * h / (rms + eps)).to(x.dtype)
            ''', hint="eps goes inside the square root"),
        _e("squares in fp16", '''
            def rms_norm(x, weight, eps=1e-6):
                ms = (x * x).mean(dim=-1, keepdim=True)
                return x * torch.rsqrt(ms + eps) * weight
            ''', hint="compute the statistics in float32"),
        _e("Gemma's (1 + w)", '''
            def rms_norm(x, weight, eps=1e-6):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
                return (out * (1.0 + weight)).to(x.dtype)
            ''', hint="(1 + weight) is Gemma's"),
        _e("HF-style with float32 result", '''
            def rms_norm(x, weight, eps=1e-6):
                hidden = x.to(torch.float32)
                variance = hidden.pow(2).mean(-1, keepdim=True)
                hidden = hidden * torch.rsqrt(variance + eps)
                return weight * hidden
            ''', hint="cast it back"),
        _e("x.norm instead of RMS", '''
            def rms_norm(x, weight, eps=1e-6):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                return (h / (h.norm(dim=-1, keepdim=True) + eps) * weight).to(x.dtype)
            ''', hint="the L2 norm divided by sqrt(D)"),
        _e("no square root", '''
            def rms_norm(x, weight, eps=1e-6):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                return (h / (h.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)
            ''', hint="divide by the root mean square"),
        _e("no eps at all", '''
            def rms_norm(x, weight, eps=1e-6):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                return (h / h.pow(2).mean(-1, keepdim=True).sqrt() * weight).to(x.dtype)
            ''', hint="add eps to the mean of the squares"),
    ],
    "RMSNorm": [
        _e("weight detached in forward (never trains)", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    return rms_norm(x, self.weight.detach(), self.eps)  # no grad needed for a scale?
            ''', hint="cut the graph"),
        _e("weight initialised to zeros", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    return rms_norm(x, self.weight, self.eps)
            ''', hint="initialise weight to ones"),
        _e("weight as a plain tensor", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = torch.ones(dim)

                def forward(self, x):
                    return rms_norm(x, self.weight, self.eps)
            ''', hint="make weight an nn.Parameter"),
        _e("Gemma: zeros and (1 + w)", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    return rms_norm(x, 1 + self.weight, self.eps)
            ''', hint="(1 + weight) is Gemma's"),
        _e("eps not passed on", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    return rms_norm(x, self.weight)
            ''', hint="use the eps argument"),
        _e("a bias too", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.bias = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    return rms_norm(x, self.weight, self.eps) + self.bias
            ''', hint="only parameter"),
        _e("parameter named gamma", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.gamma = nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    return rms_norm(x, self.gamma, self.eps)
            ''', hint="name the parameter weight"),
    ],
    "pre_norm_residual": [
        _e("residual from the normalised tensor", '''
            def pre_norm_residual(x, sublayer, norm):
                x = norm(x)
                return x + sublayer(x)
            ''', hint="the residual stream carries x itself"),
        _e("post-norm written instead", '''
            def pre_norm_residual(x, sublayer, norm):
                return norm(x + sublayer(x))
            ''', hint="is post-norm"),
        _e("no residual", '''
            def pre_norm_residual(x, sublayer, norm):
                h = norm(x)
                return sublayer(h)
            ''', hint="add the residual"),
        _e("norm applied to the sublayer output", '''
            def pre_norm_residual(x, sublayer, norm):
                return x + norm(sublayer(x))
            ''', hint="not its output"),
        _e("normalised twice (norm around the sum too)", '''
            def pre_norm_residual(x, sublayer, norm):
                out = x + sublayer(norm(x))
                return norm(out)
            ''', hint="no norm around the sum"),
        _e("norm on the sublayer's input and on its output", '''
            def pre_norm_residual(x, sublayer, norm):
                return x + norm(sublayer(norm(x)))
            ''', hint="normalise only the sublayer's input"),
    ],
    "post_norm_residual": [
        _e("post-norm on the sublayer output only", '''
            def post_norm_residual(x, sublayer, norm):
                return x + norm(sublayer(x))
            ''', hint="residual included"),
        _e("pre-norm written instead", '''
            def post_norm_residual(x, sublayer, norm):
                return x + sublayer(norm(x))
            ''', hint="is pre-norm"),
        _e("no residual", '''
            def post_norm_residual(x, sublayer, norm):
                return norm(sublayer(x))
            ''', hint="add the residual"),
        _e("norm called on the input as well", '''
            def post_norm_residual(x, sublayer, norm):
                h = norm(x)
                return norm(h + sublayer(h))
            ''', hint="the sublayer reads x itself"),
        _e("norm applied twice", '''
            def post_norm_residual(x, sublayer, norm):
                h = norm(x + sublayer(x))
                return norm(h)
            ''', hint="call norm exactly once"),
        _e("normalised input as the residual, no norm after the add", '''
            def post_norm_residual(x, sublayer, norm):
                return norm(x) + sublayer(norm(x))
            ''', hint="normalises after the residual add"),
    ],
    "rms_norm_backward": [
        _e("rms treated as a constant", '''
            def rms_norm_backward(grad_out, x, weight, eps=1e-6):
                rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                grad_x = grad_out * weight / rms
                grad_weight = (grad_out * x / rms).reshape(-1, x.shape[-1]).sum(0)
                return grad_x, grad_weight
            ''', hint="rms depends on x too"),
        _e("grad_weight not summed", '''
            def rms_norm_backward(grad_out, x, weight, eps=1e-6):
                r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                xhat = x * r
                g = grad_out * weight
                grad_x = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
                return grad_x, grad_out * xhat
            ''', hint="weight is shared by every token"),
        _e("sum instead of mean in the correction", '''
            def rms_norm_backward(grad_out, x, weight, eps=1e-6):
                r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                xhat = x * r
                g = grad_out * weight
                grad_x = r * (g - xhat * (g * xhat).sum(-1, keepdim=True))
                grad_weight = (grad_out * xhat).flatten(0, -2).sum(0) if x.dim() > 1 else grad_out * xhat
                return grad_x, grad_weight
            ''', hint="averages over the D features"),
        _e("forgot the weight in grad_x", '''
            def rms_norm_backward(grad_out, x, weight, eps=1e-6):
                D = x.shape[-1]
                r = torch.rsqrt((x ** 2).sum(-1, keepdim=True) / D + eps)
                xhat = x * r
                grad_x = r * (grad_out - xhat * (grad_out * xhat).mean(-1, keepdim=True))
                grad_weight = (grad_out * xhat).reshape(-1, D).sum(dim=0)
                return grad_x, grad_weight
            ''', hint="the gradient reaching x̂ is grad_out · weight"),
        _e("grad_weight summed over the last axis", '''
            def rms_norm_backward(grad_out, x, weight, eps=1e-6):
                r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                xhat = x * r
                g = grad_out * weight
                grad_x = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
                return grad_x, (grad_out * xhat).sum(-1)
            ''', hint="over every axis but the last"),
        _e("grad_weight summed over the first axis only", '''
            def rms_norm_backward(grad_out, x, weight, eps=1e-6):
                r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                xhat = x * r
                g = grad_out * weight
                grad_x = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
                return grad_x, (grad_out * xhat).sum(dim=0)
            ''', hint="sum grad_weight (grad_out · x̂) over every axis but the last"),
    ],
}

CORRECT: dict[str, list[Entry]] = {
    "layer_norm": [
        _e("var(unbiased=False), sqrt", '''
            def layer_norm(x, weight, bias, eps=1e-5):
                h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
                mean = h.mean(dim=-1, keepdim=True)
                var = h.var(dim=-1, keepdim=True, unbiased=False)
                y = (h - mean) / torch.sqrt(var + eps)
                return (y * weight + bias).to(x.dtype)
            '''),
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
    ],
    "rms_norm": [
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
    ],
    "RMSNorm": [
        _e("calls rms_norm", '''
            class RMSNorm(nn.Module):
                def __init__(self, dim: int, eps: float = 1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    return rms_norm(x, self.weight, eps=self.eps)
            '''),
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
    ],
    "pre_norm_residual": [
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
    ],
    "post_norm_residual": [
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
    ],
    "rms_norm_backward": [
        _e("x̂ form", '''
            def rms_norm_backward(grad_out, x, weight, eps=1e-6):
                r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                xhat = x * r
                g = grad_out * weight
                grad_x = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
                grad_weight = (grad_out * xhat).reshape(-1, x.shape[-1]).sum(0)
                return grad_x, grad_weight
            '''),
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
    ],
}
