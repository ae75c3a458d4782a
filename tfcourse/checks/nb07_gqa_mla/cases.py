"""Notebook 07's visible cases: oracles that do not hand out the answer, and properties.

Oracles (float64, in the judging process): GQA written with torch's pieces
(``F.scaled_dot_product_attention(..., enable_gqa=True)`` with an explicit bottom-right mask, RoPE
as a complex product), MLA written the same way (``F.rms_norm`` for the latent norms, the shared
rope key broadcast over the heads, ``scale=1/sqrt(dn + dr)``), both run on the WHOLE sequence
without a cache: a cached run (prefill, then one-token steps and chunks) must give the same rows
(cached == uncached), the absorbed MLA path the same outputs as the naive one without calling
``kv_b_proj`` (a forward hook counts its rows), and the caches must hold what the contract says
(G rotated KV heads; the normalised latent and the rotated shared key). ``repeat_kv`` is judged
head by head (head h of the result is KV head h // R), the byte counts against hand-computable
numbers (Llama-3-8B: 131072 bytes per token), ``mha_to_gqa`` against the GQA oracle run with the
mean-pooled weights.

Tolerances: float64 modules at float32 level (atol 1e-5, rtol 1e-5; the setup's RoPE tables are
float32 and float64 or complex angles are correct too, docs/conventions.md), float32
modules atol/rtol 1e-4; repeat_kv exactly (it only copies).

This module holds exercises 1-2 (repeat_kv, GroupedQueryAttention), the GQA oracle and the helpers
every case uses; mla.py the latent attention and the cache bytes per token (exercises 3-5),
to_gqa.py the optional challenge (6). Each imports the one before it, so the exercises register in
the notebook's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import make_generator
from ..call import INT_STEP, Call, Instance, Step
from ..case import Case, Judge, fmt_dtype, not_a_python_int
from ..outcome import FORBIDDEN_SHAPE
from ..protocol import NotebookChecks
from .mistakes import HINTS, MISTAKES

__all__ = ["ATTN_TOL", "INT_STEP", "LOADER", "NOTEBOOK", "chunked_steps", "error_hint", "errors_case", "gqa_oracle", "gqa_state", "judge_chunks", "make_case", "randn", "rope64", "step_tensors", "with_errors", "with_weights"]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("07_gqa_mla", calls={"GroupedQueryAttention": ("repeat_kv",),
           "MultiHeadLatentAttention": ("LatentCache",),
           "mha_to_gqa": ("GroupedQueryAttention", "repeat_kv")})


LOADER = "tfcourse.checks.nb07_gqa_mla.cases:with_weights"
# (atol, rtol): float64 modules at float32 level (float32 RoPE tables are the setup's), float32 modules
ATTN_TOL = {torch.float64: (1e-5, 1e-5), torch.float32: (1e-4, 1e-4)}


def with_weights(module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 o: torch.Tensor) -> torch.nn.Module:
    """Load q_proj, k_proj, v_proj and o_proj's weights into ``module`` (in their dtype) and return
    it: the input of ``mha_to_gqa``, built where the call runs from the namespace's
    GroupedQueryAttention."""
    module = module.to(q.dtype)
    module.load_state_dict({"q_proj.weight": q, "k_proj.weight": k, "v_proj.weight": v, "o_proj.weight": o})
    return module


def randn(seed: int, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.randn(*shape, generator=make_generator(seed), dtype=torch.float64) * scale).to(dtype)


def make_case(exercise: str, title: str, calls: list[Call], judge: Callable[[Judge], None], seed: int | None = None,
              part: str = "core") -> Case:
    return Case(exercise, title, calls, with_errors(judge), seed=seed, mistakes=MISTAKES[exercise], part=part)


# ---------------------------------------------------------------------------------------------
# Errors and step results
# ---------------------------------------------------------------------------------------------
def error_hint(j: Judge, call: int) -> str | None:
    """The hint of the one catalogued mistake that raises the same exception with the same
    message on this call (a failed load by name, a view of the wrong size), or None."""
    o = j.outcomes[call]
    if o.kind != "error":
        return None
    hints = set()
    for mistake in j.case.mistakes:
        m = j._mistake_outcome(mistake, call)
        if m.kind == "error" and m.error_type == o.error_type and m.error_line() == o.error_line():
            hints.add(mistake.hint)
    return hints.pop() if len(hints) == 1 else None


def python_int_failure(j: Judge, call: int) -> None:
    """Fail, saying what came back, when a call read through INT_STEP did not return a Python int
    (the AttributeError is the check's reading, not an exception of the answer's)."""
    if j.case.calls[call].steps != (INT_STEP,) or (j.expected is not None and j.expected[call].kind == "error"):
        return
    instead = not_a_python_int(j.outcomes[call])
    if instead:
        what = ", ".join([*map(repr, j.case.calls[call].args),
                          *(f"{k}={v!r}" for k, v in j.case.calls[call].kwargs.items())])
        j.fail(f"{j.case.calls[call].target}({what}) returned {instead}; expected a Python int",
               hint=HINTS["bytes_int"])


def with_errors(judge: Callable[[Judge], None]) -> Callable[[Judge], None]:
    """An answer that raised gets the hint of the catalogued mistake raising the same error; a
    load by name that fails says which names the task gives."""

    def wrapped(j: Judge) -> None:
        for i, o in enumerate(j.outcomes):
            python_int_failure(j, i)
            if o.kind == "error" and o.error_type == FORBIDDEN_SHAPE:
                j.fail(f"with absorb=True, {o.error_message}, which holds keys or values per head (refused: "
                       "a tensor ending with (S, H·(dn + dv)), or, once S > T, one with S, H and dn or dv among "
                       "its dimensions, in any layout)",
                       hint=HINTS["absorb_calls"])
            if o.kind == "bad_type" and "method" in o.type_name:
                j.fail(f"got {o.type_name} where a value was expected", hint=HINTS["lc_property"])
            if o.kind != "error" or (j.expected is not None and j.expected[i].kind == "error"):
                continue  # no error, or one the reference raises too (a ValueError the contract asks for)
            hint = error_hint(j, i)
            if hint is not None:
                j.fail(f"raised {o.error_line()}", hint=hint)
            if "loading state_dict" in o.error_message:
                lines = [ln.strip() for ln in o.error_message.splitlines()[1:] if ln.strip()]
                j.fail(f"the weights could not be loaded by name: {(lines[0] if lines else o.error_message)[:150]}",
                       hint="name and size the projections as the task says (GQA: q_proj, k_proj, v_proj, o_proj; "
                       "MLA: q_proj or q_a_proj/q_a_layernorm/q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, "
                       "kv_b_proj, o_proj): the grader loads them by name")
        judge(j)

    return wrapped


def step_tensors(j: Judge, call: int, count: int, what: str) -> list[torch.Tensor]:
    """The ``count`` tensors a call with steps returned (its results flattened), or a failure."""
    o = j.outcomes[call]
    if o.kind == "error":
        j.values(call)  # raises: the judge reports the exception
    if o.kind == "bad_type":
        j.fail(f"{what}: got {o.type_name} where tensors (or None, or ints) were expected")
    if len(o.tensors) != count:
        j.fail(f"{what}: got {len(o.tensors)} tensors back; expected {count} (did a call return a tuple of "
               "the wrong length, or None?)", hint=lambda: j.mistake_hint(call, check_shape_only=True))
    return o.tensors


def _raises_value_error(j: Judge, whats: Sequence[str], hint: str) -> None:
    for i, what in enumerate(whats):
        o = j.outcomes[i]
        if o.kind == "error" and o.error_type == "ValueError":
            continue
        read = j.case.calls[i].steps == (INT_STEP,) and o.error_type == "AttributeError"  # it returned a value
        did = f"raised {o.error_line()}" if o.kind == "error" and not read else "raised nothing"
        j.fail(f"{what}: {did}; expected ValueError", hint=hint)


def errors_case(exercise: str, title: str, calls: list[Call], whats: Sequence[str], hint: str,
                part: str = "core") -> Case:
    return Case(exercise, title, calls, lambda j: _raises_value_error(j, whats, hint),
                mistakes=MISTAKES[exercise], part=part)


# ---------------------------------------------------------------------------------------------
# repeat_kv
# ---------------------------------------------------------------------------------------------
def _repeat_case(title: str, seed: int, b: int, g: int, s: int, dh: int, n_rep: int, dtype: torch.dtype) -> Case:
    x = randn(seed, b, g, s, dh, dtype=dtype)
    h = g * n_rep

    def judge(j: Judge) -> None:
        got = j.tensor(shape=(b, h, s, dh), dtype=dtype)
        want = x[:, torch.arange(h) // n_rep]  # head h is KV head h // R
        j.close(got, want, atol=0.0, rtol=0.0, oracle="KV head h // n_rep, for each head h")

    return make_case("repeat_kv", title, [Call("repeat_kv", (x, n_rep))], judge, seed=seed)


@NOTEBOOK.exercise("repeat_kv", parts=("core", "validation"))
def _repeat_cases() -> list[Case]:
    """Check ``repeat_kv(x, n_rep)``: (B, G, S, Dh) -> (B, G·n_rep, S, Dh), head h = KV head h // n_rep."""
    f64, f32 = torch.float64, torch.float32
    return [
        _repeat_case("(B, G, S, Dh) = (2, 3, 5, 4), n_rep = 2, float64: head h of the result is KV head h // 2 "
                     "(0, 0, 1, 1, 2, 2)", 7001, 2, 3, 5, 4, 2, f64),
        _repeat_case("G = 2, n_rep = 3, float32", 7011, 1, 2, 4, 6, 3, f32),
        _repeat_case("G = 1 (MQA), n_rep = 4: every head is the one KV head", 7021, 2, 1, 3, 4, 4, f64),
        _repeat_case("n_rep = 1 (MHA): x unchanged", 7031, 2, 4, 3, 2, 1, f64),
        errors_case("repeat_kv", "ValueError when n_rep < 1",
                    [Call("repeat_kv", (randn(7041, 1, 2, 3, 4), r)) for r in (0, -2)],
                    ["n_rep = 0", "n_rep = -2"], HINTS["repeat_error"], part="validation"),
    ]


# ---------------------------------------------------------------------------------------------
# The float64 oracles
# ---------------------------------------------------------------------------------------------
def rope64(x: torch.Tensor, theta: float, start: int = 0) -> torch.Tensor:
    """Rotate-half RoPE at positions start .. start + T - 1 as a complex product in float64
    (x (..., T, Dh))."""
    dh = x.size(-1)
    half = dh // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / dh)  # (Dh/2,)
    angles = torch.arange(start, start + x.size(-2), dtype=torch.float64)[:, None] * inv  # (T, Dh/2)
    z = torch.complex(x[..., :half].double(), x[..., half:].double()) * torch.polar(torch.ones_like(angles), angles)
    return torch.cat((z.real, z.imag), dim=-1)


def gqa_state(seed: int, d: int, h: int, g: int, dh: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {"q_proj.weight": randn(seed, h * dh, d, scale=d ** -0.5, dtype=dtype),
            "k_proj.weight": randn(seed + 1, g * dh, d, scale=d ** -0.5, dtype=dtype),
            "v_proj.weight": randn(seed + 2, g * dh, d, scale=d ** -0.5, dtype=dtype),
            "o_proj.weight": randn(seed + 3, d, h * dh, scale=(h * dh) ** -0.5, dtype=dtype)}


def gqa_oracle(x: torch.Tensor, state: dict[str, torch.Tensor], h: int, g: int, theta: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(output (B, S, D), rotated keys (B, G, S, Dh)) in float64 of the whole sequence x."""
    x = x.double()
    b, s, _ = x.shape
    w = {n: state[f"{n}_proj.weight"].double() for n in "qkvo"}
    dh = w["q"].size(0) // h

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:
        return t.view(b, s, n, dh).transpose(1, 2)

    q, k = rope64(heads(x @ w["q"].T, h), theta), rope64(heads(x @ w["k"].T, g), theta)
    v = heads(x @ w["v"].T, g)
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, H, S, Dh)
    return out.transpose(1, 2).reshape(b, s, h * dh) @ w["o"].T, k


def chunked_steps(x: torch.Tensor, chunks: Sequence[int], **kwargs) -> list[Step]:
    """One forward step per chunk of ``x`` (along dim 1), each with ``kwargs`` (the same cache)."""
    steps, at = [], 0
    for t in chunks:
        steps.append(Step("__call__", (x[:, at: at + t],), kwargs))
        at += t
    return steps


def judge_chunks(j: Judge, got: Sequence[torch.Tensor], full: torch.Tensor, chunks: Sequence[int],
                 dtype: torch.dtype) -> None:
    """Each chunk's output == the rows of the whole sequence's output (cached == uncached)."""
    atol, rtol = ATTN_TOL[dtype]
    at = 0
    for i, (t, out) in enumerate(zip(chunks, got, strict=False)):
        rows = full[:, at: at + t]
        where = "the output" if len(chunks) == 1 else ("the prefill" if i == 0 else
                                                       f"call {i + 1} ({t} new token{'s' if t > 1 else ''} after "
                                                       f"{at} cached)")
        j.require(tuple(out.shape) == tuple(rows.shape), f"{where} has shape {tuple(out.shape)}; expected "
                  f"{tuple(rows.shape)}", hint=lambda: j.mistake_hint(0, check_shape_only=True))
        j.require(out.dtype == dtype, f"{where} is {fmt_dtype(out.dtype)}; expected {fmt_dtype(dtype)}")
        oracle = "the whole sequence without a cache" if len(chunks) > 1 else "the float64 oracle"
        j.close(out, rows, name=where, atol=atol, rtol=rtol, oracle=f"{oracle} (rows {at}..{at + t - 1})")
        at += t


# ---------------------------------------------------------------------------------------------
# GroupedQueryAttention
# ---------------------------------------------------------------------------------------------
def _gqa_case(title: str, seed: int, b: int, d: int, h: int, g: int, dtype: torch.dtype, chunks: Sequence[int],
              head_dim: int | None = None, theta: float = 10000.0, attributes: bool = False) -> Case:
    dh = head_dim if head_dim is not None else d // h
    s = sum(chunks)
    x = randn(seed, b, s, d, dtype=dtype)
    state = gqa_state(seed + 1, d, h, g, dh, dtype)
    args = (d, h, g) if head_dim is None else (d, h, g, head_dim)
    kwargs = {} if theta == 10000.0 else {"rope_theta": theta}
    full, keys = gqa_oracle(x, state, h, g, theta)
    cached = len(chunks) > 1
    if cached:
        steps = chunked_steps(x, chunks, cache=Instance("KVCache", key="c")) + [
            Step("k", on="c", attribute=True), Step("seq_len", on="c", attribute=True)]
    else:
        steps = [Step("__call__", (x,))]
    if attributes:
        steps += [Step(n, attribute=True) for n in ("num_heads", "num_kv_heads", "head_dim", "n_rep")]
    call = Call("GroupedQueryAttention", args, kwargs, state=state, steps=tuple(steps))
    atol, rtol = ATTN_TOL[dtype]

    def judge(j: Judge) -> None:
        got = step_tensors(j, 0, len(steps), f"{len(chunks)} output(s)" + (", cache.k, cache.seq_len" if cached
                                                                          else ""))
        judge_chunks(j, got[: len(chunks)], full, chunks, dtype)
        if cached:
            k, n = got[len(chunks)], got[len(chunks) + 1]
            j.require(tuple(k.shape) == tuple(keys.shape), f"cache.k after the calls has shape {tuple(k.shape)}; "
                      f"expected (B, G, S, Dh) = {tuple(keys.shape)}", hint=lambda: j.mistake_hint(0, check_shape_only=True))
            j.close(k, keys, name="cache.k after the calls", atol=atol, rtol=rtol,
                    oracle="the G KV heads' keys rotated at their positions")
            j.require(n.dim() == 0 and int(n) == s, f"cache.seq_len after the calls is {n.tolist()}; expected {s}")
        if attributes:
            have = [int(t) if t.dim() == 0 else t.tolist() for t in got[-4:]]
            want = [h, g, dh, h // g]
            j.require(have == want, f"(num_heads, num_kv_heads, head_dim, n_rep) = {tuple(have)}; expected "
                      f"{tuple(want)}")

    return make_case("GroupedQueryAttention", title, [call], judge, seed=seed, part="cache" if cached else "core")


@NOTEBOOK.exercise("GroupedQueryAttention", parts=("core", "cache", "validation"))
def _gqa_cases() -> list[Case]:
    """Check ``GroupedQueryAttention(d_model, num_heads, num_kv_heads, head_dim=None, rope_theta=10000.0)``.

    part: "core" (no cache: G = H, G = 1, 1 < G < H, a given head_dim) or "cache" (a KVCache holding
    the G rotated KV heads; cached == uncached) or "validation" (the ValueErrors); None: all."""
    f64, f32 = torch.float64, torch.float32
    return [
        _gqa_case("no cache, (B, T, D) = (2, 6, 16), H = 4, G = 2, float64: matches SDPA with enable_gqa=True, RoPE "
                  "and a causal mask; num_heads, num_kv_heads, head_dim, n_rep", 7101, 2, 16, 4, 2, f64, (6,),
                  attributes=True),
        _gqa_case("G = H = 4 (MHA): notebook 06's attention", 7111, 2, 16, 4, 4, f64, (5,)),
        _gqa_case("G = 1 (MQA), H = 4, rope_theta = 500, float32", 7121, 2, 16, 4, 1, f32, (4,), theta=500.0),
        _gqa_case("head_dim = 6 given (H·Dh = 24 != D = 16), H = 4, G = 2", 7131, 1, 16, 4, 2, f64, (5,),
                  head_dim=6),
        errors_case("GroupedQueryAttention", "ValueError when num_heads is not a multiple of num_kv_heads, or when "
                    "head_dim is None and d_model is not a multiple of num_heads",
                    [Call("GroupedQueryAttention", (24, 4, 3)), Call("GroupedQueryAttention", (10, 4, 2))],
                    ["GroupedQueryAttention(24, 4, 3)", "GroupedQueryAttention(10, 4, 2)"], HINTS["gqa_errors"],
                    part="validation"),
        _gqa_case("a KVCache: a prefill of 5, then 1, 1 and a chunk of 2 tokens, H = 4, G = 2 (float64): outputs == "
                  "the no-cache rows; cache.k holds the G rotated KV heads (B, G, S, Dh)", 7141, 2, 16, 4, 2, f64,
                  (5, 1, 1, 2)),
        _gqa_case("a KVCache, G = 1, H = 2, chunks 3, 1, 1, float32", 7151, 1, 16, 2, 1, f32, (3, 1, 1)),
    ]
