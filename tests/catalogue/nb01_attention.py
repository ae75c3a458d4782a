"""Wrong and correct implementations of notebook 01's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F`` are defined). Wrong entries are plausible attempts (they run and mostly return the right
types); ``hint`` is the substring of the catalogued hint (``tfcourse.checks.nb01_attention.MISTAKES``
or the generic shape/dtype hints) the feedback should show, None when no hint fits.
"""

from __future__ import annotations

from tests.catalogue import entry as _e
from tests.catalogue import variant as _variant
from tests.catalogue import without_blocks as _without

NOTEBOOK = "01_attention"


# ---------------------------------------------------------------------------------------------
# softmax
# ---------------------------------------------------------------------------------------------
_SOFTMAX = '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))
'''

SOFTMAX_WRONG = [
    _e("no max shift", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x)
    return exps / torch.sum(exps, dim=dim, keepdim=True)
''', "subtract the max along `dim`"),
    _e("nan on all -inf slice", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    # subtract the max for stability
    shifted = x - x.max(dim=dim, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)
''', "an all -inf slice gives 0/0 = nan"),
    _e("hard-coded last axis", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = x.max(-1, keepdim=True).values
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))
''', "use the `dim` argument"),
    _e("normalised over the whole tensor", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    z = x - x.max()
    numerator = torch.exp(z)
    denominator = numerator.sum()
    return numerator / denominator
''', "normalise each slice along `dim`"),
    _e("sum without keepdim", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    x_max = torch.amax(x, dim=dim, keepdim=True)
    x_max[~torch.isfinite(x_max)] = 0
    e = torch.exp(x - x_max)
    return e / e.sum(dim=dim)
'''),
    _e("casts to float32", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    x = x.float()  # work in float to be safe
    x_max = x.amax(dim=dim, keepdim=True)
    x_max = torch.nan_to_num(x_max, neginf=0.0)
    e = torch.exp(x - x_max)
    total = e.sum(dim=dim, keepdim=True)
    return torch.where(total > 0, e / total, 0.0)
''', "return the input's dtype"),
    _e("clamps -inf to -1e9 (uniform rows)", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    x = x.clamp(min=-1e9)  # avoid -inf - -inf
    x = x - x.max(dim=dim, keepdim=True).values
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)
''', "clamping -inf to a finite number"),
    _e("negative dim taken as the last axis",
       _variant(_SOFTMAX,
                ("    m = x.amax(dim=dim, keepdim=True)", '''
    if dim < 0:
        dim = x.ndim - 1  # negative: the last axis
    m = x.amax(dim=dim, keepdim=True)
''')),
       "a negative `dim` counts from the end"),
    _e("shift by one global max", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    z = x - torch.max(x)  # subtract the max for stability
    return torch.exp(z) / torch.exp(z).sum(dim=dim, keepdim=True)
''', "shift each slice by its own max"),
    _e("shift by one global max, empty slices zeroed", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x - x.max())  # one shift keeps every exp <= 1
    total = e.sum(dim=dim, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros_like(e))
''', "shift each slice by its own max"),
    _e("shift by max(0, slice max)", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True).clamp(min=0)  # an all -inf slice shifts by 0, not -inf
    e = torch.exp(x - m)
    return torch.nan_to_num(e / e.sum(dim=dim, keepdim=True))
''', "shift each slice by its own max"),
]

SOFTMAX_CORRECT = [
    _e("own stable softmax with clamped denominator", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = x.max(dim=dim, keepdim=True).values
    m = m.masked_fill(m == float("-inf"), 0.0)  # all -inf slice: shift by 0
    e = (x - m).exp()
    s = e.sum(dim=dim, keepdim=True)
    return e / s.clamp_min(torch.finfo(x.dtype).tiny)  # 0 / tiny = 0 on empty slices
'''),
    _e("torch.softmax then nan_to_num", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.nan_to_num(torch.softmax(x, dim=dim), nan=0.0)
'''),
    _e("logsumexp", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    lse = torch.logsumexp(x, dim=dim, keepdim=True)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.where(torch.isfinite(lse), torch.exp(x - safe), torch.zeros_like(x))
'''),
    _e("float64 then cast back", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    x64 = x.double()
    shift = x64.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0)
    e = torch.exp(x64 - shift)
    s = e.sum(dim=dim, keepdim=True)
    p = torch.where(s == 0, torch.zeros_like(e), e / s)
    return p.to(x.dtype)
'''),
    _e("half inputs computed in float32", '''
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    work = x.to(torch.promote_types(x.dtype, torch.float32))  # float16/bfloat16 -> float32
    m = work.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(work - m)
    s = e.sum(dim=dim, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e)).to(x.dtype)
'''),
]


# ---------------------------------------------------------------------------------------------
# softmax_jacobian
# ---------------------------------------------------------------------------------------------
_JACOBIAN = '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    if p.ndim != 1:
        raise ValueError("p must be 1-D")
    return p.diag() - p[:, None] @ p[None, :]
'''

JACOBIAN_WRONG = [
    _e("p squared instead of outer product", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    # J = diag(p) - p p^T
    return torch.diag_embed(p) - p ** 2
''', "torch.outer(p, p), not p * p"),
    _e("diagonal only (loop)", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    n = p.shape[0]
    J = p.new_zeros(n, n)
    for i in range(n):
        J[i, i] = p[i] * (1 - p[i])
    return J
''', "off-diagonal entries are -p_i p_j"),
    _e("sign flipped", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    pp = p[:, None] * p[None, :]
    return pp - torch.diag_embed(p)
''', "the sign is flipped"),
    _e("no ValueError for a 2-D p", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    return torch.diag(p) - torch.outer(p, p)
''', "ValueError"),
    _e("p_i (1 - p_j) everywhere", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    n = len(p)
    J = torch.empty(n, n, dtype=p.dtype)
    for i in range(n):
        for j in range(n):
            J[i, j] = p[i] * (1 - p[j])
    return J
''', "p_i(1-p_i) holds on the diagonal only"),
    _e("treats p as logits", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    s = torch.softmax(p, dim=0)
    return torch.diag(s) - torch.outer(s, s)
''', "without applying softmax again"),
    _e("float32 zeros buffer", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    n = p.numel()
    J = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            J[i, j] = p[i] * ((1.0 if i == j else 0.0) - p[j])
    return J
''', "return the input's dtype"),
    _e("s(1 - s) as a vector", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    if p.dim() != 1:
        raise ValueError("p must be 1-D")
    return p * (1 - p)  # d softmax / dz = s (1 - s)
''', "only the diagonal of J"),
    _e("correct math, no validation", _without(_JACOBIAN, "if p.ndim != 1:"), "ValueError"),
]

JACOBIAN_CORRECT = [
    _e("broadcasting", _JACOBIAN),
    _e("einsum with eye", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    if len(p.shape) != 1:
        raise ValueError(f"expected a vector, got shape {tuple(p.shape)}")
    eye = torch.eye(p.shape[0], dtype=p.dtype, device=p.device)
    return torch.einsum("i,ij->ij", p, eye) - torch.einsum("i,j->ij", p, p)
'''),
    _e("autodiff through softmax(log p)", '''
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    if p.dim() != 1:
        raise ValueError("softmax_jacobian takes one probability vector")
    # softmax(log p) = p, so the Jacobian at z = log p is the one we want
    return torch.func.jacrev(lambda z: torch.softmax(z, dim=-1))(torch.log(p))
'''),
]


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention
# ---------------------------------------------------------------------------------------------
_SDPA = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights
'''

SDPA_WRONG = [
    _e("no 1/sqrt(Dh) scale",
       _variant(_SDPA,
                ("scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
                 "scores = torch.matmul(q, k.transpose(-2, -1))"),
                ("    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))", '''
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
''')),
       "divide the scores by sqrt(Dh)"),
    _e("divides by Dh", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    d = q.shape[-1]
    scores = q @ k.mT / d
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
        weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    else:
        weights = scores.softmax(-1)
    return weights @ v, weights
''', "not by Dh"),
    _e("softmax over the queries", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -math.inf)
    weights = F.softmax(scores, dim=-2)
    out = weights @ v
    return out, weights
''', "softmax over the keys"),
    _e("inverted mask polarity",
       _variant(_SDPA, ('''
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
''', '''
        scores = scores.masked_fill(mask, float("-inf"))  # hide the masked positions
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights)
''')),
       "True means 'may attend'"),
    _e("masked scores multiplied to 0", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores * mask  # zero out the positions we may not attend
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''', "fill blocked scores with -inf, not 0"),
    _e("NaN on fully masked rows",
       _variant(_SDPA,
                ("    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", '''
    d_k = q.size(-1)
    scores = torch.einsum("...td,...sd->...ts", q, k) / d_k ** 0.5
'''),
                ("weights = torch.nan_to_num(torch.softmax(scores, dim=-1))",
                 "weights = scores.softmax(dim=-1)")),
       "a query with no allowed key"),
    _e("-1e9 instead of -inf (uniform empty rows)", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''', "gets uniform weights, not zeros"),
    _e("returns only out", _variant(_SDPA, ("return weights @ v, weights", "return weights @ v"))),
    _e("k.T (only works in 2-D)",
       _variant(_SDPA,
                ("scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
                 "scores = q @ k.T / math.sqrt(q.shape[-1])"))),
    _e("mask applied after the softmax", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    if mask is not None:
        weights = weights * mask  # drop the keys we may not attend
    return weights @ v, weights
''', "apply the mask before the softmax"),
    _e("scores divided twice by sqrt(Dh)",
       _variant(_SDPA,
                ("    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", '''
    d = q.size(-1)
    q = q / math.sqrt(d)  # scale q first (cheaper than scaling the scores)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
''')),
       "once, not by Dh"),
    _e("-1e9 fill (raises on float16)",
       _variant(_SDPA, ('''
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
''', '''
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
''')),
       "not a float32 constant such as -1e9"),
]

SDPA_CORRECT = [
    _e("einsum", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    out = torch.einsum("...ts,...sv->...tv", weights, v)
    return out, weights
'''),
    _e("scale q before the matmul", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    q = q * q.size(-1) ** -0.5
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ v, weights
'''),
    _e("float64 then cast back", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), 0.0, weights)
    return (weights @ v).to(dtype), weights.to(dtype)
'''),
    _e("own softmax with masked_fill", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)
    denom = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(denom > 0, denom, torch.ones_like(denom))
    return weights @ v, weights
'''),
    _e("half inputs computed in float32", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    dtype = q.dtype
    work = torch.promote_types(dtype, torch.float32)  # float16/bfloat16 -> float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return (weights @ v).to(dtype), weights.to(dtype)
'''),
    _e("fill with finfo(dtype).min",
       _variant(_SDPA, ('''
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
''', '''
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(dim=-1, keepdim=True)  # a row with no allowed key: zeros
'''))),
]


# ---------------------------------------------------------------------------------------------
# causal_mask
# ---------------------------------------------------------------------------------------------
_CAUSAL = '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    if t_k < t_q:
        raise ValueError("t_k must be >= t_q")
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool, device=device), diagonal=t_k - t_q)
'''

CAUSAL_WRONG = [
    _e("top-left aligned tril", '''
def causal_mask(t_q, t_k=None, *, device=None):
    if t_k is None:
        t_k = t_q
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool, device=device))
''', "align the mask bottom-right"),
    _e("True marks the blocked keys", '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_k or t_q
    ones = torch.ones(t_q, t_k, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=t_k - t_q + 1)  # future positions
''', "True means 'may attend'"),
    _e("strict inequality", '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    i = torch.arange(t_q, device=device).unsqueeze(1)
    j = torch.arange(t_k, device=device).unsqueeze(0)
    return j < i + (t_k - t_q)
''', "may attend its own position too"),
    _e("no ValueError when S < T", '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    allowed = torch.ones(t_q, t_k, dtype=torch.bool, device=device)
    return allowed.tril(diagonal=t_k - t_q)
''', "ValueError"),
    _e("rows and columns swapped", '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    rows = torch.arange(t_k, device=device)[:, None]
    cols = torch.arange(t_q, device=device)[None, :]
    return rows <= cols + (t_k - t_q)
''', "rows are queries, columns keys"),
    _e("float 0/1 mask", '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, device=device).tril(diagonal=t_k - t_q)
''', "build the mask from comparisons"),
    _e("additive -inf mask", '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    blocked = torch.full((t_q, t_k), float("-inf"), device=device)
    return torch.triu(blocked, diagonal=t_k - t_q + 1)  # 0 where allowed, -inf elsewhere
''', "build the mask from comparisons"),
    _e("t_k default not handled", '''
def causal_mask(t_q, t_k=None, *, device=None):
    offset = t_k - t_q
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(offset)
'''),
    _e("correct math, no validation", _without(_CAUSAL, "if t_k < t_q:"), "ValueError"),
]

CAUSAL_CORRECT = [
    _e("tril with diagonal=S-T", _CAUSAL),
    _e("not of triu", '''
def causal_mask(t_q, t_k=None, *, device=None):
    if t_k is None:
        t_k = t_q
    elif t_k < t_q:
        raise ValueError(f"need S >= T, got T={t_q}, S={t_k}")
    future = torch.ones(t_q, t_k, dtype=torch.bool, device=device).triu(t_k - t_q + 1)
    return ~future
'''),
    _e("absolute query positions", '''
def causal_mask(t_q, t_k=None, *, device=None):
    t_k = t_q if t_k is None else t_k
    if t_q > t_k:
        raise ValueError("more queries than keys")
    query_pos = torch.arange(t_k - t_q, t_k, device=device)  # absolute positions
    key_pos = torch.arange(t_k, device=device)
    return key_pos[None, :] <= query_pos[:, None]
'''),
]


# ---------------------------------------------------------------------------------------------
# padding_mask
# ---------------------------------------------------------------------------------------------
_PADDING = '''
def padding_mask(lengths, t_k):
    B = lengths.size(0)
    pos = torch.arange(t_k, device=lengths.device).expand(B, t_k)
    return (pos < lengths.unsqueeze(1)).view(B, 1, 1, t_k)
'''

PADDING_WRONG = [
    _e("True marks padding", '''
def padding_mask(lengths, t_k):
    positions = torch.arange(t_k, device=lengths.device)
    is_pad = positions.unsqueeze(0) >= lengths.unsqueeze(1)  # (B, S)
    return is_pad[:, None, None, :]
''', "True for real keys j < lengths[b]"),
    _e("returns (B, S)", '''
def padding_mask(lengths, t_k):
    B = lengths.shape[0]
    j = torch.arange(t_k, device=lengths.device).expand(B, t_k)
    return j < lengths.unsqueeze(-1)
''', "return shape (B, 1, 1, S)"),
    _e("off by one (<=)", '''
def padding_mask(lengths, t_k):
    j = torch.arange(t_k, device=lengths.device)
    mask = j[None, :] <= lengths[:, None]
    return mask.view(len(lengths), 1, 1, t_k)
''', "use j < lengths[b]"),
    _e("masks the query axis", '''
def padding_mask(lengths, t_k):
    j = torch.arange(t_k, device=lengths.device)
    mask = j[None, :] < lengths[:, None]  # (B, S)
    return mask.unsqueeze(1).unsqueeze(-1)
''', "padding hides keys"),
    _e("left padding (real keys at the end)", '''
def padding_mask(lengths, t_k):
    j = torch.arange(t_k, device=lengths.device)
    real = j[None, :] >= (t_k - lengths)[:, None]  # the last lengths[b] keys are real
    return real[:, None, None, :]
''', "pads on the right"),
    _e("float mask", '''
def padding_mask(lengths, t_k):
    j = torch.arange(t_k, device=lengths.device)
    return (j[None, :] < lengths[:, None]).float()[:, None, None, :]
''', "build the mask from comparisons"),
    _e("width from lengths.max() instead of t_k", '''
def padding_mask(lengths, t_k):
    j = torch.arange(int(lengths.max()), device=lengths.device)
    return (j[None, :] < lengths[:, None])[:, None, None, :]
''', "t_k columns"),
]

PADDING_CORRECT = [
    _e("loop over the batch", '''
def padding_mask(lengths, t_k):
    mask = torch.zeros(len(lengths), 1, 1, t_k, dtype=torch.bool, device=lengths.device)
    for b, n in enumerate(lengths.tolist()):
        mask[b, ..., :n] = True
    return mask
'''),
    _e("expand and view", _PADDING),
    _e("reshape lengths", '''
def padding_mask(lengths, t_k):
    keys = torch.arange(t_k, device=lengths.device).reshape(1, 1, 1, t_k)
    return keys < lengths.reshape(-1, 1, 1, 1)
'''),
]


# ---------------------------------------------------------------------------------------------
# memory_efficient_attention
# ---------------------------------------------------------------------------------------------
# The optional challenge (0 points): online-softmax attention over key/value chunks.
_CHUNKED = '''
def memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128):
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for start in range(0, k.shape[-2], chunk_size):
        s = q @ k[..., start:start + chunk_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + chunk_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp(m - shift)
        p = torch.exp(s - shift)
        l = alpha * l + p.sum(-1, keepdim=True)
        acc = alpha * acc + p @ v[..., start:start + chunk_size, :]
        m = m_new
    return torch.where(l > 0, acc / l, torch.zeros_like(acc))
'''

CHUNKED_WRONG = [
    _e("earlier chunks not rescaled", '''
def memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128):
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    S = k.shape[-2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for i in range(0, S, chunk_size):
        s = q @ k[..., i:i + chunk_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask[..., i:i + chunk_size], float("-inf"))
        m = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
        m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(s - m_safe)
        l = l + p.sum(dim=-1, keepdim=True)  # the old l and o were computed under the old max
        o = o + p @ v[..., i:i + chunk_size, :]
    return torch.where(l > 0, o / l, torch.zeros_like(o))
''', "multiply both the running sum and the running output by exp(m - m')"),
    _e("running sum not rescaled", '''
def memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128):
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    scale = q.size(-1) ** -0.5
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    denom = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.size(-1)))
    for start in range(0, k.size(-2), chunk_size):
        end = start + chunk_size
        scores = (q @ k[..., start:end, :].transpose(-2, -1)) * scale
        if mask is not None:
            scores = torch.where(mask[..., start:end], scores, float("-inf"))
        new_m = torch.maximum(m, scores.amax(-1, keepdim=True))
        safe = torch.nan_to_num(new_m, neginf=0.0)
        correction = torch.exp(m - safe)
        p = torch.exp(scores - safe)
        acc = acc * correction + p @ v[..., start:end, :]
        denom = denom + p.sum(-1, keepdim=True)
        m = new_m
    return torch.where(denom > 0, acc / denom, 0.0)
''', "the running sum needs the factor exp(m - m') too"),
    _e("last partial chunk dropped",
       _variant(_CHUNKED,
                ('    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)', '''
    T, S = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], T, S)
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
'''),
                ('''
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for start in range(0, k.shape[-2], chunk_size):
        s = q @ k[..., start:start + chunk_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
''', '''
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    n_chunks = max(S // chunk_size, 1)
    for c in range(n_chunks):
        ks = k[..., c * chunk_size:(c + 1) * chunk_size, :]
        vs = v[..., c * chunk_size:(c + 1) * chunk_size, :]
        s = q @ ks.transpose(-2, -1) / math.sqrt(q.shape[-1])
'''),
                ('s = s.masked_fill(~mask[..., start:start + chunk_size], float("-inf"))',
                 "s = s.masked_fill(~mask[..., c * chunk_size:(c + 1) * chunk_size], -math.inf)"),
                ("acc = alpha * acc + p @ v[..., start:start + chunk_size, :]", "o = alpha * o + p @ vs"),
                ("return torch.where(l > 0, acc / l, torch.zeros_like(acc))",
                 "return torch.where(l > 0, o / l, torch.zeros_like(o))")),
       "the last chunk may be shorter than chunk_size"),
    _e("exp of raw scores (no running max)", '''
def memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128):
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    num = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    den = torch.zeros(*q.shape[:-1], 1, dtype=q.dtype)
    for start in range(0, k.shape[-2], chunk_size):
        s = q @ k[..., start:start + chunk_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + chunk_size], float("-inf"))
        e = torch.exp(s)  # no max needed: we never hold all scores at once
        num = num + e @ v[..., start:start + chunk_size, :]
        den = den + e.sum(-1, keepdim=True)
    return torch.where(den > 0, num / den, torch.zeros_like(num))
''', "exp of raw scores overflows"),
    _e("nan while only masked keys were seen",
       _variant(_CHUNKED, ('''
        shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp(m - shift)
        p = torch.exp(s - shift)
''', '''
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
'''),
                ("return torch.where(l > 0, acc / l, torch.zeros_like(acc))", "return acc / l")),
       "its max is -inf, and -inf - (-inf) = nan"),
]

CHUNKED_CORRECT = [
    _e("running max and sum, torch.split", '''
def memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128):
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    T, S = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(torch.broadcast_shapes(mask.shape, (T, S)))
        mask_chunks = mask.split(chunk_size, dim=-1)
    else:
        mask_chunks = [None] * len(range(0, S, chunk_size))
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    chunks = zip(k.split(chunk_size, dim=-2), v.split(chunk_size, dim=-2), mask_chunks)
    for kc, vc, mc in chunks:
        s = q @ kc.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T, C)
        if mc is not None:
            s = s.masked_fill(~mc, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp(m - shift)
        p = torch.exp(s - shift)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ vc
        m = m_new
    return torch.where(l > 0, o / l, torch.zeros_like(o))
'''),
    _e("running log-sum-exp, output kept normalised", '''
def memory_efficient_attention(q, k, v, mask=None, *, chunk_size=128):
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    T, S = q.size(-2), k.size(-2)
    if mask is not None:
        mask = mask.expand(torch.broadcast_shapes(mask.shape, (T, S)))
    lse = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)  # log of the running sum
    out = torch.zeros((*q.shape[:-1], v.size(-1)), dtype=q.dtype)  # already normalised
    for start in range(0, S, chunk_size):
        stop = min(start + chunk_size, S)
        s = q @ k[..., start:stop, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask[..., start:stop], float("-inf"))
        lse_new = torch.logaddexp(lse, torch.logsumexp(s, dim=-1, keepdim=True))
        safe = torch.where(torch.isfinite(lse_new), lse_new, torch.zeros_like(lse_new))
        out = out * torch.exp(lse - safe) + torch.exp(s - safe) @ v[..., start:stop, :]
        lse = lse_new
    return out
'''),
]


WRONG = {
    "softmax": SOFTMAX_WRONG,
    "softmax_jacobian": JACOBIAN_WRONG,
    "scaled_dot_product_attention": SDPA_WRONG,
    "causal_mask": CAUSAL_WRONG,
    "padding_mask": PADDING_WRONG,
    "memory_efficient_attention": CHUNKED_WRONG,
}

CORRECT = {
    "softmax": SOFTMAX_CORRECT,
    "softmax_jacobian": JACOBIAN_CORRECT,
    "scaled_dot_product_attention": SDPA_CORRECT,
    "causal_mask": CAUSAL_CORRECT,
    "padding_mask": PADDING_CORRECT,
    "memory_efficient_attention": CHUNKED_CORRECT,
}
