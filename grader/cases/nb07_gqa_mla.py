"""Grading cases for notebook 07 (MQA, GQA and MLA).

The visible cases come from ``tfcourse.checks.nb07_gqa_mla``; the hidden ones below are drawn from
the grader's seed and compared with the reference solution run on the same calls: ``repeat_kv``
on random shapes (float32 and float64: a copy needs no half-precision handling), the modules with and without caches (every step's
output, then what the cache holds), the absorbed MLA path with ``kv_b_proj``'s rows counted, the
``LatentCache`` contents and errors, byte counts of random configurations, ``mha_to_gqa`` on a
random MHA.

Tolerances: float64 modules at float32 level (atol 1e-5, rtol 1e-5; the setup's RoPE tables are
float32, and float64/complex angles are correct too), float32 modules atol/rtol 1e-4; copies and
byte counts exactly.
"""

from __future__ import annotations

import torch

from tfcourse.checks.call import Call, Instance, Step
from tfcourse.checks.case import Case, fmt_dtype
from tfcourse.checks.nb07_gqa_mla import MISTAKES, NOTEBOOK
from tfcourse.checks.nb07_gqa_mla.cases import (
    ATTN_TOL,
    INT_STEP,
    LOADER,
    chunked_steps,
    gqa_state,
    with_errors,
)
from tfcourse.checks.nb07_gqa_mla.mla import LATENT_CACHE, absorb_forbidden, mla_state
from tfcourse.device import make_generator

from . import HiddenCases, every_tensor_cases, seeded

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _int(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high, (1,), generator=g))


_hidden = every_tensor_cases(MISTAKES, with_errors, ATTN_TOL, (0.0, 0.0))


# ---------------------------------------------------------------------------------------------
@HIDDEN.exercise("repeat_kv")
def _repeat_kv(seed: int) -> list[Case]:
    out = []
    for i, s, g, dtype in seeded(seed, 100, (torch.float64, torch.float32, torch.float64)):
        b, kv, t, dh, r = _int(g, 1, 4), _int(g, 1, 5), _int(g, 1, 9), 2 * _int(g, 1, 5), (_int(g, 2, 6), 1, 3)[i]
        x = _randn(g, b, kv, t, dh, dtype=dtype)
        out.append(_hidden("repeat_kv", f"(B, G, S, Dh) = ({b}, {kv}, {t}, {dh}), n_rep = {r}, {fmt_dtype(dtype)}",
                           [Call("repeat_kv", (x, r))], s))
    # no float16/bfloat16 case: repeat_kv only copies numbers, so half precision needs no handling of
    # its own (no half test cell; docs/grading.md); float32 and float64 check that it keeps x's dtype
    return out


@HIDDEN.exercise("GroupedQueryAttention")
def _gqa(seed: int) -> list[Case]:
    out = []
    configs = [  # (B, D, H, G, head_dim, chunks, dtype, theta)
        (2, 32, 8, 2, None, (9,), torch.float64, 10000.0),
        (1, 24, 6, 3, 8, (4,), torch.float32, 500.0),
        (2, 16, 4, 1, None, (6, 1, 1, 2), torch.float64, 10000.0),
        (1, 16, 2, 2, 6, (3, 2), torch.float32, 1e6),
    ]
    for _, s, g, (b, d, h, kv, head_dim, chunks, dtype, theta) in seeded(seed, 200, configs):
        dh = head_dim or d // h
        x = _randn(g, b, sum(chunks), d, dtype=dtype)
        state = gqa_state(s, d, h, kv, dh, dtype)
        args = (d, h, kv) if head_dim is None else (d, h, kv, head_dim)
        if len(chunks) == 1:
            steps = (Step("__call__", (x,)),)
        else:
            steps = tuple(chunked_steps(x, chunks, cache=Instance("KVCache", key="c"))) + (
                Step("k", on="c", attribute=True), Step("v", on="c", attribute=True))
        what = "no cache" if len(chunks) == 1 else f"a KVCache, chunks {list(chunks)}, then cache.k and cache.v"
        out.append(_hidden("GroupedQueryAttention", f"{what}, D = {d}, H = {h}, G = {kv}, Dh = {dh}, rope_theta = "
                           f"{theta:g}, {fmt_dtype(dtype)}",
                           [Call("GroupedQueryAttention", args, {"rope_theta": theta}, state=state, steps=steps)], s,
                           part="core" if len(chunks) == 1 else "cache", dtype=dtype))
    return out


@HIDDEN.exercise("LatentCache")
def _latent_cache(seed: int) -> list[Case]:
    out = []
    for _, s, g, dtype in seeded(seed, 300, (torch.float64, torch.float32)):
        b, dc, dr = _int(g, 1, 4), _int(g, 2, 12), 2 * _int(g, 1, 4)
        chunks = [_int(g, 1, 6) for _ in range(_int(g, 2, 5))]
        call = LATENT_CACHE.call([(_randn(g, b, t, dc, dtype=dtype), _randn(g, b, t, dr, dtype=dtype)) for t in chunks])
        out.append(_hidden("LatentCache", f"(B, Dc, dr) = ({b}, {dc}, {dr}), chunks {chunks}, {fmt_dtype(dtype)}",
                           [call], s))
    s = seed * 1000 + 350
    g = make_generator(s)
    first = (_randn(g, 2, 3, 6), _randn(g, 2, 3, 2))
    bad = [(_randn(g, 2, 1, 6), _randn(g, 2, 2, 2)), (_randn(g, 3, 1, 6), _randn(g, 3, 1, 2)),
           (_randn(g, 2, 1, 6, dtype=torch.float32), _randn(g, 2, 1, 2, dtype=torch.float32)),
           (_randn(g, 2, 1, 7), _randn(g, 2, 1, 2))]
    out.append(_hidden("LatentCache", "chunks that do not fit (T differs, B, dtype, width) raise ValueError",
                       [LATENT_CACHE.updates(first, args) for args in bad], s, part="validation"))
    return out


@HIDDEN.exercise("MultiHeadLatentAttention")
def _mla(seed: int) -> list[Case]:
    out = []
    configs = [  # (B, D, H, Dc, dn, dr, dv, dq, chunks, dtype, absorb, part)
        (2, 32, 4, 12, 8, 4, 6, None, (7,), torch.float64, False, "core"),
        (1, 24, 3, 10, 6, 6, 8, 12, (5,), torch.float32, False, "core"),
        (2, 16, 2, 8, 4, 4, 4, 8, (3, 1, 2, 1), torch.float64, False, "cache"),
        (2, 16, 4, 9, 6, 2, 4, None, (4, 1, 2), torch.float64, True, "absorb"),
        (1, 16, 2, 8, 4, 2, 6, 6, (5,), torch.float32, True, "absorb"),
    ]
    for _, s, g, (b, d, h, dc, dn, dr, dv, dq, chunks, dtype, absorb, part) in seeded(seed, 400, configs):
        x = _randn(g, b, sum(chunks), d, dtype=dtype)
        state = mla_state(s, d, h, dc, dn, dr, dv, dq, dtype)
        kwargs = {} if dq is None else {"q_lora_rank": dq}
        fwd = {"absorb": True} if absorb else {}
        if len(chunks) == 1:
            steps = (Step("__call__", (x,), fwd),)
        else:
            steps = tuple(chunked_steps(x, chunks, cache=Instance("LatentCache", key="c"), **fwd)) + (
                Step("c_kv", on="c", attribute=True), Step("k_rope", on="c", attribute=True))
        what = "no cache" if len(chunks) == 1 else f"a LatentCache, chunks {list(chunks)}, then its c_kv and k_rope"
        out.append(_hidden("MultiHeadLatentAttention", f"{what}, D = {d}, H = {h}, Dc = {dc}, dn = {dn}, dr = {dr}, "
                           f"dv = {dv}, q_lora_rank = {dq}" + (", absorb=True (kv_b_proj's rows counted, K and V "
                                                               "per head refused)" if absorb else "")
                           + f", {fmt_dtype(dtype)}",
                           [Call("MultiHeadLatentAttention", (d, h, dc, dn, dr, dv), kwargs, state=state, steps=steps,
                                 count_rows_of="kv_b_proj" if absorb else "",
                                 forbid_shapes=absorb_forbidden(b, h, dc, dn, dr, dv, chunks) if absorb else ())],
                           s, part=part, dtype=dtype))
    return out


@HIDDEN.exercise("attention_cache_bytes_per_token")
def _bytes(seed: int) -> list[Case]:
    g = make_generator(seed * 1000 + 500)
    calls = []
    for kind in ("mha", "mqa", "gqa", "mla", "gqa", "mla"):
        layers, heads, dh = _int(g, 1, 100), _int(g, 1, 64), _int(g, 1, 256)
        kwargs = {"bytes_per_element": (1, 2, 4)[_int(g, 0, 3)]}
        if kind == "gqa":  # G divides H (exercise 2's rule): one draw among H's divisors
            divisors = [k for k in range(1, heads + 1) if heads % k == 0]
            kwargs["num_kv_heads"] = divisors[_int(g, 0, len(divisors))]
        if kind == "mla":  # dr even, as RoPE needs (exercise 4)
            kwargs.update(kv_lora_rank=_int(g, 16, 1024), qk_rope_head_dim=2 * _int(g, 4, 64))
        calls.append(Call("attention_cache_bytes_per_token", (kind, layers, heads, dh), kwargs,
                          steps=(INT_STEP,)))
    calls.append(Call("attention_cache_bytes_per_token", ("gqa", 80, 64, 128), {"num_kv_heads": 8},
                      steps=(INT_STEP,)))  # Llama-2-70B
    unknown = [Call("attention_cache_bytes_per_token", ("MHA", 2, 4, 8))]  # must raise: no int to read
    return [_hidden("attention_cache_bytes_per_token", "random mha/mqa/gqa/mla sizes, Llama-2-70B (gqa)", calls,
                    seed * 1000 + 500),
            _hidden("attention_cache_bytes_per_token", "kind 'MHA' (unknown) raises ValueError", unknown,
                    seed * 1000 + 500, part="validation")]


@HIDDEN.exercise("mha_to_gqa")
def _mha_to_gqa(seed: int) -> list[Case]:
    s = seed * 1000 + 600
    g = make_generator(s)
    b, t, h, kv = 2, _int(g, 2, 7), 6, (1, 2, 3)[_int(g, 0, 3)]
    d = 24
    x = _randn(g, b, t, d)
    state = gqa_state(s, d, h, h, d // h, torch.float64)
    mha = Instance(LOADER, (Instance("GroupedQueryAttention", (d, h, h)), *(state[f"{n}_proj.weight"]
                                                                            for n in "qkvo")), key="m")
    call = Call("mha_to_gqa", (mha, kv), steps=(Step("__call__", (x,)), Step("num_kv_heads", attribute=True),
                                                Step("__call__", (x,), on="m")))
    return [_hidden("mha_to_gqa", f"H = {h} -> G = {kv}, (B, T, D) = ({b}, {t}, {d}): the new module's output, its "
                    "num_kv_heads, the input's output", [call], s, dtype=torch.float64)]

cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
