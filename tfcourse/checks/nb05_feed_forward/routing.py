"""Notebook 05's visible cases of the mixture of experts: ``MoE``, ``load_balancing_loss`` and
the optional ``route_with_capacity`` (exercises 5-7), which register after cases.py's exercises
(this module imports it), as in the notebook.

Oracles: the MoE as a *dense* weighted sum over all E experts (the sparse answer must agree with
it), hand-computable balance losses (perfectly balanced routing gives 1.0, collapsed routing ≈
E·P_0) and a plain Python loop for the capacity queue.

Tolerances (docs/conventions.md, "Where correct public code differs"): the MoE router, the balance loss and
the capacity routing may take the softmax in float32 (Hugging Face's Mixtral does), so their
float64 results are judged at float32 level, ``ROUTER_FLOAT64_TOL`` = (atol 1e-6, rtol 1e-5);
router logits themselves (gate(x)) at float64 tolerance. Every MoE/routing input is built with a
margin between the K-th and the (K+1)-th probability of every token (``MARGIN``), so no rounding
can change the top-K selection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ...device import make_generator
from ..call import Call, Instance, Step
from ..case import Case, Judge
from ..evidence import grad_output_for
from ..outcome import NO_GRADIENT
from .cases import (
    F32,
    F64,
    NOTEBOOK,
    make_case,
    randn,
    random_weight,
    require_value_error,
    returned_tensor,
    swiglu_oracle,
    swiglu_state,
)
from .hint_texts import HINTS

__all__ = ["BALANCE_GRAD_NAMES", "GRAD_TOL", "MARGIN", "MOE_GRAD_NAMES", "MOE_NAMES", "ROUTER_FLOAT64_TOL", "ROUTE_NAMES", "balance_grad_call", "balance_oracle", "check_margin", "circulant_logits", "error_hint", "judge_balance_gradient", "judge_moe_gradient", "judge_sparse", "moe_call", "moe_grad_call", "moe_inputs", "moe_oracle", "probe_markers", "router_tolerance"]

ROUTER_FLOAT64_TOL = (1e-6, 1e-5)
# the smallest gap between the K-th and the (K+1)-th router probability of any token in a case
MARGIN = 1e-3
MOE_NAMES = ("y", "router_logits")
MOE_GRAD_NAMES = ("y", "router_logits", "gate.weight.grad")
BALANCE_GRAD_NAMES = ("loss", "router_logits.grad")
# gradients of float64 routing (a float32 softmax inside is allowed): float32 level
GRAD_TOL = (1e-6, 1e-5)
ROUTE_NAMES = ("expert_index", "weights", "kept")
PROBE_EXPERT = "tfcourse.checks.nb05_feed_forward.probes:RoutedExpert"
SWIGLU_PROJ = ("gate_proj", "up_proj", "down_proj")


def router_tolerance(dtype: torch.dtype) -> tuple[float | None, float | None]:
    """(atol, rtol) for routing results of ``dtype``: float32 level for float64, else the default."""
    return ROUTER_FLOAT64_TOL if dtype == F64 else (None, None)


def error_hint(j: Judge) -> None:
    """Fail with a hint when a call raised the very error (type and message) that exactly one
    catalogued mistake raises on every call of the case (e.g. a top-K over the wrong axis whose
    shapes no longer broadcast); otherwise return and let the judge report the exception."""
    if not any(o.kind == "error" for o in j.outcomes) or not j.case.mistakes:
        return
    hints = []
    for mistake in j.case.mistakes:
        if mistake.hint in hints:
            continue
        theirs = [j._mistake_outcome(mistake, i) for i in range(len(j.case.calls))]
        if all(o.kind == t.kind and o.error_type == t.error_type and o.error_message == t.error_message
               for o, t in zip(j.outcomes, theirs, strict=True)):
            hints.append(mistake.hint)
    if len(hints) == 1:
        o = next(o for o in j.outcomes if o.kind == "error")
        j.fail(f"raised {o.error_line()[:150]}", hint=hints[0])


# ---------------------------------------------------------------------------------------------
# MoE: a dense oracle (every expert on every token, weighted by the renormalised top-K)
# ---------------------------------------------------------------------------------------------
def check_margin(probs: torch.Tensor, k: int, *, every: bool = False) -> float:
    """The smallest gap between the k-th and (k+1)-th largest probability of any row (every: the
    smallest gap among the top k+1, so that their order is certain too)."""
    top = probs.double().sort(dim=-1, descending=True).values
    if every:
        stop = min(k + 1, top.size(-1))
        return float((top[:, : stop - 1] - top[:, 1:stop]).min()) if stop > 1 else math.inf
    return float((top[:, k - 1] - top[:, k]).min()) if k < top.size(-1) else math.inf


def moe_inputs(seed: int, shape: tuple[int, ...], d_ff: int, num_experts: int, top_k: int, dtype: torch.dtype,
               *, every: bool = False, need_idle: bool = False) -> tuple[int, torch.Tensor, dict[str, torch.Tensor]]:
    """(seed used, x, state) for MoE(D, d_ff, E, K): the first seed from ``seed`` on whose router
    probabilities (computed from the dtype-rounded x and gate) have a gap of at least MARGIN at
    the top-K boundary of every token (need_idle: and some expert gets no token)."""
    d = shape[-1]
    for s in range(seed, seed + 200):
        g = make_generator(s)
        x = (torch.randn(*shape, generator=g, dtype=F64)).to(dtype)
        gate = random_weight(g, num_experts, d, dtype, 2.5)
        probs = torch.softmax(F.linear(x.double().reshape(-1, d), gate.double()), dim=-1)
        if check_margin(probs, top_k, every=every) < MARGIN:
            continue
        if need_idle and bool((torch.bincount(probs.topk(top_k).indices.reshape(-1), minlength=num_experts)
                               > 0).all()):
            continue
        state = {"gate.weight": gate}
        for e in range(num_experts):
            state.update(swiglu_state(s * 100 + e, d, d_ff, dtype, prefix=f"experts.{e}."))
        return s, x, state
    raise AssertionError(f"no MoE input with a top-{top_k} margin of {MARGIN} from seed {seed}")


def moe_call(x: torch.Tensor, state: dict[str, torch.Tensor], d_ff: int, num_experts: int, top_k: int,
             markers: torch.Tensor | None = None) -> Call:
    """MoE(D, d_ff, E, K) loaded with ``state``, called on x. With ``markers`` (E, D), the sparse
    part's call: every expert replaced by a ``probes.RoutedExpert`` (same weights, plus its marker,
    NaN for a call that holds a token not routed to it)."""
    replace = () if markers is None else tuple(
        (f"experts.{e}", Instance(PROBE_EXPERT, (state["gate.weight"], e, top_k,
                                                 *(state[f"experts.{e}.{p}.weight"] for p in SWIGLU_PROJ),
                                                 markers[e])))
        for e in range(num_experts))
    return Call("MoE", (x.size(-1), d_ff, num_experts, top_k), state=state, forward_args=(x,), replace=replace)


def probe_markers(seed: int, num_experts: int, d_model: int, dtype: torch.dtype) -> torch.Tensor:
    """(E, D) the vectors the probe experts add to their SwiGLU, drawn from ``seed``."""
    return (0.5 * torch.randn(num_experts, d_model, generator=make_generator(seed), dtype=F64)).to(dtype)


def moe_oracle(x: torch.Tensor, state: dict[str, torch.Tensor], num_experts: int, top_k: int,
               markers: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, router_logits, tokens routed to each expert) in float64, computed densely; with
    ``markers``, of the probe experts (each expert's SwiGLU plus its marker)."""
    h = x.double().reshape(-1, x.size(-1))
    logits = F.linear(h, state["gate.weight"].double())
    probs = torch.softmax(logits, dim=-1)
    top, index = probs.topk(top_k, dim=-1)
    weights = torch.zeros_like(probs).scatter(1, index, top / top.sum(dim=-1, keepdim=True))  # (N, E)
    outs = torch.stack([swiglu_oracle(h, state, f"experts.{e}.") for e in range(num_experts)], dim=1)  # (N, E, D)
    if markers is not None:
        outs = outs + markers.double()[None]
    y = (weights[..., None] * outs).sum(dim=1)
    counts = torch.bincount(index.reshape(-1), minlength=num_experts)
    return y.reshape(x.shape), logits, counts


def _moe_value_case(title: str, seed: int, shape: tuple[int, ...], d_ff: int, num_experts: int, top_k: int,
                    dtype: torch.dtype) -> Case:
    s, x, state = moe_inputs(seed, shape, d_ff, num_experts, top_k, dtype)
    n = math.prod(shape[:-1])

    def judge(j: Judge) -> None:
        y_want, logits_want, _ = moe_oracle(x, state, num_experts, top_k)
        y = returned_tensor(j, 0, 0, n=2, names=MOE_NAMES, shape=tuple(x.shape), dtype=dtype, float32_ok=True)
        logits = returned_tensor(j, 0, 1, n=2, names=MOE_NAMES, shape=(n, num_experts), dtype=dtype)
        j.close(logits, logits_want.to(dtype), name="router_logits", index=1, oracle="gate(x) as (N, E)")
        atol, rtol = router_tolerance(dtype)
        j.close(y, y_want.to(dtype), name="y", atol=atol, rtol=rtol,
                oracle="Σ_e w_e·SwiGLU_e(x) over all experts (w = 0 off the top-K)")

    return make_case("MoE", title, [moe_call(x, state, d_ff, num_experts, top_k)], judge, seed=s)


def moe_grad_call(x: torch.Tensor, state: dict[str, torch.Tensor], d_ff: int, num_experts: int, top_k: int) -> Call:
    """MoE's forward with autograd on: y is back-propagated; the outcome is (y, router_logits, gate.weight.grad)."""
    return Call("MoE", (x.size(-1), d_ff, num_experts, top_k), state=state, forward_args=(x,),
                grad_of=("gate.weight",))


def moe_gate_grad(x: torch.Tensor, state: dict[str, torch.Tensor], num_experts: int, top_k: int) -> torch.Tensor:
    """d y/d gate.weight (back-propagating grad_output_for(y)) of a correct MoE, in float64."""
    h = x.double().reshape(-1, x.size(-1))
    gate = state["gate.weight"].double().clone().requires_grad_(True)
    probs = torch.softmax(F.linear(h, gate), dim=-1)
    top, index = probs.topk(top_k, dim=-1)
    weights = torch.zeros_like(probs).scatter(1, index, top / top.sum(dim=-1, keepdim=True))  # (N, E)
    with torch.no_grad():
        outs = torch.stack([swiglu_oracle(h, state, f"experts.{e}.") for e in range(num_experts)], dim=1)
    y = (weights[..., None] * outs).sum(dim=1).reshape(x.shape)
    y.backward(grad_output_for(y))
    return gate.grad


def judge_moe_gradient(j: Judge, want: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """gate.weight's gradient (the outcome's third tensor) equals ``want``; a cut graph gets its hint."""
    o = j.outcomes[0]
    if o.kind == "error" and o.error_type == NO_GRADIENT:
        j.fail("no gradient reached gate.weight from y: the router could never learn", hint=HINTS["router_detached"])
    n = math.prod(shape[:-1])
    returned_tensor(j, 0, 0, n=3, names=MOE_GRAD_NAMES, shape=shape, dtype=dtype, float32_ok=True)
    returned_tensor(j, 0, 1, n=3, names=MOE_GRAD_NAMES, shape=(n, want.size(0)), dtype=dtype)
    grad = j.tensor(0, 2, n=3, names=MOE_GRAD_NAMES, shape=tuple(want.shape))
    j.close(grad, want.to(grad.dtype), name="gate.weight.grad", index=2, atol=GRAD_TOL[0], rtol=GRAD_TOL[1],
            oracle="the float64 gradient", hint=lambda: j.mistake_hint() or HINTS["router_gradient"])


def _moe_grad_case(title: str, seed: int, shape: tuple[int, ...], d_ff: int, num_experts: int, top_k: int) -> Case:
    s, x, state = moe_inputs(seed, shape, d_ff, num_experts, top_k, F64)

    def judge(j: Judge) -> None:
        judge_moe_gradient(j, moe_gate_grad(x, state, num_experts, top_k), tuple(x.shape), F64)

    return make_case("MoE", title, [moe_grad_call(x, state, d_ff, num_experts, top_k)], judge, seed=s)


def judge_sparse(j: Judge, y_want: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """y of a MoE whose experts are probe experts (``moe_call`` with markers) equals ``y_want``:
    NaN means an expert's forward got a token not routed to it; other values, that the experts'
    own forward did not make y (their projections called one by one)."""
    o = j.outcomes[0]
    if o.kind == "error":
        j.values(0)  # reports the exception
    y = returned_tensor(j, 0, 0, n=2, names=MOE_NAMES, shape=shape, dtype=dtype, float32_ok=True)
    if bool(y.isnan().any()):
        j.fail("y holds NaN: an expert's forward was given a token not routed to it (the check's experts return "
               "NaN for the whole call then, whatever weight or mask is applied afterwards)",
               hint=HINTS["extra_rows"])  # many routing mistakes give NaN too: this names the part's rule
    atol, rtol = router_tolerance(dtype)
    j.close(y, y_want.to(dtype), name="y", atol=atol, rtol=rtol, hint=lambda: j.mistake_hint() or HINTS["expert_parts"],
            oracle="Σ_e w_e·expert_e(x) with the check's experts (SwiGLU plus a marker vector)")


def _moe_sparse_case(title: str, seed: int, shape: tuple[int, ...], d_ff: int, num_experts: int, top_k: int,
                     dtype: torch.dtype, need_idle: bool = False) -> Case:
    s, x, state = moe_inputs(seed, shape, d_ff, num_experts, top_k, dtype, need_idle=need_idle)
    markers = probe_markers(s + 7, num_experts, shape[-1], dtype)

    def judge(j: Judge) -> None:
        judge_sparse(j, moe_oracle(x, state, num_experts, top_k, markers)[0], tuple(x.shape), dtype)

    return make_case("MoE", title, [moe_call(x, state, d_ff, num_experts, top_k, markers)], judge, seed=s,
                     part="sparse")


@NOTEBOOK.exercise("MoE", parts=("core", "sparse", "validation"))
def _moe_cases() -> list[Case]:
    """Check ``MoE(d_model, d_ff, num_experts, top_k)``: (y, router_logits (N, E)) against a dense
    weighted sum of the experts.

    part: "core" (values, router logits, attributes, the gradient), "sparse" (each expert's
    forward receives only the tokens routed to it) or "validation" (the top_k ValueError), the
    three test cells; None checks all."""
    cases = [
        _moe_value_case("MoE(8, 16, num_experts=4, top_k=2), x (2, 5, 8) float64: y equals the dense weighted sum "
                        "of the top-2 experts, router_logits = gate(x) (N, E)", 5301, (2, 5, 8), 16, 4, 2, F64),
        _moe_value_case("MoE(16, 32, num_experts=8, top_k=2), x (1, 7, 16) float32", 5311, (1, 7, 16), 32, 8, 2, F32),
        _moe_value_case("MoE(8, 16, num_experts=8, top_k=1), x (3, 4, 8) float64: each token's y is its one "
                        "expert's output (weight 1)", 5321, (3, 4, 8), 16, 8, 1, F64),
    ]
    bad_k = [(8, 16, 4, 5), (8, 16, 4, 0)]

    def bad(j: Judge) -> None:
        for i, args in enumerate(bad_k):
            require_value_error(j, f"MoE{args}", HINTS["moe_top_k"], call=i)

    cases.append(make_case("MoE", "MoE(8, 16, num_experts=4, top_k=5) and top_k=0 raise ValueError",
                           [Call("MoE", args) for args in bad_k], bad, part="validation"))

    def attributes(j: Judge) -> None:
        o = j.outcomes[0]
        if o.kind == "error":
            j.values(0)
        got = [int(t) for t in o.tensors] if o.ok else []
        j.require(got == [4, 2], f"num_experts, top_k read {got}; expected [4, 2]",
                  hint="keep the arguments as attributes: self.num_experts = num_experts, self.top_k = top_k")

    cases.append(make_case("MoE", "MoE(8, 16, num_experts=4, top_k=2) has attributes num_experts = 4 and top_k = 2",
                           [Call("MoE", (8, 16, 4, 2), steps=(Step("num_experts", attribute=True),
                                                              Step("top_k", attribute=True)))], attributes))
    cases.append(_moe_grad_case("backward (float64): y back-propagated, gate.weight's gradient equals that of the "
                                "renormalised top-2 weights (MoE(8, 16, 4, top_k=2), x (2, 5, 8))", 5351, (2, 5, 8),
                                16, 4, 2))
    cases.append(_moe_sparse_case("sparse: each expert's forward receives only the tokens routed to it (MoE(8, 16, 8, "
                                  "top_k=2), x (2, 6, 8) float64, the check's probe experts: NaN for a call holding "
                                  "a token not routed to that expert)", 5331, (2, 6, 8),
                                  16, 8, 2, F64))
    cases.append(_moe_sparse_case("sparse, top_k=1 with an expert that no token chose (skip it or call it on 0 "
                                  "rows): MoE(8, 16, 4, 1), x (1, 9, 8) float32", 5341, (1, 9, 8), 16, 4, 1, F32,
                                  need_idle=True))
    return cases


# ---------------------------------------------------------------------------------------------
# load_balancing_loss: hand-computable values and the formula in float64
# ---------------------------------------------------------------------------------------------
def balance_oracle(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """E · Σ_e f_e · P_e in float64 (f: top-K assignments / (N·K), P: mean softmax probability)."""
    n, e = logits.shape
    probs = torch.softmax(logits.double(), dim=-1)
    counts = torch.bincount(probs.detach().topk(top_k, dim=-1).indices.reshape(-1), minlength=e).double()
    return e * (counts / (n * top_k) * probs.mean(0)).sum()


def balance_grad_call(logits: torch.Tensor, top_k: int) -> Call:
    """load_balancing_loss with autograd: the outcome is (loss, d loss / d router_logits)."""
    return Call("load_balancing_loss", (logits, top_k), grad_of=("router_logits",))


def balance_grad(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """d loss/d router_logits in float64 with f held constant (a count): the gradient through P."""
    leaf = logits.double().clone().requires_grad_(True)
    loss = balance_oracle(leaf, top_k)
    loss.backward(grad_output_for(loss))
    return leaf.grad


def judge_balance_gradient(j: Judge, want: torch.Tensor, dtype: torch.dtype) -> None:
    o = j.outcomes[0]
    if o.kind == "error" and o.error_type == NO_GRADIENT:
        j.fail("the loss does not reach router_logits through autograd: training could not use it",
               hint=HINTS["no_graph"])
    error_hint(j)
    returned_tensor(j, 0, 0, n=2, names=BALANCE_GRAD_NAMES, shape=(), dtype=dtype, what="router_logits",
                    float32_ok=True)
    grad = j.tensor(0, 1, n=2, names=BALANCE_GRAD_NAMES, shape=tuple(want.shape))
    j.close(grad, want.to(grad.dtype), name="router_logits.grad", index=1, atol=GRAD_TOL[0], rtol=GRAD_TOL[1],
            oracle="the gradient through P", hint=lambda: j.mistake_hint() or HINTS["f_gradient"])


def _balance_grad_case(title: str, logits: torch.Tensor, top_k: int, seed: int) -> Case:
    def judge(j: Judge) -> None:
        judge_balance_gradient(j, balance_grad(logits, top_k), logits.dtype)

    return make_case("load_balancing_loss", title, [balance_grad_call(logits, top_k)], judge, seed=seed)


def _random_logits(seed: int, n: int, e: int, k: int, dtype: torch.dtype, scale: float = 1.5,
                   every: bool = False) -> tuple[int, torch.Tensor]:
    for s in range(seed, seed + 200):
        logits = randn(s, n, e, dtype=dtype, scale=scale)
        if check_margin(torch.softmax(logits.double(), -1), k, every=every) >= MARGIN:
            return s, logits
    raise AssertionError(f"no logits with a top-{k} margin of {MARGIN} from seed {seed}")


def circulant_logits(base: Sequence[float], rounds: int = 2) -> torch.Tensor:
    """Rows: ``base`` rolled by 0, 1, ..., E-1, ``rounds`` times: every expert is in the same number
    of top-K lists and has mean probability 1/E, so the balance loss is exactly 1."""
    b = torch.tensor(base, dtype=F64)
    return torch.stack([b.roll(i) for i in range(len(base))] * rounds)


def _balance_case(title: str, logits: torch.Tensor, top_k: int, seed: int | None = None,
                  want: float | None = None) -> Case:
    dtype = logits.dtype

    def judge(j: Judge) -> None:
        error_hint(j)
        got = returned_tensor(j, shape=(), dtype=dtype, what="router_logits", float32_ok=True)
        expected = balance_oracle(logits, top_k) if want is None else torch.tensor(want, dtype=F64)
        atol, rtol = router_tolerance(dtype)
        j.close(got, expected.to(dtype), name="loss", atol=atol, rtol=rtol,
                oracle="the value" if want is not None else "E·Σ f·P")

    return make_case("load_balancing_loss", title, [Call("load_balancing_loss", (logits, top_k))], judge, seed=seed)


@NOTEBOOK.exercise("load_balancing_loss")
def _balance_cases() -> list[Case]:
    """Check ``load_balancing_loss(router_logits, top_k)`` = E·Σ f·P: 1.0 for balanced routing."""
    balanced = circulant_logits([2.0, 1.0, 0.0, -1.5])
    collapsed = torch.tensor([[5.0, 0.0, -1.0, -2.0]] * 6, dtype=F64) + 0.1 * randn(5411, 6, 4)
    p0 = float(torch.softmax(collapsed, -1)[:, 0].mean())
    s1, l1 = _random_logits(5421, 16, 4, 2, F64)
    s2, l2 = _random_logits(5431, 24, 8, 2, F32)
    s3, l3 = _random_logits(5441, 10, 8, 3, F64)
    return [
        _balance_case("perfectly balanced routing (8 tokens, E = 4, top_k = 2: every expert is in 4 top-2 lists and "
                      "has mean probability 1/4): the loss is 1.0", balanced, 2, want=1.0),
        _balance_case(f"collapsed routing (every token picks expert 0, top_k = 1, E = 4): the loss is E·P_0 = "
                      f"{4 * p0:.4f}", collapsed, 1, seed=5411, want=4 * p0),
        _balance_case("random router_logits (N, E) = (16, 4), top_k = 2, float64: equals E·Σ_e f_e·P_e", l1, 2, s1),
        _balance_case("random router_logits (24, 8), top_k = 2, float32", l2, 2, s2),
        _balance_case("random router_logits (10, 8), top_k = 3, float64", l3, 3, s3),
        _balance_grad_case("backward (float64, (16, 4), top_k = 2): the gradient w.r.t. router_logits flows "
                           "through P only (f is a count)", l1, 2, s1),
    ]


# ---------------------------------------------------------------------------------------------
# route_with_capacity (optional challenge): a Python loop over the queue
# ---------------------------------------------------------------------------------------------
def route_oracle(logits: torch.Tensor, top_k: int, capacity: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(expert_index, weights (float64), kept) by offering slot 0 of every token, then slot 1, ..."""
    probs = torch.softmax(logits.double(), dim=-1)
    top, index = probs.topk(top_k, dim=-1)
    weights = top / top.sum(dim=-1, keepdim=True)
    n = logits.size(0)
    kept = torch.zeros(n, top_k, dtype=torch.bool)
    taken: dict[int, int] = {}
    for slot in range(top_k):
        for token in range(n):
            e = int(index[token, slot])
            if taken.get(e, 0) < capacity:
                kept[token, slot] = True
                taken[e] = taken.get(e, 0) + 1
    return index, weights, kept


def _route_case(title: str, logits: torch.Tensor, top_k: int, capacity: int, seed: int | None = None) -> Case:
    dtype, n = logits.dtype, logits.size(0)

    def judge(j: Judge) -> None:
        index_want, weights_want, kept_want = route_oracle(logits, top_k, capacity)
        kw = {"n": 3, "names": ROUTE_NAMES, "shape": (n, top_k)}
        index = returned_tensor(j, 0, 0, dtype=torch.int64, what="topk indices (int64)", **kw)
        weights = returned_tensor(j, 0, 1, dtype=dtype, what="router_logits", float32_ok=True, **kw)
        kept = returned_tensor(j, 0, 2, dtype=torch.bool, what="a mask (bool)", **kw)
        j.close(index, index_want, name="expert_index", oracle="top-K, descending")
        atol, rtol = router_tolerance(dtype)
        j.close(weights, weights_want.to(dtype), name="weights", index=1, atol=atol, rtol=rtol,
                oracle="top-K renormalised")
        j.close(kept, kept_want, name="kept", index=2, oracle="the queue")

    return make_case("route_with_capacity", title, [Call("route_with_capacity", (logits, top_k, capacity))], judge,
                     seed=seed)


@NOTEBOOK.exercise("route_with_capacity")
def _route_cases() -> list[Case]:
    """Check ``route_with_capacity(router_logits, top_k, capacity)`` (optional, 0 points) against a
    loop over the queue: slot 0 of every token first, each expert keeps the first `capacity`."""
    hand = torch.tensor([[2.0, 0.5, 0.0], [2.0, 0.0, 0.5], [0.5, 2.0, 0.0], [2.0, 0.3, 0.0], [0.0, 0.4, 2.0],
                         [2.0, 0.0, 0.6]], dtype=F64)
    s1, l1 = _random_logits(5501, 8, 4, 2, F64, every=True)
    s2, l2 = _random_logits(5511, 5, 4, 2, F32, every=True)
    s3, l3 = _random_logits(5521, 6, 8, 2, F64, every=True)
    cases = [
        _route_case("6 tokens, E = 3, top_k = 1, capacity 2: tokens 0, 1, 3, 5 choose expert 0, which keeps tokens "
                    "0 and 1 and drops 3 and 5", hand, 1, 2),
        _route_case("(N, E) = (8, 4), top_k = 2, capacity 3, float64: slot 0 of every token is offered before any "
                    "slot 1", l1, 2, 3, s1),
        _route_case("capacity 0 drops everything ((5, 4) float32, top_k = 2)", l2, 2, 0, s2),
        _route_case("capacity 12 = N·K keeps everything ((6, 8) float64, top_k = 2)", l3, 2, 12, s3),
    ]

    def bad(j: Judge) -> None:
        require_value_error(j, "route_with_capacity(logits, 2, -1)", HINTS["capacity_error"])

    cases.append(make_case("route_with_capacity", "capacity -1 raises ValueError",
                           [Call("route_with_capacity", (l1, 2, -1))], bad))
    return cases
