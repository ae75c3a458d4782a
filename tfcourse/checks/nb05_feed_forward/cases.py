"""Notebook 05's visible cases: oracles that do not hand out the answer, and properties.

Oracles: ``F.gelu`` (both forms; in float64 for half-precision inputs), the FFNs written with
``F.linear``, ``F.gelu`` and ``F.silu`` on the same weights, Meta's published Llama widths
(11008, 13824, 14336, 28672).

Tolerances (docs/conventions.md, "Where correct public code differs"): gelu, FeedForward and SwiGLU keep
float64 in float64 and are judged at float64 tolerance.

This module holds exercises 1-4 (gelu, FeedForward, SwiGLU, swiglu_hidden_dim) and the helpers
every case uses; routing.py the mixture of experts, its balance loss and the optional capacity
routing (exercises 5-7), which register after these (it imports this module).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import make_generator
from .. import shared
from ..call import INT_STEP, Call
from ..case import Case, Judge, fmt_dtype, not_a_python_int
from ..protocol import NotebookChecks
from .hint_texts import HINTS
from .mistakes import MISTAKES

__all__ = ["F32", "F64", "LOAD_HINTS", "NOTEBOOK", "ffn_state", "hidden_dim_call", "judge_hidden_dim", "make_case", "random_weight", "randn", "require_value_error", "returned_tensor", "swiglu_oracle", "swiglu_state", "with_load_hints"]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("05_feed_forward", calls={"FeedForward": ("gelu",), "MoE": ("SwiGLU",)})


F64, F32 = torch.float64, torch.float32
HALF = (torch.float16, torch.bfloat16)


def _dt(dtype: torch.dtype) -> str:
    return fmt_dtype(dtype)


def randn(seed: int, *shape: int, dtype: torch.dtype = F64, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=make_generator(seed), dtype=F64) * scale).to(dtype)


def returned_tensor(j: Judge, call: int = 0, index: int = 0, *, shape: Sequence[int], dtype: torch.dtype, n: int = 1,
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


def require_value_error(j: Judge, what: str, hint: str, call: int = 0) -> None:
    """Call ``call`` must raise ValueError."""
    o = j.outcomes[call]
    if o.kind != "error":
        j.fail(f"{what}: returned without an error; expected ValueError", hint=hint)
    j.require(o.error_type == "ValueError", f"{what}: raised {o.error_line()[:90]}; expected ValueError",
              hint=hint + " (an assert or a failing operation raises other errors)", call=call)


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
    return shared.with_load_hints(judge, "the weights", 110, functools.partial(_load_hint, exercise))


def make_case(exercise: str, title: str, calls: list[Call], judge: Callable[[Judge], None], seed: int | None = None,
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
        got = returned_tensor(j, shape=tuple(x.shape), dtype=x.dtype)
        expected = F.gelu(x.double() if x.dtype in HALF else x, approximate=form)
        j.close(got, expected, oracle=oracle, tol_dtype=x.dtype if x.dtype in HALF else None,
                hint=float64_hint(j, got, expected))

    return make_case("gelu", title, [Call("gelu", (x,), kwargs)], judge, seed=seed, part=part)


@NOTEBOOK.exercise("gelu", parts=("core", "tanh", "validation", "half"))
def _gelu_cases() -> list[Case]:
    """Check ``gelu(x, approximate="none")`` against F.gelu.

    part: "core" (the exact form, float32/float64), "tanh" (the tanh form, float32/float64),
    "validation" (the ValueError for another `approximate`) or "half" (both forms in float16 and
    bfloat16), the four test cells that score it; None checks all."""
    x = gelu_inputs()
    cases = [
        _gelu_case("exact form (default approximate), float64, x from -8 to 8 and tiny values: matches F.gelu",
                   x, None, None, "core"),
        _gelu_case('approximate="none" given, (B, T, D) = (2, 3, 16) float32: matches F.gelu',
                   randn(5001, 2, 3, 16, dtype=F32, scale=3.0), "none", 5001, "core"),
    ]

    def bad(j: Judge) -> None:
        require_value_error(j, 'gelu(x, approximate="erf")', HINTS["approximate_error"])

    cases.append(make_case("gelu", 'approximate="erf" (neither "none" nor "tanh") raises ValueError',
                           [Call("gelu", (randn(5011, 4),), {"approximate": "erf"})], bad, part="validation"))
    cases.append(_gelu_case('approximate="tanh", float64, x from -8 to 8 and tiny values: matches '
                            'F.gelu(x, approximate="tanh")', x, "tanh", None, "tanh"))
    for i, dtype in enumerate(HALF):
        for k, form in enumerate(("none", "tanh")):
            s = 5021 + 10 * i + k
            xh = randn(s, 3, 40, dtype=dtype, scale=3.0)
            cases.append(_gelu_case(f'approximate="{form}", {_dt(dtype)} x (3, 40): {_dt(dtype)} out, close to '
                                    "F.gelu in float64", xh, form, s, "half"))
    return cases


# ---------------------------------------------------------------------------------------------
# FeedForward and SwiGLU: the formulas with F.linear on the same weights
# ---------------------------------------------------------------------------------------------
def random_weight(g: torch.Generator, rows: int, cols: int, dtype: torch.dtype, gain: float = 1.0) -> torch.Tensor:
    return (torch.randn(rows, cols, generator=g, dtype=F64) * gain / math.sqrt(cols)).to(dtype)


def ffn_state(seed: int, d: int, f: int, dtype: torch.dtype, bias: bool = True) -> dict[str, torch.Tensor]:
    """FeedForward weights: gain 2 on up_proj, so GELU's curved region (x < 1) matters."""
    g = make_generator(seed)
    state = {"up_proj.weight": random_weight(g, f, d, dtype, 2.0), "down_proj.weight": random_weight(g, d, f, dtype)}
    if bias:
        state["up_proj.bias"] = (0.5 * torch.randn(f, generator=g, dtype=F64)).to(dtype)
        state["down_proj.bias"] = (0.5 * torch.randn(d, generator=g, dtype=F64)).to(dtype)
    return state


def swiglu_state(seed: int, d: int, f: int, dtype: torch.dtype, prefix: str = "") -> dict[str, torch.Tensor]:
    g = make_generator(seed)
    return {f"{prefix}gate_proj.weight": random_weight(g, f, d, dtype, 2.0),
            f"{prefix}up_proj.weight": random_weight(g, f, d, dtype),
            f"{prefix}down_proj.weight": random_weight(g, d, f, dtype)}


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
                 oracle: Callable[[torch.Tensor, dict], torch.Tensor], oracle_name: str, part: str = "core") -> Case:
    def judge(j: Judge) -> None:
        got = returned_tensor(j, shape=tuple(x.shape), dtype=x.dtype)
        want = oracle(x, state).to(x.dtype)
        j.close(got, want, oracle=oracle_name, hint=float64_hint(j, got, want))

    call = Call(exercise, args, kwargs, state=state, forward_args=(x,))
    return make_case(exercise, title, [call], judge, seed=seed, part=part)


@NOTEBOOK.exercise("FeedForward", parts=("core", "half"))
def _ff_cases() -> list[Case]:
    """Check ``FeedForward(d_model, d_ff, bias=True)`` = down_proj(gelu(up_proj(x))), weights loaded
    by name (up_proj, down_proj), with and without bias.

    part: "core" (float64/float32) or "half" (float16 weights and x); None checks both."""
    name = "down_proj(F.gelu(up_proj(x)))"
    return [
        _module_case("FeedForward", f"FeedForward(8, 32), weights loaded by name, x (2, 5, 8) float64: equals {name}",
                     (8, 32), {}, ffn_state(5101, 8, 32, F64), randn(5102, 2, 5, 8), 5101, ffn_oracle, name),
        _module_case("FeedForward", "FeedForward(8, 16, bias=False), x (3, 4, 8) float32: no biases, equals "
                     f"{name}", (8, 16), {"bias": False}, ffn_state(5111, 8, 16, F32, bias=False),
                     randn(5112, 3, 4, 8, dtype=F32), 5111, ffn_oracle, name),
        _module_case("FeedForward", f"FeedForward(12, 48), x (6, 12) float64 (any leading axes): equals {name}",
                     (12, 48), {}, ffn_state(5121, 12, 48, F64), randn(5122, 6, 12, scale=2.0), 5121, ffn_oracle,
                     name),
        _module_case("FeedForward", f"FeedForward(8, 32), float16 weights and x (2, 5, 8): float16 out, close to {name} "
                     "in float64", (8, 32), {}, ffn_state(5131, 8, 32, torch.float16),
                     randn(5132, 2, 5, 8, dtype=torch.float16), 5131, ffn_oracle, name, part="half"),
    ]


@NOTEBOOK.exercise("SwiGLU", parts=("core", "half"))
def _swiglu_cases() -> list[Case]:
    """Check ``SwiGLU(d_model, d_ff)`` = down_proj(silu(gate_proj(x)) * up_proj(x)), weights loaded
    by name, no biases.

    part: "core" (float64/float32) or "half" (bfloat16 weights and x); None checks both."""
    name = "down_proj(F.silu(gate_proj(x)) * up_proj(x))"
    return [
        _module_case("SwiGLU", f"SwiGLU(8, 24), weights loaded by name, x (2, 5, 8) float64: equals {name}",
                     (8, 24), {}, swiglu_state(5201, 8, 24, F64), randn(5202, 2, 5, 8), 5201, swiglu_oracle, name),
        _module_case("SwiGLU", f"SwiGLU(16, 40), x (4, 16) float32: equals {name}", (16, 40), {},
                     swiglu_state(5211, 16, 40, F32), randn(5212, 4, 16, dtype=F32, scale=2.0), 5211, swiglu_oracle,
                     name),
        _module_case("SwiGLU", f"SwiGLU(12, 32), x (1, 7, 12) float64, inputs of spread 3: equals {name}",
                     (12, 32), {}, swiglu_state(5221, 12, 32, F64), randn(5222, 1, 7, 12, scale=3.0), 5221,
                     swiglu_oracle, name),
        _module_case("SwiGLU", f"SwiGLU(16, 40), bfloat16 weights and x (2, 3, 16): bfloat16 out, close to {name} in "
                     "float64", (16, 40), {}, swiglu_state(5231, 16, 40, torch.bfloat16),
                     randn(5232, 2, 3, 16, dtype=torch.bfloat16), 5231, swiglu_oracle, name, part="half"),
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


@NOTEBOOK.exercise("swiglu_hidden_dim", parts=("core", "validation"))
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

        cases.append(make_case("swiglu_hidden_dim", f"{title} (a Python int)", [hidden_dim_call(*args, **kwargs)],
                               judge))
    bad_args = [((0,), {}), ((-8,), {}), ((4096.0,), {}), ((4096,), {"multiple_of": 0})]

    def bad(j: Judge) -> None:
        for i, (args, kwargs) in enumerate(bad_args):
            text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
            require_value_error(j, f"swiglu_hidden_dim({text})", HINTS["hidden_error"], call=i)

    cases.append(make_case("swiglu_hidden_dim", "d_model 0, -8 or 4096.0, or multiple_of 0, raises ValueError",
                           [hidden_dim_call(*a, **k) for a, k in bad_args], bad, part="validation"))
    return cases
