"""Visible cases of notebook 03 (positional encodings), and the oracles they judge with.

Tables built from angles (sinusoidal, RoPE cos/sin, interleaved RoPE) are judged against the
float64 formula with the absolute tolerance of docs/conventions.md, ``1e-6 + 8·2⁻²³·max angle``
(:func:`angle_atol`): float32 angles carry that rounding, so answers that compute their angles in
float32, in float64 or as complex numbers all pass, and a wrong frequency, pairing or position is
off by far more. Rotations are judged with oracles that do not hand out the answer: pairs as
complex numbers multiplied by e^{iθ}, and the properties RoPE exists for (norms preserved,
q_m·k_n depends on m − n only). ``permute_for_rotate_half`` is judged by the q·k scores it must
preserve.

This module holds exercises 1-6 (the sinusoidal table, RoPE and its two pairings) and the helpers
every case uses; relative.py the relative positions on the scores (ALiBi, T5's buckets), llama3.py
the optional challenge. Each imports the one before it, so the exercises register in the
notebook's order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ...device import make_generator
from ..call import Call
from ..case import Case, Judge
from ..protocol import NotebookChecks
from ..shared import with_error_hints
from .mistakes import HINT_HEAD_AXIS, MISTAKES

__all__ = ["F32", "F64", "NOTEBOOK", "angle_atol", "interleaved_oracle", "inv_freq64", "make_case", "require_value_error", "returned_tensor", "rope_oracle", "rope_tables64", "rotation_atol", "sinusoid64"]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("03_positional_encodings", calls={"apply_rope": ("rotate_half",), "alibi_bias": ("alibi_slopes",)})


F64 = torch.float64
F32 = torch.float32
F16 = torch.float16


# ---------------------------------------------------------------------------------------------
# tolerances and oracles (float64)
# ---------------------------------------------------------------------------------------------
def angle_atol(max_angle: float) -> float:
    """The absolute tolerance of a table of sines and cosines of angles up to ``max_angle``."""
    return 1e-6 + 8 * 2.0**-23 * float(max_angle)


def rotation_atol(x: torch.Tensor, max_angle: float) -> float:
    """The absolute tolerance of x rotated pairwise by angles up to ``max_angle``: an angle off
    by δ moves a pair of norm r by about r·δ."""
    pairs = x.double().reshape(*x.shape[:-1], -1, 2).norm(dim=-1)
    return angle_atol(max_angle) * max(1.0, float(pairs.max()))


def inv_freq64(dim: int, base: float) -> torch.Tensor:
    return float(base) ** (-torch.arange(0, dim, 2, dtype=F64) / dim)


def sinusoid64(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al.: PE[p, 2i] = sin(p / base^(2i/D)), PE[p, 2i+1] = cos(p / base^(2i/D))."""
    ang = torch.arange(num_positions, dtype=F64)[:, None] * inv_freq64(d_model, base)
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(-2)


def rope_tables64(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of cat(freqs, freqs) (rotate-half layout), float64."""
    freqs = positions.to(F64)[..., None] * inv_freq64(head_dim, base)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rope_tables32(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = rope_tables64(positions, head_dim, base)
    return cos.to(F32), sin.to(F32)


def rope_oracle(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE as complex numbers: channel i and i + Dh/2 are the real and imaginary
    parts of one number, multiplied by cos θ + i·sin θ (tables of the rotate-half layout)."""
    h = x.shape[-1] // 2
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    z = torch.complex(x[..., :h].double(), x[..., h:].double()) * torch.complex(cos[..., :h].double(),
                                                                                 sin[..., :h].double())
    return torch.cat((z.real, z.imag), dim=-1)


def interleaved_oracle(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Interleaved RoPE as complex numbers: channels (2i, 2i+1) are one number times e^{i·p·θ_i}."""
    ang = positions.to(F64)[..., None] * inv_freq64(x.shape[-1], base)
    if positions.dim() == 2:
        ang = ang[:, None]
    z = torch.complex(x[..., 0::2].double(), x[..., 1::2].double()) * torch.polar(torch.ones_like(ang), ang)
    return torch.stack((z.real, z.imag), dim=-1).flatten(-2)


def max_angle(positions: torch.Tensor | int) -> float:
    """The largest angle of RoPE/sinusoid tables for these positions (θ_0 = 1)."""
    if isinstance(positions, int):
        return float(max(positions - 1, 0))
    return float(positions.abs().max()) if positions.numel() else 0.0


# ---------------------------------------------------------------------------------------------
# helpers for judging
# ---------------------------------------------------------------------------------------------
def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


FLOAT32_HINT = ("return float32 as the contract says: build with dtype=torch.float32 (torch.arange of ints "
                "is int64, Python floats in torch.tensor or float64 math give float64), or .float() at the end")
X_DTYPE_HINT = ("return the dtype of x: cast the float32 tables to x.dtype first, or compute in float32 and "
                "cast the result back with .to(x.dtype)")
X_DTYPE_HINT_INTERLEAVED = ("return the dtype of x: compute the angles and the rotation in float32 (or float64), "
                            "then cast the result back with .to(x.dtype)")


def returned_tensor(j: Judge, call: int = 0, index: int = 0, *, shape: Sequence[int], dtype: torch.dtype, n: int = 1,
                    names: Sequence[str] | None = None, hint: str = FLOAT32_HINT) -> torch.Tensor:
    """One returned tensor, after shape and device (Judge.tensor), then dtype with this exercise's hint."""
    t = j.tensor(call, index, n=n, names=names, shape=shape)
    if t.dtype != dtype:
        name = names[index] if names else "output"
        j.fail(f"{name} has dtype {_dt(t.dtype)}; expected {_dt(dtype)}", hint=hint)
    return t


def require_value_error(j: Judge, what: str, hint: str, *, names: str | None = None) -> None:
    """The call must raise ValueError (whose message contains ``names`` when given)."""
    o = j.raised()
    if o is None:
        j.fail(f"{what}: returned without an error; expected ValueError", hint=hint)
    j.require(o.error_type == "ValueError", f"{what}: raised {o.error_line()[:90]}; expected ValueError",
              hint=hint + " (an assert or a failing reshape raises other errors)")
    if names is not None:
        j.require(names in o.error_message, f"the message {o.error_message.strip()[:70]!r} should name "
                  f"`{names}`", hint=f"say which argument is wrong, e.g. f\"{names} = ... must be even\"")


def make_case(exercise: str, title: str, calls: list[Call], judge: Callable[[Judge], None], seed: int | None = None,
              part: str = "core") -> Case:
    if exercise == "apply_rope":
        judge = with_error_hints(judge, APPLY_ROPE_ERRORS)
    if exercise == "rope_cos_sin":
        judge = with_error_hints(judge, ROPE_COS_SIN_ERRORS)
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise], part=part)


def _table_dim(n: int) -> Callable[[Call], bool]:
    """Whether a call's cos table (args[1]) has ``n`` axes."""
    return lambda call: isinstance(call.args[1], torch.Tensor) and call.args[1].dim() == n


# positions[:, None] is a column for (T,) positions but not for (B, T) ones
ROPE_COS_SIN_ERRORS = (
    (r"must match the size of tensor", "index the last axis: positions[..., None] * inv_freq works for (T,) "
     "and (B, T) positions; positions[:, None] (or torch.outer) only for (T,)",
     lambda call: isinstance(call.args[0], torch.Tensor) and call.args[0].dim() == 2),
)

# Hugging Face's apply_rotary_pos_emb does cos.unsqueeze(1) because its tables are always (B, T, Dh);
# on a (T, Dh) table that gives (T, 1, Dh), which lines T up with the heads and raises.
APPLY_ROPE_ERRORS = (
    (r"must match the size of tensor", "(T, Dh) tables broadcast against x (B, H, T, Dh) as they are: insert "
     "the head axis (unsqueeze(1), as Hugging Face does) only for (B, T, Dh) tables, when cos.dim() == 3",
     _table_dim(2)),
    (r"must match the size of tensor", HINT_HEAD_AXIS.replace("positions (B, T)", "tables (B, T, Dh)"),
     _table_dim(3)),
)


def _x(seed: int, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=make_generator(seed), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# 1. sinusoidal_position_encoding
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("sinusoidal_position_encoding", parts=("core", "validation"))
def _sinusoidal_cases() -> list[Case]:
    """Check ``sinusoidal_position_encoding(num_positions, d_model, base=10000.0)`` against the float64
    formula (interleaved sin/cos), with the base as a parameter and ValueError for odd d_model."""
    name = "sinusoidal_position_encoding"
    cases = []

    def table(t: int, d: int, base: float | None):
        def judge(j: Judge) -> None:
            got = returned_tensor(j, shape=(t, d), dtype=F32)
            j.close(got, sinusoid64(t, d, base or 10000.0), atol=angle_atol(max_angle(t)), rtol=0.0,
                    oracle="the float64 formula", tol_dtype=F32)
        return judge

    cases.append(make_case(name, "T = 64, D = 16: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(…)",
                           [Call(name, (64, 16))], table(64, 16, None)))
    cases.append(make_case(name, "T = 10, D = 6, base = 1000.0 (the base is a parameter)",
                           [Call(name, (10, 6), {"base": 1000.0})], table(10, 6, 1000.0)))
    cases.append(make_case(name, "T = 1, D = 2: the single row is [sin 0, cos 0] = [0, 1]",
                           [Call(name, (1, 2))], table(1, 2, None)))

    def odd(j: Judge) -> None:
        require_value_error(j, "d_model = 7", "check d_model % 2 first and raise ValueError naming d_model: sin "
                            "and cos fill pairs of columns", names="d_model")

    cases.append(Case(name, "d_model = 7 (odd): raises ValueError naming d_model", [Call(name, (5, 7))], odd,
                      part="validation"))
    return cases


# ---------------------------------------------------------------------------------------------
# 2. rope_cos_sin
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("rope_cos_sin", parts=("core", "validation"))
def _rope_cos_sin_cases() -> list[Case]:
    """Check ``rope_cos_sin(positions, head_dim, base=10000.0)``: rotate-half tables for (T,) and
    (B, T) positions, float32, ValueError for odd head_dim."""
    name = "rope_cos_sin"
    names = ("cos", "sin")
    cases = []

    def tables(positions: torch.Tensor, dh: int, base: float):
        def judge(j: Judge) -> None:
            want = rope_tables64(positions, dh, base)
            shape = (*positions.shape, dh)
            got = [returned_tensor(j, 0, i, n=2, names=names, shape=shape, dtype=F32) for i in range(2)]
            for i in range(2):
                j.close(got[i], want[i], name=names[i], index=i, atol=angle_atol(max_angle(positions)),
                        rtol=0.0, oracle="the float64 formula", tol_dtype=F32)
        return judge

    p1 = torch.arange(16)
    cases.append(make_case(name, "positions 0 … 15, Dh = 8: (T, Dh) tables of cat(freqs, freqs)",
                           [Call(name, (p1, 8))], tables(p1, 8, 10000.0)))
    p2 = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 3, 3, 100, 9, 0]])
    cases.append(make_case(name, "per-sequence positions (B, T) = (2, 6), Dh = 6, base = 500.0",
                           [Call(name, (p2, 6), {"base": 500.0})], tables(p2, 6, 500.0)))
    p3 = torch.arange(40, 45, dtype=torch.int32)
    cases.append(make_case(name, "int32 positions 40 … 44 (5 new tokens after 40 cached ones), Dh = 4",
                           [Call(name, (p3, 4))], tables(p3, 4, 10000.0)))

    def odd(j: Judge) -> None:
        require_value_error(j, "head_dim = 7", "check head_dim % 2 first and raise ValueError: RoPE rotates pairs of "
                            "channels")

    cases.append(Case(name, "head_dim = 7 (odd): raises ValueError",
                      [Call(name, (torch.arange(3), 7))], odd, part="validation"))
    return cases


# ---------------------------------------------------------------------------------------------
# 3. rotate_half
# ---------------------------------------------------------------------------------------------
def _times_i(x: torch.Tensor) -> torch.Tensor:
    """Pairs (i, i + Dh/2) as complex numbers, multiplied by i (a rotation by 90°)."""
    h = x.shape[-1] // 2
    z = torch.complex(x[..., :h].double(), x[..., h:].double()) * 1j
    return torch.cat((z.real, z.imag), dim=-1)


@NOTEBOOK.exercise("rotate_half")
def _rotate_half_cases() -> list[Case]:
    """Check ``rotate_half(x)`` = cat(−x2, x1) on the last axis, exactly."""
    name = "rotate_half"
    cases = []
    for seed, shape, dtype, what in ((311, (2, 3, 4, 8), F64, "x (B, H, T, Dh) = (2, 3, 4, 8) float64"),
                                     (312, (5, 2), F32, "x (5, 2) float32: Dh = 2, one pair"),
                                     (313, (6,), F32, "a single vector (6,) float32")):
        x = _x(seed, *shape, dtype=dtype)

        def judge(j: Judge, x=x) -> None:
            got = returned_tensor(j, shape=x.shape, dtype=x.dtype, hint="return the dtype of x (torch.cat keeps it)")
            j.close(got, _times_i(x), atol=0.0, rtol=0.0, oracle="expected")

        cases.append(make_case(name, f"{what}: cat(−x2, x1), exactly", [Call(name, (x,))], judge, seed=seed))
    return cases


# ---------------------------------------------------------------------------------------------
# 4. apply_rope
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("apply_rope", parts=("core", "batched", "half"))
def _apply_rope_cases() -> list[Case]:
    """Check ``apply_rope(x, cos, sin)``: part "core" ((T, Dh) tables, norms preserved, scores depend on
    m − n only), "batched" ((B, T, Dh) tables) or "half" (a float16 x with float32 tables); None
    checks all."""
    name = "apply_rope"
    cases = []

    def value(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        def judge(j: Judge) -> None:
            got = returned_tensor(j, shape=x.shape, dtype=x.dtype, hint=X_DTYPE_HINT)
            j.close(got, rope_oracle(x, cos, sin), tol_dtype=x.dtype, oracle="the rotated pairs")
        return judge

    x1 = _x(401, 2, 3, 6, 8)
    c1, s1 = rope_tables32(torch.arange(10, 16), 8)
    cases.append(make_case(name, "x (2, 3, 6, 8) float64, (T, Dh) float32 tables of positions 10 … 15",
                           [Call(name, (x1, c1, s1))], value(x1, c1, s1), seed=401))
    x2 = _x(402, 1, 4, 5, 16, dtype=F32)
    c2, s2 = rope_tables32(torch.arange(5), 16)
    cases.append(make_case(name, "x (1, 4, 5, 16) float32, tables of positions 0 … 4",
                           [Call(name, (x2, c2, s2))], value(x2, c2, s2), seed=402))

    pos3 = torch.tensor([0, 3, 17, 100, 250, 999, 2000])
    x3 = _x(403, 2, 2, 7, 8)
    c3, s3 = rope_tables32(pos3, 8)

    def norms(j: Judge, x=x3) -> None:
        got = returned_tensor(j, shape=x.shape, dtype=x.dtype, hint=X_DTYPE_HINT)
        before, after = x.norm(dim=-1), got.double().norm(dim=-1)
        j.close(after, before, name="‖output‖ per vector", atol=1e-6, rtol=1e-6, oracle="‖x‖")

    cases.append(make_case(name, "a rotation: every (b, h, t) vector keeps its norm (positions up to 2000)",
                           [Call(name, (x3, c3, s3))], norms, seed=403))
    cases.append(_relative_case(name, 404, lambda x, p: Call(name, (x, *rope_tables32(p, x.shape[-1])))))

    x5 = _x(405, 3, 3, 4, 8)  # B = H = 3
    pos5 = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8], [2, 9, 4, 1]])
    c5, s5 = rope_tables32(pos5, 8)
    cases.append(make_case(name, "(B, T, Dh) tables of per-sequence positions, x (3, 3, 4, 8): B = H = 3",
                           [Call(name, (x5, c5, s5))], value(x5, c5, s5), seed=405, part="batched"))
    x6 = _x(406, 2, 5, 3, 4, dtype=F32)
    c6, s6 = rope_tables32(torch.tensor([[4, 5, 6], [0, 0, 1]]), 4)
    cases.append(make_case(name, "(B, T, Dh) tables, x (2, 5, 3, 4) float32 (B ≠ H)",
                           [Call(name, (x6, c6, s6))], value(x6, c6, s6), seed=406, part="batched"))
    x7 = _x(407, 2, 3, 6, 16, dtype=F32).to(F16)
    c7, s7 = rope_tables32(torch.tensor([[0, 5, 60, 61, 200, 300], [7, 8, 9, 10, 11, 12]]), 16)
    cases.append(make_case(name, "half precision: x (2, 3, 6, 16) float16, (B, T, Dh) float32 tables; the output "
                           "stays float16", [Call(name, (x7, c7, s7))], value(x7, c7, s7), seed=407, part="half"))
    return cases


def _relative_case(name: str, seed: int, make: Callable[[torch.Tensor, torch.Tensor], Call],
                   shift: int = 1000) -> Case:
    """q at positions m, k at positions n, then both shifted by ``shift``: q·k must not change.

    x holds q (batch 0) and k (batch 1), 2 heads, T = 5 positions."""
    x = _x(seed, 2, 2, 5, 8)
    p = torch.tensor([0, 1, 4, 9, 30])

    def judge(j: Judge) -> None:
        a = returned_tensor(j, 0, shape=x.shape, dtype=x.dtype, hint=X_DTYPE_HINT).double()
        b = returned_tensor(j, 1, shape=x.shape, dtype=x.dtype, hint=X_DTYPE_HINT).double()
        sa, sb = a[0] @ a[1].transpose(-2, -1), b[0] @ b[1].transpose(-2, -1)  # (H, T, T) scores q_m·k_n
        scale = float(x[0].norm(dim=-1).max() * x[1].norm(dim=-1).max())
        j.close(sb, sa, name=f"scores q_(m+{shift})·k_(n+{shift})", atol=angle_atol(2 * (shift + 30)) * scale,
                rtol=0.0, call=1, oracle="scores q_m·k_n")
        rotated = (a - x.double()).abs().max()
        j.require(bool(rotated > 1e-3), "the output equals x: nothing was rotated (scores of unrotated "
                  "vectors do not depend on positions at all)", call=0)

    return make_case(name, f"relative positions: shifting every position by {shift} leaves q_m·k_n unchanged",
                     [make(x, p), make(x, p + shift)], judge, seed=seed)


# ---------------------------------------------------------------------------------------------
# 5. apply_rope_interleaved
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("apply_rope_interleaved", parts=("core", "half"))
def _interleaved_cases() -> list[Case]:
    """Check ``apply_rope_interleaved(x, positions, base=10000.0)``: part "core" (pairs (2i, 2i+1),
    (T,) and (B, T) positions, norms preserved, scores depend on m − n only) or "half" (a float16
    x, angles in float32); None checks both."""
    name = "apply_rope_interleaved"
    cases = []

    def value(x: torch.Tensor, positions: torch.Tensor, base: float | None):
        def judge(j: Judge) -> None:
            got = returned_tensor(j, shape=x.shape, dtype=x.dtype, hint=X_DTYPE_HINT_INTERLEAVED)
            if x.dtype == F16:  # float16 rounding dominates the angle's
                j.close(got, interleaved_oracle(x, positions, base or 10000.0), tol_dtype=F16,
                        oracle="the rotated pairs")
                return
            j.close(got, interleaved_oracle(x, positions, base or 10000.0), tol_dtype=x.dtype,
                    atol=rotation_atol(x, max_angle(positions)), rtol=0.0, oracle="the rotated pairs")
        return judge

    x1 = _x(501, 2, 3, 6, 8, dtype=F32)
    p1 = torch.arange(7, 13)
    cases.append(make_case(name, "x (2, 3, 6, 8) float32, positions 7 … 12", [Call(name, (x1, p1))],
                           value(x1, p1, None), seed=501))
    x2 = _x(502, 3, 3, 5, 6, dtype=F32)  # B = H = 3
    p2 = torch.tensor([[0, 1, 2, 3, 4], [9, 8, 7, 6, 5], [3, 3, 40, 41, 42]])
    cases.append(make_case(name, "per-sequence positions (3, 5), x (3, 3, 5, 6) float32, base = 500.0",
                           [Call(name, (x2, p2), {"base": 500.0})], value(x2, p2, 500.0), seed=502))
    x3 = _x(503, 1, 2, 40, 16)
    p3 = torch.arange(40) * 25
    cases.append(make_case(name, "x float64, positions 0, 25, … 975: float32-level tolerance grown with the angle",
                           [Call(name, (x3, p3))], value(x3, p3, None), seed=503))

    x4 = _x(504, 2, 2, 7, 8)
    p4 = torch.tensor([0, 3, 17, 100, 250, 999, 2000])

    def norms(j: Judge, x=x4) -> None:
        got = returned_tensor(j, shape=x.shape, dtype=x.dtype, hint="return the dtype of x")
        j.close(got.double().norm(dim=-1), x.norm(dim=-1), name="‖output‖ per vector", atol=1e-6, rtol=1e-6,
                oracle="‖x‖")

    cases.append(make_case(name, "a rotation: every (b, h, t) vector keeps its norm (positions up to 2000)",
                           [Call(name, (x4, p4))], norms, seed=504))
    cases.append(_relative_case(name, 505, lambda x, p: Call(name, (x, p))))
    x6 = _x(506, 2, 3, 6, 16, dtype=F32).to(F16)
    p6 = torch.tensor([[0, 5, 60, 61, 200, 300], [7, 8, 9, 10, 11, 12]])
    cases.append(make_case(name, "half precision: x (2, 3, 6, 16) float16, positions (2, 6) up to 300; angles in "
                           "float32, output float16", [Call(name, (x6, p6))], value(x6, p6, None), seed=506,
                           part="half"))
    return cases


# ---------------------------------------------------------------------------------------------
# 6. permute_for_rotate_half
# ---------------------------------------------------------------------------------------------
def _scores(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, num_heads: int, layout: str) -> torch.Tensor:
    """(H, T, T) RoPE'd q·k scores of x (T, D) with weights (H·Dh, D), positions 0 … T−1."""
    t = x.shape[0]
    q = (x.double() @ wq.double().T).view(t, num_heads, -1).transpose(0, 1)
    k = (x.double() @ wk.double().T).view(t, num_heads, -1).transpose(0, 1)
    pos = torch.arange(t)
    if layout == "interleaved":
        q, k = interleaved_oracle(q[None], pos)[0], interleaved_oracle(k[None], pos)[0]
    else:
        cos, sin = rope_tables64(pos, q.shape[-1])
        q, k = rope_oracle(q[None], cos, sin)[0], rope_oracle(k[None], cos, sin)[0]
    return q @ k.transpose(-2, -1)


def _permutation_rows(rows: int, num_heads: int) -> list[int]:
    dh = rows // num_heads
    order = []
    for h in range(num_heads):
        order += [h * dh + 2 * j for j in range(dh // 2)] + [h * dh + 2 * j + 1 for j in range(dh // 2)]
    return order


@NOTEBOOK.exercise("permute_for_rotate_half", parts=("core", "validation"))
def _permute_cases() -> list[Case]:
    """Check ``permute_for_rotate_half(weight, num_heads)`` by the q·k scores it must keep, its rows, and
    its ValueErrors."""
    name = "permute_for_rotate_half"
    cases = []
    heads, dh, d = 3, 8, 24
    wq, wk = _x(601, heads * dh, d) / math.sqrt(d), _x(602, heads * dh, d) / math.sqrt(d)
    x = _x(603, 9, d)

    def scores(j: Judge) -> None:
        pq = returned_tensor(j, 0, shape=wq.shape, dtype=F64, hint="return the dtype of weight")
        pk = returned_tensor(j, 1, shape=wk.shape, dtype=F64, hint="return the dtype of weight")
        j.close(_scores(x, pq, pk, heads, "rotate-half"), _scores(x, wq, wk, heads, "interleaved"),
                name="scores (rotate-half, permuted W)", call=0, oracle="scores (interleaved, W)")

    cases.append(make_case(name, "H = 3, Dh = 8: rotate-half RoPE on x @ W_permᵀ gives the q·k scores of "
                           "interleaved RoPE on x @ Wᵀ", [Call(name, (wq, heads)), Call(name, (wk, heads))], scores,
                           seed=601))
    w2 = _x(604, 2 * 6, 5, dtype=F32)

    def rows(j: Judge, w=w2) -> None:
        got = returned_tensor(j, shape=w.shape, dtype=F32, hint="return the dtype of weight")
        j.close(got, w[_permutation_rows(12, 2)], atol=0.0, rtol=0.0,
                oracle="rows 0, 2, 4, 1, 3, 5 of each head (exactly)")

    cases.append(make_case(name, "H = 2, Dh = 6, D = 5, float32: within each head rows 0, 2, 4, then 1, 3, 5",
                           [Call(name, (w2, 2))], rows, seed=604))

    def bad_heads(j: Judge) -> None:
        require_value_error(j, "weight (10, 4), num_heads = 3", "raise ValueError when weight.shape[0] is not "
                            "divisible by num_heads")

    cases.append(Case(name, "10 rows, num_heads = 3: raises ValueError", [Call(name, (_x(605, 10, 4), 3))],
                      bad_heads, part="validation"))

    def odd(j: Judge) -> None:
        require_value_error(j, "weight (6, 4), num_heads = 2 (Dh = 3)", "raise ValueError when the head width "
                            "weight.shape[0] // num_heads is odd: RoPE rotates pairs")

    cases.append(Case(name, "Dh = 3 (odd): raises ValueError", [Call(name, (_x(606, 6, 4), 2))], odd,
                      part="validation"))
    return cases
