"""Notebook 06's reference agrees with Hugging Face's Llama and logits processors, and the checks'
statistical rule is sound.

* ``DecoderLM`` loaded with the weights of a random-init ``transformers.LlamaForCausalLM`` (MHA:
  num_key_value_heads = num_attention_heads, no biases, rms_norm_eps 1e-6, tied and untied
  embeddings; no downloads) gives the same logits (float32, <= 1e-4), the same cache contents as
  HF's DynamicCache after a prefill, and ``generate`` the same greedy tokens as HF's
  ``generate(do_sample=False)``.
* Cached decoding equals full recomputation at EVERY prefill/decode split (one token at a time,
  and the rest as one chunk), float64.
* ``sample_next_token``'s kept set and probabilities equal HF's ``TemperatureLogitsWarper`` ->
  ``TopKLogitsWarper`` -> ``TopPLogitsWarper`` on random logits without ties;
  ``apply_repetition_penalty`` equals ``RepetitionPenaltyLogitsProcessor``.
* The sampling tolerance (|freq − p| <= 5·sqrt(p(1 − p)/n) + 1e-3, exact support) accepts correct
  samplers (the reference's multinomial, a Gumbel-max sampler) for every one of 10 generator
  seeds, and rejects every catalogued sampling mistake for each of them.

Figures are printed (``-s``).
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from tfcourse.checks.call import run_call
from tfcourse.checks.case import judge_case
from tfcourse.checks.nb06_kv_cache.mistakes import MISTAKES, SAMPLING
from tfcourse.checks.nb06_kv_cache.sampling import ROW_A, ROW_B, sampling_case
from tfcourse.device import single_thread
from tfcourse.reference import nb06_kv_cache as ref

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

pytestmark = pytest.mark.nb06


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensor ops: one thread is several times faster on a busy 2-core machine."""
    with single_thread():
        yield

V, D, L, H, DFF, THETA = 61, 32, 2, 4, 48, 500.0


def _hf_model(tied: bool, seed: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=DFF, num_hidden_layers=L, num_attention_heads=H,
                      num_key_value_heads=H, rms_norm_eps=1e-6, rope_theta=THETA, tie_word_embeddings=tied,
                      attention_bias=False, mlp_bias=False, max_position_embeddings=256, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # random weights everywhere, norms too (HF initialises them to ones)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 if "embed" in name else p.shape[-1] ** -0.5))
    return model


def _ours_from_hf(model: LlamaForCausalLM, tied: bool) -> ref.DecoderLM:
    hf = model.state_dict()
    state = {"tok_emb.weight": hf["model.embed_tokens.weight"], "final_norm.weight": hf["model.norm.weight"],
             "lm_head.weight": hf["lm_head.weight"]}
    for i in range(L):
        p = f"model.layers.{i}."
        for n in "qkvo":
            state[f"blocks.{i}.attn.{n}_proj.weight"] = hf[f"{p}self_attn.{n}_proj.weight"]
        for n in ("gate", "up", "down"):
            state[f"blocks.{i}.ffn.{n}_proj.weight"] = hf[f"{p}mlp.{n}_proj.weight"]
        state[f"blocks.{i}.attn_norm.weight"] = hf[f"{p}input_layernorm.weight"]
        state[f"blocks.{i}.ffn_norm.weight"] = hf[f"{p}post_attention_layernorm.weight"]
    ours = ref.DecoderLM(V, D, L, H, DFF, rope_theta=THETA, tie_embeddings=tied).eval()
    ours.load_state_dict(state, strict=True)
    if tied:
        assert ours.lm_head.weight is ours.tok_emb.weight
    return ours


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_logits_and_cache_match_hf_llama(tied):
    hf = _hf_model(tied)
    ours = _ours_from_hf(hf, tied)
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(ids, use_cache=True)
        caches = [ref.KVCache() for _ in range(L)]
        got = ours(ids, caches=caches)
    diff = float((got - want.logits).abs().max())
    print(f"{'tied' if tied else 'untied'}: max |logits - HF| {diff:.3g} (logits up to {float(got.abs().max()):.3g})")
    assert diff <= 1e-4
    for i, cache in enumerate(caches):  # the cache holds what HF's DynamicCache holds: keys after RoPE
        layer = want.past_key_values.layers[i]
        torch.testing.assert_close(cache.k, layer.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cache.v, layer.values, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_greedy_generate_matches_hf_generate(tied):
    hf = _hf_model(tied, seed=3)
    ours = _ours_from_hf(hf, tied)
    ids = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(4))
    n = 12
    with torch.no_grad():
        want = hf.generate(ids, max_new_tokens=n, do_sample=False, min_new_tokens=n)
    got_cached = ref.generate(ours, ids, n)
    got_full = ref.generate(ours, ids, n, use_cache=False)
    with torch.no_grad():  # the greedy choices are clear (no near-ties to flip on rounding)
        top2 = ours(got_cached[:, :-1])[:, ids.size(1) - 1:].topk(2, dim=-1).values
    margin = float((top2[..., 0] - top2[..., 1]).min())
    print(f"{'tied' if tied else 'untied'}: {n} greedy tokens, smallest top-2 margin {margin:.3g}")
    assert margin > 1e-3
    assert torch.equal(got_cached, want), (got_cached, want)
    assert torch.equal(got_full, want)


def test_cached_equals_uncached_at_every_split():
    torch.manual_seed(0)
    model = ref.DecoderLM(23, 16, 3, 2, 24, rope_theta=100.0).double().eval()
    ids = torch.randint(0, 23, (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full = model(ids)
        worst = 0.0
        for split in range(1, ids.size(1)):
            # prefill `split` tokens, then one token per call
            caches = [ref.KVCache() for _ in model.blocks]
            parts = [model(ids[:, :split], caches=caches)]
            parts += [model(ids[:, t:t + 1], caches=caches) for t in range(split, ids.size(1))]
            stepwise = torch.cat(parts, dim=1)
            # prefill `split` tokens, then the rest as one chunk (the bottom-right mask)
            caches = [ref.KVCache() for _ in model.blocks]
            chunked = torch.cat([model(ids[:, :split], caches=caches), model(ids[:, split:], caches=caches)], dim=1)
            for got in (stepwise, chunked):
                worst = max(worst, float((got - full).abs().max()))
                torch.testing.assert_close(got, full, atol=1e-10, rtol=1e-10)
            assert all(c.seq_len == ids.size(1) for c in caches)
    print(f"cached vs uncached, every split of 10 tokens: max |diff| {worst:.3g}")


def _our_probs(logits: torch.Tensor, **options) -> torch.Tensor:
    """The distribution the reference draws from (torch.multinomial's argument)."""
    seen = []

    def capture(probs, *args, **kwargs):
        seen.append(probs.clone())
        return torch.zeros(probs.size(0), 1, dtype=torch.int64)

    with mock.patch.object(torch, "multinomial", side_effect=capture):
        ref.sample_next_token(logits, **options)
    return seen[0]


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.6])
def test_sampling_support_and_probabilities_match_hf_warpers(temperature):
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(6, 40, generator=g) * 2  # continuous: no ties
    ids = torch.zeros(6, 1, dtype=torch.int64)
    checked = 0
    for top_k in (None, 1, 5, 17, 40, 55):
        for top_p in (None, 0.05, 0.3, 0.7, 0.95, 1.0):
            scores = TemperatureLogitsWarper(temperature)(ids, logits.clone())
            if top_k is not None:
                scores = TopKLogitsWarper(top_k)(ids, scores)
            if top_p is not None:
                scores = TopPLogitsWarper(top_p)(ids, scores)
            ours = _our_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)
            assert torch.equal(ours > 0, torch.isfinite(scores)), (top_k, top_p)
            torch.testing.assert_close(ours, scores.softmax(-1), atol=1e-6, rtol=1e-5)
            checked += 1
    print(f"temperature {temperature}: {checked} top-k/top-p combinations, supports identical to HF's")


@pytest.mark.parametrize("penalty", [0.5, 1.3, 2.0])
def test_repetition_penalty_matches_hf(penalty):
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(3, 30, generator=g) * 3
    ids = torch.randint(0, 15, (3, 20), generator=g)  # repeats and unseen ids
    want = RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
    got = ref.apply_repetition_penalty(logits, ids, penalty)
    assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------
# The statistical rule of the sampling checks
# ---------------------------------------------------------------------------------------------
CONFIGS = [  # (temperature, top_k, top_p): every visible sampling case's options
    (1.0, None, None), (0.5, None, None), (2.0, None, None), (1.0, 3, None), (1.0, 20, None),
    (1.0, None, 0.6), (1.0, None, 0.05), (0.7, 4, 0.85), (1.0, None, 1.0), (1.5, None, 0.5),
]
ROWS = torch.stack((ROW_A, ROW_B))


def _gumbel(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    probs = _our_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    u = torch.rand(probs.shape, generator=generator, dtype=torch.float64)
    return (probs.double().log() - torch.log(-torch.log(u.clamp_min(1e-300)))).argmax(-1)


def _passes(sampler, seed: int, config) -> bool:
    temperature, top_k, top_p = config
    case = sampling_case("t", ROWS, seed, temperature=temperature, top_k=top_k, top_p=top_p)
    return judge_case(case, [run_call(c, {"sample_next_token": sampler}) for c in case.calls]).status == "passed"


def test_the_sampling_tolerance_accepts_correct_samplers_for_every_seed():
    for sampler in (ref.sample_next_token, _gumbel):
        failed = [(seed, cfg) for seed in range(10) for cfg in CONFIGS if not _passes(sampler, 1000 + seed, cfg)]
        assert not failed, f"{getattr(sampler, '__name__', sampler)} fails {failed}"
    print(f"multinomial and Gumbel-max pass {len(CONFIGS)} configurations x 10 seeds")


@pytest.mark.parametrize("key", sorted(SAMPLING))
def test_the_sampling_tolerance_rejects_each_catalogued_mistake_for_every_seed(key):
    (mistake,) = [m for m in MISTAKES["sample_next_token"] if m.name == f"distribution: {key}"]
    caught = [seed for seed in range(10) if not all(_passes(mistake.fn, 1000 + seed, cfg) for cfg in CONFIGS)]
    assert caught == list(range(10)), f"{key} passes every configuration for seeds {sorted(set(range(10)) - set(caught))}"
