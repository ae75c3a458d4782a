"""Notebook 06's visible cases: oracles that do not hand out the answer, and properties.

Oracles (float64, in the judging process): the attention, block and model written with torch's
own pieces (``F.scaled_dot_product_attention`` with an explicit bottom-right mask, ``F.rms_norm``,
``F.silu``, RoPE as a complex product), run on the WHOLE sequence without a cache: a cached run,
prefill then one-token steps and multi-token chunks, must give the same rows (cached == uncached),
and the cache must end up holding the rotated keys. Tolerance: float64 modules are judged at
float32 level (atol 1e-5, rtol 1e-5), since the setup's RoPE tables are float32 and float64 or
complex angles are correct too (docs/conventions.md, "Where correct public code differs"); float32 modules at atol 1e-4,
rtol 1e-4 (two layers of float32 arithmetic).

This module holds exercises 1-4 (KVCache, CausalSelfAttention, DecoderBlock, DecoderLM) and the
helpers every case uses; sampling.py the decoding exercises 5-8 (sample_next_token, generate,
kv_cache_bytes, apply_repetition_penalty), which register after these (it imports this module).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import make_generator
from ..call import Call, Instance, Step
from ..case import Case, Judge, fmt_dtype
from ..protocol import NotebookChecks
from ..shared import TwoTensorCache, expect_value_errors
from .hint_texts import HINTS
from .mistakes import MISTAKES

__all__ = ["ATTN_TOL", "KV_CACHE", "NOTEBOOK", "attention_oracle", "attention_state", "block_oracle", "block_state", "chunked_steps", "error_hints", "judge_chunks", "lm_oracle", "lm_state", "make_case", "randn", "step_tensors"]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("06_kv_cache", calls={"CausalSelfAttention": ("KVCache",),
           "DecoderBlock": ("CausalSelfAttention", "KVCache"),
           "DecoderLM": ("DecoderBlock", "CausalSelfAttention", "KVCache"),
           "generate": ("KVCache", "sample_next_token")})


# (atol, rtol): float64 modules at float32 level (float32 RoPE tables are the setup's), float32 modules
ATTN_TOL = {torch.float64: (1e-5, 1e-5), torch.float32: (1e-4, 1e-4)}


def randn(seed: int, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.randn(*shape, generator=make_generator(seed), dtype=torch.float64) * scale).to(dtype)


def make_case(exercise: str, title: str, calls: list[Call], judge: Callable[[Judge], None], seed: int | None = None,
              part: str = "core") -> Case:
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise], part=part)


def step_tensors(j: Judge, call: int, count: int, what: str) -> list[torch.Tensor]:
    """The ``count`` tensors a call with steps returned (its results flattened), or a failure."""
    o = j.outcomes[call]
    if o.kind == "error":
        j.values(call)  # raises: the judge reports the exception (with error hints, see _errors)
    if o.kind == "bad_type":
        hint = HINTS["seq_len_method"] if "method" in o.type_name else None
        j.fail(f"{what}: got {o.type_name} where tensors (or None, or ints) were expected", hint=hint)
    if len(o.tensors) != count:
        j.fail(f"{what}: got {len(o.tensors)} tensors back; expected {count} (did a call return a tuple "
               "of the wrong length, or None?)", hint=lambda: j.mistake_hint(call, check_shape_only=True))
    return o.tensors


def error_hints(judge: Callable[[Judge], None]) -> Callable[[Judge], None]:
    """An answer that raised gets the hint its error points to (torch.cat on the wrong axis, a
    division by a zero temperature, weights that could not be loaded by name)."""

    def wrapped(j: Judge) -> None:
        for o in j.outcomes:
            if o.kind != "error":
                continue
            msg = o.error_message
            if "must match except in dimension" in msg and "dimension 2" not in msg:
                j.fail(f"raised {o.error_line()}", hint=HINTS["cat_axis"])
            if "probability tensor contains" in msg:
                j.fail(f"raised {o.error_line()}", hint=HINTS["zero_temp"]
                       if any(c.kwargs.get("temperature") == 0 for c in j.case.calls) else None)
            if "loading state_dict" in msg and '"lm_head.weight"' in msg and "Missing" in msg:
                j.fail("lm_head.weight could not be loaded: a tied model's state holds tok_emb.weight only",
                       hint=HINTS["tie"])
            if "loading state_dict" in msg:
                lines = [ln.strip() for ln in msg.splitlines()[1:] if ln.strip()]
                j.fail(f"the weights could not be loaded by name: {(lines[0] if lines else msg)[:120]}",
                       hint="name the submodules as the task says (q_proj, k_proj, v_proj, o_proj; attn_norm, "
                       "attn, ffn_norm, ffn; tok_emb, blocks, final_norm, lm_head): the grader loads them by name")
        judge(j)

    return wrapped


# ---------------------------------------------------------------------------------------------
# KVCache
# ---------------------------------------------------------------------------------------------
# the KVCache contract (its checks' words): tfcourse.checks.shared.TwoTensorCache
KV_CACHE = TwoTensorCache("KVCache", ("k", "v"), dim=2, layout="(B, G, P + T, Dh)", holds=("keys", "values"),
                          dtype_note=", the dtype it was given")


def _kv_case(title: str, seed: int, dtype: torch.dtype, b: int, g: int, dh: int, chunks: Sequence[int]) -> Case:
    ks = [randn(seed + 2 * i, b, g, t, dh, dtype=dtype) for i, t in enumerate(chunks)]
    vs = [randn(seed + 2 * i + 1, b, g, t, dh, dtype=dtype) for i, t in enumerate(chunks)]
    return make_case("KVCache", title, [KV_CACHE.call(zip(ks, vs, strict=True), read_empty=True)],
                     error_hints(KV_CACHE.judge(ks, vs, dtype, step_tensors)), seed=seed)


def _kv_errors(seed: int) -> Case:
    k = randn(seed, 2, 3, 4, 5)
    bad = {
        "k (2, 3, 4, 5) with v (2, 3, 2, 5) on the first update": ((k, randn(seed + 1, 2, 3, 2, 5)), None),
        "a chunk with Dh = 6 after Dh = 5": ((randn(seed + 2, 2, 3, 1, 6), randn(seed + 3, 2, 3, 1, 6)), True),
        "a float32 chunk after float64": ((randn(seed + 4, 2, 3, 1, 5, dtype=torch.float32),
                                           randn(seed + 5, 2, 3, 1, 5, dtype=torch.float32)), True),
        "a chunk with B = 1 after B = 2": ((randn(seed + 6, 1, 3, 1, 5), randn(seed + 7, 1, 3, 1, 5)), True),
        "a chunk with G = 2 after G = 3": ((randn(seed + 8, 2, 2, 1, 5), randn(seed + 9, 2, 2, 1, 5)), True),
    }
    first = (k, randn(seed + 10, 2, 3, 4, 5))
    calls = [KV_CACHE.updates(first, args) if after else KV_CACHE.updates(args) for args, after in bad.values()]

    def judge(j: Judge) -> None:
        expect_value_errors(j, list(bad), HINTS["cache_validate"])

    return make_case("KVCache", "update raises ValueError when k and v differ in shape, or when B, G, Dh or the "
                     "dtype differ from the cache", calls, judge, seed=seed, part="validation")


@NOTEBOOK.exercise("KVCache", parts=("core", "validation"))
def _kv_cache_cases() -> list[Case]:
    """Check ``KVCache()``: k/v None when empty, ``update(k, v)`` appends on the sequence axis and
    returns the whole cache, ``seq_len`` counts positions, ValueError for chunks that do not fit."""
    return [
        _kv_case("an empty cache, then chunks of 5, 1 and 2 positions (B, G, Dh) = (2, 3, 4), float64: "
                 "update returns the whole cache, seq_len counts positions", 6001, torch.float64, 2, 3, 4, (5, 1, 2)),
        _kv_case("chunks of 2, 2 and 1 positions (B, G, Dh) = (1, 2, 8), float32", 6011, torch.float32, 1, 2, 8,
                 (2, 2, 1)),
        _kv_errors(6021),
    ]


# ---------------------------------------------------------------------------------------------
# The float64 oracles: attention, block, model, on the whole sequence
# ---------------------------------------------------------------------------------------------
def rope64(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE at positions 0 .. T-1 as a complex product in float64 (x (B, H, T, Dh))."""
    dh = x.size(-1)
    half = dh // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / dh)  # (Dh/2,)
    angles = torch.arange(x.size(2), dtype=torch.float64)[:, None] * inv  # (T, Dh/2)
    z = torch.complex(x[..., :half].double(), x[..., half:].double()) * torch.polar(torch.ones_like(angles), angles)
    return torch.cat((z.real, z.imag), dim=-1)


def attention_oracle(x: torch.Tensor, state: dict[str, torch.Tensor], h: int, theta: float,
                     prefix: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """(output (B, S, D), rotated keys (B, H, S, Dh)) in float64 of the whole sequence x."""
    x = x.double()
    b, s, d = x.shape
    w = {n: state[f"{prefix}{n}_proj.weight"].double() for n in "qkvo"}

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(b, s, h, d // h).transpose(1, 2)

    q, k, v = rope64(heads(x @ w["q"].T), theta), rope64(heads(x @ w["k"].T), theta), heads(x @ w["v"].T)
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, s, d) @ w["o"].T, k


def block_oracle(x: torch.Tensor, state: dict[str, torch.Tensor], h: int, theta: float, eps: float,
                 prefix: str = "") -> torch.Tensor:
    x = x.double()
    d = x.size(-1)
    w = {n: t.double() for n, t in state.items()}
    attn, _ = attention_oracle(F.rms_norm(x, (d,), w[f"{prefix}attn_norm.weight"], eps), state, h, theta,
                               prefix=f"{prefix}attn.")
    hid = x + attn
    n = F.rms_norm(hid, (d,), w[f"{prefix}ffn_norm.weight"], eps)
    ffn = (F.silu(n @ w[f"{prefix}ffn.gate_proj.weight"].T) * (n @ w[f"{prefix}ffn.up_proj.weight"].T)) \
        @ w[f"{prefix}ffn.down_proj.weight"].T
    return hid + ffn


def lm_oracle(ids: torch.Tensor, state: dict[str, torch.Tensor], layers: int, h: int, theta: float) -> torch.Tensor:
    x = state["tok_emb.weight"].double()[ids]
    for i in range(layers):
        x = block_oracle(x, state, h, theta, 1e-6, prefix=f"blocks.{i}.")
    x = F.rms_norm(x, (x.size(-1),), state["final_norm.weight"].double(), 1e-6)
    head = state.get("lm_head.weight", state["tok_emb.weight"]).double()
    return x @ head.T


def attention_state(seed: int, d: int, dtype: torch.dtype, prefix: str = "") -> dict[str, torch.Tensor]:
    return {f"{prefix}{n}_proj.weight": randn(seed + i, d, d, scale=d ** -0.5, dtype=dtype)
            for i, n in enumerate("qkvo")}


def block_state(seed: int, d: int, d_ff: int, dtype: torch.dtype, prefix: str = "") -> dict[str, torch.Tensor]:
    state = attention_state(seed, d, dtype, prefix=f"{prefix}attn.")
    state[f"{prefix}attn_norm.weight"] = (1 + 0.3 * randn(seed + 10, d)).to(dtype)
    state[f"{prefix}ffn_norm.weight"] = (1 + 0.3 * randn(seed + 11, d)).to(dtype)
    state[f"{prefix}ffn.gate_proj.weight"] = randn(seed + 12, d_ff, d, scale=d ** -0.5, dtype=dtype)
    state[f"{prefix}ffn.up_proj.weight"] = randn(seed + 13, d_ff, d, scale=d ** -0.5, dtype=dtype)
    state[f"{prefix}ffn.down_proj.weight"] = randn(seed + 14, d, d_ff, scale=d_ff ** -0.5, dtype=dtype)
    return state


def lm_state(seed: int, vocab: int, d: int, layers: int, d_ff: int, dtype: torch.dtype,
             tied: bool = False) -> dict[str, torch.Tensor]:
    state = {"tok_emb.weight": randn(seed, vocab, d, dtype=dtype)}
    for i in range(layers):
        state.update(block_state(seed + 100 * (i + 1), d, d_ff, dtype, prefix=f"blocks.{i}."))
    state["final_norm.weight"] = (1 + 0.3 * randn(seed + 1, d)).to(dtype)
    if not tied:
        state["lm_head.weight"] = randn(seed + 2, vocab, d, scale=d ** -0.5, dtype=dtype)
    return state


def chunked_steps(inputs: torch.Tensor, chunks: Sequence[int], cache_kwarg: str, caches: object) -> list[Step]:
    """One forward step per chunk of ``inputs`` (along dim 1), each given the same cache(s)."""
    steps, at = [], 0
    for t in chunks:
        steps.append(Step("__call__", (inputs[:, at: at + t],), {cache_kwarg: caches}))
        at += t
    return steps


def judge_chunks(j: Judge, got: list[torch.Tensor], full: torch.Tensor, chunks: Sequence[int], dtype: torch.dtype,
                 what: str = "output") -> None:
    """Each chunk's output == the rows of the whole sequence's output (cached == uncached)."""
    atol, rtol = ATTN_TOL[dtype]
    at = 0
    for i, (t, out) in enumerate(zip(chunks, got, strict=False)):
        rows = full[:, at: at + t]
        if len(chunks) == 1:
            where = f"the whole sequence ({t} token{'s' if t > 1 else ''}, no cache)"
        elif i == 0:
            where = "the prefill"
        else:
            where = f"call {i + 1} ({t} new token{'s' if t > 1 else ''} after {at} cached)"
        j.require(tuple(out.shape) == tuple(rows.shape), f"{what} of {where} has shape {tuple(out.shape)}; "
                  f"expected {tuple(rows.shape)}", hint=lambda: j.mistake_hint(0, check_shape_only=True))
        j.require(out.dtype == dtype, f"{what} of {where} is {fmt_dtype(out.dtype)}; expected {fmt_dtype(dtype)}")
        j.close(out, rows, name=f"{what} of {where}", atol=atol, rtol=rtol,
                oracle="the same computation in plain torch" if len(chunks) == 1
                else f"rows {at}..{at + t - 1} without a cache")
        at += t


# ---------------------------------------------------------------------------------------------
# CausalSelfAttention
# ---------------------------------------------------------------------------------------------
def _attn_full_case(title: str, seed: int, b: int, t: int, d: int, h: int, dtype: torch.dtype,
                    theta: float | None = None, attributes: bool = False) -> Case:
    x = randn(seed, b, t, d, dtype=dtype)
    state = attention_state(seed + 1, d, dtype)
    args = (d, h) if theta is None else (d, h, theta)
    steps = (Step("num_heads", attribute=True), Step("head_dim", attribute=True)) if attributes else ()
    call = Call("CausalSelfAttention", args, state=state, forward_args=(x,), steps=steps)
    want, _ = attention_oracle(x, state, h, 10000.0 if theta is None else theta)
    atol, rtol = ATTN_TOL[dtype]

    def judge(j: Judge) -> None:
        if attributes:
            out, heads, dh = step_tensors(j, 0, 3, "forward's output, num_heads and head_dim")
            j.require(heads.dim() == 0 and int(heads) == h, f"num_heads is {heads.tolist()}; expected {h}")
            j.require(dh.dim() == 0 and int(dh) == d // h, f"head_dim is {dh.tolist()}; expected {d // h}")
        else:
            out = j.tensor(shape=(b, t, d))
        j.require(tuple(out.shape) == (b, t, d), f"output has shape {tuple(out.shape)}; expected {(b, t, d)}",
                  hint=lambda: j.mistake_hint(check_shape_only=True))
        j.require(out.dtype == dtype, f"output is {fmt_dtype(out.dtype)}; expected {fmt_dtype(dtype)}, x's dtype")
        j.close(out, want.to(torch.float64), atol=atol, rtol=rtol,
                oracle="F.scaled_dot_product_attention with RoPE (float64)")

    return make_case("CausalSelfAttention", title, [call], error_hints(judge), seed=seed)


def _attn_cache_case(title: str, seed: int, b: int, d: int, h: int, chunks: Sequence[int], dtype: torch.dtype,
                     theta: float = 10000.0) -> Case:
    s = sum(chunks)
    x = randn(seed, b, s, d, dtype=dtype)
    state = attention_state(seed + 1, d, dtype)
    cache = Instance("KVCache", key="c")
    steps = chunked_steps(x, chunks, "cache", cache) + [Step("k", on="c", attribute=True),
                                                        Step("seq_len", on="c", attribute=True)]
    call = Call("CausalSelfAttention", (d, h, theta), state=state, steps=tuple(steps))
    full, keys = attention_oracle(x, state, h, theta)
    raw = (x.double() @ state["k_proj.weight"].double().T).view(b, s, h, d // h).transpose(1, 2)  # before RoPE
    atol, rtol = ATTN_TOL[dtype]

    def judge(j: Judge) -> None:
        got = step_tensors(j, 0, len(chunks) + 2, f"{len(chunks)} outputs, cache.k and cache.seq_len")
        k, n = got[-2], got[-1]
        # unrotated keys in the cache are named first: whatever the outputs, the rule is broken there
        if tuple(k.shape) == tuple(raw.shape) and torch.allclose(k.double().cpu(), raw, atol=10 * atol, rtol=rtol):
            j.fail("cache.k after the calls holds the keys before RoPE (k_proj's output); the cache must hold "
                   "them rotated at their positions", hint=HINTS["pre_rope_cache"])
        judge_chunks(j, got, full, chunks, dtype)
        j.require(tuple(k.shape) == tuple(keys.shape), f"cache.k after the calls has shape {tuple(k.shape)}; "
                  f"expected (B, H, S, Dh) = {tuple(keys.shape)}")
        j.close(k, keys, name="cache.k after the calls", atol=atol, rtol=rtol,
                oracle="the keys rotated at their positions")
        j.require(n.dim() == 0 and int(n) == s, f"cache.seq_len after the calls is {n.tolist()}; expected {s}")

    return make_case("CausalSelfAttention", title, [call], error_hints(judge), seed=seed, part="cache")


def _attn_errors() -> Case:
    def judge(j: Judge) -> None:
        expect_value_errors(j, ["CausalSelfAttention(10, 4)"], HINTS["divisible"])

    return make_case("CausalSelfAttention", "ValueError when d_model is not divisible by num_heads",
                     [Call("CausalSelfAttention", (10, 4))], judge, part="validation")


@NOTEBOOK.exercise("CausalSelfAttention", parts=("core", "cache", "validation"))
def _attention_cases() -> list[Case]:
    """Check ``CausalSelfAttention(d_model, num_heads, rope_theta=10000.0)``.

    part: "core" (no cache: SDPA with RoPE and a causal mask, float64/float32) or "cache" (prefill,
    one-token steps and chunks == the no-cache rows; cache.k holds the rotated keys) or "validation"
    (the ValueError for d_model % num_heads); None: all."""
    f64, f32 = torch.float64, torch.float32
    return [
        _attn_full_case("no cache, (B, T, D) = (2, 7, 16), H = 4, float64: matches SDPA with RoPE at positions "
                        "0..T-1 and a causal mask; num_heads and head_dim", 6101, 2, 7, 16, 4, f64, attributes=True),
        _attn_full_case("no cache, one token (T = 1), float64", 6111, 3, 1, 16, 2, f64),
        _attn_full_case("no cache, T = 3, H = 2, rope_theta = 100, float32", 6121, 2, 3, 16, 2, f32, theta=100.0),
        _attn_full_case("no cache, T = 5, D = 24, H = 3, float64", 6131, 1, 5, 24, 3, f64),
        _attn_errors(),
        _attn_cache_case("a prefill of 5 tokens, then 3 one-token steps (float64): each output == the no-cache "
                         "output's rows; cache.k holds the rotated keys", 6141, 2, 16, 2, (5, 1, 1, 1), f64),
        _attn_cache_case("a prefill of 4, then chunks of 3 and 2 tokens (bottom-right mask), rope_theta = 500",
                         6151, 2, 16, 4, (4, 3, 2), f64, theta=500.0),
        _attn_cache_case("a prefill of 1, then steps of 1, 2 and 1 tokens, float32", 6161, 1, 16, 2, (1, 1, 2, 1),
                         f32),
    ]


# ---------------------------------------------------------------------------------------------
# DecoderBlock
# ---------------------------------------------------------------------------------------------
def _block_case(title: str, seed: int, b: int, d: int, h: int, d_ff: int, dtype: torch.dtype,
                chunks: Sequence[int], theta: float = 10000.0, eps: float | None = None, scale: float = 1.0) -> Case:
    s = sum(chunks)
    x = randn(seed, b, s, d, scale=scale, dtype=dtype)
    state = block_state(seed + 1, d, d_ff, dtype)
    kwargs = {} if eps is None else {"eps": eps}
    full = block_oracle(x, state, h, theta, 1e-6 if eps is None else eps)
    if len(chunks) == 1:
        call = Call("DecoderBlock", (d, h, d_ff, theta), kwargs, state=state, forward_args=(x,))
    else:
        cache = Instance("KVCache", key="c")
        call = Call("DecoderBlock", (d, h, d_ff, theta), kwargs, state=state,
                    steps=tuple(chunked_steps(x, chunks, "cache", cache)))

    def judge(j: Judge) -> None:
        got = [j.tensor()] if len(chunks) == 1 else step_tensors(j, 0, len(chunks), f"{len(chunks)} outputs")
        judge_chunks(j, got, full, chunks, dtype)

    return make_case("DecoderBlock", title, [call], error_hints(judge), seed=seed)


@NOTEBOOK.exercise("DecoderBlock")
def _block_cases() -> list[Case]:
    """Check ``DecoderBlock(d_model, num_heads, d_ff, rope_theta=10000.0, eps=1e-6)``, with and
    without a cache, against the pre-norm block written with torch's pieces."""
    f64, f32 = torch.float64, torch.float32
    return [
        _block_case("no cache, (B, T, D) = (2, 6, 16), H = 2, d_ff = 40, float64: matches the pre-norm block "
                    "(RMSNorm, attention, SwiGLU)", 6201, 2, 16, 2, 40, f64, (6,)),
        _block_case("no cache, inputs of size 0.05 with eps = 0.01 (eps matters), rope_theta = 50, float64", 6211,
                    1, 16, 4, 24, f64, (5,), theta=50.0, eps=1e-2, scale=0.05),
        _block_case("a prefill of 4, then one token, then a chunk of 3 (a cache), float64", 6221, 2, 16, 2, 32, f64,
                    (4, 1, 3)),
        _block_case("no cache, float32", 6231, 2, 16, 4, 24, f32, (4,)),
    ]


# ---------------------------------------------------------------------------------------------
# DecoderLM
# ---------------------------------------------------------------------------------------------
def _lm_ids(seed: int, b: int, t: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=make_generator(seed))


def _lm_case(title: str, seed: int, *, b: int = 2, vocab: int = 13, d: int = 16, layers: int = 2, h: int = 2,
             d_ff: int = 24, dtype: torch.dtype = torch.float64, chunks: Sequence[int] = (6,),
             theta: float = 10000.0, tied: bool = False, part: str = "core") -> Case:
    s = sum(chunks)
    ids = _lm_ids(seed, b, s, vocab)
    state = lm_state(seed + 1, vocab, d, layers, d_ff, dtype, tied=tied)
    args = (vocab, d, layers, h, d_ff, theta)
    kwargs = {"tie_embeddings": True} if tied else {}
    full = lm_oracle(ids, state, layers, h, theta)
    if len(chunks) == 1:
        call = Call("DecoderLM", args, kwargs, state=state, forward_args=(ids,))
    else:
        caches = [Instance("KVCache", key=f"c{i}") for i in range(layers)]
        call = Call("DecoderLM", args, kwargs, state=state, steps=tuple(chunked_steps(ids, chunks, "caches", caches)))

    def judge(j: Judge) -> None:
        got = [j.tensor()] if len(chunks) == 1 else step_tensors(j, 0, len(chunks), f"{len(chunks)} outputs")
        judge_chunks(j, got, full, chunks, dtype, what="logits")

    return make_case("DecoderLM", title, [call], error_hints(judge), seed=seed, part=part)


def _lm_caches_error(seed: int) -> Case:
    ids = _lm_ids(seed, 1, 3, 13)
    state = lm_state(seed + 1, 13, 16, 2, 24, torch.float64)
    call = Call("DecoderLM", (13, 16, 2, 2, 24), state=state, forward_args=(ids,),
                forward_kwargs={"caches": [Instance("KVCache", key="c0")]})

    def judge(j: Judge) -> None:
        expect_value_errors(j, ["one cache for two blocks"], HINTS["caches_len"])

    return make_case("DecoderLM", "ValueError when len(caches) != number of blocks", [call], judge, seed=seed,
                     part="validation")


@NOTEBOOK.exercise("DecoderLM", parts=("core", "cache_and_tied", "validation"))
def _lm_cases() -> list[Case]:
    """Check ``DecoderLM(vocab_size, d_model, num_layers, num_heads, d_ff, rope_theta=10000.0,
    tie_embeddings=False)``. part: "core" (no cache), "cache_and_tied" or "validation" (the ValueError for
    len(caches)); None: all."""
    return [
        _lm_case("no cache, V = 13, D = 16, L = 2, H = 2, (B, T) = (2, 6), float64: logits match the "
                 "embedding -> blocks -> final RMSNorm -> lm_head stack", 6301),
        _lm_case("no cache, one layer, rope_theta = 100, float32", 6311, layers=1, dtype=torch.float32, theta=100.0,
                 vocab=20, h=4),
        _lm_case("no cache, 3 layers, one token per sequence (T = 1)", 6321, layers=3, chunks=(1,), b=3),
        _lm_case("caches (one KVCache per block): a prefill of 4, one token, then a chunk of 3 == the logits "
                 "without a cache", 6331, chunks=(4, 1, 3), part="cache_and_tied"),
        _lm_case("tie_embeddings=True with a state holding tok_emb.weight only: lm_head.weight is tok_emb.weight",
                 6341, tied=True, part="cache_and_tied"),
        _lm_case("tie_embeddings=True, caches: a prefill of 2, then 2 one-token steps", 6351, tied=True,
                 chunks=(2, 1, 1), layers=1, part="cache_and_tied"),
        _lm_caches_error(6361),
    ]
