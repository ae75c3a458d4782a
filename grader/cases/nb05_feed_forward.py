"""Grading cases for notebook 05 (feed-forward layers).

The visible cases come from ``tfcourse.checks.nb05_feed_forward``; the hidden ones below compare
with the reference solution on inputs drawn from the grader's seed: other shapes and widths,
float64 and float32, GELU on random x of spread up to 12 (|x| up to ~40) in both forms, FeedForward and SwiGLU with weights
loaded by name (with and without bias), float16/bfloat16 inputs for gelu (both forms),
FeedForward and SwiGLU (``half.py``: compared with the reference computed in float64; each
exercise's "half" test cell), more
Llama-rule widths, MoE with E = 2 … 8 and K = 1 … 3 (values, and for the sparse part y with the
check's probe experts, which return NaN for a call holding a token not routed to them), balance losses for several (N, E, K) and capacity routing. MoE is not run in
half precision: rounding there could reorder near-equal router probabilities.

Tolerances (docs/conventions.md, "Where correct public code differs"): gelu, FeedForward and SwiGLU keep
float64 in float64 and are judged at float64 tolerance; MoE, load_balancing_loss and
route_with_capacity may take the router softmax in float32 (Hugging Face's Mixtral does), so their
float64 cases are judged at float32 level (atol 1e-6, rtol 1e-5). Every routing input keeps a gap
of ``MARGIN`` at each token's top-K boundary (asserted while building), so no rounding changes the
selection.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tfcourse.checks.call import Call
from tfcourse.checks.case import Case, Judge
from tfcourse.checks.nb05_feed_forward import MISTAKES, NOTEBOOK
from tfcourse.checks.nb05_feed_forward.cases import (
    ffn_state,
    hidden_dim_call,
    judge_hidden_dim,
    swiglu_state,
    with_load_hints,
)
from tfcourse.checks.nb05_feed_forward.routing import (
    MARGIN,
    MOE_NAMES,
    ROUTE_NAMES,
    balance_grad_call,
    check_margin,
    judge_balance_gradient,
    judge_moe_gradient,
    judge_sparse,
    moe_call,
    moe_grad_call,
    moe_inputs,
    probe_markers,
    router_tolerance,
)
from tfcourse.device import make_generator

from . import HiddenCases, hidden_case, seeded
from .half import HALF_DTYPES, half_case

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)
F32, F64 = torch.float32, torch.float64


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = F64) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=F64) * scale).to(dtype)


def _wrap(exercise: str) -> Callable[[Callable[[Judge], None]], Callable[[Judge], None]] | None:
    if exercise in ("FeedForward", "SwiGLU", "MoE"):
        return lambda judge: with_load_hints(exercise, judge)
    return None


def _hidden(exercise: str, title: str, calls: list[Call], seed: int, *, n: int = 1, names=None,
            part: str = "core", atol: float | None = None, rtol: float | None = None) -> Case:
    return hidden_case(exercise, f"hidden case: {title}", calls, seed, mistakes=MISTAKES[exercise], n=n,
                       names=names, part=part, atol=atol, rtol=rtol, wrap=_wrap(exercise))


def _half(exercise: str, title: str, call: Call, dtype: torch.dtype, seed: int, part: str = "half") -> Case:
    return half_case(NOTEBOOK.name, exercise, f"hidden case: half precision, {title}", call, dtype, seed,
                     mistakes=MISTAKES[exercise], part=part, wrap=_wrap(exercise))


# ---------------------------------------------------------------------------------------------
# gelu
# ---------------------------------------------------------------------------------------------
@HIDDEN.exercise("gelu")
def _gelu(seed: int) -> list[Case]:
    out = []
    configs = [((5, 33), F64, 4.0), ((2, 3, 4, 16), F32, 3.0), ((200,), F64, 12.0), ((7,), F32, 1e-3)]
    for i, (shape, dtype, scale) in enumerate(configs):
        for k, form in enumerate(("none", "tanh")):
            s = seed * 1000 + 100 + 10 * i + k
            x = _randn(make_generator(s), *shape, scale=scale, dtype=dtype)
            out.append(_hidden("gelu", f'approximate="{form}", x {shape} {_dt(dtype)}, |x| ~ {scale:g}: matches the '
                               "reference", [Call("gelu", (x,), {"approximate": form})], s,
                               part="core" if form == "none" else "tanh"))
    s = seed * 1000 + 150
    out.append(_hidden("gelu", 'approximate="exact" raises ValueError',
                       [Call("gelu", (_randn(make_generator(s), 3),), {"approximate": "exact"})], s,
                       part="validation"))
    for i, dtype in enumerate(HALF_DTYPES):
        for k, form in enumerate(("none", "tanh")):
            s = seed * 1000 + 160 + 10 * i + k
            x = _randn(make_generator(s), 4, 64, scale=3.0, dtype=dtype)
            out.append(_half("gelu", f'approximate="{form}", x (4, 64)', Call("gelu", (x,), {"approximate": form}),
                             dtype, s))
    return out


# ---------------------------------------------------------------------------------------------
# FeedForward and SwiGLU
# ---------------------------------------------------------------------------------------------
@HIDDEN.exercise("FeedForward")
def _ff(seed: int) -> list[Case]:
    out = []
    configs = [((3, 7, 16), 64, F64, True), ((2, 5, 8), 24, F32, False), ((10, 12), 20, F64, False),
               ((2, 2, 3, 8), 32, F32, True)]
    for _, s, g, (shape, f, dtype, bias) in seeded(seed, 200, configs):
        d = shape[-1]
        x = _randn(g, *shape, scale=2.0, dtype=dtype)
        call = Call("FeedForward", (d, f), {} if bias else {"bias": False}, state=ffn_state(s, d, f, dtype, bias),
                    forward_args=(x,))
        out.append(_hidden("FeedForward", f"FeedForward({d}, {f}{'' if bias else ', bias=False'}) on x {shape} "
                           f"{_dt(dtype)}: matches the reference", [call], s))
    for _, s, g, dtype in seeded(seed, 250, HALF_DTYPES):
        x = _randn(g, 2, 5, 16, dtype=dtype)
        call = Call("FeedForward", (16, 32), state=ffn_state(s, 16, 32, dtype), forward_args=(x,))
        out.append(_half("FeedForward", "FeedForward(16, 32) with weights of that dtype on x (2, 5, 16)", call,
                         dtype, s))
    return out


@HIDDEN.exercise("SwiGLU")
def _swiglu(seed: int) -> list[Case]:
    out = []
    configs = [((3, 7, 16), 48, F64), ((2, 5, 8), 24, F32), ((10, 12), 32, F64), ((2, 2, 3, 8), 16, F32)]
    for _, s, g, (shape, f, dtype) in seeded(seed, 300, configs):
        d = shape[-1]
        x = _randn(g, *shape, scale=2.0, dtype=dtype)
        call = Call("SwiGLU", (d, f), state=swiglu_state(s, d, f, dtype), forward_args=(x,))
        out.append(_hidden("SwiGLU", f"SwiGLU({d}, {f}) on x {shape} {_dt(dtype)}: matches the reference", [call], s))
    for _, s, g, dtype in seeded(seed, 350, HALF_DTYPES):
        x = _randn(g, 2, 5, 16, dtype=dtype)
        call = Call("SwiGLU", (16, 32), state=swiglu_state(s, 16, 32, dtype), forward_args=(x,))
        out.append(_half("SwiGLU", "SwiGLU(16, 32) with weights of that dtype on x (2, 5, 16)", call, dtype, s))
    return out


# ---------------------------------------------------------------------------------------------
# swiglu_hidden_dim
# ---------------------------------------------------------------------------------------------
def _hidden_dim_case(title: str, call: Call, seed: int) -> Case:
    return Case("swiglu_hidden_dim", f"hidden case: {title}", [call], judge_hidden_dim, seed=seed, reference=True,
                mistakes=MISTAKES["swiglu_hidden_dim"], hidden=True)


@HIDDEN.exercise("swiglu_hidden_dim")
def _hidden_dim(seed: int) -> list[Case]:
    g = make_generator(seed * 1000 + 400)
    configs = [  # Llama 3.1 405B, Llama-3-70B, Code Llama 34B, then drawn from the seed
        ((16384,), {"multiple_of": 1024, "ffn_dim_multiplier": 1.2}),
        ((8192,), {"multiple_of": 1024, "ffn_dim_multiplier": 1.3}),
        ((8192,), {"multiple_of": 256, "ffn_dim_multiplier": 1.0}),
        ((1,), {}),
    ]
    for _ in range(4):
        d = int(torch.randint(8, 4000, (1,), generator=g))
        m = [8, 32, 64, 128, 256][int(torch.randint(0, 5, (1,), generator=g))]
        mult = [None, 1.3, 1.5, 0.9][int(torch.randint(0, 4, (1,), generator=g))]
        configs.append(((d,), {"multiple_of": m} if mult is None else {"multiple_of": m, "ffn_dim_multiplier": mult}))
    out = []
    for i, (args, kwargs) in enumerate(configs):
        text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        out.append(_hidden_dim_case(f"swiglu_hidden_dim({text}): matches the reference (a Python int)",
                                    hidden_dim_call(*args, **kwargs), seed * 1000 + 400 + i))
    s = seed * 1000 + 450
    out.append(_hidden("swiglu_hidden_dim", "d_model -1 and multiple_of -256 raise ValueError",
                       [hidden_dim_call(-1), hidden_dim_call(4096, multiple_of=-256)], s, part="validation"))
    return out


# ---------------------------------------------------------------------------------------------
# MoE
# ---------------------------------------------------------------------------------------------
_MOE_CONFIGS = [  # (shape, d_ff, E, K, dtype)
    ((2, 6, 16), 32, 4, 2, F64),
    ((3, 5, 8), 16, 8, 3, F32),
    ((1, 11, 8), 24, 2, 1, F64),
    ((2, 4, 12), 16, 6, 2, F32),
    ((4, 3, 8), 16, 8, 8, F64),  # K = E: every expert, softmax weights
]


@HIDDEN.exercise("MoE")
def _moe(seed: int) -> list[Case]:
    out = []
    for i, (shape, f, e, k, dtype) in enumerate(_MOE_CONFIGS):
        s, x, state = moe_inputs(seed * 1000 + 500 + 20 * i, shape, f, e, k, dtype)
        assert check_margin(torch.softmax(x.double().reshape(-1, shape[-1]) @ state["gate.weight"].double().T, -1),
                            k) >= MARGIN
        atol, rtol = router_tolerance(dtype)
        title = f"MoE({shape[-1]}, {f}, num_experts={e}, top_k={k}) on x {shape} {_dt(dtype)}"
        out.append(_hidden("MoE", f"{title}: y and router_logits match the reference",
                           [moe_call(x, state, f, e, k)], s, n=2, names=MOE_NAMES, atol=atol, rtol=rtol))
        if i < 3:
            markers = probe_markers(s + 7, e, shape[-1], dtype)
            out.append(_moe_sparse(f"sparse: {title}, the check's probe experts (NaN for a call holding a token not "
                                   "routed to that expert): y matches the reference's",
                                   moe_call(x, state, f, e, k, markers), s, dtype))
    s, x, state = moe_inputs(seed * 1000 + 620, (3, 4, 8), 16, 6, 2, F64)
    out.append(_moe_grad("backward: MoE(8, 16, num_experts=6, top_k=2) on x (3, 4, 8) float64, y back-propagated: "
                         "gate.weight's gradient matches the reference", moe_grad_call(x, state, 16, 6, 2), s))
    s = seed * 1000 + 600
    out.append(_hidden("MoE", "MoE(8, 16, num_experts=3, top_k=4) raises ValueError",
                       [Call("MoE", (8, 16, 3, 4))], s, part="validation"))
    return out


def _moe_grad(title: str, call: Call, seed: int) -> Case:
    shape = tuple(call.forward_args[0].shape)

    def judge(j: Judge) -> None:
        judge_moe_gradient(j, j.expected_tensor(0, 2), shape, F64)

    return Case("MoE", f"hidden case: {title}", [call], with_load_hints("MoE", judge), seed=seed, reference=True,
                mistakes=MISTAKES["MoE"], hidden=True)


def _moe_sparse(title: str, call: Call, seed: int, dtype: torch.dtype) -> Case:
    shape = tuple(call.forward_args[0].shape)

    def judge(j: Judge) -> None:
        judge_sparse(j, j.expected_tensor(0, 0), shape, dtype)

    return Case("MoE", f"hidden case: {title}", [call], with_load_hints("MoE", judge), seed=seed, reference=True,
                mistakes=MISTAKES["MoE"], hidden=True, part="sparse")


# ---------------------------------------------------------------------------------------------
# load_balancing_loss and route_with_capacity
# ---------------------------------------------------------------------------------------------
def _logits(seed: int, n: int, e: int, k: int, dtype: torch.dtype, scale: float, every: bool = False):
    for s in range(seed, seed + 200):
        logits = _randn(make_generator(s), n, e, scale=scale, dtype=dtype)
        if check_margin(torch.softmax(logits.double(), -1), k, every=every) >= MARGIN:
            return s, logits
    raise AssertionError(f"no logits with a top-{k} margin of {MARGIN} from seed {seed}")


@HIDDEN.exercise("load_balancing_loss")
def _balance(seed: int) -> list[Case]:
    out = []
    configs = [(32, 8, 2, F64, 2.0), (50, 4, 1, F32, 1.0), (12, 16, 4, F64, 3.0), (40, 6, 2, F32, 0.5),
               (9, 2, 1, F64, 4.0)]
    for i, (n, e, k, dtype, scale) in enumerate(configs):
        s, logits = _logits(seed * 1000 + 700 + 20 * i, n, e, k, dtype, scale)
        atol, rtol = router_tolerance(dtype)
        out.append(_hidden("load_balancing_loss", f"router_logits ({n}, {e}) {_dt(dtype)}, top_k={k}: matches the "
                           "reference", [Call("load_balancing_loss", (logits, k))], s, atol=atol, rtol=rtol))
    s, logits = _logits(seed * 1000 + 790, 20, 6, 2, F64, 1.5)
    out.append(_balance_grad("backward: router_logits (20, 6) float64, top_k=2: the gradient matches the "
                             "reference's (through P only)", balance_grad_call(logits, 2), s))
    return out


def _balance_grad(title: str, call: Call, seed: int) -> Case:
    def judge(j: Judge) -> None:
        judge_balance_gradient(j, j.expected_tensor(0, 1), F64)

    return Case("load_balancing_loss", f"hidden case: {title}", [call], judge, seed=seed, reference=True,
                mistakes=MISTAKES["load_balancing_loss"], hidden=True)


@HIDDEN.exercise("route_with_capacity")
def _route(seed: int) -> list[Case]:
    out = []
    configs = [(16, 4, 2, 5, F64), (20, 8, 3, 4, F32), (10, 3, 1, 2, F64), (12, 6, 2, 1, F32), (7, 4, 2, 30, F64)]
    for i, (n, e, k, capacity, dtype) in enumerate(configs):
        s, logits = _logits(seed * 1000 + 800 + 20 * i, n, e, k, dtype, 1.5, every=True)
        atol, rtol = router_tolerance(dtype)
        out.append(_hidden("route_with_capacity", f"router_logits ({n}, {e}) {_dt(dtype)}, top_k={k}, capacity "
                           f"{capacity}: matches the reference", [Call("route_with_capacity", (logits, k, capacity))],
                           s, n=3, names=ROUTE_NAMES, atol=atol, rtol=rtol))
    s = seed * 1000 + 890
    out.append(_hidden("route_with_capacity", "capacity -3 raises ValueError",
                       [Call("route_with_capacity", (_randn(make_generator(s), 4, 3), 1, -3))], s))
    return out

cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
