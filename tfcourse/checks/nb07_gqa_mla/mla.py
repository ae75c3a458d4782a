"""Notebook 07's visible cases of multi-head latent attention (``LatentCache``,
``MultiHeadLatentAttention``) and of what each kind of attention caches per token
(``attention_cache_bytes_per_token``): exercises 3-5, which register after cases.py's (this module
imports it), as in the notebook. The MLA oracle is written with torch's pieces as cases.py's
docstring says; the absorbed path is watched for the shapes it must not build.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..call import INT_STEP, Call, Instance, Step
from ..case import Case, Judge
from ..evidence import ANY_ORDER
from ..shared import TwoTensorCache, with_error_hints
from .cases import (
    ATTN_TOL,
    NOTEBOOK,
    chunked_steps,
    errors_case,
    judge_chunks,
    make_case,
    randn,
    rope64,
    step_tensors,
)
from .mistakes import HINTS

__all__ = ["LATENT_CACHE", "absorb_forbidden", "mla_oracle", "mla_state"]

# torch's messages for matrix products whose inner sizes do not meet (matmul, bmm, einsum)
_MATMUL_SHAPES = (r"shapes cannot be multiplied|Expected size for first two dimensions of batch2|"
                  r"size of tensor a \(\d+\) must match the size of tensor b|einsum\(\): operands do not broadcast|"
                  r"subscript .* has size \d+ for operand \d+ which does not broadcast")


# ---------------------------------------------------------------------------------------------
# The float64 oracle of MLA, and what its absorbed path must not compute
# ---------------------------------------------------------------------------------------------
def mla_state(seed: int, d: int, h: int, dc: int, dn: int, dr: int, dv: int, dq: int | None,
              dtype: torch.dtype) -> dict[str, torch.Tensor]:
    qk = dn + dr
    state = {}
    if dq is None:
        state["q_proj.weight"] = randn(seed, h * qk, d, scale=d ** -0.5)
    else:
        state["q_a_proj.weight"] = randn(seed, dq, d, scale=d ** -0.5)
        state["q_a_layernorm.weight"] = 1 + 0.3 * randn(seed + 1, dq)
        state["q_b_proj.weight"] = randn(seed + 2, h * qk, dq, scale=dq ** -0.5)
    state["kv_a_proj_with_mqa.weight"] = randn(seed + 3, dc + dr, d, scale=d ** -0.5)
    state["kv_a_layernorm.weight"] = 1 + 0.3 * randn(seed + 4, dc)
    state["kv_b_proj.weight"] = randn(seed + 5, h * (dn + dv), dc, scale=dc ** -0.5)
    state["o_proj.weight"] = randn(seed + 6, d, h * dv, scale=(h * dv) ** -0.5)
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
    calls reach: (S, H·(dn + dv)) and (B·S, H·(dn + dv)); where S > T (a cached call): S, H and w
    among a tensor's dimensions in any order, for w = dn, dv, dn + dv (per-head K or V in any layout:
    (B, H, S, dn), (B, H, dn, S), (S, B, H, dv), ...). The sizes must differ so that the absorbed
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
            # the watcher sees aten operations too, where matmul merges B and H into one dimension
            assert b * h not in (dn, dv, dn + dv), "with a cache, B·H must be none of dn, dv, dn + dv"
            assert s not in (dn, dv, dn + dv), "a cached S must be none of dn, dv, dn + dv"
            found |= {(ANY_ORDER, s, h, w) for w in (dn, dv, dn + dv)}
    return tuple(sorted(found))


# ---------------------------------------------------------------------------------------------
# LatentCache
# ---------------------------------------------------------------------------------------------
# the LatentCache contract (its checks' words): tfcourse.checks.shared.TwoTensorCache
LATENT_CACHE = TwoTensorCache("LatentCache", ("c_kv", "k_rope"), dim=1, layout="(B, P + T, width)",
                              holds=("latents", "rope keys"), shape_only=True)


def _latent_case(title: str, seed: int, dtype: torch.dtype, b: int, dc: int, dr: int, chunks: Sequence[int]) -> Case:
    cs = [randn(seed + 2 * i, b, t, dc, dtype=dtype) for i, t in enumerate(chunks)]
    ks = [randn(seed + 2 * i + 1, b, t, dr, dtype=dtype) for i, t in enumerate(chunks)]
    return make_case("LatentCache", title, [LATENT_CACHE.call(zip(cs, ks, strict=True), read_empty=True)],
                     LATENT_CACHE.judge(cs, ks, dtype, step_tensors), seed=seed)


def _latent_errors(seed: int) -> Case:
    c, k = randn(seed, 2, 3, 6), randn(seed + 1, 2, 3, 4)
    bad = {
        "c_kv (2, 3, 6) with k_rope (2, 2, 4) on the first update": ((c, randn(seed + 2, 2, 2, 4)), False),
        "c_kv (2, 3, 6) with k_rope (1, 3, 4) on the first update": ((c, randn(seed + 3, 1, 3, 4)), False),
        "a chunk with B = 1 after B = 2": ((randn(seed + 4, 1, 1, 6), randn(seed + 5, 1, 1, 4)), True),
        "a latent of width 5 after 6": ((randn(seed + 6, 2, 1, 5), randn(seed + 7, 2, 1, 4)), True),
        "a rope key of width 2 after 4": ((randn(seed + 8, 2, 1, 6), randn(seed + 9, 2, 1, 2)), True),
        "a float32 chunk after float64": ((randn(seed + 10, 2, 1, 6, dtype=torch.float32),
                                           randn(seed + 11, 2, 1, 4, dtype=torch.float32)), True),
    }
    calls = [LATENT_CACHE.updates((c, k), args) if after else LATENT_CACHE.updates(args) for args, after in bad.values()]
    return errors_case("LatentCache", "update raises ValueError when c_kv and k_rope differ in B or T, or when B, a "
                       "width or the dtype differ from the cache", calls, list(bad), HINTS["lc_validate"],
                       part="validation")


@NOTEBOOK.exercise("LatentCache", parts=("core", "validation"))
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
    x = randn(seed, b, s, d, dtype=dtype)
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
                          hint=lambda: j.mistake_hint(0, check_shape_only=True))
                j.close(have, want, name=f"cache.{name} after the calls", atol=atol, rtol=rtol, oracle=what)
            j.require(n.dim() == 0 and int(n) == s, f"cache.seq_len after the calls is {n.tolist()}; expected {s}")
        if absorb:
            rows = got[-1]
            j.require(int(rows.sum()) == 0, f"with absorb=True, kv_b_proj was called on {int(rows.sum())} rows; "
                      "expected 0 (the absorbed path uses its weight, never its forward)", hint=HINTS["absorb_calls"])

    if absorb:  # a shape error in the absorbed products (W_uv without its transpose, say) gets a hint
        judge = with_error_hints(judge, ((_MATMUL_SHAPES, HINTS["absorb_shapes"]),))
    return make_case("MultiHeadLatentAttention", title, [call], judge, seed=seed, part=part)


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
        _mla_case("absorb=True, q_lora_rank = 6, H = 3, Dc = 9, dn = 8, with a LatentCache: chunks 3, 1, 3 (no K "
                  "or V per head)", 7361, h=3, dq=6, dc=9, dn=8, chunks=(3, 1, 3), absorb=True, part="absorb"),
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
                      f"{formula}", hint=lambda i=i: j.mistake_hint(i))

    return make_case("attention_cache_bytes_per_token", title, calls, judge)


@NOTEBOOK.exercise("attention_cache_bytes_per_token", parts=("core", "validation"))
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
        errors_case("attention_cache_bytes_per_token", "ValueError for an unknown kind, gqa without num_kv_heads, mla "
                    "without kv_lora_rank or qk_rope_head_dim",
                    [_bytes_call("mlx", 2, 4, 8), _bytes_call("gqa", 2, 4, 8),
                     _bytes_call("mla", 2, 4, 8, qk_rope_head_dim=4), _bytes_call("mla", 2, 4, 8, kv_lora_rank=16)],
                    ["kind='mlx'", "gqa without num_kv_heads", "mla without kv_lora_rank",
                     "mla without qk_rope_head_dim"], HINTS["bytes_errors"], part="validation"),
    ]
