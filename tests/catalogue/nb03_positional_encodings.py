"""Wrong and correct implementations of notebook 03's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F``, ``nn`` are defined). Wrong entries are plausible attempts; ``hint`` is the substring of the
catalogued hint (``tfcourse.checks.nb03_positional_encodings.MISTAKES`` or the checks' own error
and dtype hints) the feedback should show, None when no hint fits. Correct entries are the other
forms the contract accepts: the PyTorch tutorial's exp/log div_term, float64 or complex angles
(Meta's precompute_freqs_cis), Hugging Face's rotate_half and matmul tables, GPT-J's sincos,
BLOOM's closed-form slopes, HF's T5 bucketing.
"""

from __future__ import annotations

from tests.catalogue import entry as _e
from tests.catalogue import variant as _variant
from tests.catalogue import without_blocks as _without

NOTEBOOK = "03_positional_encodings"


# ---------------------------------------------------------------------------------------------
# sinusoidal_position_encoding
# ---------------------------------------------------------------------------------------------
_SINUSOIDAL = '''
def sinusoidal_position_encoding(num_positions, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} must be even")
    pos = torch.arange(num_positions, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe
'''

# The PyTorch tutorial's table (exp/log div_term).
_SINUSOIDAL_TUTORIAL = '''
def sinusoidal_position_encoding(num_positions, d_model, base=10000.0):
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got d_model={d_model}")
    position = torch.arange(num_positions).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(base) / d_model))
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
'''

# The table filled by Python loops (math.sin, math.cos).
_SINUSOIDAL_LOOPS = '''
def sinusoidal_position_encoding(num_positions, d_model, base=10000.0):
    if d_model % 2 == 1:
        raise ValueError("d_model must be even")
    pe = torch.zeros(num_positions, d_model)
    for p in range(num_positions):
        for i in range(d_model // 2):
            angle = p / base ** (2 * i / d_model)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe
'''

SINUSOIDAL_WRONG = [
    _e("[sin | cos] concatenated", '''
def sinusoidal_position_encoding(num_positions, d_model, base=10000.0):
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got d_model={d_model}")
    position = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
    return torch.cat([torch.sin(position * div_term), torch.cos(position * div_term)], dim=-1)
''', "[sin | cos] concatenated is a different table"),
    _e("exponent i/D",
       _variant(_SINUSOIDAL, ('''
    pos = torch.arange(num_positions, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
''', '''
    i = torch.arange(d_model // 2)
    freqs = 1.0 / base ** (i / d_model)
    angles = torch.arange(num_positions)[:, None] * freqs[None, :]
'''),
                ("pe[:, 0::2] = torch.sin(pos * div)", "pe[:, 0::2] = torch.sin(angles)"),
                ("pe[:, 1::2] = torch.cos(pos * div)", "pe[:, 1::2] = torch.cos(angles)")),
       "not i/D"),
    _e("each column its own exponent",
       _variant(_SINUSOIDAL_LOOPS, ('''
    for p in range(num_positions):
    ...
            pe[p, 2 * i + 1] = math.cos(angle)
''', '''
    for pos in range(num_positions):
        for j in range(d_model):
            angle = pos / base ** (j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
''')),
       "both columns of pair i share one frequency"),
    _e("cos in the even columns", '''
def sinusoidal_position_encoding(num_positions, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} is odd")
    pos = torch.arange(num_positions, dtype=torch.float32)[:, None]
    div = base ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.empty(num_positions, d_model)
    pe[:, 0::2] = torch.cos(pos / div)
    pe[:, 1::2] = torch.sin(pos / div)
    return pe
''', "they are swapped"),
    _e("base hard-coded",
       _variant(_SINUSOIDAL,
                ("pos = torch.arange(num_positions, dtype=torch.float32)[:, None]",
                 "pos = torch.arange(num_positions).float().unsqueeze(1)"),
                ("torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))",
                 "torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))")),
       "use the `base` argument"),
    _e("no check for odd d_model", _without(_SINUSOIDAL, "if d_model % 2:"), "check d_model % 2 first"),
    _e("float64 table", '''
def sinusoidal_position_encoding(num_positions, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} must be even")
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    div = base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe
''', "return float32 as the contract says"),
    _e("range(0, D, 2) and 2 * i in the exponent",
       _variant(_SINUSOIDAL_LOOPS,
                ("if d_model % 2 == 1:", "if d_model % 2:"),
                ('''
    for p in range(num_positions):
    ...
            pe[p, 2 * i + 1] = math.cos(angle)
''', '''
    for pos in range(num_positions):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (base ** ((2 * i) / d_model)))
            pe[pos, i + 1] = math.cos(pos / (base ** ((2 * i) / d_model)))
''')),
       "i is already the even column"),
    _e("the PyTorch tutorial's (T, 1, D) buffer",
       _variant(_SINUSOIDAL_TUTORIAL,
                ("if d_model % 2 != 0:", "if d_model % 2:"),
                ('raise ValueError(f"d_model must be even, got d_model={d_model}")',
                 'raise ValueError(f"d_model = {d_model} must be even")'),
                ("pe = torch.zeros(num_positions, d_model)", "pe = torch.zeros(num_positions, 1, d_model)"),
                ("pe[:, 0::2] = torch.sin(position * div_term)",
                 "pe[:, 0, 0::2] = torch.sin(position * div_term)"),
                ("pe[:, 1::2] = torch.cos(position * div_term)",
                 "pe[:, 0, 1::2] = torch.cos(position * div_term)")),
       "drop the middle axis"),
    _e("correct math, no validation", _without(_SINUSOIDAL, "if d_model % 2:"), "ValueError"),
]

SINUSOIDAL_CORRECT = [
    _e("PyTorch tutorial exp/log div_term", _SINUSOIDAL_TUTORIAL),
    _e("float64 angles, stacked", '''
def sinusoidal_position_encoding(num_positions, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} must be even")
    pos = torch.arange(num_positions, dtype=torch.float64)
    inv = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    ang = torch.outer(pos, inv)
    return torch.stack((ang.sin(), ang.cos()), dim=-1).reshape(num_positions, d_model).float()
'''),
    _e("Python loops with math", _SINUSOIDAL_LOOPS),
]


# ---------------------------------------------------------------------------------------------
# rope_cos_sin
# ---------------------------------------------------------------------------------------------
_COS_SIN = '''
def rope_cos_sin(positions, head_dim, base=10000.0):
    if head_dim % 2:
        raise ValueError(f"head_dim = {head_dim} must be even")
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()
'''

# The same in another hand: no device=, a plain message.
_COS_SIN_PLAIN = _variant(_COS_SIN,
                          ('raise ValueError(f"head_dim = {head_dim} must be even")',
                           'raise ValueError("head_dim must be even")'),
                          ("inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)",
                           "inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))"))

COS_SIN_WRONG = [
    _e("repeat_interleave layout",
       _variant(_COS_SIN,
                ("emb = torch.cat((freqs, freqs), dim=-1)", "emb = freqs.repeat_interleave(2, dim=-1)")),
       "repeat_interleave gives the interleaved layout"),
    _e("arange instead of positions",
       _variant(_COS_SIN, ('''
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)
    freqs = positions.float()[..., None] * inv_freq
''', '''
    T = positions.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(T, device=positions.device).float()
    freqs = torch.outer(t, inv_freq.to(positions.device))
''')),
       "rotate each token by its own entry of `positions`"),
    _e("exponent i/Dh", '''
def rope_cos_sin(positions, head_dim, base=10000.0):
    if head_dim % 2 != 0:
        raise ValueError("head_dim must be even")
    i = torch.arange(head_dim // 2, dtype=torch.float32, device=positions.device)
    theta = base ** (-i / head_dim)
    freqs = positions[..., None].float() * theta
    emb = torch.cat([freqs, freqs], dim=-1)
    return torch.cos(emb), torch.sin(emb)
''', "not i/D"),
    _e("returns (sin, cos)",
       _variant(_COS_SIN, ('''
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()
''', '''
    emb = torch.cat([positions.float()[..., None] * inv_freq] * 2, dim=-1)
    return emb.sin(), emb.cos()
''')),
       "return (cos, sin)"),
    _e("Dh/2 columns",
       _variant(_COS_SIN, ('''
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()
''', "    return freqs.cos(), freqs.sin()")),
       "cos and sin have Dh columns"),
    _e("position_ids made 2-D as in Hugging Face",
       _variant(_COS_SIN, ('''
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)
    freqs = positions.float()[..., None] * inv_freq
''', '''
    if positions.dim() == 1:
        positions = positions.unsqueeze(0)  # (1, T), like position_ids
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim)).to(positions.device)
    freqs = (inv_freq[None, :, None] @ positions[:, None, :].float()).transpose(1, 2)
''')),
       "with no batch axis added"),
    _e("multiplies by base^(2i/Dh)",
       _variant(_COS_SIN,
                ("inv_freq = 1.0 / base **", "freq = base **"),
                ("freqs = positions.float()[..., None] * inv_freq",
                 "freqs = positions.float().unsqueeze(-1) * freq"),
                ("emb = torch.cat((freqs, freqs), dim=-1)", "emb = torch.cat((freqs, freqs), -1)")),
       "don't multiply by base^(2i/D)"),
    _e("arange(T) broadcast to the positions' shape",
       _variant(_COS_SIN_PLAIN,
                ("    freqs = positions.float()[..., None] * inv_freq", '''
    t = torch.arange(positions.shape[-1]).float()
    freqs = torch.outer(t, inv_freq).expand(*positions.shape, head_dim // 2)
''')),
       "rotate each token by its own entry of `positions`"),
    _e("every position 0",
       _variant(_COS_SIN_PLAIN,
                ("freqs = positions.float()[..., None] * inv_freq",
                 "freqs = torch.zeros(*positions.shape, 1) * inv_freq")),
       "rotate each token by its own entry of `positions`"),
    _e("positions[:, None] for (B, T) positions",
       _variant(_COS_SIN_PLAIN,
                ("freqs = positions.float()[..., None] * inv_freq",
                 "freqs = positions.float()[:, None] * inv_freq")),
       "index the last axis: positions[..., None]"),
    _e("correct math, no validation", _without(_COS_SIN, "if head_dim % 2:"), "ValueError"),
]

COS_SIN_CORRECT = [
    _e("Hugging Face matmul form", '''
def rope_cos_sin(positions, head_dim, base=10000.0):
    if head_dim % 2:
        raise ValueError(f"head_dim = {head_dim} must be even")
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    pos = positions.reshape(-1, positions.shape[-1])  # (B, T)
    inv_freq_expanded = inv_freq[None, :, None].expand(pos.shape[0], -1, 1).to(positions.device)
    freqs = (inv_freq_expanded.float() @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1).reshape(*positions.shape, head_dim)
    return emb.cos(), emb.sin()
'''),
    _e("float64 angles cast to float32", '''
def rope_cos_sin(positions, head_dim, base=10000.0):
    if head_dim % 2 != 0:
        raise ValueError(f"head_dim must be even, got head_dim={head_dim}")
    i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device)
    freqs = positions.double().unsqueeze(-1) * base ** (-i / head_dim)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()
'''),
    _e("einsum",
       _variant(_COS_SIN_PLAIN,
                ("inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))",
                 "theta = torch.exp(-math.log(base) * torch.arange(0, head_dim, 2, device=positions.device) / head_dim)"),
                ("freqs = positions.float()[..., None] * inv_freq",
                 'freqs = torch.einsum("...t,d->...td", positions.float(), theta.float())'),
                ("emb = torch.cat((freqs, freqs), dim=-1)",
                 "emb = freqs.repeat(*([1] * (freqs.dim() - 1)), 2)"))),
]


# ---------------------------------------------------------------------------------------------
# rotate_half
# ---------------------------------------------------------------------------------------------
ROTATE_WRONG = [
    _e("minus on the first half", '''
def rotate_half(x):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x2, -x1), dim=-1)
''', "the minus goes on the second half"),
    _e("swap without minus", '''
def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x2, x1], dim=-1)
''', "without the minus it is a swap"),
    _e("GPT-J's rotate_every_two", '''
def rotate_half(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)
''', "that is GPT-J's rotate_every_two"),
    _e("chunk along the first axis", '''
def rotate_half(x):
    x1, x2 = x.chunk(2)
    return torch.cat((-x2, x1))
''', "along the last axis"),
    _e("halves left in place", '''
def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., :d], x[..., d:]), dim=-1)
''', "the halves change places"),
]

ROTATE_CORRECT = [
    _e("Hugging Face slicing", '''
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)
'''),
    _e("chunk", '''
def rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)
'''),
    _e("unflatten and flip", '''
def rotate_half(x):
    halves = x.unflatten(-1, (2, -1))  # (..., 2, Dh/2)
    return torch.stack((-halves[..., 1, :], halves[..., 0, :]), dim=-2).flatten(-2)
'''),
]


# ---------------------------------------------------------------------------------------------
# apply_rope
# ---------------------------------------------------------------------------------------------
_APPLY = '''
def apply_rope(x, cos, sin):
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin
'''

APPLY_WRONG = [
    _e("minus instead of plus", '''
def apply_rope(x, cos, sin):
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos - rotate_half(x) * sin
''', "the rotation goes backwards"),
    _e("sin times x",
       _variant(_APPLY, ('''
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin
''', "    return x * cos + x * sin")),
       "multiply sin with rotate_half(x)"),
    _e("head axis in front", '''
def apply_rope(x, cos, sin):
    cos = cos.unsqueeze(0)  # broadcast over the batch
    sin = sin.unsqueeze(0)
    return (x * cos) + (rotate_half(x) * sin)
''', "insert the head axis"),
    _e("cos and sin swapped", '''
def apply_rope(x, cos, sin):
    if cos.ndim == 3:
        cos, sin = cos[:, None, :, :], sin[:, None, :, :]
    return x * sin + rotate_half(x) * cos
''', "cos multiplies x"),
    _e("GPT-J pairing on rotate-half tables",
       _variant(_APPLY, ('''
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin
''', '''
    rot = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return x * cos + rot * sin
''')),
       "not neighbours (2i, 2i+1)"),
    _e("float32 result",
       _variant(_APPLY, ('''
        cos, sin = cos[:, None], sin[:, None]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
''', '''
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x = x.float()
''')),
       "return the dtype of x"),
    _e("Hugging Face's unsqueeze(1) on (T, Dh) tables", '''
def apply_rope(x, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (x * cos) + (rotate_half(x) * sin)
''', "insert the head axis (unsqueeze(1), as Hugging Face does) only for (B, T, Dh)"),
    _e("no cast for half x", _variant(_APPLY, ("    cos, sin = cos.to(x.dtype), sin.to(x.dtype)", None)),
       "cast the float32 tables to x.dtype first"),
]

APPLY_CORRECT = [
    _e("Hugging Face style, tables cast to x.dtype", '''
def apply_rope(x, cos, sin):
    unsqueeze_dim = 1 if cos.dim() == 3 else 0
    cos = cos.unsqueeze(unsqueeze_dim).to(x.dtype)
    sin = sin.unsqueeze(unsqueeze_dim).to(x.dtype)
    return (x * cos) + (rotate_half(x) * sin)
'''),
    _e("float32 compute, cast back", '''
def apply_rope(x, cos, sin):
    if cos.ndim == 3:
        cos, sin = cos[:, None], sin[:, None]
    dtype = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(dtype)
    out = xf * cos.to(dtype) + rotate_half(xf) * sin.to(dtype)
    return out.to(x.dtype)
'''),
    _e("halves written out", '''
def apply_rope(x, cos, sin):
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    h = x.shape[-1] // 2
    c, s = cos[..., :h].to(x.dtype), sin[..., :h].to(x.dtype)
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
'''),
]


# ---------------------------------------------------------------------------------------------
# apply_rope_interleaved
# ---------------------------------------------------------------------------------------------
_INTERLEAVED = '''
def apply_rope_interleaved(x, positions, base=10000.0):
    dh = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, dh, 2, device=x.device).float() / dh)
    ang = positions.float()[..., None] * inv_freq
    if positions.dim() == 2:
        ang = ang[:, None]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2).to(x.dtype)
'''

# The same in another hand (negative exponent, even and odd columns xe, xo).
_INTERLEAVED_DH = _variant(_INTERLEAVED,
                           ("dh = x.shape[-1]", "Dh = x.shape[-1]"),
                           ("inv_freq = 1.0 / base ** (torch.arange(0, dh, 2, device=x.device).float() / dh)",
                            "inv_freq = base ** (-torch.arange(0, Dh, 2, dtype=torch.float32, device=x.device) / Dh)"),
                           ("if positions.dim() == 2:", "if ang.dim() == 3:"),
                           ("x1, x2 = x[..., 0::2], x[..., 1::2]", "xe, xo = x[..., 0::2], x[..., 1::2]"),
                           ("x1 * cos - x2 * sin, x1 * sin + x2", "xe * cos - xo * sin, xe * sin + xo"))

INTERLEAVED_WRONG = [
    _e("rotate-half pairs", '''
def apply_rope_interleaved(x, positions, base=10000.0):
    dh = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, dh, 2, device=x.device).float() / dh)
    freqs = positions.float()[..., None] * inv_freq
    if positions.dim() == 2:
        freqs = freqs[:, None]
    emb = torch.cat((freqs, freqs), dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    return (x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()).to(x.dtype)
''', "is the rotate-half layout"),
    _e("positions ignored", '''
def apply_rope_interleaved(x, positions, base=10000.0):
    B, H, T, Dh = x.shape
    theta = 1.0 / base ** (torch.arange(0, Dh, 2, device=x.device).float() / Dh)
    angles = torch.arange(T, device=x.device).float()[:, None] * theta
    cos, sin = angles.cos(), angles.sin()
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x_even * cos - x_odd * sin
    out[..., 1::2] = x_even * sin + x_odd * cos
    return out
''', "rotate each token by its own entry of `positions`"),
    _e("rotates by -theta",
       _variant(_INTERLEAVED,
                ("ang = ang[:, None]", "ang = ang.unsqueeze(1)"),
                ('''
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2).to(x.dtype)
''', '''
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack((a * cos + b * sin, b * cos - a * sin), dim=-1)
    return out.flatten(-2).to(x.dtype)
''')),
       "these signs rotate by −θ"),
    _e("cat tables with rotate_every_two", '''
def apply_rope_interleaved(x, positions, base=10000.0):
    dh = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, dh, 2, device=x.device).float() / dh)
    freqs = torch.einsum("...t,d->...td", positions.float(), inv_freq)
    if positions.dim() == 2:
        freqs = freqs[:, None]
    emb = torch.cat((freqs, freqs), dim=-1)
    rot = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    return (x * emb.cos() + rot * emb.sin()).to(x.dtype)
''', "repeat each angle in place"),
    _e("exponent i/Dh", '''
def apply_rope_interleaved(x, positions, base=10000.0):
    dh = x.shape[-1]
    theta = base ** (-torch.arange(dh // 2, device=x.device).float() / dh)
    ang = positions.float()[..., None] * theta
    if positions.dim() == 2:
        ang = ang[:, None]
    x1, x2 = x[..., ::2], x[..., 1::2]
    out = torch.stack([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)
    return out.reshape(x.shape).to(x.dtype)
''', "not i/D"),
    _e("no head axis for (B, T) positions",
       _without(_INTERLEAVED, "if positions.dim() == 2:"),
       "insert the head axis"),
    _e("cat instead of stack and flatten",
       _variant(_INTERLEAVED_DH,
                ("xe, xo = x[..., 0::2], x[..., 1::2]",
                 "xe, xo = x[..., 0::2].float(), x[..., 1::2].float()"),
                ("return torch.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).flatten(-2).to(x.dtype)",
                 "return torch.cat((xe * cos - xo * sin, xe * sin + xo * cos), -1).to(x.dtype)")),
       "put each rotated pair back in place"),
    _e("angles in x's dtype",
       _variant(_INTERLEAVED_DH,
                ("base ** (-torch.arange(0, Dh, 2, dtype=torch.float32, device=x.device) / Dh)",
                 "base ** (-torch.arange(0, Dh, 2, dtype=x.dtype, device=x.device) / Dh)"),
                ("ang = positions.float()[..., None] * inv_freq",
                 "ang = positions.to(x.dtype)[..., None] * inv_freq"),
                ("torch.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).flatten(-2).to(x.dtype)",
                 "torch.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).flatten(-2)")),
       "compute the angles positions·θ_i in float32 (at least), then cast the result to x.dtype"),
]

INTERLEAVED_CORRECT = [
    _e("complex numbers (Meta's precompute_freqs_cis)", '''
def apply_rope_interleaved(x, positions, base=10000.0):
    dim = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device)[: (dim // 2)].float() / dim))
    freqs = positions.float()[..., None] * freqs
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    if positions.dim() == 2:
        freqs_cis = freqs_cis[:, None]
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_ * freqs_cis).flatten(-2).type_as(x)
'''),
    _e("float64 angles", '''
def apply_rope_interleaved(x, positions, base=10000.0):
    dh = x.shape[-1]
    inv = base ** (-torch.arange(0, dh, 2, dtype=torch.float64, device=x.device) / dh)
    ang = positions.double()[..., None] * inv
    if positions.dim() == 2:
        ang = ang[:, None]
    x1, x2 = x[..., 0::2].double(), x[..., 1::2].double()
    out = torch.stack((x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()), dim=-1)
    return out.flatten(-2).to(x.dtype)
'''),
    _e("GPT-J sincos with rotate_every_two", '''
def apply_rope_interleaved(x, positions, base=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    sinusoid = torch.einsum("...i,j->...ij", positions.float(), inv_freq.to(x.device))
    sin = torch.repeat_interleave(sinusoid.sin(), 2, dim=-1)
    cos = torch.repeat_interleave(sinusoid.cos(), 2, dim=-1)
    if positions.dim() == 2:
        sin, cos = sin[:, None], cos[:, None]
    x1, x2 = x[..., ::2], x[..., 1::2]
    rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return (x.float() * cos + rot.float() * sin).to(x.dtype) if x.dtype != torch.float64 \\
        else x * cos + rot * sin
'''),
]


# ---------------------------------------------------------------------------------------------
# permute_for_rotate_half
# ---------------------------------------------------------------------------------------------
_PERMUTE = '''
def permute_for_rotate_half(weight, num_heads):
    rows, d = weight.shape
    if rows % num_heads or (rows // num_heads) % 2:
        raise ValueError(f"cannot split {rows} rows into {num_heads} heads of even width")
    dh = rows // num_heads
    return weight.view(num_heads, dh // 2, 2, d).transpose(1, 2).reshape(rows, d)
'''

PERMUTE_WRONG = [
    _e("the inverse permutation",
       _variant(_PERMUTE,
                ("return weight.view(num_heads, dh // 2, 2, d).transpose(1, 2).reshape(rows, d)",
                 "return weight.view(num_heads, 2, dh // 2, d).transpose(1, 2).reshape(rows, d)")),
       "this is the inverse permutation"),
    _e("whole matrix as one head", '''
def permute_for_rotate_half(weight, num_heads):
    n = weight.shape[0]
    if n % num_heads or (n // num_heads) % 2:
        raise ValueError("bad shapes")
    order = torch.cat([torch.arange(0, n, 2), torch.arange(1, n, 2)])
    return weight[order]
''', "permute within each head"),
    _e("transpose forgotten", '''
def permute_for_rotate_half(weight, num_heads):
    out_dim, in_dim = weight.shape
    if out_dim % num_heads != 0:
        raise ValueError("rows not divisible by num_heads")
    head_dim = out_dim // num_heads
    if head_dim % 2 != 0:
        raise ValueError("head_dim must be even")
    return weight.reshape(num_heads, head_dim // 2, 2, in_dim).reshape(out_dim, in_dim)
''', "the rows must be reordered"),
    _e("columns permuted", '''
def permute_for_rotate_half(weight, num_heads):
    rows, cols = weight.shape
    if rows % num_heads or (rows // num_heads) % 2:
        raise ValueError("bad shape")
    dh = cols // num_heads
    return weight.view(rows, num_heads, dh // 2, 2).transpose(2, 3).reshape(rows, cols)
''', "reorder the rows"),
    _e("no check for odd Dh", '''
def permute_for_rotate_half(weight, num_heads):
    rows, d = weight.shape
    if rows % num_heads:
        raise ValueError(f"{rows} rows are not divisible by num_heads = {num_heads}")
    dh = rows // num_heads
    return weight.view(num_heads, dh // 2, 2, d).transpose(1, 2).reshape(rows, d)
''', "is odd"),
    _e("correct math, no validation",
       _without(_PERMUTE, "if rows % num_heads or (rows // num_heads) % 2:"),
       "ValueError"),
]

PERMUTE_CORRECT = [
    _e("Hugging Face's convert_llama_weights permute", '''
def permute_for_rotate_half(weight, num_heads):
    dim1, dim2 = weight.shape
    if dim1 % num_heads != 0 or (dim1 // num_heads) % 2 != 0:
        raise ValueError(f"weight rows {dim1} must split into {num_heads} heads of even width")
    return weight.view(num_heads, dim1 // num_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)
'''),
    _e("index list", '''
def permute_for_rotate_half(weight, num_heads):
    rows = weight.shape[0]
    if rows % num_heads:
        raise ValueError("rows not divisible by num_heads")
    dh = rows // num_heads
    if dh % 2:
        raise ValueError(f"head width {dh} is odd")
    within = torch.cat([torch.arange(0, dh, 2), torch.arange(1, dh, 2)])
    index = torch.cat([h * dh + within for h in range(num_heads)]).to(weight.device)
    return weight[index]
'''),
    _e("slices per head", '''
def permute_for_rotate_half(weight, num_heads):
    if num_heads < 1 or weight.shape[0] % num_heads:
        raise ValueError("bad num_heads")
    dh = weight.shape[0] // num_heads
    if dh % 2:
        raise ValueError("odd head_dim")
    return torch.cat([torch.cat((w[0::2], w[1::2])) for w in weight.split(dh)])
'''),
]


# ---------------------------------------------------------------------------------------------
# alibi_slopes
# ---------------------------------------------------------------------------------------------
_SLOPES = '''
def alibi_slopes(num_heads):
    if num_heads < 1:
        raise ValueError("num_heads must be >= 1")
    def p2(n):
        return [2 ** (-8 * h / n) for h in range(1, n + 1)]
    n = 2 ** (num_heads.bit_length() - 1)
    s = p2(n) + p2(2 * n)[0::2][: num_heads - n]
    return torch.tensor(s, dtype=torch.float32)
'''

SLOPES_WRONG = [
    _e("power-of-two rule for every H", '''
def alibi_slopes(num_heads):
    if num_heads < 1:
        raise ValueError(f"num_heads = {num_heads} must be >= 1")
    return torch.tensor([2 ** (-8 * h / num_heads) for h in range(1, num_heads + 1)])
''', "is the rule for H a power of two only"),
    _e("even slopes of 2n", '''
def alibi_slopes(num_heads):
    if num_heads < 1:
        raise ValueError("num_heads must be positive")
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = [2 ** (-8 * h / n) for h in range(1, n + 1)]
    extra = [2 ** (-8 * h / (2 * n)) for h in range(1, 2 * n + 1)]
    slopes += extra[1::2][: num_heads - n]
    return torch.tensor(slopes, dtype=torch.float32)
''', "not [1::2]"),
    _e("h from 0", '''
def alibi_slopes(num_heads):
    if num_heads < 1:
        raise ValueError("num_heads must be positive")
    def pow2(n):
        return [2 ** (-8 * h / n) for h in range(n)]
    n = 2 ** int(math.log2(num_heads))
    slopes = pow2(n) + pow2(2 * n)[0::2][: num_heads - n]
    return torch.tensor(slopes, dtype=torch.float32)
''', "h runs from 1 to H"),
    _e("first slopes of 2n", '''
def alibi_slopes(num_heads):
    if num_heads <= 0:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-8.0 * h / closest) for h in range(1, closest + 1)]
    more = [2.0 ** (-8.0 * h / (2 * closest)) for h in range(1, 2 * closest + 1)]
    return torch.tensor(slopes + more[: num_heads - closest], dtype=torch.float32)
''', "not the first H − n"),
    _e("no error for 0 heads", '''
def alibi_slopes(num_heads):
    n = 1
    while n * 2 <= num_heads:
        n *= 2
    slopes = [2 ** (-8 * h / n) for h in range(1, n + 1)]
    slopes += [2 ** (-8 * h / (2 * n)) for h in range(1, 2 * n, 2)][: num_heads - n]
    return torch.tensor(slopes, dtype=torch.float32)
''', "raise ValueError when num_heads < 1"),
    _e("slopes sorted by size",
       _variant(_SLOPES,
                ("return torch.tensor(s, dtype=torch.float32)",
                 "return torch.tensor(sorted(s, reverse=True), dtype=torch.float32)")),
       "keep Press et al.'s order"),
    _e("correct math, no validation", _without(_SLOPES, "if num_heads < 1:"), "ValueError"),
]

SLOPES_CORRECT = [
    _e("BLOOM closed form", '''
def alibi_slopes(num_heads):
    if num_heads < 1:
        raise ValueError(f"num_heads = {num_heads} must be at least 1")
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))),
                                  dtype=torch.float32)
        num_remaining = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes
'''),
    _e("Press et al.'s recursive get_slopes", '''
def alibi_slopes(num_heads):
    if num_heads < 1:
        raise ValueError("num_heads must be >= 1")
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    def get_slopes(n):
        if math.log2(n).is_integer():
            return get_slopes_power_of_2(n)
        closest = 2 ** math.floor(math.log2(n))
        return get_slopes_power_of_2(closest) + get_slopes(2 * closest)[0::2][: n - closest]
    return torch.tensor(get_slopes(num_heads), dtype=torch.float32)
'''),
]


# ---------------------------------------------------------------------------------------------
# alibi_bias
# ---------------------------------------------------------------------------------------------
_BIAS = '''
def alibi_bias(num_heads, t_q, t_k=None):
    S = t_q if t_k is None else t_k
    q_pos = torch.arange(S - t_q, S, dtype=torch.float32)
    k_pos = torch.arange(S, dtype=torch.float32)
    return -alibi_slopes(num_heads)[:, None, None] * (q_pos[:, None] - k_pos[None, :])
'''

BIAS_WRONG = [
    _e("BLOOM's slope * key position", '''
def alibi_bias(num_heads, t_q, t_k=None):
    t_k = t_q if t_k is None else t_k
    slopes = alibi_slopes(num_heads)
    k_pos = torch.arange(t_k, dtype=torch.float32)
    return (slopes[:, None, None] * k_pos[None, None, :]).expand(num_heads, t_q, t_k)
''', "BLOOM's slope · k_pos"),
    _e("absolute distance", '''
def alibi_bias(num_heads, t_q, t_k=None):
    S = t_q if t_k is None else t_k
    q_pos = torch.arange(S - t_q, S)[:, None]
    k_pos = torch.arange(S)[None, :]
    dist = (q_pos - k_pos).abs().float()
    return -alibi_slopes(num_heads).view(-1, 1, 1) * dist
''', "−slope·|q_pos − k_pos| is not the bias"),
    _e("top-left positions", '''
def alibi_bias(num_heads, t_q, t_k=None):
    if t_k is None:
        t_k = t_q
    rel = torch.arange(t_k)[None, :] - torch.arange(t_q)[:, None]
    return alibi_slopes(num_heads)[:, None, None] * rel.float()
''', "q_pos = S − T + i"),
    _e("sign flipped", '''
def alibi_bias(num_heads, t_q, t_k=None):
    S = t_k or t_q
    q_pos = torch.arange(t_q, dtype=torch.float32) + (S - t_q)
    k_pos = torch.arange(S, dtype=torch.float32)
    return alibi_slopes(num_heads)[:, None, None] * (q_pos[:, None] - k_pos[None, :])
''', "keys further in the past get a more negative"),
    _e("t_k ignored", '''
def alibi_bias(num_heads, t_q, t_k=None):
    pos = torch.arange(t_q, dtype=torch.float32)
    rel = pos[None, :] - pos[:, None]
    return alibi_slopes(num_heads)[:, None, None] * rel[None]
''', "S = t_k when it is given"),
    _e("masked with -inf above the diagonal", '''
def alibi_bias(num_heads, t_q, t_k=None):
    S = t_q if t_k is None else t_k
    q_pos = torch.arange(S - t_q, S)
    k_pos = torch.arange(S)
    rel = (q_pos[:, None] - k_pos[None, :]).float()
    bias = -alibi_slopes(num_heads)[:, None, None] * rel
    return bias.masked_fill(rel < 0, float("-inf"))
''', "without −inf"),
    _e("every row measured from the last key", '''
def alibi_bias(num_heads, t_q, t_k=None):
    S = t_q if t_k is None else t_k
    slopes = alibi_slopes(num_heads)
    alibi = slopes[:, None, None] * (torch.arange(S, dtype=torch.float32) - (S - 1))[None, None, :]
    return alibi.expand(num_heads, t_q, S).contiguous()
''', "measure each row from its own query"),
    _e("own power-of-two slopes", '''
def alibi_bias(num_heads, t_q, t_k=None):
    S = t_q if t_k is None else t_k
    slopes = torch.tensor([2 ** (-8 * h / num_heads) for h in range(1, num_heads + 1)])
    q_pos = torch.arange(S - t_q, S)
    k_pos = torch.arange(S)
    return -slopes[:, None, None] * (q_pos[:, None] - k_pos[None, :]).float()
''', "take the slopes from alibi_slopes(num_heads)"),
]

BIAS_CORRECT = [
    _e("bottom-right broadcast", _BIAS),
    _e("key minus query times slope", '''
def alibi_bias(num_heads, t_q, t_k=None):
    if t_k is None:
        t_k = t_q
    rel = torch.arange(t_k)[None, :] - (torch.arange(t_q)[:, None] + t_k - t_q)
    return torch.einsum("h,ts->hts", alibi_slopes(num_heads), rel.float())
'''),
]


# ---------------------------------------------------------------------------------------------
# relative_position_bucket
# ---------------------------------------------------------------------------------------------
_BUCKET = '''
def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets.long()
'''

# T5's bucketing written compactly, as several learners do.
_BUCKET_SHORT = '''
def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    rel = relative_position.long()
    out = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return out + torch.where(rel < max_exact, rel, large)
'''

BUCKET_WRONG = [
    _e("clamp to num_buckets", '''
def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    ret = torch.zeros_like(relative_position, dtype=torch.long)
    n = relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (n > 0).long() * num_buckets
        n = n.abs()
    else:
        n = -torch.clamp(n, max=0)
    max_exact = num_buckets // 2
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    val_if_large = torch.clamp(val_if_large, max=num_buckets)
    return ret + torch.where(n < max_exact, n, val_if_large)
''', "clamp the large buckets to num_buckets − 1"),
    _e("num_buckets not halved",
       _variant(_BUCKET_SHORT,
                ("    rel = relative_position.long()", '''
    buckets = torch.zeros_like(relative_position, dtype=torch.long)
    rel = relative_position.long()
'''),
                ("    out = torch.zeros_like(rel)", None),
                ('''
        num_buckets //= 2
        out += (rel > 0).long() * num_buckets
''', "        buckets += (rel > 0).long() * (num_buckets // 2)"),
                ("large = large.clamp(max=num_buckets - 1)",
                 "large = torch.clamp(large, max=num_buckets - 1)"),
                ("return out + torch.where(rel < max_exact, rel, large)",
                 "return buckets + torch.where(rel < max_exact, rel, large)")),
       "halve num_buckets first"),
    _e("query minus key", '''
def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    n = -relative_position.long()  # distance from the query back to the key
    ret = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        ret += (n > 0).long() * num_buckets
        n = n.abs()
    else:
        n = torch.clamp(n, min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(is_small, n, large)
''', "relative_position = key_pos − query_pos"),
    _e("future keys kept when unidirectional",
       _variant(_BUCKET_SHORT, ("rel = -torch.min(rel, torch.zeros_like(rel))", "rel = rel.clamp(min=0)")),
       "only keys before the query count"),
    _e("log(max_distance)",
       _variant(_BUCKET_SHORT, ("math.log(max_distance / max_exact)", "math.log(max_distance)")),
       "not / log(max_distance)"),
    _e("rounded buckets",
       _variant(_BUCKET_SHORT,
                ("large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)",
                 "scaled = torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)"),
                ("                         * (num_buckets - max_exact)).long()",
                 "    large = max_exact + torch.round(scaled * (num_buckets - max_exact)).long()")),
       "not rounded"),
    _e("abs() when unidirectional",
       _variant(_BUCKET,
                ("relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))",
                 "relative_position = torch.abs(relative_position)"),
                ("return relative_buckets.long()", "return relative_buckets")),
       "not |relative_position|"),
    _e("offset for relative_position >= 0",
       _variant(_BUCKET,
                ("relative_buckets += (relative_position > 0).to(torch.long)",
                 "relative_buckets += (relative_position >= 0).to(torch.long)"),
                ("return relative_buckets.long()", "return relative_buckets")),
       "not ≥ 0"),
    _e("max_exact off by one",
       _variant(_BUCKET,
                ("max_exact = num_buckets // 2", "max_exact = num_buckets // 2 + 1"),
                ("return relative_buckets.long()", "return relative_buckets")),
       "max_exact = num_buckets // 2"),
]

BUCKET_CORRECT = [
    _e("Hugging Face T5", _BUCKET),
    _e("float64 logs and clamp", '''
def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    rel = relative_position.long()
    offset = torch.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n = num_buckets // 2
        offset = torch.where(rel > 0, n, 0)
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)
    exact = n // 2
    log_ratio = torch.log(dist.double().clamp(min=1) / exact) / math.log(max_distance / exact)
    large = (exact + (log_ratio * (n - exact)).floor().long()).clamp(max=n - 1)
    return offset + torch.where(dist < exact, dist, large)
'''),
]


# ---------------------------------------------------------------------------------------------
# llama3_inv_freq
# ---------------------------------------------------------------------------------------------
_LLAMA3 = '''
def llama3_inv_freq(head_dim, base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192):
    old = original_max_position_embeddings
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    wavelen = 2 * math.pi / inv_freq
    out = torch.where(wavelen > old / low_freq_factor, inv_freq / factor, inv_freq)
    s = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mid = (wavelen >= old / high_freq_factor) & (wavelen <= old / low_freq_factor)
    return torch.where(mid, (1 - s) * inv_freq / factor + s * inv_freq, out)
'''

LLAMA3_WRONG = [
    _e("no smoothing band", '''
def llama3_inv_freq(head_dim, base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192):
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = original_max_position_embeddings / low_freq_factor
    return torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
''', "are interpolated"),
    _e("multiplied by factor",
       _variant(_LLAMA3, ('''
    out = torch.where(wavelen > old / low_freq_factor, inv_freq / factor, inv_freq)
    s = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mid = (wavelen >= old / high_freq_factor) & (wavelen <= old / low_freq_factor)
    return torch.where(mid, (1 - s) * inv_freq / factor + s * inv_freq, out)
''', '''
    scaled = torch.where(wavelen > old / low_freq_factor, inv_freq * factor, inv_freq)
    smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq * factor + smooth * inv_freq
    medium = (wavelen >= old / high_freq_factor) & (wavelen <= old / low_freq_factor)
    return torch.where(medium, smoothed, scaled)
''')),
       "divide their inv_freq by factor"),
    _e("interpolation weights swapped", '''
def llama3_inv_freq(head_dim, base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192):
    old = original_max_position_embeddings
    freqs = []
    for f in (1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)).tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / high_freq_factor:
            freqs.append(f)
        elif wavelen > old / low_freq_factor:
            freqs.append(f / factor)
        else:
            s = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            freqs.append(s * f / factor + (1 - s) * f)
    return torch.tensor(freqs, dtype=torch.float32)
''', "s weights the unscaled frequency"),
    _e("limits swapped",
       _variant(_LLAMA3,
                ("    out = torch.where(wavelen > old / low_freq_factor, inv_freq / factor, inv_freq)", '''
    low_wl, high_wl = old / high_freq_factor, old / low_freq_factor
    out = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
'''),
                ("old / high_freq_factor) & (wavelen <= old / low_freq_factor",
                 "high_wl) & (wavelen <= low_wl")),
       "is the long limit"),
    _e("wavelength 1 / inv_freq",
       _variant(_LLAMA3, ("wavelen = 2 * math.pi / inv_freq", "wavelen = 1.0 / inv_freq")),
       "2π / inv_freq"),
    _e("smoothing factor from wavelen / old_len", '''
def llama3_inv_freq(head_dim, base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192):
    L = original_max_position_embeddings
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    wl = 2 * math.pi / inv_freq
    s = (wl / L - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - s) * inv_freq / factor + s * inv_freq
    out = torch.where(wl > L / low_freq_factor, inv_freq / factor, inv_freq)
    return torch.where((wl >= L / high_freq_factor) & (wl <= L / low_freq_factor), blended, out)
''', "the original length over the wavelength"),
]

LLAMA3_CORRECT = [
    _e("Hugging Face _compute_llama3_parameters", '''
def llama3_inv_freq(head_dim, base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    old_context_len = original_max_position_embeddings
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
'''),
    _e("Meta's apply_scaling loop", '''
def llama3_inv_freq(head_dim, base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192):
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: (head_dim // 2)].float() / head_dim))
    old_context_len = original_max_position_embeddings
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    new_freqs = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            new_freqs.append(freq)
        elif wavelen > low_freq_wavelen:
            new_freqs.append(freq / factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            new_freqs.append((1 - smooth) * freq / factor + smooth * freq)
    return torch.tensor(new_freqs, dtype=freqs.dtype, device=freqs.device)
'''),
]


WRONG = {
    "sinusoidal_position_encoding": SINUSOIDAL_WRONG,
    "rope_cos_sin": COS_SIN_WRONG,
    "rotate_half": ROTATE_WRONG,
    "apply_rope": APPLY_WRONG,
    "apply_rope_interleaved": INTERLEAVED_WRONG,
    "permute_for_rotate_half": PERMUTE_WRONG,
    "alibi_slopes": SLOPES_WRONG,
    "alibi_bias": BIAS_WRONG,
    "relative_position_bucket": BUCKET_WRONG,
    "llama3_inv_freq": LLAMA3_WRONG,
}

CORRECT = {
    "sinusoidal_position_encoding": SINUSOIDAL_CORRECT,
    "rope_cos_sin": COS_SIN_CORRECT,
    "rotate_half": ROTATE_CORRECT,
    "apply_rope": APPLY_CORRECT,
    "apply_rope_interleaved": INTERLEAVED_CORRECT,
    "permute_for_rotate_half": PERMUTE_CORRECT,
    "alibi_slopes": SLOPES_CORRECT,
    "alibi_bias": BIAS_CORRECT,
    "relative_position_bucket": BUCKET_CORRECT,
    "llama3_inv_freq": LLAMA3_CORRECT,
}
