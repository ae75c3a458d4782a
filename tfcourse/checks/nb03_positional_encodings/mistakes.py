"""The catalogue of known wrong implementations of notebook 03's exercises, with their hints.

Each function has its exercise's signature and is self-contained (it never calls another
exercise by name, so a stand-in never changes it). ``MISTAKES[exercise]`` lists them; the
feedback shows a hint only when exactly one of them explains the answer on every call of the
failing case (``tfcourse.checks.case.Judge.mistake_hint``), so the visible cases are built to
tell them apart (tests/test_hints.py measures it over the catalogue).

The mistakes of the relative positions on the scores (``alibi_slopes``, ``alibi_bias``,
``relative_position_bucket``) are in relative_mistakes.py; ``MISTAKES`` holds them too.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from ..hints import Mistake
from .relative_mistakes import RELATIVE_MISTAKES

__all__ = ["MISTAKES"]


# ---------------------------------------------------------------------------------------------
# shared pieces (float32 angles, as the course's solutions compute them)
# ---------------------------------------------------------------------------------------------
def _inv_freq(dim: int, base: float, *, exponent: str = "2i/D", device=None) -> torch.Tensor:
    i = torch.arange(dim // 2, dtype=torch.float32, device=device)
    if exponent == "2i/D":
        return 1.0 / base ** (2 * i / dim)
    if exponent == "i/D":
        return 1.0 / base ** (i / dim)
    if exponent == "+2i/D":
        return base ** (2 * i / dim)
    if exponent == "4i/D":  # `for i in range(0, D, 2)` (i already even), then 2 * i in the exponent
        return 1.0 / base ** (4 * i / dim)
    raise ValueError(exponent)


def _half_rot(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _every_two(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


# ---------------------------------------------------------------------------------------------
# 1. sinusoidal_position_encoding
# ---------------------------------------------------------------------------------------------
def _sinusoid(num_positions, d_model, base=10000.0, *, layout="interleaved", exponent="2i/D", start=0,
              column_exponent=False):
    pos = torch.arange(start, start + num_positions, dtype=torch.float32)[:, None]
    if column_exponent:  # column j uses base^(-j/D): odd columns get (2i+1)/D
        j = torch.arange(d_model, dtype=torch.float32)
        ang = pos / base ** (j / d_model)
        pe = ang.clone()
        pe[:, 0::2] = torch.sin(ang[:, 0::2])
        pe[:, 1::2] = torch.cos(ang[:, 1::2])
        return pe
    ang = pos * _inv_freq(d_model, base, exponent=exponent)
    if layout == "concat":
        return torch.cat((torch.sin(ang), torch.cos(ang)), dim=-1)
    pe = torch.zeros(num_positions, d_model)
    first, second = (torch.cos, torch.sin) if layout == "swapped" else (torch.sin, torch.cos)
    pe[:, 0::2] = first(ang)
    pe[:, 1::2] = second(ang)
    return pe


def _sin_base_ignored(num_positions, d_model, base=10000.0):
    return _sinusoid(num_positions, d_model, 10000.0)


def _sin_tutorial_shape(num_positions, d_model, base=10000.0):
    return _sinusoid(num_positions, d_model, base)[:, None]  # (T, 1, D), the PyTorch tutorial's buffer


# ---------------------------------------------------------------------------------------------
# 2. rope_cos_sin
# ---------------------------------------------------------------------------------------------
def _rope(positions, head_dim, base=10000.0, *, exponent="2i/D", layout="cat", use_positions=True,
          order="cos,sin"):
    if use_positions == "zero":
        p = torch.zeros_like(positions)
    elif use_positions == "expand":  # arange(T) broadcast to positions.shape
        p = torch.arange(positions.shape[-1], device=positions.device).expand(positions.shape)
    else:
        p = positions if use_positions else torch.arange(positions.shape[-1], device=positions.device)  # (T,)
    freqs = p.to(torch.float32)[..., None] * _inv_freq(head_dim, base, exponent=exponent, device=positions.device)
    if layout == "cat":
        emb = torch.cat((freqs, freqs), dim=-1)
    elif layout == "repeat_interleave":
        emb = freqs.repeat_interleave(2, dim=-1)
    else:  # "half": no duplication
        emb = freqs
    cos, sin = emb.cos(), emb.sin()
    return (cos, sin) if order == "cos,sin" else (sin, cos)


def _rope_batch_axis(positions, head_dim, base=10000.0):
    cos, sin = _rope(positions, head_dim, base)
    return (cos[None], sin[None]) if positions.dim() == 1 else (cos, sin)


def _rope_base_ignored(positions, head_dim, base=10000.0):
    return _rope(positions, head_dim, 10000.0)


# ---------------------------------------------------------------------------------------------
# 3. rotate_half
# ---------------------------------------------------------------------------------------------
def _rot_sign(x):
    h = x.shape[-1] // 2
    return torch.cat((x[..., h:], -x[..., :h]), dim=-1)


def _rot_no_minus(x):
    h = x.shape[-1] // 2
    return torch.cat((x[..., h:], x[..., :h]), dim=-1)


def _rot_every_two(x):
    return _every_two(x)


def _rot_first_axis(x):
    h = x.shape[0] // 2
    return torch.cat((-x[h:], x[:h]), dim=0)


def _rot_minus_first(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., :h], x[..., h:]), dim=-1)


# ---------------------------------------------------------------------------------------------
# 4. apply_rope
# ---------------------------------------------------------------------------------------------
def _heads(t: torch.Tensor) -> torch.Tensor:
    return t[:, None] if t.dim() == 3 else t


def _apply_minus(x, cos, sin):
    cos, sin = _heads(cos), _heads(sin)
    return (x * cos - _half_rot(x) * sin).to(x.dtype)


def _apply_no_rotate(x, cos, sin):
    cos, sin = _heads(cos), _heads(sin)
    return (x * cos + x * sin).to(x.dtype)


def _apply_every_two(x, cos, sin):
    cos, sin = _heads(cos), _heads(sin)
    return (x * cos + _every_two(x) * sin).to(x.dtype)


def _apply_swapped(x, cos, sin):
    cos, sin = _heads(cos), _heads(sin)
    return (x * sin + _half_rot(x) * cos).to(x.dtype)


def _apply_batch_as_heads(x, cos, sin):
    cos, sin = cos[None], sin[None]  # (1, B, T, Dh): sequences paired with heads
    if cos.dim() == 3:
        cos, sin = cos[0], sin[0]
    return (x * cos + _half_rot(x) * sin).to(x.dtype)


# ---------------------------------------------------------------------------------------------
# 5. apply_rope_interleaved
# ---------------------------------------------------------------------------------------------
def _angles(x, positions, base, *, exponent="2i/D", use_positions="yes", heads=True):
    if use_positions == "zero":
        p = torch.zeros_like(positions)
    elif use_positions == "arange":
        p = torch.arange(x.shape[-2], device=x.device).expand(positions.shape)
    else:
        p = positions
    ang = p.to(torch.float32)[..., None] * _inv_freq(x.shape[-1], base, exponent=exponent, device=x.device)
    if p.dim() == 2 and heads:
        ang = ang[:, None]
    return ang


def _interleaved(x, positions, base=10000.0, *, sign=1.0, **kw):
    ang = _angles(x, positions, base, **kw)
    cos, sin = ang.cos(), sign * ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.to(x.dtype)


def _inter_cat_output(x, positions, base=10000.0):
    ang = _angles(x, positions, base)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)  # halves, not pairs


def _inter_half_angles(x, positions, base=10000.0):
    """Angles computed in x's dtype: float16/bfloat16 positions·θ_i lose whole radians' worth of
    digits (a position of 300 in float16 is good to 0.25)."""
    dim = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=x.dtype, device=x.device) / dim)
    ang = positions.to(x.dtype)[..., None] * inv_freq
    if ang.dim() == 3:
        ang = ang[:, None]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def _inter_half_pairs(x, positions, base=10000.0):
    ang = _angles(x, positions, base)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    return (x * cos + _half_rot(x) * sin).to(x.dtype)


def _inter_cat_freqs(x, positions, base=10000.0):
    ang = _angles(x, positions, base)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    return (x * cos + _every_two(x) * sin).to(x.dtype)


def _inter_base_ignored(x, positions, base=10000.0):
    return _interleaved(x, positions, 10000.0)


# ---------------------------------------------------------------------------------------------
# 6. permute_for_rotate_half
# ---------------------------------------------------------------------------------------------
def _perm_inverse(weight, num_heads):
    rows, d = weight.shape
    dh = rows // num_heads
    return weight.view(num_heads, 2, dh // 2, d).transpose(1, 2).reshape(rows, d)


def _perm_heads_ignored(weight, num_heads):
    rows, d = weight.shape
    return weight.view(1, rows // 2, 2, d).transpose(1, 2).reshape(rows, d)


def _perm_unchanged(weight, num_heads):
    return weight.clone()


def _perm_columns(weight, num_heads):
    rows, d = weight.shape
    dh = d // num_heads
    return weight.view(rows, num_heads, dh // 2, 2).transpose(2, 3).reshape(rows, d)


def _perm_heads_interleaved(weight, num_heads):
    rows, d = weight.shape
    dh = rows // num_heads
    # reads the rows as (Dh/2, 2, H): head h taken as every H-th row
    return weight.view(dh // 2, 2, num_heads, d).permute(2, 1, 0, 3).reshape(rows, d)


# ---------------------------------------------------------------------------------------------
# 10. llama3_inv_freq (optional challenge)
# ---------------------------------------------------------------------------------------------
def _llama3(head_dim, base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=8192, *, smooth=True, multiply=False, swap_weights=False,
            swap_bounds=False, two_pi=True, s_inverted=False):
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    old = original_max_position_embeddings
    low_wl, high_wl = old / low_freq_factor, old / high_freq_factor
    if swap_bounds:
        low_wl, high_wl = high_wl, low_wl
    wavelen = (2 * math.pi if two_pi else 1.0) / inv
    scaled = inv * factor if multiply else inv / factor
    out = torch.where(wavelen > low_wl, scaled, inv)
    if smooth:
        ratio = wavelen / old if s_inverted else old / wavelen
        s = (ratio - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = s * scaled + (1 - s) * inv if swap_weights else (1 - s) * scaled + s * inv
        medium = (wavelen >= high_wl) & (wavelen <= low_wl)
        out = torch.where(medium, smoothed, out)
    return out


# the catalogued Llama 3 mistakes: the exercise's signature, one flag of _llama3 changed
_llama3_no_smoothing = partial(_llama3, smooth=False)
_llama3_multiply = partial(_llama3, multiply=True)
_llama3_swapped_weights = partial(_llama3, swap_weights=True)
_llama3_swapped_bounds = partial(_llama3, swap_bounds=True)
_llama3_no_two_pi = partial(_llama3, two_pi=False)
_llama3_s_inverted = partial(_llama3, s_inverted=True)


# ---------------------------------------------------------------------------------------------
# The catalogue
# ---------------------------------------------------------------------------------------------
HINT_I_OVER_D = ("the exponent is 2i/D for pair i = 0 .. D/2 − 1 (torch.arange(0, D, 2) / D), not i/D: "
                 "with i/D the frequencies fall only half as far")
HINT_POSITIVE = ("the frequencies are base^(−2i/D) and fall with i: divide the position by base^(2i/D) "
                 "(or multiply by its inverse), don't multiply by base^(2i/D)")
HINT_BASE = "use the `base` argument, not a hard-coded 10000"
HINT_POSITIONS = ("rotate each token by its own entry of `positions` (they may start anywhere, repeat, or "
                  "differ per sequence): not torch.arange(T), not position 0 for every token")
HINT_HEAD_AXIS = ("for per-sequence positions (B, T) insert the head axis: (B, 1, T, Dh) broadcasts over "
                  "the heads of x (B, H, T, Dh); (1, B, T, Dh) pairs sequences with heads")
HINT_HALF_ANGLES = ("compute the angles positions·θ_i in float32 (at least), then cast the result to x.dtype: "
                    "in float16/bfloat16 a position of a few hundred is already off by a fraction of a radian")

MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "sinusoidal_position_encoding": (
        Mistake("[sin | cos] concatenated", "the interleaved table puts sin in even columns and cos in odd "
                "ones (PE[p, 2i] = sin, PE[p, 2i+1] = cos); [sin | cos] concatenated is a different table",
                partial(_sinusoid, layout="concat")),
        Mistake("sin and cos swapped", "sin goes in the even columns (2i) and cos in the odd ones (2i+1): "
                "they are swapped", partial(_sinusoid, layout="swapped")),
        Mistake("exponent i/D", HINT_I_OVER_D, partial(_sinusoid, exponent="i/D")),
        Mistake("exponent of the column", "both columns of pair i share one frequency base^(−2i/D): column "
                "2i+1 uses 2i, not 2i+1 (e.g. torch.arange(0, D, 2) for both)",
                partial(_sinusoid, column_exponent=True)),
        Mistake("positive exponent", HINT_POSITIVE, partial(_sinusoid, exponent="+2i/D")),
        Mistake("base ignored", HINT_BASE, _sin_base_ignored),
        Mistake("2i with i already even", "in `for i in range(0, D, 2)` i is already the even column 2k: "
                "the exponent is i/D there, not 2*i/D (that gives 4k/D and frequencies that fall twice as "
                "fast)", partial(_sinusoid, exponent="4i/D")),
        Mistake("(T, 1, D) as in the PyTorch tutorial", "return (num_positions, d_model): the PyTorch "
                "tutorial's buffer is (T, 1, D) for its (T, B, D) inputs; drop the middle axis",
                _sin_tutorial_shape),
        Mistake("positions from 1", "positions start at 0: row p of the table is position p "
                "(torch.arange(num_positions))", partial(_sinusoid, start=1)),
    ),
    "rope_cos_sin": (
        Mistake("repeat_interleave", "repeat_interleave gives the interleaved layout (θ0, θ0, θ1, θ1, …); "
                "rotate-half tables are cat(freqs, freqs, -1) = (θ0, θ1, …, θ0, θ1, …)",
                partial(_rope, layout="repeat_interleave")),
        Mistake("exponent i/Dh", HINT_I_OVER_D, partial(_rope, exponent="i/D")),
        Mistake("positive exponent", HINT_POSITIVE, partial(_rope, exponent="+2i/D")),
        Mistake("base ignored", HINT_BASE, _rope_base_ignored),
        Mistake("arange instead of positions", HINT_POSITIONS, partial(_rope, use_positions=False)),
        Mistake("arange broadcast to positions.shape", HINT_POSITIONS, partial(_rope, use_positions="expand")),
        Mistake("all positions 0", HINT_POSITIONS, partial(_rope, use_positions="zero")),
        Mistake("(sin, cos)", "return (cos, sin), in that order", partial(_rope, order="sin,cos")),
        Mistake("batch axis added", "the tables have shape positions.shape + (Dh,): (T, Dh) for positions "
                "(T,), with no batch axis added (Hugging Face's position_ids are (B, T); these may be (T,))",
                _rope_batch_axis),
        Mistake("half width", "cos and sin have Dh columns: emb = cat(freqs, freqs, -1) repeats the Dh/2 "
                "angles once more", partial(_rope, layout="half")),
    ),
    "rotate_half": (
        Mistake("sign on the first half", "rotate_half(x) = cat(−x2, x1): the minus goes on the second half, "
                "which moves to the front", _rot_sign),
        Mistake("no minus", "negate the second half: cat(−x2, x1); without the minus it is a swap, not a "
                "rotation by 90°", _rot_no_minus),
        Mistake("rotate_every_two", "rotate_half pairs channel i with i + Dh/2 (the two halves), not "
                "neighbours (2i, 2i+1): that is GPT-J's rotate_every_two", _rot_every_two),
        Mistake("first axis", "split and concatenate along the last axis (dim=-1), the head dimension",
                _rot_first_axis),
        Mistake("halves not swapped", "the halves change places: cat(−x2, x1) puts the negated second half "
                "first and the first half second", _rot_minus_first),
    ),
    "apply_rope": (
        Mistake("minus", "x·cos + rotate_half(x)·sin: with a minus the rotation goes backwards (by −θ)",
                _apply_minus),
        Mistake("no rotate_half", "multiply sin with rotate_half(x), not with x itself", _apply_no_rotate),
        Mistake("rotate_every_two", "the tables are in rotate-half layout: pair with rotate_half (the halves), "
                "not neighbours (2i, 2i+1)", _apply_every_two),
        Mistake("cos and sin swapped", "cos multiplies x and sin multiplies rotate_half(x)", _apply_swapped),
        Mistake("batch paired with heads", HINT_HEAD_AXIS.replace("positions (B, T)", "tables (B, T, Dh)"),
                _apply_batch_as_heads),
    ),
    "apply_rope_interleaved": (
        Mistake("rotate-half pairs", "this exercise pairs neighbours (2i, 2i+1); pairing channel i with "
                "i + Dh/2 is the rotate-half layout", _inter_half_pairs),
        Mistake("position 0", HINT_POSITIONS, partial(_interleaved, use_positions="zero")),
        Mistake("arange", HINT_POSITIONS, partial(_interleaved, use_positions="arange")),
        Mistake("sign", "out[2i] = x[2i]·cos − x[2i+1]·sin and out[2i+1] = x[2i]·sin + x[2i+1]·cos: these "
                "signs rotate by −θ", partial(_interleaved, sign=-1.0)),
        Mistake("cat(freqs, freqs)", "pair (2i, 2i+1) shares the frequency θ_i: repeat each angle in place "
                "(repeat_interleave(2)), not cat(freqs, freqs), for the interleaved pairing", _inter_cat_freqs),
        Mistake("exponent i/Dh", HINT_I_OVER_D, partial(_interleaved, exponent="i/D")),
        Mistake("base ignored", HINT_BASE, _inter_base_ignored),
        Mistake("batch paired with heads", HINT_HEAD_AXIS, partial(_interleaved, heads=False)),
        Mistake("cat instead of stack", "put each rotated pair back in place: torch.stack((even, odd), "
                "dim=-1).flatten(-2) interleaves them (0, 1, 2, …); torch.cat puts all the even outputs "
                "first (the rotate-half layout)", _inter_cat_output),
        Mistake("angles in x's dtype (half)", HINT_HALF_ANGLES, _inter_half_angles),
    ),
    "permute_for_rotate_half": (
        Mistake("inverse permutation", "this is the inverse permutation (rotate-half → interleaved): within "
                "a head, new row j is old row 2j and new row Dh/2 + j is old row 2j + 1", _perm_inverse),
        Mistake("heads ignored", "permute within each head: rows h·Dh … (h+1)·Dh − 1 are head h "
                "(view(H, Dh // 2, 2, D)), not the whole matrix as one head", _perm_heads_ignored),
        Mistake("unchanged", "the rows must be reordered: the interleaved layout pairs rows (2j, 2j+1) of a "
                "head, rotate-half pairs rows (j, Dh/2 + j)", _perm_unchanged),
        Mistake("columns", "reorder the rows (output features: weight is (H·Dh, D) = (out, in)), not the "
                "columns", _perm_columns),
        Mistake("heads strided", "head h is a block of Dh consecutive rows (view(H, Dh // 2, 2, D)), not "
                "every H-th row", _perm_heads_interleaved),
    ),
    **RELATIVE_MISTAKES,  # alibi_slopes, alibi_bias, relative_position_bucket (relative_mistakes.py)
    "llama3_inv_freq": (
        Mistake("no smoothing", "frequencies whose wavelength lies between the two limits are interpolated: "
                "(1 − s)·inv_freq/factor + s·inv_freq, s = (old_len/wavelen − low) / (high − low)",
                _llama3_no_smoothing),
        Mistake("multiplied by factor", "long wavelengths are stretched: divide their inv_freq by factor, "
                "don't multiply", _llama3_multiply),
        Mistake("weights swapped", "s weights the unscaled frequency: (1 − s)·inv_freq/factor + s·inv_freq",
                _llama3_swapped_weights),
        Mistake("limits swapped", "low_freq_wavelen = old_len / low_freq_factor is the long limit (scale "
                "above it), high_freq_wavelen = old_len / high_freq_factor the short one (keep below it)",
                _llama3_swapped_bounds),
        Mistake("wavelength without 2π", "the wavelength of a pair is 2π / inv_freq", _llama3_no_two_pi),
        Mistake("s from wavelen / old_len", "s = (old_len / wavelen − low_freq_factor) / (high_freq_factor − "
                "low_freq_factor): the original length over the wavelength, not the wavelength over it",
                _llama3_s_inverted),
    ),
}
