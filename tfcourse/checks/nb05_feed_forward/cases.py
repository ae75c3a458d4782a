"""Notebook 05's visible cases: oracles that do not hand out the answer, and properties.

Oracles: ``F.gelu`` (both forms; in float64 for half-precision inputs), the FFNs written with
``F.linear``, ``F.gelu`` and ``F.silu`` on the same weights, Meta's published Llama widths
(11008, 13824, 14336, 28672), the MoE as a *dense* weighted sum over all E experts (the sparse
answer must agree with it), hand-computable balance losses (perfectly balanced routing gives 1.0,
collapsed routing ≈ E·P_0) and a plain Python loop for the capacity queue.

Tolerances (docs/conventions.md, shared/design/peer-code.md): gelu, FeedForward and SwiGLU keep
float64 in float64 and are judged at float64 tolerance; the MoE router, the balance loss and the
capacity routing may take the softmax in float32 (Hugging Face's Mixtral does), so their float64
results are judged at float32 level, ``ROUTER_FLOAT64_TOL`` = (atol 1e-6, rtol 1e-5); router logits
themselves (gate(x)) at float64 tolerance. Every MoE/routing input is built with a margin between
the K-th and the (K+1)-th probability of every token (``MARGIN``), so no rounding can change the
top-K selection.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import make_generator
from ..call import INT_STEP, Call, Step
from ..case import Case, Judge, fmt_dtype, not_a_python_int
from ..evidence import grad_output_for
from ..outcome import NO_GRADIENT
from ..protocol import NotebookChecks
from .mistakes import HINTS, MISTAKES

__all__ = ["GRAD_TOL", "LOAD_HINTS", "MARGIN", "MOE_GRAD_NAMES", "MOE_NAMES", "NOTEBOOK", "ROUTER_FLOAT64_TOL", "ROUTE_NAMES", "balance_grad_call", "balance_oracle", "check_margin", "circulant_logits", "error_hint", "ffn_state", "hidden_dim_call", "judge_balance_gradient", "judge_hidden_dim", "judge_moe_gradient", "judge_rows", "moe_call", "moe_grad_call", "moe_inputs", "moe_oracle", "router_tolerance", "swiglu_state", "with_load_hints"]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("05_feed_forward", calls={"FeedForward": ("gelu",), "MoE": ("SwiGLU",)})


F64, F32 = torch.float64, torch.float32
HALF = (torch.float16, torch.bfloat16)
ROUTER_FLOAT64_TOL = (1e-6, 1e-5)
# the smallest gap between the K-th and the (K+1)-th router probability of any token in a case
MARGIN = 1e-3
MOE_NAMES = ("y", "router_logits")
MOE_GRAD_NAMES = ("y", "router_logits", "gate.weight.grad")
BALANCE_GRAD_NAMES = ("loss", "router_logits.grad")
# gradients of float64 routing (a float32 softmax inside is allowed): float32 level
GRAD_TOL = (1e-6, 1e-5)
ROUTE_NAMES = ("expert_index", "weights", "kept")


def router_tolerance(dtype: torch.dtype) -> tuple[float | None, float | None]:
    """(atol, rtol) for routing results of ``dtype``: float32 level for float64, else the default."""
    return ROUTER_FLOAT64_TOL if dtype == F64 else (None, None)


def _dt(dtype: torch.dtype) -> str:
    return fmt_dtype(dtype)


def _x(seed: int, *shape: int, dtype: torch.dtype = F64, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=make_generator(seed), dtype=F64) * scale).to(dtype)


def _get(j: Judge, call: int = 0, index: int = 0, *, shape: Sequence[int], dtype: torch.dtype, n: int = 1,
         names: Sequence[str] | None = None, what: str = "x", float32_ok: bool = False) -> torch.Tensor:
    """One returned tensor: shape first (Judge.tensor), then dtype with the precision hints
    (float32_ok: the contract allows computing in float32, so a float32 result is told to cast back)."""
    t = j.tensor(call, index, n=n, names=names, shape=shape)
    if t.dtype != dtype:
        name = names[index] if names else "output"
        hint = None
        if (dtype in HALF or float32_ok) and t.dtype == F32:
            hint = HINTS["float32_out"] if not float32_ok else HINTS["cast_back"].format(what=what)
        elif dtype == F64 and t.dtype == F32:
            hint = HINTS["float64_down"]
        elif dtype == torch.bool:
            hint = HINTS["bool_mask"]
        j.fail(f"{name} has dtype {_dt(t.dtype)}; expected {_dt(dtype)}, the dtype of {what}", hint=hint)
    return t


def _raises(j: Judge, what: str, hint: str, call: int = 0) -> None:
    """Call ``call`` must raise ValueError."""
    o = j.outcomes[call]
    if o.kind != "error":
        j.fail(f"{what}: returned without an error; expected ValueError", hint=hint)
    j.require(o.error_type == "ValueError", f"{what}: raised {o.error_line()[:90]}; expected ValueError",
              hint=hint + " (an assert or a failing operation raises other errors)", call=call)


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
# Modules loaded by name: a load error names the layers
# ---------------------------------------------------------------------------------------------
LOAD_HINTS = {
    "FeedForward": {
        "names": "name the two layers up_proj and down_proj (nn.Linear attributes): the grader loads "
                 "up_proj.weight, up_proj.bias, down_proj.weight, down_proj.bias",
        "bias": "pass bias=bias to both nn.Linear layers: with bias=False FeedForward has no bias",
        "size": "up_proj is nn.Linear(d_model, d_ff) (weight (F, D)), down_proj is nn.Linear(d_ff, d_model)",
    },
    "SwiGLU": {
        "names": "name the three layers gate_proj, up_proj and down_proj (Hugging Face LlamaMLP's names): the "
                 "grader loads gate_proj.weight, up_proj.weight, down_proj.weight",
        "bias": "SwiGLU's three layers have no bias: nn.Linear(..., bias=False)",
        "size": "gate_proj and up_proj are nn.Linear(d_model, d_ff, bias=False), down_proj "
                "nn.Linear(d_ff, d_model, bias=False)",
    },
    "MoE": {
        "names": "the router is `gate` (nn.Linear(d_model, num_experts, bias=False)) and the experts are "
                 "`experts`, an nn.ModuleList of num_experts SwiGLU (a plain list registers no parameters): the "
                 "grader loads gate.weight, experts.0.gate_proj.weight, ...",
        "bias": "the router has no bias: gate = nn.Linear(d_model, num_experts, bias=False)",
        "size": "gate is nn.Linear(d_model, num_experts) (weight (E, D)); each expert is SwiGLU(d_model, d_ff)",
        "expert": "the keys that did not load are all inside the experts (experts.N.…): they are your SwiGLU "
                  "from exercise 3, which must hold exactly gate_proj.weight, up_proj.weight and down_proj.weight (nn.Linear "
                  "without bias): fix SwiGLU first, its check cell (test_SwiGLU) says what is wrong",
    },
}


EXPERT_KEY = re.compile(r"experts\.\d+\.")


def _load_hint(exercise: str, lines: list[str]) -> str | None:
    hints = LOAD_HINTS[exercise]
    keys = [k for ln in lines for k in re.findall(r'"([^"]+)"', ln)]
    own = [k for ln in lines if not ln.startswith("Unexpected") for k in re.findall(r'"([^"]+)"', ln)]
    own += [m for ln in lines for m in re.findall(r"size mismatch for ([\w.]+)", ln)]
    if exercise == "MoE" and own and all(EXPERT_KEY.match(k) for k in keys + own):
        # every bad key is inside experts the module does have (not a plain list): the learner's SwiGLU
        return hints["expert"]
    unexpected = any(ln.startswith("Unexpected") for ln in lines)
    missing = [ln for ln in lines if ln.startswith("Missing")]
    if unexpected:
        return hints["names"]
    if missing:
        return hints["bias"] if all(".bias" in ln for ln in missing) else hints["names"]
    return hints["size"] if any("size mismatch" in ln for ln in lines) else None


def with_load_hints(exercise: str, judge: Callable[[Judge], None]) -> Callable[[Judge], None]:
    """Wrap a module's judge: weights that could not be loaded by name get a hint."""

    def wrapped(j: Judge) -> None:
        for o in j.outcomes:
            if o.kind == "error" and "loading state_dict" in o.error_message:
                lines = [ln.strip() for ln in o.error_message.splitlines()[1:] if ln.strip()]
                detail = next((ln for ln in lines if "key(s)" in ln or "size mismatch" in ln),
                              lines[0] if lines else "")
                j.fail(f"the weights could not be loaded by name: {detail[:110]}", hint=_load_hint(exercise, lines))
        judge(j)

    return wrapped


def _case(exercise: str, title: str, calls: list[Call], judge: Callable[[Judge], None], seed: int | None = None,
          part: str = "core") -> Case:
    if exercise in LOAD_HINTS:
        judge = with_load_hints(exercise, judge)
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise], part=part)


# ---------------------------------------------------------------------------------------------
# gelu(x, approximate="none"): F.gelu
# ---------------------------------------------------------------------------------------------
def gelu_inputs() -> torch.Tensor:
    """x in [-8, 8] (step 0.1) and tiny values, float64, shape (8, 21)."""
    tiny = torch.tensor([1e-6, -1e-6, 1e-4, -1e-4, 3e-3, -3e-3, 0.0], dtype=F64)
    return torch.cat([torch.linspace(-8, 8, 161, dtype=F64), tiny]).reshape(8, 21)


def _gelu_case(title: str, x: torch.Tensor, approximate: str | None, seed: int | None, part: str) -> Case:
    kwargs = {} if approximate is None else {"approximate": approximate}
    form = approximate or "none"
    oracle = f'F.gelu(x{", approximate=" + repr(form) if form != "none" else ""})' + \
        (" in float64" if x.dtype in HALF else "")

    def judge(j: Judge) -> None:
        got = _get(j, shape=tuple(x.shape), dtype=x.dtype)
        expected = F.gelu(x.double() if x.dtype in HALF else x, approximate=form)
        j.close(got, expected, oracle=oracle, tol_dtype=x.dtype if x.dtype in HALF else None,
                hint=float64_hint(j, got, expected))

    return _case("gelu", title, [Call("gelu", (x,), kwargs)], judge, seed=seed, part=part)


@NOTEBOOK.exercise("gelu", parts=("core", "tanh"))
def _gelu_cases() -> list[Case]:
    """Check ``gelu(x, approximate="none")`` against F.gelu.

    part: "core" (the exact form, float32/float64) or "tanh" (the tanh form, float16/bfloat16 for
    both forms, and the ValueError for another `approximate`), the two test cells that score it;
    None checks both."""
    x = gelu_inputs()
    cases = [
        _gelu_case("exact form (default approximate), float64, x from -8 to 8 and tiny values: matches F.gelu",
                   x, None, None, "core"),
        _gelu_case('approximate="none" given, (B, T, D) = (2, 3, 16) float32: matches F.gelu',
                   _x(5001, 2, 3, 16, dtype=F32, scale=3.0), "none", 5001, "core"),
    ]

    def bad(j: Judge) -> None:
        _raises(j, 'gelu(x, approximate="erf")', HINTS["approximate_error"])

    cases.append(_case("gelu", 'approximate="erf" (neither "none" nor "tanh") raises ValueError',
                       [Call("gelu", (_x(5011, 4),), {"approximate": "erf"})], bad, part="tanh"))
    cases.append(_gelu_case('approximate="tanh", float64, x from -8 to 8 and tiny values: matches '
                            'F.gelu(x, approximate="tanh")', x, "tanh", None, "tanh"))
    for i, dtype in enumerate(HALF):
        for k, form in enumerate(("none", "tanh")):
            s = 5021 + 10 * i + k
            xh = _x(s, 3, 40, dtype=dtype, scale=3.0)
            cases.append(_gelu_case(f'approximate="{form}", {_dt(dtype)} x (3, 40): {_dt(dtype)} out, close to '
                                    "F.gelu in float64", xh, form, s, "core" if form == "none" else "tanh"))
    return cases


# ---------------------------------------------------------------------------------------------
# FeedForward and SwiGLU: the formulas with F.linear on the same weights
# ---------------------------------------------------------------------------------------------
def _weight(g: torch.Generator, rows: int, cols: int, dtype: torch.dtype, gain: float = 1.0) -> torch.Tensor:
    return (torch.randn(rows, cols, generator=g, dtype=F64) * gain / math.sqrt(cols)).to(dtype)


def ffn_state(seed: int, d: int, f: int, dtype: torch.dtype, bias: bool = True) -> dict[str, torch.Tensor]:
    """FeedForward weights: gain 2 on up_proj, so GELU's curved region (x < 1) matters."""
    g = make_generator(seed)
    state = {"up_proj.weight": _weight(g, f, d, dtype, 2.0), "down_proj.weight": _weight(g, d, f, dtype)}
    if bias:
        state["up_proj.bias"] = (0.5 * torch.randn(f, generator=g, dtype=F64)).to(dtype)
        state["down_proj.bias"] = (0.5 * torch.randn(d, generator=g, dtype=F64)).to(dtype)
    return state


def swiglu_state(seed: int, d: int, f: int, dtype: torch.dtype, prefix: str = "") -> dict[str, torch.Tensor]:
    g = make_generator(seed)
    return {f"{prefix}gate_proj.weight": _weight(g, f, d, dtype, 2.0), f"{prefix}up_proj.weight": _weight(g, f, d, dtype),
            f"{prefix}down_proj.weight": _weight(g, d, f, dtype)}


def ffn_oracle(x: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
    """down(gelu(up(x))) in float64."""
    s = {k: v.double() for k, v in state.items()}
    h = F.gelu(F.linear(x.double(), s["up_proj.weight"], s.get("up_proj.bias")))
    return F.linear(h, s["down_proj.weight"], s.get("down_proj.bias"))


def swiglu_oracle(x: torch.Tensor, state: dict[str, torch.Tensor], prefix: str = "") -> torch.Tensor:
    """down(silu(gate(x)) * up(x)) in float64."""
    x = x.double()
    gate = F.linear(x, state[f"{prefix}gate_proj.weight"].double())
    up = F.linear(x, state[f"{prefix}up_proj.weight"].double())
    return F.linear(F.silu(gate) * up, state[f"{prefix}down_proj.weight"].double())


def float64_hint(j: Judge, got: torch.Tensor, expected: torch.Tensor) -> str | None:
    """For a float64 answer that misses float64 tolerance: the catalogue's hint, else the float32
    hint when it is off by float32 rounding only (computed in float32 inside and cast back). None
    when it passes (the catalogue is run only for a failure)."""
    if got.dtype != F64 or expected.dtype != F64 or torch.allclose(got, expected, atol=1e-10, rtol=1e-7):
        return None
    hint = j.mistake_hint()
    if hint is None and torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
        hint = HINTS["float32_inside"]
    return hint


def _module_case(exercise: str, title: str, args: tuple, kwargs: dict, state: dict, x: torch.Tensor, seed: int,
                 oracle: Callable[[torch.Tensor, dict], torch.Tensor], oracle_name: str) -> Case:
    def judge(j: Judge) -> None:
        got = _get(j, shape=tuple(x.shape), dtype=x.dtype)
        want = oracle(x, state).to(x.dtype)
        j.close(got, want, oracle=oracle_name, hint=float64_hint(j, got, want))

    call = Call(exercise, args, kwargs, state=state, forward_args=(x,))
    return _case(exercise, title, [call], judge, seed=seed)


@NOTEBOOK.exercise("FeedForward")
def _ff_cases() -> list[Case]:
    """Check ``FeedForward(d_model, d_ff, bias=True)`` = down_proj(gelu(up_proj(x))), weights loaded
    by name (up_proj, down_proj), with and without bias."""
    name = "down_proj(F.gelu(up_proj(x)))"
    return [
        _module_case("FeedForward", f"FeedForward(8, 32), weights loaded by name, x (2, 5, 8) float64: equals {name}",
                     (8, 32), {}, ffn_state(5101, 8, 32, F64), _x(5102, 2, 5, 8), 5101, ffn_oracle, name),
        _module_case("FeedForward", "FeedForward(8, 16, bias=False), x (3, 4, 8) float32: no biases, equals "
                     f"{name}", (8, 16), {"bias": False}, ffn_state(5111, 8, 16, F32, bias=False),
                     _x(5112, 3, 4, 8, dtype=F32), 5111, ffn_oracle, name),
        _module_case("FeedForward", f"FeedForward(12, 48), x (6, 12) float64 (any leading axes): equals {name}",
                     (12, 48), {}, ffn_state(5121, 12, 48, F64), _x(5122, 6, 12, scale=2.0), 5121, ffn_oracle,
                     name),
    ]


@NOTEBOOK.exercise("SwiGLU")
def _swiglu_cases() -> list[Case]:
    """Check ``SwiGLU(d_model, d_ff)`` = down_proj(silu(gate_proj(x)) * up_proj(x)), weights loaded
    by name, no biases."""
    name = "down_proj(F.silu(gate_proj(x)) * up_proj(x))"
    return [
        _module_case("SwiGLU", f"SwiGLU(8, 24), weights loaded by name, x (2, 5, 8) float64: equals {name}",
                     (8, 24), {}, swiglu_state(5201, 8, 24, F64), _x(5202, 2, 5, 8), 5201, swiglu_oracle, name),
        _module_case("SwiGLU", f"SwiGLU(16, 40), x (4, 16) float32: equals {name}", (16, 40), {},
                     swiglu_state(5211, 16, 40, F32), _x(5212, 4, 16, dtype=F32, scale=2.0), 5211, swiglu_oracle,
                     name),
        _module_case("SwiGLU", f"SwiGLU(12, 32), x (1, 7, 12) float64, inputs of spread 3: equals {name}",
                     (12, 32), {}, swiglu_state(5221, 12, 32, F64), _x(5222, 1, 7, 12, scale=3.0), 5221,
                     swiglu_oracle, name),
    ]


# ---------------------------------------------------------------------------------------------
# swiglu_hidden_dim: Meta's published widths
# ---------------------------------------------------------------------------------------------
def hidden_dim_call(*args, **kwargs) -> Call:
    """``swiglu_hidden_dim(*args, **kwargs)``, read through ``INT_STEP``: the answer's type shows."""
    return Call("swiglu_hidden_dim", args, kwargs, steps=(INT_STEP,))


def judge_hidden_dim(j: Judge, want: int | None = None, expected_call: int | None = None) -> None:
    """The answer is a Python int equal to ``want`` (or to the reference's outcome of the call)."""
    o = j.outcomes[0]
    instead = not_a_python_int(o)
    if instead and instead.startswith("a numpy ") and "int" in instead:  # has .numerator, is not a Python int
        kind = instead.removeprefix("a numpy ")
        j.fail(f"returned a numpy {kind}; expected a Python int",
               hint=f"a numpy {kind} is not a Python int: return int(...) of it, or keep to Python "
                    "ints (// and math.ceil give ints)")
    if instead or (o.ok and (len(o.tensors) != 1 or o.tensors[0].dtype != torch.int64)):
        j.fail(f"returned {instead or 'a value that is not an int'}; expected a Python int",
               hint=HINTS["python_int"])
    if o.kind == "error":
        j.values(0)  # reports the exception
    if want is None:
        want = int(j.expected_tensor(0, 0))
    got = int(o.tensors[0])
    j.require(got == want, f"returned {got}; expected {want}")


@NOTEBOOK.exercise("swiglu_hidden_dim")
def _hidden_dim_cases() -> list[Case]:
    """Check ``swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None)`` against
    Llama's published widths (a Python int), and its ValueErrors."""
    configs = [  # (title, args, kwargs, expected)
        ("Llama-2-7B: swiglu_hidden_dim(4096) is 11008", (4096,), {}, 11008),
        ("Llama-3-8B: swiglu_hidden_dim(4096, multiple_of=1024, ffn_dim_multiplier=1.3) is 14336", (4096,),
         {"multiple_of": 1024, "ffn_dim_multiplier": 1.3}, 14336),
        ("Llama-2-13B: swiglu_hidden_dim(5120) is 13824", (5120,), {}, 13824),
        ("Llama-2-70B: swiglu_hidden_dim(8192, multiple_of=4096, ffn_dim_multiplier=1.3) is 28672", (8192,),
         {"multiple_of": 4096, "ffn_dim_multiplier": 1.3}, 28672),
        ("swiglu_hidden_dim(64, multiple_of=32): int(512 / 3) = 170, rounded up to 192", (64,),
         {"multiple_of": 32}, 192),
        ("swiglu_hidden_dim(96, multiple_of=64): int(768 / 3) = 256 is already a multiple of 64", (96,),
         {"multiple_of": 64}, 256),
    ]
    cases = []
    for title, args, kwargs, want in configs:
        def judge(j: Judge, want=want) -> None:
            judge_hidden_dim(j, want)

        cases.append(_case("swiglu_hidden_dim", f"{title} (a Python int)", [hidden_dim_call(*args, **kwargs)],
                           judge))
    bad_args = [((0,), {}), ((-8,), {}), ((4096.0,), {}), ((4096,), {"multiple_of": 0})]

    def bad(j: Judge) -> None:
        for i, (args, kwargs) in enumerate(bad_args):
            text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
            _raises(j, f"swiglu_hidden_dim({text})", HINTS["hidden_error"], call=i)

    cases.append(_case("swiglu_hidden_dim", "d_model 0, -8 or 4096.0, or multiple_of 0, raises ValueError",
                       [hidden_dim_call(*a, **k) for a, k in bad_args], bad))
    return cases


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
        gate = _weight(g, num_experts, d, dtype, 2.5)
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
             count: bool = False) -> Call:
    return Call("MoE", (x.size(-1), d_ff, num_experts, top_k), state=state, forward_args=(x,),
                count_rows_of="experts" if count else "")


def moe_oracle(x: torch.Tensor, state: dict[str, torch.Tensor], num_experts: int,
               top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, router_logits, tokens routed to each expert) in float64, computed densely."""
    h = x.double().reshape(-1, x.size(-1))
    logits = F.linear(h, state["gate.weight"].double())
    probs = torch.softmax(logits, dim=-1)
    top, index = probs.topk(top_k, dim=-1)
    weights = torch.zeros_like(probs).scatter(1, index, top / top.sum(dim=-1, keepdim=True))  # (N, E)
    outs = torch.stack([swiglu_oracle(h, state, f"experts.{e}.") for e in range(num_experts)], dim=1)  # (N, E, D)
    y = (weights[..., None] * outs).sum(dim=1)
    counts = torch.bincount(index.reshape(-1), minlength=num_experts)
    return y.reshape(x.shape), logits, counts


def _moe_value_case(title: str, seed: int, shape: tuple[int, ...], d_ff: int, num_experts: int, top_k: int,
                    dtype: torch.dtype) -> Case:
    s, x, state = moe_inputs(seed, shape, d_ff, num_experts, top_k, dtype)
    n = math.prod(shape[:-1])

    def judge(j: Judge) -> None:
        y_want, logits_want, _ = moe_oracle(x, state, num_experts, top_k)
        y = _get(j, 0, 0, n=2, names=MOE_NAMES, shape=tuple(x.shape), dtype=dtype, float32_ok=True)
        logits = _get(j, 0, 1, n=2, names=MOE_NAMES, shape=(n, num_experts), dtype=dtype)
        j.close(logits, logits_want.to(dtype), name="router_logits", index=1, oracle="gate(x) as (N, E)")
        atol, rtol = router_tolerance(dtype)
        j.close(y, y_want.to(dtype), name="y", atol=atol, rtol=rtol,
                oracle="Σ_e w_e·SwiGLU_e(x) over all experts (w = 0 off the top-K)")

    return _case("MoE", title, [moe_call(x, state, d_ff, num_experts, top_k)], judge, seed=s)


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
    _get(j, 0, 0, n=3, names=MOE_GRAD_NAMES, shape=shape, dtype=dtype, float32_ok=True)
    _get(j, 0, 1, n=3, names=MOE_GRAD_NAMES, shape=(n, want.size(0)), dtype=dtype)
    grad = j.tensor(0, 2, n=3, names=MOE_GRAD_NAMES, shape=tuple(want.shape))
    j.close(grad, want.to(grad.dtype), name="gate.weight.grad", index=2, atol=GRAD_TOL[0], rtol=GRAD_TOL[1],
            oracle="the float64 gradient", hint=j.mistake_hint() or HINTS["router_gradient"])


def _moe_grad_case(title: str, seed: int, shape: tuple[int, ...], d_ff: int, num_experts: int, top_k: int) -> Case:
    s, x, state = moe_inputs(seed, shape, d_ff, num_experts, top_k, F64)

    def judge(j: Judge) -> None:
        judge_moe_gradient(j, moe_gate_grad(x, state, num_experts, top_k), tuple(x.shape), F64)

    return _case("MoE", title, [moe_grad_call(x, state, d_ff, num_experts, top_k)], judge, seed=s)


def judge_rows(j: Judge, want: torch.Tensor) -> None:
    """The rows each expert's forward received (the outcome's last tensor) equal ``want``."""
    o = j.outcomes[0]
    if o.kind == "error":
        j.values(0)  # reports the exception
    if o.kind == "bad_type" or len(o.tensors) != 3:
        got = "something else" if o.kind == "bad_type" else f"{len(o.tensors) - 1} tensor(s)"
        j.fail(f"forward returned {got}; expected the tuple (y, router_logits)")
    rows = o.tensors[2]
    if not torch.equal(rows, want.to(rows.dtype)):
        e = int((rows != want).nonzero()[0])
        hint = j.mistake_hint()
        if hint is None and int(rows.sum()) == 0:
            hint = HINTS["expert_parts"]
        elif hint is None and bool((rows >= want).all()):
            hint = HINTS["extra_rows"]
        j.fail(f"expert {e}'s forward received {int(rows[e])} rows; {int(want[e])} (token, slot) assignments "
               "are routed to it", f"rows per expert: {rows.tolist()}; routed: {want.tolist()}", hint=hint)


def _moe_sparse_case(title: str, seed: int, shape: tuple[int, ...], d_ff: int, num_experts: int, top_k: int,
                     dtype: torch.dtype, need_idle: bool = False) -> Case:
    s, x, state = moe_inputs(seed, shape, d_ff, num_experts, top_k, dtype, need_idle=need_idle)

    def judge(j: Judge) -> None:
        judge_rows(j, moe_oracle(x, state, num_experts, top_k)[2])

    return _case("MoE", title, [moe_call(x, state, d_ff, num_experts, top_k, count=True)], judge, seed=s,
                 part="sparse")


@NOTEBOOK.exercise("MoE", parts=("core", "sparse"))
def _moe_cases() -> list[Case]:
    """Check ``MoE(d_model, d_ff, num_experts, top_k)``: (y, router_logits (N, E)) against a dense
    weighted sum of the experts.

    part: "core" (values, router logits, ValueError, attributes) or "sparse" (each expert's
    forward receives only the tokens routed to it), the two test cells; None checks both."""
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
            _raises(j, f"MoE{args}", HINTS["moe_top_k"], call=i)

    cases.append(_case("MoE", "MoE(8, 16, num_experts=4, top_k=5) and top_k=0 raise ValueError",
                       [Call("MoE", args) for args in bad_k], bad))

    def attributes(j: Judge) -> None:
        o = j.outcomes[0]
        if o.kind == "error":
            j.values(0)
        got = [int(t) for t in o.tensors] if o.ok else []
        j.require(got == [4, 2], f"num_experts, top_k read {got}; expected [4, 2]",
                  hint="keep the arguments as attributes: self.num_experts = num_experts, self.top_k = top_k")

    cases.append(_case("MoE", "MoE(8, 16, num_experts=4, top_k=2) has attributes num_experts = 4 and top_k = 2",
                       [Call("MoE", (8, 16, 4, 2), steps=(Step("num_experts", attribute=True),
                                                          Step("top_k", attribute=True)))], attributes))
    cases.append(_moe_grad_case("backward (float64): y back-propagated, gate.weight's gradient equals that of the "
                                "renormalised top-2 weights (MoE(8, 16, 4, top_k=2), x (2, 5, 8))", 5351, (2, 5, 8),
                                16, 4, 2))
    cases.append(_moe_sparse_case("sparse: each expert's forward receives exactly the tokens routed to it (MoE(8, "
                                  "16, 8, top_k=2), x (2, 6, 8) float64, rows counted per expert)", 5331, (2, 6, 8),
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
    _get(j, 0, 0, n=2, names=BALANCE_GRAD_NAMES, shape=(), dtype=dtype, what="router_logits", float32_ok=True)
    grad = j.tensor(0, 1, n=2, names=BALANCE_GRAD_NAMES, shape=tuple(want.shape))
    j.close(grad, want.to(grad.dtype), name="router_logits.grad", index=1, atol=GRAD_TOL[0], rtol=GRAD_TOL[1],
            oracle="the gradient through P", hint=j.mistake_hint() or HINTS["f_gradient"])


def _balance_grad_case(title: str, logits: torch.Tensor, top_k: int, seed: int) -> Case:
    def judge(j: Judge) -> None:
        judge_balance_gradient(j, balance_grad(logits, top_k), logits.dtype)

    return _case("load_balancing_loss", title, [balance_grad_call(logits, top_k)], judge, seed=seed)


def _random_logits(seed: int, n: int, e: int, k: int, dtype: torch.dtype, scale: float = 1.5,
                   every: bool = False) -> tuple[int, torch.Tensor]:
    for s in range(seed, seed + 200):
        logits = _x(s, n, e, dtype=dtype, scale=scale)
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
        got = _get(j, shape=(), dtype=dtype, what="router_logits", float32_ok=True)
        expected = balance_oracle(logits, top_k) if want is None else torch.tensor(want, dtype=F64)
        atol, rtol = router_tolerance(dtype)
        j.close(got, expected.to(dtype), name="loss", atol=atol, rtol=rtol,
                oracle="the value" if want is not None else "E·Σ f·P")

    return _case("load_balancing_loss", title, [Call("load_balancing_loss", (logits, top_k))], judge, seed=seed)


@NOTEBOOK.exercise("load_balancing_loss")
def _balance_cases() -> list[Case]:
    """Check ``load_balancing_loss(router_logits, top_k)`` = E·Σ f·P: 1.0 for balanced routing."""
    balanced = circulant_logits([2.0, 1.0, 0.0, -1.5])
    collapsed = torch.tensor([[5.0, 0.0, -1.0, -2.0]] * 6, dtype=F64) + 0.1 * _x(5411, 6, 4)
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
        index = _get(j, 0, 0, dtype=torch.int64, what="topk indices (int64)", **kw)
        weights = _get(j, 0, 1, dtype=dtype, what="router_logits", float32_ok=True, **kw)
        kept = _get(j, 0, 2, dtype=torch.bool, what="a mask (bool)", **kw)
        j.close(index, index_want, name="expert_index", oracle="top-K, descending")
        atol, rtol = router_tolerance(dtype)
        j.close(weights, weights_want.to(dtype), name="weights", index=1, atol=atol, rtol=rtol,
                oracle="top-K renormalised")
        j.close(kept, kept_want, name="kept", index=2, oracle="the queue")

    return _case("route_with_capacity", title, [Call("route_with_capacity", (logits, top_k, capacity))], judge,
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
        _raises(j, "route_with_capacity(logits, 2, -1)", HINTS["capacity_error"])

    cases.append(_case("route_with_capacity", "capacity -1 raises ValueError",
                       [Call("route_with_capacity", (l1, 2, -1))], bad))
    return cases


