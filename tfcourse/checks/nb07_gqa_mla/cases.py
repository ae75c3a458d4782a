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
float32 and float64 or complex angles are correct too, shared/design/peer-code.md), float32
modules atol/rtol 1e-4; repeat_kv exactly (it only copies).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import make_generator
from ..call import INT_STEP, Call, Instance, Step
from ..case import Case, Judge, fmt_dtype, not_a_python_int
from ..outcome import FORBIDDEN_SHAPE
from ..protocol import NotebookChecks
from .mistakes import HINTS, MISTAKES

__all__ = ["ATTN_TOL", "INT_STEP", "LOADER", "NOTEBOOK", "absorb_forbidden", "error_hint", "gqa_oracle", "gqa_state", "mla_oracle", "mla_state", "pooled_state", "step_tensors", "with_errors", "with_weights"]

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


def _randn(seed: int, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.randn(*shape, generator=make_generator(seed), dtype=torch.float64) * scale).to(dtype)


def _case(exercise: str, title: str, calls: list[Call], judge: Callable[[Judge], None], seed: int | None = None,
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
                j.fail(f"with absorb=True, {o.error_message}, which holds keys or values per head (tensors "
                       "ending with (S, H·(dn + dv)), or with (H, S, dn) / (H, S, dv) once S > T, are refused)",
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
               "the wrong length, or None?)", hint=j.mistake_hint(call, check_shape_only=True))
    return o.tensors


def _raises_value_error(j: Judge, whats: Sequence[str], hint: str) -> None:
    for i, what in enumerate(whats):
        o = j.outcomes[i]
        if o.kind == "error" and o.error_type == "ValueError":
            continue
        read = j.case.calls[i].steps == (INT_STEP,) and o.error_type == "AttributeError"  # it returned a value
        did = f"raised {o.error_line()}" if o.kind == "error" and not read else "raised nothing"
        j.fail(f"{what}: {did}; expected ValueError", hint=hint)


def _errors_case(exercise: str, title: str, calls: list[Call], whats: Sequence[str], hint: str,
                 part: str = "core") -> Case:
    return Case(exercise, title, calls, lambda j: _raises_value_error(j, whats, hint),
                mistakes=MISTAKES[exercise], part=part)


# ---------------------------------------------------------------------------------------------
# repeat_kv
# ---------------------------------------------------------------------------------------------
def _repeat_case(title: str, seed: int, b: int, g: int, s: int, dh: int, n_rep: int, dtype: torch.dtype) -> Case:
    x = _randn(seed, b, g, s, dh, dtype=dtype)
    h = g * n_rep

    def judge(j: Judge) -> None:
        got = j.tensor(shape=(b, h, s, dh), dtype=dtype)
        want = x[:, torch.arange(h) // n_rep]  # head h is KV head h // R
        j.close(got, want, atol=0.0, rtol=0.0, oracle="KV head h // n_rep, for each head h")

    return _case("repeat_kv", title, [Call("repeat_kv", (x, n_rep))], judge, seed=seed)


@NOTEBOOK.exercise("repeat_kv")
def _repeat_cases() -> list[Case]:
    """Check ``repeat_kv(x, n_rep)``: (B, G, S, Dh) -> (B, G·n_rep, S, Dh), head h = KV head h // n_rep."""
    f64, f32 = torch.float64, torch.float32
    return [
        _repeat_case("(B, G, S, Dh) = (2, 3, 5, 4), n_rep = 2, float64: head h of the result is KV head h // 2 "
                     "(0, 0, 1, 1, 2, 2)", 7001, 2, 3, 5, 4, 2, f64),
        _repeat_case("G = 2, n_rep = 3, float32", 7011, 1, 2, 4, 6, 3, f32),
        _repeat_case("G = 1 (MQA), n_rep = 4: every head is the one KV head", 7021, 2, 1, 3, 4, 4, f64),
        _repeat_case("n_rep = 1 (MHA): x unchanged", 7031, 2, 4, 3, 2, 1, f64),
        _errors_case("repeat_kv", "ValueError when n_rep < 1",
                     [Call("repeat_kv", (_randn(7041, 1, 2, 3, 4), r)) for r in (0, -2)],
                     ["n_rep = 0", "n_rep = -2"], HINTS["repeat_error"]),
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
    return {"q_proj.weight": _randn(seed, h * dh, d, scale=d ** -0.5, dtype=dtype),
            "k_proj.weight": _randn(seed + 1, g * dh, d, scale=d ** -0.5, dtype=dtype),
            "v_proj.weight": _randn(seed + 2, g * dh, d, scale=d ** -0.5, dtype=dtype),
            "o_proj.weight": _randn(seed + 3, d, h * dh, scale=(h * dh) ** -0.5, dtype=dtype)}


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


def mla_state(seed: int, d: int, h: int, dc: int, dn: int, dr: int, dv: int, dq: int | None,
              dtype: torch.dtype) -> dict[str, torch.Tensor]:
    qk = dn + dr
    state = {}
    if dq is None:
        state["q_proj.weight"] = _randn(seed, h * qk, d, scale=d ** -0.5)
    else:
        state["q_a_proj.weight"] = _randn(seed, dq, d, scale=d ** -0.5)
        state["q_a_layernorm.weight"] = 1 + 0.3 * _randn(seed + 1, dq)
        state["q_b_proj.weight"] = _randn(seed + 2, h * qk, dq, scale=dq ** -0.5)
    state["kv_a_proj_with_mqa.weight"] = _randn(seed + 3, dc + dr, d, scale=d ** -0.5)
    state["kv_a_layernorm.weight"] = 1 + 0.3 * _randn(seed + 4, dc)
    state["kv_b_proj.weight"] = _randn(seed + 5, h * (dn + dv), dc, scale=dc ** -0.5)
    state["o_proj.weight"] = _randn(seed + 6, d, h * dv, scale=(h * dv) ** -0.5)
    return {k: v.to(dtype) for k, v in state.items()}


def mla_oracle(x: torch.Tensor, state: dict[str, torch.Tensor], h: int, dc: int, dn: int, dr: int, dv: int,
               theta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output (B, S, D), normalised latent (B, S, Dc), rotated shared key (B, S, dr)) in float64
    of the whole sequence x: MLA's naive form written with torch's pieces."""
    x = x.double()
    w = {n: t.double() for n, t in state.items()}
    b, s, _ = x.shape
    if "q_proj.weight" in w:
        q = x @ w["q_proj.weight"].T
    else:
        qa = x @ w["q_a_proj.weight"].T
        q = F.rms_norm(qa, (qa.size(-1),), w["q_a_layernorm.weight"], 1e-6) @ w["q_b_proj.weight"].T
    q = q.view(b, s, h, dn + dr).transpose(1, 2)  # (B, H, S, dn + dr)
    q = torch.cat((q[..., :dn], rope64(q[..., dn:], theta)), dim=-1)
    kva = x @ w["kv_a_proj_with_mqa.weight"].T  # (B, S, Dc + dr)
    c_kv = F.rms_norm(kva[..., :dc], (dc,), w["kv_a_layernorm.weight"], 1e-6)  # (B, S, Dc)
    k_rope = rope64(kva[..., dc:], theta)  # (B, S, dr)
    kv = (c_kv @ w["kv_b_proj.weight"].T).view(b, s, h, dn + dv).transpose(1, 2)
    k = torch.cat((kv[..., :dn], k_rope[:, None].expand(b, h, s, dr)), dim=-1)  # (B, H, S, dn + dr)
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, kv[..., dn:], attn_mask=mask, scale=1 / math.sqrt(dn + dr))
    return out.transpose(1, 2).reshape(b, s, h * dv) @ w["o_proj.weight"].T, c_kv, k_rope


def absorb_forbidden(b: int, h: int, dc: int, dn: int, dr: int, dv: int, chunks: Sequence[int]
                     ) -> tuple[tuple[int, ...], ...]:
    """The trailing shapes no tensor of an absorbed MLA forward may end with (Call.forbid_shapes):
    K and V per head, whether made by kv_b_proj or by the latent times its weight. Every S the
    calls reach: (S, H·(dn + dv)) and (B·S, H·(dn + dv)); where S > T (a cached call):
    (S, H, w) and (H, S, w) for w = dn, dv, dn + dv. The sizes must differ so that the absorbed
    path's own tensors (q_nope (B, H, T, dn), its output (B, H, T, dv), the rope key broadcast
    (B, H, S, dr), the latent (B, S, Dc), the weight's views (H, Dc, dv)) cannot match."""
    wide = h * (dn + dv)
    assert len({dc, dn, dv, dn + dv, wide, dr}) == 6, "Dc, dn, dv, dn + dv, H·(dn + dv) and dr must all differ"
    found, s = set(), 0
    for t in chunks:
        s += t
        assert dc not in (s, b * s), "Dc must be neither S nor B·S (kv_b_proj.weight.T is (Dc, H·(dn + dv)))"
        found |= {(s, wide), (b * s, wide)}
        if s > t:
            assert s not in (*chunks, dc), "a cached S must be neither a T nor Dc (w_uv.mT is (H, Dc, dv))"
            found |= {shape for w in (dn, dv, dn + dv) for shape in ((s, h, w), (h, s, w))}
    return tuple(sorted(found))


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
                  f"{tuple(rows.shape)}", hint=j.mistake_hint(0, check_shape_only=True))
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
    x = _randn(seed, b, s, d, dtype=dtype)
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
                      f"expected (B, G, S, Dh) = {tuple(keys.shape)}", hint=j.mistake_hint(0, check_shape_only=True))
            j.close(k, keys, name="cache.k after the calls", atol=atol, rtol=rtol,
                    oracle="the G KV heads' keys rotated at their positions")
            j.require(n.dim() == 0 and int(n) == s, f"cache.seq_len after the calls is {n.tolist()}; expected {s}")
        if attributes:
            have = [int(t) if t.dim() == 0 else t.tolist() for t in got[-4:]]
            want = [h, g, dh, h // g]
            j.require(have == want, f"(num_heads, num_kv_heads, head_dim, n_rep) = {tuple(have)}; expected "
                      f"{tuple(want)}")

    return _case("GroupedQueryAttention", title, [call], judge, seed=seed, part="cache" if cached else "core")


@NOTEBOOK.exercise("GroupedQueryAttention", parts=("core", "cache"))
def _gqa_cases() -> list[Case]:
    """Check ``GroupedQueryAttention(d_model, num_heads, num_kv_heads, head_dim=None, rope_theta=10000.0)``.

    part: "core" (no cache: G = H, G = 1, 1 < G < H, a given head_dim) or "cache" (a KVCache holding
    the G rotated KV heads; cached == uncached); None: both."""
    f64, f32 = torch.float64, torch.float32
    return [
        _gqa_case("no cache, (B, T, D) = (2, 6, 16), H = 4, G = 2, float64: matches SDPA with enable_gqa=True, RoPE "
                  "and a causal mask; num_heads, num_kv_heads, head_dim, n_rep", 7101, 2, 16, 4, 2, f64, (6,),
                  attributes=True),
        _gqa_case("G = H = 4 (MHA): notebook 06's attention", 7111, 2, 16, 4, 4, f64, (5,)),
        _gqa_case("G = 1 (MQA), H = 4, rope_theta = 500, float32", 7121, 2, 16, 4, 1, f32, (4,), theta=500.0),
        _gqa_case("head_dim = 6 given (H·Dh = 24 != D = 16), H = 4, G = 2", 7131, 1, 16, 4, 2, f64, (5,),
                  head_dim=6),
        _errors_case("GroupedQueryAttention", "ValueError when num_heads is not a multiple of num_kv_heads, or when "
                     "head_dim is None and d_model is not a multiple of num_heads",
                     [Call("GroupedQueryAttention", (24, 4, 3)), Call("GroupedQueryAttention", (10, 4, 2))],
                     ["GroupedQueryAttention(24, 4, 3)", "GroupedQueryAttention(10, 4, 2)"], HINTS["gqa_errors"]),
        _gqa_case("a KVCache: a prefill of 5, then 1, 1 and a chunk of 2 tokens, H = 4, G = 2 (float64): outputs == "
                  "the no-cache rows; cache.k holds the G rotated KV heads (B, G, S, Dh)", 7141, 2, 16, 4, 2, f64,
                  (5, 1, 1, 2)),
        _gqa_case("a KVCache, G = 1, H = 2, chunks 3, 1, 1, float32", 7151, 1, 16, 2, 1, f32, (3, 1, 1)),
    ]


# ---------------------------------------------------------------------------------------------
# LatentCache
# ---------------------------------------------------------------------------------------------
def _latent_case(title: str, seed: int, dtype: torch.dtype, b: int, dc: int, dr: int, chunks: Sequence[int]) -> Case:
    cs = [_randn(seed + 2 * i, b, t, dc, dtype=dtype) for i, t in enumerate(chunks)]
    ks = [_randn(seed + 2 * i + 1, b, t, dr, dtype=dtype) for i, t in enumerate(chunks)]
    steps = [Step("c_kv", attribute=True), Step("k_rope", attribute=True), Step("seq_len", attribute=True)]
    for c, k in zip(cs, ks, strict=True):
        steps += [Step("update", (c, k)), Step("seq_len", attribute=True)]
    steps += [Step("c_kv", attribute=True), Step("k_rope", attribute=True)]
    count = 3 + 3 * len(chunks) + 2

    def judge(j: Judge) -> None:
        got = step_tensors(j, 0, count, "the cache's attributes and update results")
        for i, name in enumerate(("c_kv", "k_rope")):
            j.require(got[i].numel() == 0, f"cache.{name} before the first update is a tensor of shape "
                      f"{tuple(got[i].shape)}; expected None")
        j.require(got[2].dim() == 0 and int(got[2]) == 0, f"seq_len of an empty cache is {got[2].tolist()}; "
                  "expected 0", hint=j.mistake_hint())
        total = 0
        for i, t in enumerate(chunks):
            total += t
            c_all, k_all, n = got[3 + 3 * i: 6 + 3 * i]
            want_c, want_k = torch.cat(cs[: i + 1], dim=1), torch.cat(ks[: i + 1], dim=1)
            which = f"update {i + 1} (a chunk of {t}, {total - t} cached)"
            for name, have, want in (("c_kv", c_all, want_c), ("k_rope", k_all, want_k)):
                j.require(tuple(have.shape) == tuple(want.shape), f"{which} returned {name} of shape "
                          f"{tuple(have.shape)}; expected (B, P + T, width) = {tuple(want.shape)}",
                          hint=j.mistake_hint(check_shape_only=True))
                j.require(have.dtype == dtype, f"{which} returned {name} as {fmt_dtype(have.dtype)}; expected "
                          f"{fmt_dtype(dtype)}")
                j.close(have, want, name=f"{which}: returned {name}", oracle="torch.cat of every chunk so far")
            j.require(n.dim() == 0 and int(n) == total, f"seq_len after {which} is {n.tolist()}; expected {total}, "
                      "the number of cached positions", hint=j.mistake_hint())
        j.close(got[-2], torch.cat(cs, dim=1), name="cache.c_kv after the updates", oracle="torch.cat of the latents")
        j.close(got[-1], torch.cat(ks, dim=1), name="cache.k_rope after the updates",
                oracle="torch.cat of the rope keys")

    return _case("LatentCache", title, [Call("LatentCache", (), steps=tuple(steps))], judge, seed=seed)


def _latent_errors(seed: int) -> Case:
    c, k = _randn(seed, 2, 3, 6), _randn(seed + 1, 2, 3, 4)
    bad = {
        "c_kv (2, 3, 6) with k_rope (2, 2, 4) on the first update": ((c, _randn(seed + 2, 2, 2, 4)), False),
        "c_kv (2, 3, 6) with k_rope (1, 3, 4) on the first update": ((c, _randn(seed + 3, 1, 3, 4)), False),
        "a chunk with B = 1 after B = 2": ((_randn(seed + 4, 1, 1, 6), _randn(seed + 5, 1, 1, 4)), True),
        "a latent of width 5 after 6": ((_randn(seed + 6, 2, 1, 5), _randn(seed + 7, 2, 1, 4)), True),
        "a rope key of width 2 after 4": ((_randn(seed + 8, 2, 1, 6), _randn(seed + 9, 2, 1, 2)), True),
        "a float32 chunk after float64": ((_randn(seed + 10, 2, 1, 6, dtype=torch.float32),
                                           _randn(seed + 11, 2, 1, 4, dtype=torch.float32)), True),
    }
    first = Step("update", (c, k))
    calls = [Call("LatentCache", (), steps=((first, Step("update", args)) if after else (Step("update", args),)))
             for args, after in bad.values()]
    return _errors_case("LatentCache", "update raises ValueError when c_kv and k_rope differ in B or T, or when B, a "
                        "width or the dtype differ from the cache", calls, list(bad), HINTS["lc_validate"])


@NOTEBOOK.exercise("LatentCache")
def _latent_cases() -> list[Case]:
    """Check ``LatentCache()``: c_kv/k_rope None when empty, update appends on the sequence axis and
    returns the whole cache, seq_len counts positions, ValueError for chunks that do not fit."""
    return [
        _latent_case("an empty cache, then chunks of 4, 1 and 2 positions, (B, Dc, dr) = (2, 6, 4), float64: update "
                     "returns the whole cache, seq_len counts positions", 7201, torch.float64, 2, 6, 4, (4, 1, 2)),
        _latent_case("chunks of 1 and 3, (B, Dc, dr) = (1, 8, 2), float32", 7211, torch.float32, 1, 8, 2, (1, 3)),
        _latent_errors(7221),
    ]


# ---------------------------------------------------------------------------------------------
# MultiHeadLatentAttention
# ---------------------------------------------------------------------------------------------
def _mla_case(title: str, seed: int, *, b: int = 2, d: int = 16, h: int = 2, dc: int = 8, dn: int = 6, dr: int = 4,
              dv: int = 5, dq: int | None = None, dtype: torch.dtype = torch.float64, chunks: Sequence[int] = (5,),
              theta: float = 10000.0, absorb: bool = False, part: str = "core") -> Case:
    s = sum(chunks)
    x = _randn(seed, b, s, d, dtype=dtype)
    state = mla_state(seed + 1, d, h, dc, dn, dr, dv, dq, dtype)
    args = (d, h, dc, dn, dr, dv)
    kwargs = {}
    if dq is not None:
        kwargs["q_lora_rank"] = dq
    if theta != 10000.0:
        kwargs["rope_theta"] = theta
    full, latent, rope_key = mla_oracle(x, state, h, dc, dn, dr, dv, theta)
    cached = len(chunks) > 1
    fwd = {"absorb": True} if absorb else {}
    if cached:
        steps = chunked_steps(x, chunks, cache=Instance("LatentCache", key="c"), **fwd) + [
            Step("c_kv", on="c", attribute=True), Step("k_rope", on="c", attribute=True),
            Step("seq_len", on="c", attribute=True)]
    else:
        steps = [Step("__call__", (x,), fwd)]
    call = Call("MultiHeadLatentAttention", args, kwargs, state=state, steps=tuple(steps),
                count_rows_of="kv_b_proj" if absorb else "",
                forbid_shapes=absorb_forbidden(b, h, dc, dn, dr, dv, chunks) if absorb else ())
    atol, rtol = ATTN_TOL[dtype]
    count = len(steps) + (1 if absorb else 0)

    def judge(j: Judge) -> None:
        got = step_tensors(j, 0, count, f"{len(chunks)} output(s)" + (", cache.c_kv, cache.k_rope, cache.seq_len"
                                                                     if cached else ""))
        judge_chunks(j, got[: len(chunks)], full, chunks, dtype)
        if cached:
            c_kv, k_rope, n = got[len(chunks): len(chunks) + 3]
            for name, have, want, what in (("c_kv", c_kv, latent, "the normalised latent kv_a_layernorm(c_kv)"),
                                           ("k_rope", k_rope, rope_key, "the shared rope key rotated at its "
                                                                        "position")):
                j.require(tuple(have.shape) == tuple(want.shape), f"cache.{name} after the calls has shape "
                          f"{tuple(have.shape)}; expected {tuple(want.shape)} (B, S, {'Dc' if name == 'c_kv' else 'dr'})",
                          hint=j.mistake_hint(0, check_shape_only=True))
                j.close(have, want, name=f"cache.{name} after the calls", atol=atol, rtol=rtol, oracle=what)
            j.require(n.dim() == 0 and int(n) == s, f"cache.seq_len after the calls is {n.tolist()}; expected {s}")
        if absorb:
            rows = got[-1]
            j.require(int(rows.sum()) == 0, f"with absorb=True, kv_b_proj was called on {int(rows.sum())} rows; "
                      "expected 0 (the absorbed path uses its weight, never its forward)", hint=HINTS["absorb_calls"])

    return _case("MultiHeadLatentAttention", title, [call], judge, seed=seed, part=part)


@NOTEBOOK.exercise("MultiHeadLatentAttention", parts=("core", "cache", "absorb"))
def _mla_cases() -> list[Case]:
    """Check ``MultiHeadLatentAttention(d_model, num_heads, kv_lora_rank, qk_nope_head_dim,
    qk_rope_head_dim, v_head_dim, q_lora_rank=None, rope_theta=10000.0)``.

    part: "core" (naive, no cache), "cache" (a LatentCache holding the latent and the rotated
    shared key) or "absorb" (absorb=True == naive, kv_b_proj never called); None: all."""
    f32 = torch.float32
    return [
        _mla_case("no cache, (B, T, D) = (2, 5, 16), H = 2, Dc = 8, dn = 6, dr = 4, dv = 5, float64: matches MLA "
                  "written with torch's pieces (naive: K and V up-projected from the latent)", 7301),
        _mla_case("q_lora_rank = 6 (q_a_proj, q_a_layernorm, q_b_proj), H = 3, float64", 7311, h=3, dq=6),
        _mla_case("H = 4, dn = 4, dr = 2, dv = 4, Dc = 6, rope_theta = 500, float32", 7321, h=4, dn=4, dr=2, dv=4, dc=6,
                  dtype=f32, theta=500.0),
        _mla_case("a LatentCache: a prefill of 4, then 1 and 2 tokens (float64): outputs == the no-cache rows; the "
                  "cache holds the normalised latent (B, S, Dc) and the rotated shared key (B, S, dr)", 7331,
                  chunks=(4, 1, 2), part="cache"),
        _mla_case("a LatentCache with q_lora_rank = 4, H = 3, chunks 2, 1, 1, 1, float32", 7341, h=3, dq=4,
                  chunks=(2, 1, 1, 1), dtype=f32, part="cache"),
        _mla_case("absorb=True, no cache, H = 3: the same outputs as the naive path; kv_b_proj's forward is never "
                  "called (its rows are counted) and K and V are never built per head", 7351, h=3, absorb=True,
                  part="absorb"),
        _mla_case("absorb=True, q_lora_rank = 6, H = 3, Dc = 9, with a LatentCache: chunks 3, 1, 3 (no K or V "
                  "per head)", 7361, h=3, dq=6, dc=9, chunks=(3, 1, 3), absorb=True, part="absorb"),
        _mla_case("absorb=True, H = 4, Dc = 12, dn = 4, dr = 2, dv = 6, float32", 7371, h=4, dn=4, dr=2, dv=6, dc=12,
                  dtype=f32, absorb=True, part="absorb"),
    ]


# ---------------------------------------------------------------------------------------------
# attention_cache_bytes_per_token
# ---------------------------------------------------------------------------------------------
def _bytes_call(*args, **kwargs) -> Call:
    # the answer is a Python int: read it back through .numerator (see INT_STEP)
    return Call("attention_cache_bytes_per_token", args, kwargs, steps=(INT_STEP,))


def _bytes_case(title: str, rows: list[tuple[tuple, dict, int, str]]) -> Case:
    calls = [_bytes_call(*args, **kwargs) for args, kwargs, _, _ in rows]

    def judge(j: Judge) -> None:
        for i, (args, kwargs, want, formula) in enumerate(rows):
            what = ", ".join([*map(repr, args), *(f"{k}={v}" for k, v in kwargs.items())])
            (got,) = step_tensors(j, i, 1, "the byte count")
            j.require(int(got) == want, f"attention_cache_bytes_per_token({what}) = {int(got)}; expected {want} = "
                      f"{formula}", hint=j.mistake_hint(i))

    return _case("attention_cache_bytes_per_token", title, calls, judge)


@NOTEBOOK.exercise("attention_cache_bytes_per_token")
def _bytes_cases() -> list[Case]:
    """Check ``attention_cache_bytes_per_token(kind, num_layers, num_heads, head_dim, ...)`` for
    mha, mqa, gqa and mla (a Python int)."""
    return [
        _bytes_case("Llama-3-8B (L = 32, H = 32, Dh = 128, G = 8) in bf16: gqa 131072 bytes per token; as mha "
                    "524288, as mqa 16384",
                    [(("gqa", 32, 32, 128), {"num_kv_heads": 8}, 131072, "2·L·G·Dh·bytes"),
                     (("mha", 32, 32, 128), {}, 524288, "2·L·H·Dh·bytes"),
                     (("mqa", 32, 32, 128), {}, 16384, "2·L·Dh·bytes")]),
        _bytes_case("DeepSeek-V3's MLA (L = 61, H = 128, Dc = 512, dr = 64) in bf16: 61·576·2 = 70272 bytes per token",
                    [(("mla", 61, 128, 128), {"kv_lora_rank": 512, "qk_rope_head_dim": 64}, 70272, "L·(Dc + dr)·bytes"),
                     (("mla", 2, 4, 16), {"kv_lora_rank": 10, "qk_rope_head_dim": 6, "bytes_per_element": 4},
                      2 * 16 * 4, "L·(Dc + dr)·bytes")]),
        _bytes_case("float32 (4 bytes), G = H is mha, G = 3",
                    [(("gqa", 2, 6, 8), {"num_kv_heads": 6, "bytes_per_element": 4}, 2 * 2 * 6 * 8 * 4,
                      "2·L·G·Dh·bytes"),
                     (("gqa", 3, 6, 10), {"num_kv_heads": 3, "bytes_per_element": 1}, 2 * 3 * 3 * 10,
                      "2·L·G·Dh·bytes"),
                     (("mha", 5, 3, 4), {"bytes_per_element": 4}, 2 * 5 * 3 * 4 * 4, "2·L·H·Dh·bytes")]),
        _errors_case("attention_cache_bytes_per_token", "ValueError for an unknown kind, gqa without num_kv_heads, mla "
                     "without kv_lora_rank or qk_rope_head_dim",
                     [_bytes_call("mlx", 2, 4, 8), _bytes_call("gqa", 2, 4, 8),
                      _bytes_call("mla", 2, 4, 8, qk_rope_head_dim=4), _bytes_call("mla", 2, 4, 8, kv_lora_rank=16)],
                     ["kind='mlx'", "gqa without num_kv_heads", "mla without kv_lora_rank",
                      "mla without qk_rope_head_dim"], HINTS["bytes_errors"]),
    ]


# ---------------------------------------------------------------------------------------------
# mha_to_gqa (challenge)
# ---------------------------------------------------------------------------------------------
def pooled_state(state: dict[str, torch.Tensor], h: int, g: int) -> dict[str, torch.Tensor]:
    """The MHA state with k_proj/v_proj rows mean-pooled over each group of R = H // G heads."""
    out = dict(state)
    for n in ("k_proj.weight", "v_proj.weight"):
        w = state[n]
        dh, d = w.size(0) // h, w.size(1)
        out[n] = w.view(g, h // g, dh, d).mean(1).reshape(g * dh, d)
    return out


def _to_gqa_case(title: str, seed: int, b: int, t: int, d: int, h: int, g: int) -> Case:
    dh = d // h
    x = _randn(seed, b, t, d)
    state = gqa_state(seed + 1, d, h, h, dh, torch.float64)
    mha = Instance(LOADER, (Instance("GroupedQueryAttention", (d, h, h)),
                               *(state[f"{n}_proj.weight"] for n in "qkvo")), key="m")
    call = Call("mha_to_gqa", (mha, g), steps=(Step("__call__", (x,)), Step("num_kv_heads", attribute=True),
                                               Step("__call__", (x,), on="m")))
    want, _ = gqa_oracle(x, pooled_state(state, h, g), h, g, 10000.0)
    before, _ = gqa_oracle(x, state, h, h, 10000.0)
    atol, rtol = ATTN_TOL[torch.float64]

    def judge(j: Judge) -> None:
        out, n, again = step_tensors(j, 0, 3, "the new module's output, its num_kv_heads, the input's output")
        j.require(n.dim() == 0 and int(n) == g, f"the new module's num_kv_heads is {n.tolist()}; expected {g}")
        j.require(tuple(out.shape) == (b, t, d), f"the new module's output has shape {tuple(out.shape)}; expected "
                  f"{(b, t, d)}")
        j.close(again, before, name="the input module's output after the call", atol=atol, rtol=rtol,
                oracle="its output before the call", hint=HINTS["pool_inplace"])
        j.close(out, want, name="the new module's output", atol=atol, rtol=rtol,
                oracle="GQA with each group's k_proj/v_proj rows mean-pooled")

    return _case("mha_to_gqa", title, [call], judge, seed=seed)


def _to_gqa_errors(seed: int) -> Case:
    d, h = 16, 4
    mha = gqa_state(seed, d, h, h, d // h, torch.float64)
    gqa = gqa_state(seed + 10, d, h, 2, d // h, torch.float64)

    def built(state: dict[str, torch.Tensor], g: int) -> Instance:
        return Instance(LOADER, (Instance("GroupedQueryAttention", (d, h, g)),
                                 *(state[f"{n}_proj.weight"] for n in "qkvo")))

    calls = [Call("mha_to_gqa", (built(gqa, 2), 1)), Call("mha_to_gqa", (built(mha, h), 3))]
    return _errors_case("mha_to_gqa", "ValueError when the input is not MHA (G != H) or when H is not a multiple of "
                        "num_kv_heads", calls, ["an input with H = 4, G = 2", "H = 4 to num_kv_heads = 3"],
                        HINTS["pool_errors"])


@NOTEBOOK.exercise("mha_to_gqa")
def _to_gqa_cases() -> list[Case]:
    """Check ``mha_to_gqa(mha, num_kv_heads)`` (optional, 0 points): mean-pooled KV heads, a new module."""
    return [
        _to_gqa_case("H = 4 -> G = 2, (B, T, D) = (2, 5, 16), float64: KV heads (0, 1) and (2, 3) mean-pooled, "
                     "q_proj and o_proj copied; the input module unchanged", 7501, 2, 5, 16, 4, 2),
        _to_gqa_case("H = 6 -> G = 2 (R = 3)", 7511, 1, 4, 24, 6, 2),
        _to_gqa_case("H = 4 -> G = 1 (MQA)", 7521, 2, 3, 16, 4, 1),
        _to_gqa_errors(7531),
    ]


