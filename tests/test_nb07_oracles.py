"""Notebook 07's reference agrees with Hugging Face's GQA and MLA on the same weights.

The course's ``repeat_kv``, ``GroupedQueryAttention`` and ``MultiHeadLatentAttention``
(tfcourse.reference.nb07_gqa_mla) are compared with transformers' ``repeat_kv``,
``LlamaAttention`` (a GQA config, eager attention, its own ``LlamaRotaryEmbedding`` and a causal
mask as its forward expects) and ``DeepseekV3Attention`` (rope_interleave=False, with and without
q_lora_rank, its own ``DeepseekV3RotaryEmbedding``), random-init, no downloads, in float32 and
float64; the absorbed MLA path equals the naive one and HF's; cached == uncached at every split
point for both modules (and the absorbed path); and the interleaved pairing of DeepSeek's official
checkpoints (HF with rope_interleave=True) is a different model on the same weights, as the task
cell says. The differences are printed (``-s``).
"""

from __future__ import annotations

import pytest
import torch
from transformers import DeepseekV3Config, LlamaConfig
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
from transformers.models.llama.modeling_llama import repeat_kv as hf_repeat_kv

from tfcourse.reference import nb07_gqa_mla as ref
from tfcourse.reference.nb06_kv_cache import KVCache

pytestmark = pytest.mark.nb07

# float64 at float32 level: HF computes RoPE tables, RMSNorm statistics and the softmax in float32
TOL = {torch.float32: (2e-5, 1e-4), torch.float64: (1e-5, 1e-5)}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randomise(module: torch.nn.Module, seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Random weights (norm weights around 1) in ``dtype``, loaded into ``module``; returns the state."""
    g = _gen(seed)
    state = {}
    for name, p in module.named_parameters():
        if "layernorm" in name or "norm" in name:
            state[name] = 1 + 0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64)
        else:
            state[name] = torch.randn(p.shape, generator=g, dtype=torch.float64) * p.shape[-1] ** -0.5
    state = {k: v.to(dtype) for k, v in state.items()}
    module.to(dtype).load_state_dict(state)
    return state


def _additive_causal(t: int, s: int, dtype: torch.dtype) -> torch.Tensor:
    allowed = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)
    return torch.zeros(1, 1, t, s, dtype=dtype).masked_fill(~allowed, float("-inf"))


def _assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    atol, rtol = TOL[want.dtype]
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape)
    print(f"{what}: max |diff| {float((got - want).abs().max()):.3g}")
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=what)


# ---------------------------------------------------------------------------------------------
# repeat_kv and GQA against Llama
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,n_rep", [((2, 3, 5, 4), 2), ((1, 1, 7, 8), 4), ((2, 4, 3, 2), 1), ((3, 2, 1, 6), 3)])
def test_repeat_kv_equals_hf(shape, n_rep):
    x = torch.randn(shape, generator=_gen(1))
    assert torch.equal(ref.repeat_kv(x, n_rep), hf_repeat_kv(x, n_rep))
    if n_rep > 1:  # and .repeat (tiling) is a different layout whenever G > 1
        assert shape[1] == 1 or not torch.equal(x.repeat(1, n_rep, 1, 1), hf_repeat_kv(x, n_rep))


def _llama(d: int, h: int, g: int, dh: int, theta: float, dtype: torch.dtype, seed: int):
    config = LlamaConfig(hidden_size=d, num_attention_heads=h, num_key_value_heads=g, head_dim=dh,
                         rope_parameters={"rope_type": "default", "rope_theta": theta}, attention_bias=False)
    config._attn_implementation = "eager"
    hf = LlamaAttention(config, layer_idx=0).eval()
    state = _randomise(hf, seed, dtype)
    ours = ref.GroupedQueryAttention(d, h, g, head_dim=dh, rope_theta=theta).to(dtype).eval()
    ours.load_state_dict(state)  # the same names: q_proj, k_proj, v_proj, o_proj
    return config, hf, ours


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("h,g,dh", [(8, 2, 16), (4, 4, 8), (4, 1, 8), (6, 3, 10)])
def test_gqa_equals_hf_llama_attention(h, g, dh, dtype):
    d, b, t, theta = 48, 2, 7, 500.0
    config, hf, ours = _llama(d, h, g, dh, theta, dtype, seed=h * 10 + g)
    x = torch.randn(b, t, d, generator=_gen(2), dtype=torch.float64).to(dtype)
    positions = torch.arange(t)[None].expand(b, t)
    cos, sin = LlamaRotaryEmbedding(config)(x, positions)
    with torch.no_grad():
        want, _ = hf(x, position_embeddings=(cos, sin), attention_mask=_additive_causal(t, t, dtype))
        got = ours(x)
    _assert_close(got, want, f"GQA H={h} G={g} Dh={dh} {dtype}")


# ---------------------------------------------------------------------------------------------
# MLA against DeepseekV3Attention
# ---------------------------------------------------------------------------------------------
def _deepseek(q_lora_rank: int | None, dtype: torch.dtype, interleave: bool = False, seed: int = 3):
    d, h, dc, dn, dr, dv, theta = 48, 4, 16, 12, 8, 10, 1000.0
    config = DeepseekV3Config(hidden_size=d, num_attention_heads=h, num_key_value_heads=h, kv_lora_rank=dc,
                              q_lora_rank=q_lora_rank, qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv,
                              rope_parameters={"rope_type": "default", "rope_theta": theta},
                              rope_interleave=interleave, attention_bias=False, rms_norm_eps=1e-6)
    config._attn_implementation = "eager"
    hf = DeepseekV3Attention(config, layer_idx=0).eval()
    state = _randomise(hf, seed, dtype)
    ours = ref.MultiHeadLatentAttention(d, h, dc, dn, dr, dv, q_lora_rank=q_lora_rank, rope_theta=theta)
    ours = ours.to(dtype).eval()
    ours.load_state_dict(state)  # the same names, strict
    return config, hf, ours


def _hf_mla(config, hf, x: torch.Tensor) -> torch.Tensor:
    b, t, _ = x.shape
    positions = torch.arange(t)[None].expand(b, t)
    cos, sin = DeepseekV3RotaryEmbedding(config)(x, positions)
    with torch.no_grad():
        out, _ = hf(x, position_embeddings=(cos, sin), attention_mask=_additive_causal(t, t, x.dtype))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("q_lora_rank", [None, 24], ids=["q_proj", "q_lora_rank=24"])
def test_mla_naive_and_absorbed_equal_hf_deepseek_v3(q_lora_rank, dtype):
    config, hf, ours = _deepseek(q_lora_rank, dtype)
    x = torch.randn(2, 9, 48, generator=_gen(4), dtype=torch.float64).to(dtype)
    want = _hf_mla(config, hf, x)
    with torch.no_grad():
        naive, absorbed = ours(x), ours(x, absorb=True)
    _assert_close(naive, want, f"MLA naive, q_lora_rank={q_lora_rank}, {dtype}")
    _assert_close(absorbed, want, f"MLA absorbed, q_lora_rank={q_lora_rank}, {dtype}")
    if dtype == torch.float64:  # absorbed == naive to rounding: the same sums in another order
        print(f"absorbed - naive: {float((absorbed - naive).abs().max()):.3g}")
        torch.testing.assert_close(absorbed, naive, atol=1e-12, rtol=1e-10)


def test_interleaved_pairing_is_another_model_on_the_same_weights():
    """DeepSeek's official checkpoints rotate (2i, 2i+1) pairs; HF's rope_interleave=True does that
    on the same weights and differs from the course's rotate-half MLA by far more than rounding."""
    config, hf, ours = _deepseek(None, torch.float64, interleave=True)
    x = torch.randn(2, 9, 48, generator=_gen(5), dtype=torch.float64)
    with torch.no_grad():
        gap = float((_hf_mla(config, hf, x) - ours(x)).abs().max())
    print(f"interleaved vs rotate-half on the same weights: {gap:.3g}")
    assert gap > 1e-2


# ---------------------------------------------------------------------------------------------
# cached == uncached at every split point
# ---------------------------------------------------------------------------------------------
def _splits(s: int) -> list[list[int]]:
    """A prefill of p tokens then the rest in one chunk, for every p; and one token at a time."""
    return [[p, s - p] for p in range(1, s)] + [[1] * s]


def _run_chunks(module: torch.nn.Module, x: torch.Tensor, chunks: list[int], cache, **kwargs) -> torch.Tensor:
    outs, at = [], 0
    with torch.no_grad():
        for t in chunks:
            outs.append(module(x[:, at: at + t], cache=cache, **kwargs))
            at += t
    return torch.cat(outs, dim=1)


def test_gqa_cached_equals_uncached_at_every_split():
    s = 7
    _, _, ours = _llama(32, 8, 2, 8, 10000.0, torch.float64, seed=7)
    x = torch.randn(2, s, 32, generator=_gen(8), dtype=torch.float64)
    with torch.no_grad():
        full = ours(x)
    for chunks in _splits(s):
        cache = KVCache()
        got = _run_chunks(ours, x, chunks, cache)
        torch.testing.assert_close(got, full, atol=1e-12, rtol=1e-10, msg=str(chunks))
        assert tuple(cache.k.shape) == (2, 2, s, 8), "the cache holds the G KV heads, not H"


@pytest.mark.parametrize("absorb", [False, True], ids=["naive", "absorbed"])
def test_mla_cached_equals_uncached_at_every_split(absorb):
    s = 7
    _, _, ours = _deepseek(24, torch.float64, seed=9)
    x = torch.randn(2, s, 48, generator=_gen(10), dtype=torch.float64)
    with torch.no_grad():
        full = ours(x)
    for chunks in _splits(s):
        cache = ref.LatentCache()
        got = _run_chunks(ours, x, chunks, cache, absorb=absorb)
        torch.testing.assert_close(got, full, atol=1e-12, rtol=1e-10, msg=str(chunks))
        assert tuple(cache.c_kv.shape) == (2, s, 16) and tuple(cache.k_rope.shape) == (2, s, 8)


def test_real_configs_bytes_per_token():
    """Llama-3-8B (GQA, 8 KV heads) and DeepSeek-V3 (MLA) in bf16, by hand."""
    assert ref.attention_cache_bytes_per_token("gqa", 32, 32, 128, num_kv_heads=8) == 2 * 32 * 8 * 128 * 2 == 131072
    assert ref.attention_cache_bytes_per_token("mla", 61, 128, 128, kv_lora_rank=512, qk_rope_head_dim=64) == \
        61 * (512 + 64) * 2 == 70272
