"""Notebook 04's visible cases: oracles that do not hand out the answer, and properties.

Oracles: ``F.layer_norm`` and ``F.rms_norm`` (run in float64 for half-precision inputs),
``torch.nn.RMSNorm`` holding the same weight, torch modules built from the same weights for the
residual blocks, and ``torch.autograd`` for the backward challenge. Properties: a token's output
never depends on another token; RMSNorm is scale invariant. Inputs that tell the catalogued
mistakes apart: tiny magnitudes (±1e-3, where eps is as large as the variance), a non-default eps,
float16 values of a few hundred (their squares overflow float16) and bfloat16.

Tolerances: layer_norm keeps float64 in float64, so float64 answers are judged tightly; rms_norm
(and RMSNorm, and the backward) may keep its statistics in float32 even for float64 input, as HF's
``LlamaRMSNorm`` and Meta's ``_norm(x.float())`` do (docs/conventions.md, "Where correct public code differs"), so its float64
answers are judged at float32 level: ``RMS_FLOAT64_TOL`` = (atol 1e-6, rtol 1e-5). Half-precision
answers are compared with the oracle in float64 within ``HALF_TOLERANCE``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import make_generator
from .. import shared
from ..call import Call, TorchModule
from ..case import Case, Judge, fmt_dtype
from ..evidence import grad_output_for
from ..protocol import NotebookChecks
from ..tolerance import tolerance
from .mistakes import HINTS, MISTAKES

__all__ = ["LOAD_HINTS", "NOTEBOOK", "RMS_FLOAT64_TOL", "judge_dtype", "norm_tolerance", "with_load_hints"]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("04_normalisation", calls={"RMSNorm": ("rms_norm",)})


HALF = (torch.float16, torch.bfloat16)
RMS_FLOAT64_TOL = (1e-6, 1e-5)


def norm_tolerance(exercise: str, dtype: torch.dtype) -> tuple[float | None, float | None]:
    """(atol, rtol) for ``exercise`` at ``dtype``: None = the dtype's default tolerance."""
    if dtype == torch.float64 and exercise in ("rms_norm", "RMSNorm", "rms_norm_backward"):
        return RMS_FLOAT64_TOL
    return None, None


def _x(seed: int, *shape: int, dtype: torch.dtype = torch.float64, scale: float = 1.0,
       shift: float = 0.0) -> torch.Tensor:
    x = torch.randn(*shape, generator=make_generator(seed), dtype=torch.float64) * scale + shift
    return x.to(dtype)


def _weights(seed: int, d: int, dtype: torch.dtype, bias: bool = True):
    """A weight around 1 (spread 0.5) and a bias (spread 0.5): forgetting either shows."""
    g = make_generator(seed)
    w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    b = (0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    return (w, b) if bias else w


def judge_dtype(j: Judge, want: torch.dtype, *, call: int = 0, index: int = 0, n: int = 1,
                names: Sequence[str] | None = None, shape: Sequence[int] | None = None) -> torch.Tensor:
    """The returned tensor after shape, then dtype (with the precision hints), then device."""
    t = j.tensor(call, index, n=n, names=names, shape=shape)
    if t.dtype != want:
        name = names[index] if names else "output"
        hint = None
        if want in HALF and t.dtype == torch.float32:
            hint = HINTS["float32_out"]
        elif want == torch.float64 and t.dtype == torch.float32:
            hint = HINTS["float64_down"]
        j.fail(f"{name} has dtype {fmt_dtype(t.dtype)}; expected {fmt_dtype(want)}, the dtype of x",
               hint=hint)
    return t


LOAD_HINTS = {
    "renamed": "name the parameter weight (self.weight = nn.Parameter(torch.ones(dim))): the grader "
               "loads it by that name",
    "plain": "make weight an nn.Parameter (self.weight = nn.Parameter(torch.ones(dim))): a plain "
             "tensor attribute is not part of the module's parameters, so it cannot be loaded or trained",
    "extra": "weight is RMSNorm's only parameter: no bias, no other nn.Parameter",
    "size": "weight has shape (dim,): one scale per feature",
}


def _load_hint(lines: list[str]) -> str | None:
    unexpected = any(ln.startswith("Unexpected") for ln in lines)
    missing = any(ln.startswith("Missing") for ln in lines)
    if unexpected:
        return LOAD_HINTS["renamed" if missing else "plain"]
    if missing:
        return LOAD_HINTS["extra"]
    return LOAD_HINTS["size"] if any("size mismatch" in ln for ln in lines) else None


def with_load_hints(judge: Callable[[Judge], None]) -> Callable[[Judge], None]:
    """Wrap an RMSNorm judge: weights that could not be loaded by name get a hint."""
    return shared.with_load_hints(judge, "the weight", 100, _load_hint)


def _case(exercise: str, title: str, calls: list[Call], judge, seed: int | None = None,
          part: str = "core") -> Case:
    if exercise == "RMSNorm":
        judge = with_load_hints(judge)
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise], part=part)


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    return torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol)


def _dt(dtype: torch.dtype) -> str:
    return fmt_dtype(dtype)


# ---------------------------------------------------------------------------------------------
# layer_norm and rms_norm: one builder for oracle cases
# ---------------------------------------------------------------------------------------------
def _oracle(exercise: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            eps: float) -> torch.Tensor:
    """F.layer_norm / F.rms_norm over the last axis, in float64 for half-precision x."""
    if x.dtype in HALF:
        x, weight = x.double(), weight.double()
        bias = None if bias is None else bias.double()
    shape = (x.size(-1),)
    if exercise == "layer_norm":
        return F.layer_norm(x, shape, weight, bias, eps)
    return F.rms_norm(x, shape, weight, eps)


def _norm_case(exercise: str, title: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               seed: int, eps: float | None = None, part: str = "core") -> Case:
    default = 1e-5 if exercise == "layer_norm" else 1e-6
    args = (x, weight) if bias is None else (x, weight, bias)
    call = Call(exercise, args, {} if eps is None else {"eps": eps})
    oracle_name = ("F.layer_norm" if exercise == "layer_norm" else "F.rms_norm") + \
        (" in float64" if x.dtype in HALF else "")

    def judge(j: Judge) -> None:
        got = judge_dtype(j, x.dtype, shape=tuple(x.shape))
        expected = _oracle(exercise, x, weight, bias, default if eps is None else eps)
        atol, rtol = norm_tolerance(exercise, x.dtype)
        if x.dtype == torch.float64 and atol is None and not _close(got, expected, *tolerance(x.dtype)) \
                and _close(got, expected, *RMS_FLOAT64_TOL):  # right, but only to float32 precision?
            j.close(got, expected, oracle=oracle_name, hint=lambda: j.mistake_hint() or HINTS["float64_down"])
        j.close(got, expected, oracle=oracle_name, atol=atol, rtol=rtol,
                tol_dtype=x.dtype if x.dtype in HALF else None)

    return _case(exercise, title, [call], judge, seed=seed, part=part)


def _token_case(exercise: str, seed: int, dtype: torch.dtype) -> Case:
    """Changing token (1, 3) of x changes out[1, 3] only: statistics per token."""
    x = _x(seed, 2, 6, 12, dtype=dtype, scale=2.0, shift=0.5)
    x2 = x.clone()
    x2[1, 3] = _x(seed + 1, 12, dtype=dtype, scale=5.0, shift=-3.0)
    weights = _weights(seed + 2, 12, dtype, bias=exercise == "layer_norm")
    args = weights if isinstance(weights, tuple) else (weights,)

    def judge(j: Judge) -> None:
        before = judge_dtype(j, dtype, call=0, shape=(2, 6, 12))
        after = judge_dtype(j, dtype, call=1, shape=(2, 6, 12))
        same = torch.ones(2, 6, dtype=torch.bool)
        same[1, 3] = False
        atol, rtol = tolerance(dtype)
        moved = [[b, t] for b in range(2) for t in range(6) if same[b, t]
                 and not torch.allclose(after[b, t], before[b, t], atol=atol, rtol=rtol)]
        j.require(not moved, f"changing x[1, 3] also changed out at (b, t) = {moved[:4]}"
                  f"{' …' if len(moved) > 4 else ''}", "each token's output may depend on its own features only",
                  call=1)
        j.require(not torch.allclose(after[1, 3], before[1, 3]), "out[1, 3] did not change when x[1, 3] did",
                  call=1)

    return _case(exercise, "a token's output depends on its own features only: changing x[1, 3] "
                 "changes out[1, 3] and nothing else", [Call(exercise, (x, *args)), Call(exercise, (x2, *args))],
                 judge, seed=seed)


@NOTEBOOK.exercise("layer_norm", parts=("core", "half"))
def _layer_norm_cases() -> list[Case]:
    """Check ``layer_norm(x, weight, bias, eps=1e-5)`` against F.layer_norm and properties.

    part: "core" (float32/float64, tiny inputs, eps) or "half" (float16/bfloat16), the two test
    cells that score it; None checks both."""
    ex = "layer_norm"
    dt = torch.float64
    w, b = _weights(1002, 16, dt)
    cases = [
        _norm_case(ex, f"(B, T, D) = (2, 5, 16), {_dt(dt)}: matches F.layer_norm", _x(1001, 2, 5, 16, scale=2.0,
                   shift=0.5), w, b, seed=1001),
        _token_case(ex, 1011, torch.float32),
    ]
    w, b = _weights(1022, 8, dt)
    cases.append(_norm_case(ex, f"tiny inputs (±1e-3, {_dt(dt)}), where eps = 1e-5 is larger than the variance: "
                            "matches F.layer_norm", _x(1021, 3, 8, scale=1e-3), w, b, seed=1021))
    w, b = _weights(1032, 10, dt)
    cases.append(_norm_case(ex, "eps=1e-2 given, inputs of spread 0.1: matches F.layer_norm(eps=1e-2)",
                            _x(1031, 2, 3, 10, scale=0.1), w, b, seed=1031, eps=1e-2))
    w, b = _weights(1042, 7, dt)
    cases.append(_norm_case(ex, "one vector x of shape (D,) = (7,) (any number of leading axes)",
                            _x(1041, 7, scale=3.0, shift=1.0), w, b, seed=1041))
    # half precision: float16 values of a few hundred (squares overflow float16), bfloat16
    w, b = _weights(1052, 64, torch.float16)
    cases.append(_norm_case(ex, "float16 x with |x| ~ 300-1000 (their squares overflow float16): float16 out, "
                            "close to F.layer_norm in float64", _x(1051, 2, 4, 64, dtype=torch.float16, scale=500.0),
                            w, b, seed=1051, part="half"))
    w, b = _weights(1062, 32, torch.bfloat16)
    cases.append(_norm_case(ex, "bfloat16 x around 1000 with spread 10: bfloat16 out, close to F.layer_norm in "
                            "float64", _x(1061, 3, 32, dtype=torch.bfloat16, scale=10.0, shift=1000.0), w, b,
                            seed=1061, part="half"))
    return cases


@NOTEBOOK.exercise("rms_norm", parts=("core", "half"))
def _rms_norm_cases() -> list[Case]:
    """Check ``rms_norm(x, weight, eps=1e-6)`` against F.rms_norm and properties.

    part: "core" or "half" (float16/bfloat16), the two test cells that score it; None checks both."""
    ex = "rms_norm"
    dt = torch.float64
    cases = [
        _norm_case(ex, f"(B, T, D) = (2, 5, 16), {_dt(dt)}: matches F.rms_norm", _x(2001, 2, 5, 16, scale=2.0,
                   shift=0.5), _weights(2002, 16, dt, bias=False), None, seed=2001),
        _token_case(ex, 2011, torch.float32),
        _norm_case(ex, "tiny inputs (±1e-3, float32), where eps = 1e-6 is as large as mean(x²): matches "
                   "F.rms_norm", _x(2021, 3, 8, dtype=torch.float32, scale=1e-3),
                   _weights(2022, 8, torch.float32, bias=False), None, seed=2021),
        _norm_case(ex, "eps=1e-2 given, inputs of spread 0.1: matches F.rms_norm(eps=1e-2)",
                   _x(2031, 2, 3, 10, scale=0.1), _weights(2032, 10, dt, bias=False), None, seed=2031, eps=1e-2),
        _norm_case(ex, "(B, H, T, Dh) = (2, 3, 4, 8), float32 (q/k-norm normalises each head's vector)",
                   _x(2041, 2, 3, 4, 8, dtype=torch.float32, scale=2.0, shift=1.0),
                   _weights(2042, 8, torch.float32, bias=False), None, seed=2041),
    ]
    x = _x(2051, 3, 9, scale=1.5, shift=0.5)
    w = _weights(2052, 9, dt, bias=False)

    def invariant(j: Judge) -> None:
        out = judge_dtype(j, dt, call=0, shape=(3, 9))
        scaled = judge_dtype(j, dt, call=1, shape=(3, 9))
        j.close(scaled, out, name="rms_norm(10·x)", call=1, atol=RMS_FLOAT64_TOL[0], rtol=RMS_FLOAT64_TOL[1],
                oracle="rms_norm(x)")

    cases.append(_case(ex, "scale invariance: rms_norm(10·x) equals rms_norm(x) (up to eps)",
                       [Call(ex, (x, w)), Call(ex, (x * 10, w))], invariant, seed=2051))
    cases.append(_norm_case(ex, "float16 x with |x| ~ 300-1000 (their squares overflow float16): float16 out, "
                            "close to F.rms_norm in float64", _x(2061, 2, 4, 64, dtype=torch.float16, scale=500.0),
                            _weights(2062, 64, torch.float16, bias=False), None, seed=2061, part="half"))
    cases.append(_norm_case(ex, "bfloat16: bfloat16 out, close to F.rms_norm in float64",
                            _x(2071, 3, 32, dtype=torch.bfloat16, scale=3.0, shift=1.0),
                            _weights(2072, 32, torch.bfloat16, bias=False), None, seed=2071, part="half"))
    return cases


# ---------------------------------------------------------------------------------------------
# RMSNorm(dim, eps=1e-6)
# ---------------------------------------------------------------------------------------------
def rmsnorm_call(dim: int, x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None) -> Call:
    """``RMSNorm(dim[, eps=eps])``, ``weight`` loaded by name when given, called on x."""
    return Call("RMSNorm", (dim,), {} if eps is None else {"eps": eps},
                state=None if weight is None else {"weight": weight}, forward_args=(x,))


def _torch_rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    dtype = torch.float64 if x.dtype in HALF else x.dtype
    module = torch.nn.RMSNorm(x.size(-1), eps=eps, dtype=dtype)
    if weight is not None:
        module.load_state_dict({"weight": weight.to(dtype)})
    with torch.no_grad():
        return module(x.to(dtype))


def _rmsnorm_case(title: str, x: torch.Tensor, weight: torch.Tensor | None, seed: int,
                  eps: float | None = None, part: str = "core") -> Case:
    def judge(j: Judge) -> None:
        got = judge_dtype(j, x.dtype, shape=tuple(x.shape))
        expected = _torch_rmsnorm(x, weight, 1e-6 if eps is None else eps)
        atol, rtol = norm_tolerance("RMSNorm", x.dtype)
        j.close(got, expected, atol=atol, rtol=rtol, tol_dtype=x.dtype if x.dtype in HALF else None,
                oracle="torch.nn.RMSNorm" + (" in float64" if x.dtype in HALF else "")
                + (" with the same weight" if weight is not None else " (weight = ones)"))

    return _case("RMSNorm", title, [rmsnorm_call(x.size(-1), x, weight, eps)], judge, seed=seed, part=part)


def _rmsnorm_gradient_case() -> Case:
    """Backward through RMSNorm: the gradient reaches ``weight`` and equals torch.nn.RMSNorm's."""
    x, weight = _x(3041, 2, 3, 8, scale=2.0, shift=0.5), _weights(3042, 8, torch.float64, bias=False)
    call = Call("RMSNorm", (8,), state={"weight": weight}, forward_args=(x,), grad_of=("weight",))

    def judge(j: Judge) -> None:
        module = torch.nn.RMSNorm(8, eps=1e-6, dtype=torch.float64)
        module.load_state_dict({"weight": weight})
        expected = module(x)
        expected.backward(grad_output_for(expected))
        atol, rtol = norm_tolerance("RMSNorm", torch.float64)
        j.close(j.tensor(0, 0, n=2, names=("output", "weight.grad"), shape=(2, 3, 8), dtype=torch.float64),
                expected.detach(), atol=atol, rtol=rtol, oracle="torch.nn.RMSNorm")
        j.close(j.tensor(0, 1, n=2, names=("output", "weight.grad"), shape=(8,), dtype=torch.float64),
                module.weight.grad, name="weight.grad", index=1, atol=atol, rtol=rtol,
                oracle="torch.nn.RMSNorm's weight.grad")

    return _case("RMSNorm", "backward (float64): the gradient reaches weight and equals torch.nn.RMSNorm's",
                 [call], judge, seed=3041)


@NOTEBOOK.exercise("RMSNorm", parts=("core", "half"))
def _rmsnorm_cases() -> list[Case]:
    """Check the ``RMSNorm(dim, eps=1e-6)`` module against torch.nn.RMSNorm holding the same weight.

    part: "core" (float32/float64, a loaded weight, eps, the gradient) or "half" (float16 and
    bfloat16, squares that overflow float16); None checks both."""
    dt = torch.float64
    return [
        _rmsnorm_case("a fresh RMSNorm(16) (float32): weight starts at ones, so it matches torch.nn.RMSNorm(16)",
                      _x(3001, 2, 5, 16, dtype=torch.float32, scale=2.0, shift=0.5), None, seed=3001),
        _rmsnorm_case(f"weight (D,) loaded by name ({_dt(dt)}): matches torch.nn.RMSNorm holding the same weight",
                      _x(3011, 2, 5, 16, scale=2.0, shift=0.5), _weights(3012, 16, dt, bias=False), seed=3011),
        _rmsnorm_case("RMSNorm(10, eps=1e-2) on inputs of spread 0.1: the eps given is used",
                      _x(3021, 2, 3, 10, scale=0.1), _weights(3022, 10, dt, bias=False), seed=3021, eps=1e-2),
        _rmsnorm_case("float16 weight and x with |x| ~ 300-1000 (squares overflow float16): float16 out",
                      _x(3031, 2, 4, 32, dtype=torch.float16, scale=500.0),
                      _weights(3032, 32, torch.float16, bias=False), seed=3031, part="half"),
        _rmsnorm_gradient_case(),
    ]


# ---------------------------------------------------------------------------------------------
# pre_norm_residual / post_norm_residual: torch modules as sublayer and norm
# ---------------------------------------------------------------------------------------------
def _linear(seed: int, d: int, dtype: torch.dtype) -> TorchModule:
    g = make_generator(seed)
    state = {"weight": (torch.randn(d, d, generator=g, dtype=torch.float64) / d ** 0.5).to(dtype),
             "bias": (0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)}
    return TorchModule("Linear", {"in_features": d, "out_features": d}, state)


def _layernorm(seed: int, d: int, dtype: torch.dtype) -> TorchModule:
    w, b = _weights(seed, d, dtype)
    return TorchModule("LayerNorm", {"normalized_shape": d}, {"weight": w, "bias": b})


def _rmsnorm_module(seed: int, d: int, dtype: torch.dtype) -> TorchModule:
    return TorchModule("RMSNorm", {"normalized_shape": d, "eps": 1e-6}, {"weight": _weights(seed, d, dtype, bias=False)})


def _residual_oracle(exercise: str, x: torch.Tensor, sublayer: TorchModule, norm: TorchModule) -> torch.Tensor:
    sub, nrm = sublayer.build(), norm.build()
    with torch.no_grad():
        return x + sub(nrm(x)) if exercise == "pre_norm_residual" else nrm(x + sub(x))


def _residual_cases(exercise: str, base: int) -> list[Case]:
    formula = "x + sublayer(norm(x))" if exercise == "pre_norm_residual" else "norm(x + sublayer(x))"
    configs = [  # (title, x, sublayer, norm)
        ("nn.Linear sublayer, nn.LayerNorm norm, (B, T, D) = (2, 5, 16), float32",
         _x(base + 1, 2, 5, 16, dtype=torch.float32, scale=2.0, shift=1.0), _linear(base + 2, 16, torch.float32),
         _layernorm(base + 3, 16, torch.float32)),
        ("a nonlinear sublayer (an nn.LayerNorm with its own weights), nn.RMSNorm norm, (T, D) = (6, 12), float64",
         _x(base + 11, 6, 12, scale=3.0, shift=-1.0), _layernorm(base + 12, 12, torch.float64),
         _rmsnorm_module(base + 13, 12, torch.float64)),
        ("nn.Linear sublayer, nn.RMSNorm norm, (B, T, D) = (2, 3, 8), float64",
         _x(base + 21, 2, 3, 8, scale=0.5, shift=2.0), _linear(base + 22, 8, torch.float64),
         _rmsnorm_module(base + 23, 8, torch.float64)),
    ]
    cases = []
    for i, (title, x, sub, norm) in enumerate(configs):
        def judge(j: Judge, x=x, sub=sub, norm=norm) -> None:
            got = judge_dtype(j, x.dtype, shape=tuple(x.shape))
            j.close(got, _residual_oracle(exercise, x, sub, norm), oracle=formula)

        cases.append(_case(exercise, f"{title}: equals {formula}", [Call(exercise, (x, sub, norm))], judge,
                           seed=base + 10 * i + 1))
    return cases


@NOTEBOOK.exercise("pre_norm_residual")
def _pre_norm_residual_cases() -> list[Case]:
    """Check ``pre_norm_residual(x, sublayer, norm)`` = x + sublayer(norm(x))."""
    return _residual_cases("pre_norm_residual", 5000)


@NOTEBOOK.exercise("post_norm_residual")
def _post_norm_residual_cases() -> list[Case]:
    """Check ``post_norm_residual(x, sublayer, norm)`` = norm(x + sublayer(x))."""
    return _residual_cases("post_norm_residual", 6000)


# ---------------------------------------------------------------------------------------------
# rms_norm_backward (optional challenge): torch.autograd through F.rms_norm
# ---------------------------------------------------------------------------------------------
def autograd_backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_weight) of F.rms_norm by torch.autograd (in float64)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = weight.detach().double().requires_grad_(True)
    out = F.rms_norm(x64, (x.size(-1),), w64, eps)
    gx, gw = torch.autograd.grad(out, (x64, w64), grad_out.double())
    return gx, gw


BACKWARD_NAMES = ("grad_x", "grad_weight")


@NOTEBOOK.exercise("rms_norm_backward")
def _backward_cases() -> list[Case]:
    """Check ``rms_norm_backward(grad_out, x, weight, eps=1e-6)`` (optional, 0 points) against
    torch.autograd."""
    ex = "rms_norm_backward"
    configs = [  # (title, shape, dtype, eps, scale)
        ("(B, T, D) = (2, 4, 8), float64", (2, 4, 8), torch.float64, None, 2.0),
        ("(T, D) = (5, 6), eps=0.1 given, inputs of spread 0.3 (eps matters)", (5, 6), torch.float64, 0.1, 0.3),
        ("(B, H, T, Dh) = (2, 3, 4, 8), float32", (2, 3, 4, 8), torch.float32, None, 1.0),
    ]
    cases = []
    for i, (title, shape, dtype, eps, scale) in enumerate(configs):
        s = 4001 + 10 * i
        x = _x(s, *shape, dtype=dtype, scale=scale, shift=0.3)
        grad_out = _x(s + 1, *shape, dtype=dtype)
        w = _weights(s + 2, shape[-1], dtype, bias=False)

        def judge(j: Judge, x=x, grad_out=grad_out, w=w, eps=eps) -> None:
            gx, gw = autograd_backward(grad_out, x, w, 1e-6 if eps is None else eps)
            atol, rtol = norm_tolerance(ex, x.dtype)
            for index, expected in enumerate((gx, gw)):
                got = judge_dtype(j, x.dtype, index=index, n=2, names=BACKWARD_NAMES, shape=tuple(expected.shape))
                j.close(got, expected.to(x.dtype), name=BACKWARD_NAMES[index], index=index, atol=atol, rtol=rtol,
                        oracle="torch.autograd through F.rms_norm")

        cases.append(_case(ex, f"{title}: matches torch.autograd", [Call(ex, (grad_out, x, w),
                                                                          {} if eps is None else {"eps": eps})],
                           judge, seed=s))
    return cases


