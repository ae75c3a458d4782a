"""Grading cases for notebook 06 (causal decoding and the KV cache).

The visible cases come from ``tfcourse.checks.nb06_kv_cache``; the hidden ones below are drawn
from the grader's seed. Deterministic answers are compared with the reference solution run on
the same calls (``KVCache`` contents, the modules' outputs with and without caches, greedy
``generate`` on the probe model, byte counts, the repetition penalty); sampling is judged
statistically like the visible cases (random logits rows, kept away from top-k ties and from
cumulative masses near p), and how ``generate`` calls the model by its tokens on a probe
whose logits depend on how it is called, compared with the reference's on the same probe.

Tolerances: float64 modules at float32 level (atol 1e-5, rtol 1e-5; the setup's RoPE tables are
float32, and float64/complex angles are correct too), float32 modules atol/rtol 1e-4; token ids
and byte counts exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tfcourse.checks.call import INT_STEP, Call, Instance, Step
from tfcourse.checks.case import Case, Judge, fmt_dtype
from tfcourse.checks.nb06_kv_cache import MISTAKES, NOTEBOOK
from tfcourse.checks.nb06_kv_cache.cases import (
    ATTN_TOL,
    KV_CACHE,
    attention_state,
    block_state,
    chunked_steps,
    error_hints,
    lm_state,
)
from tfcourse.checks.nb06_kv_cache.mistakes import filtered_probs
from tfcourse.checks.nb06_kv_cache.sampling import (
    calls_case,
    probe,
    require_ints,
    sampling_case,
)
from tfcourse.device import make_generator

from . import HiddenCases, every_tensor_cases, seeded

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _pick(g: torch.Generator, options: Sequence) -> object:
    return options[int(torch.randint(len(options), (1,), generator=g))]


_hidden = every_tensor_cases(MISTAKES, error_hints, ATTN_TOL)


# ---------------------------------------------------------------------------------------------
@HIDDEN.exercise("KVCache")
def _kv_cache(seed: int) -> list[Case]:
    out = []
    for _, s, g, dtype in seeded(seed, 100, (torch.float64, torch.float32, torch.float64)):
        b, gh, dh = (int(v) for v in torch.randint(1, 5, (3,), generator=g))
        dh *= 2
        chunks = [int(v) for v in torch.randint(1, 6, (int(torch.randint(2, 5, (1,), generator=g)),), generator=g)]
        call = KV_CACHE.call([(_randn(g, b, gh, t, dh, dtype=dtype), _randn(g, b, gh, t, dh, dtype=dtype))
                              for t in chunks])
        out.append(_hidden("KVCache", f"(B, G, Dh) = ({b}, {gh}, {dh}), chunks {chunks}, {fmt_dtype(dtype)}",
                           [call], s))
    s = seed * 1000 + 150
    g = make_generator(s)
    first = (_randn(g, 2, 2, 3, 4), _randn(g, 2, 2, 3, 4))
    bad = [(_randn(g, 2, 2, 1, 4), _randn(g, 2, 2, 2, 4)), (_randn(g, 2, 2, 1, 4, dtype=torch.float32),) * 2,
           (_randn(g, 3, 2, 1, 4), _randn(g, 3, 2, 1, 4))]
    out.append(_hidden("KVCache", "chunks that do not fit the cache (k/v shapes, dtype, B) raise ValueError",
                       [KV_CACHE.updates(first, args) for args in bad], s, part="validation"))
    return out


@HIDDEN.exercise("CausalSelfAttention")
def _attention(seed: int) -> list[Case]:
    out = []
    configs = [  # (B, D, H, chunks, dtype, theta); one chunk = no cache
        (2, 32, 4, (9,), torch.float64, 10000.0),
        (1, 24, 3, (4,), torch.float32, 500.0),
        (3, 16, 2, (2,), torch.float64, 1e6),
    ]
    for _, s, g, (b, d, h, chunks, dtype, theta) in seeded(seed, 200, configs):
        x = _randn(g, b, chunks[0], d, dtype=dtype)
        call = Call("CausalSelfAttention", (d, h, theta), state=attention_state(s, d, dtype), forward_args=(x,))
        out.append(_hidden("CausalSelfAttention", f"no cache, (B, T, D) = ({b}, {chunks[0]}, {d}), H = {h}, "
                           f"rope_theta = {theta:g}, {fmt_dtype(dtype)}", [call], s, dtype=dtype))
    for i, s, g, (chunks, dtype) in seeded(seed, 250, (((6, 1, 1, 2), torch.float64), ((3, 4, 1), torch.float32),
                                                       ((1, 1, 1, 1, 3), torch.float64))):
        b, d, h = 2, 16, (2, 4, 1)[i]
        x = _randn(g, b, sum(chunks), d, dtype=dtype)
        cache = Instance("KVCache", key="c")
        steps = chunked_steps(x, chunks, "cache", cache) + [Step("k", on="c", attribute=True),
                                                            Step("v", on="c", attribute=True)]
        call = Call("CausalSelfAttention", (d, h), state=attention_state(s, d, dtype), steps=tuple(steps))
        out.append(_hidden("CausalSelfAttention", f"a cache, chunks {list(chunks)}, H = {h}, {fmt_dtype(dtype)}: "
                           "outputs, then cache.k and cache.v", [call], s, part="cache", dtype=dtype))
    return out


@HIDDEN.exercise("DecoderBlock")
def _block(seed: int) -> list[Case]:
    out = []
    configs = [((7,), torch.float64, 10000.0, None), ((3, 1, 2), torch.float64, 300.0, 1e-5),
               ((5,), torch.float32, 10000.0, 1e-3), ((2, 2, 1), torch.float32, 10000.0, None)]
    for i, s, g, (chunks, dtype, theta, eps) in seeded(seed, 300, configs):
        b, d, h, d_ff = 2, 16, 2 * (1 + i % 2), 20 + 4 * i
        x = _randn(g, b, sum(chunks), d, dtype=dtype)
        state = block_state(s, d, d_ff, dtype)
        kwargs = {} if eps is None else {"eps": eps}
        if len(chunks) == 1:
            call = Call("DecoderBlock", (d, h, d_ff, theta), kwargs, state=state, forward_args=(x,))
        else:
            call = Call("DecoderBlock", (d, h, d_ff, theta), kwargs, state=state,
                        steps=tuple(chunked_steps(x, chunks, "cache", Instance("KVCache", key="c"))))
        what = "no cache" if len(chunks) == 1 else f"a cache, chunks {list(chunks)}"
        out.append(_hidden("DecoderBlock", f"{what}, H = {h}, d_ff = {d_ff}, rope_theta = {theta:g}"
                           + (f", eps = {eps:g}" if eps else "") + f", {fmt_dtype(dtype)}", [call], s, dtype=dtype))
    return out


@HIDDEN.exercise("DecoderLM")
def _lm(seed: int) -> list[Case]:
    out = []
    configs = [  # (vocab, D, L, H, d_ff, chunks, dtype, tied, part)
        (17, 16, 2, 4, 24, (5,), torch.float64, False, "core"),
        (9, 24, 1, 3, 32, (3,), torch.float32, False, "core"),
        (15, 16, 3, 2, 24, (3, 1, 2, 1), torch.float64, False, "cache_and_tied"),
        (11, 16, 2, 2, 16, (4,), torch.float64, True, "cache_and_tied"),
        (11, 16, 2, 4, 16, (2, 2, 1), torch.float32, True, "cache_and_tied"),
    ]
    for _, s, g, (vocab, d, layers, h, d_ff, chunks, dtype, tied, part) in seeded(seed, 400, configs):
        ids = torch.randint(0, vocab, (2, sum(chunks)), generator=g)
        state = lm_state(s, vocab, d, layers, d_ff, dtype, tied=tied)
        args = (vocab, d, layers, h, d_ff)
        kwargs = {"tie_embeddings": True} if tied else {}
        if len(chunks) == 1:
            call = Call("DecoderLM", args, kwargs, state=state, forward_args=(ids,))
        else:
            caches = [Instance("KVCache", key=f"c{n}") for n in range(layers)]
            call = Call("DecoderLM", args, kwargs, state=state,
                        steps=tuple(chunked_steps(ids, chunks, "caches", caches)))
        what = "no cache" if len(chunks) == 1 else f"caches, chunks {list(chunks)}"
        out.append(_hidden("DecoderLM", f"V = {vocab}, D = {d}, L = {layers}, H = {h}, {what}"
                           + (", tied" if tied else "") + f", {fmt_dtype(dtype)}", [call], s, part=part, dtype=dtype))
    return out


def _clear_rows(g: torch.Generator, vocab: int, count: int, thresholds: Sequence[float],
                temperature: float, top_k: int | None, late_apart: bool = False) -> torch.Tensor:
    """Random logits rows without top-k ties and without a cumulative mass within 0.02 of any
    threshold (after temperature and top-k), redrawn until they are. ``late_apart``: also until
    top-p of the untempered logits keeps another set than top-p of logits / temperature (so the
    temperature divided in last fails whatever the seed), told apart from top-p dropping the
    crossing token."""
    rows = []
    while len(rows) < count:
        x = torch.randn(vocab, generator=g, dtype=torch.float64) * 1.5
        if late_apart:
            top_p = thresholds[0]
            right = filtered_probs(x[None], temperature, top_k, top_p)
            late = filtered_probs(x[None], temperature, top_k, top_p, temp="late")
            drop = filtered_probs(x[None], temperature, top_k, top_p, topp="drop_crossing")
            untempered = x.sort(descending=True).values
            if top_k is not None and top_k < vocab:
                untempered = untempered[:top_k]
            cum1 = untempered.softmax(-1).cumsum(-1)
            if (torch.equal(right > 0, late > 0) or (late - drop).abs().max() < 0.1
                    or bool(((cum1 - top_p).abs() <= 0.02).any())):
                continue
        s = (x / temperature).sort(descending=True).values
        if top_k is not None and top_k < vocab:
            if s[top_k - 1] - s[top_k] < 0.05:
                continue
            s = s[:top_k]
        cum = s.softmax(-1).cumsum(-1)
        if all(((cum - p).abs() > 0.02).all() for p in thresholds):
            rows.append(x)
    return torch.stack(rows)


@HIDDEN.exercise("sample_next_token")
def _sampling(seed: int) -> list[Case]:
    out = []
    for i, s, g, dtype in seeded(seed, 500, (torch.float32, torch.float64)):
        logits = _randn(g, 6, 30, scale=3.0, dtype=dtype)
        options = {} if i == 0 else {"top_k": 4, "top_p": 0.3}
        out.append(_hidden("sample_next_token", f"temperature 0 on (6, 30) {fmt_dtype(dtype)} logits"
                           + (" with top_k and top_p (ignored)" if options else "") + ": the argmax",
                           [Call("sample_next_token", (logits,), {"temperature": 0.0, **options})], s))
    configs = [  # (temperature, top_k, top_p, part)
        (1.3, None, None, "core"),
        (0.8, 5, None, "filters"),
        (1.0, None, 0.7, "filters"),
        (0.6, 6, 0.7, "filters"),  # sharpened: top-p of the untempered logits keeps more (late_apart)
    ]
    for _, s, g, (temperature, top_k, top_p, part) in seeded(seed, 550, configs):
        vocab = int(torch.randint(8, 13, (1,), generator=g))
        rows = _clear_rows(g, vocab, 2, [top_p] if top_p is not None else [], temperature, top_k,
                           late_apart=temperature != 1.0 and top_p is not None)
        what = ", ".join([f"temperature {temperature:g}"] + ([f"top_k = {top_k}"] if top_k else [])
                         + ([f"top_p = {top_p:g}"] if top_p else []))
        out.append(sampling_case(f"hidden case: {what}, V = {vocab}, two random rows", rows, s,
                                 temperature=temperature, top_k=top_k, top_p=top_p, part=part, hidden=True))
    return out


@HIDDEN.exercise("generate")
def _generate(seed: int) -> list[Case]:
    out = []
    configs = [(3, 6, 9, True), (2, 1, 7, False), (1, 8, 5, True), (2, 3, 10, False)]  # (B, T, N, use_cache)
    for _, s, g, (b, t, n, use_cache) in seeded(seed, 600, configs):
        ids = torch.randint(0, 11, (b, t), generator=g)
        layers = int(torch.randint(1, 4, (1,), generator=g))
        call = Call("generate", (probe(num_layers=layers), ids, n), {"use_cache": use_cache})
        out.append(_hidden("generate", f"greedy, (B, T) = ({b}, {t}), {n} new tokens, a probe model with {layers} "
                           f"blocks, use_cache={use_cache}", [call], s))
    for i, s, g, use_cache in seeded(seed, 650, (True, False)):
        layers = int(torch.randint(1, 4, (1,), generator=g))
        out.append(calls_case(f"hidden case: how the model is called, use_cache={use_cache}, a probe with {layers} "
                              "blocks whose logits depend on how it is called: the tokens match the reference's", s,
                              use_cache, b=1 + i, t=3 + i, n=4 + 2 * i, num_layers=layers, hidden=True))
    return out


@HIDDEN.exercise("kv_cache_bytes")
def _bytes(seed: int) -> list[Case]:
    g = make_generator(seed * 1000 + 700)
    calls = []
    for _ in range(4):
        args = [int(v) for v in torch.randint(0, 200, (6,), generator=g)]
        calls.append(Call("kv_cache_bytes", tuple(args[:4]), {"batch_size": args[4], "bytes_per_element":
                                                              _pick(g, (1, 2, 4))}, steps=(INT_STEP,)))
    calls.append(Call("kv_cache_bytes", (80, 8, 128, 32768), steps=(INT_STEP,)))  # Llama-2-70B, GQA
    negative = [Call("kv_cache_bytes", (4, 2, 64, 100, -1))]  # must raise: no int to read
    sizes = _hidden("kv_cache_bytes", "random sizes, Llama-2-70B (GQA) at 32K tokens", calls, seed * 1000 + 700)
    judge = sizes.judge

    def ints_first(j: Judge) -> None:  # "returned a float", not the AttributeError of .numerator
        require_ints(j)
        judge(j)

    sizes.judge = ints_first
    return [sizes, _hidden("kv_cache_bytes", "batch_size = -1 raises ValueError", negative, seed * 1000 + 700,
                           part="validation")]


@HIDDEN.exercise("apply_repetition_penalty")
def _penalty(seed: int) -> list[Case]:
    out = []
    for _, s, g, (dtype, penalty) in seeded(seed, 800, ((torch.float64, 1.2), (torch.float32, 2.0), (torch.float64, 0.5))):
        b, vocab, t = 3, 20, 12
        logits = _randn(g, b, vocab, scale=2.0, dtype=dtype)
        ids = torch.randint(0, vocab // 2, (b, t), generator=g)
        out.append(_hidden("apply_repetition_penalty", f"penalty {penalty:g}, (B, V) = ({b}, {vocab}), ids with "
                           f"repeats, {fmt_dtype(dtype)}", [Call("apply_repetition_penalty", (logits, ids, penalty))],
                           s))
    return out

cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
