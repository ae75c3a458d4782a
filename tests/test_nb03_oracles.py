"""Notebook 03: the reference agrees with the implementations learners will meet (issue 8).

Hugging Face ``transformers`` (a test-only dependency, random-init configs, nothing downloaded):

* ``rope_cos_sin`` / ``rotate_half`` / ``apply_rope`` = Llama's ``LlamaRotaryEmbedding``,
  ``rotate_half`` and ``apply_rotary_pos_emb`` (rotate-half pairing);
* ``apply_rope_interleaved`` = GPT-J's ``create_sinusoidal_positions`` + ``apply_rotary_pos_emb``
  (``rotate_every_two``, the interleaved pairing);
* ``permute_for_rotate_half``: GPT-J rotary scores with W equal Llama rotary scores with the
  permuted W (what HF's conversion of Meta checkpoints relies on);
* ``alibi_slopes`` = BLOOM's ``build_alibi_tensor`` slopes for H = 1 … 32, and ``alibi_bias``
  differs from BLOOM's bias by a constant per row, so the causal softmax is the same;
* ``relative_position_bucket`` = ``T5Attention._relative_position_bucket`` (both directions,
  several num_buckets / max_distance);
* ``llama3_inv_freq`` = ``ROPE_INIT_FUNCTIONS["llama3"]``.

The Hugging Face functions themselves also pass the notebook's visible checks (they are correct
answers written another way). Without transformers those tests are skipped with the reason; the
last two run anyway: the angle-scaled tolerance (docs/conventions.md) accepts float32, float64
and complex angles at position 4095 with room and fails every catalogued mistake by far, and
every catalogued mistake, taken as the answer, gets its own hint from the visible checks.
"""

from __future__ import annotations

import io
import math
import warnings
from contextlib import redirect_stdout

import pytest
import torch

from tfcourse.checks import nb03_positional_encodings as checks
from tfcourse.checks.case import CheckFailed
from tfcourse.checks.nb03_positional_encodings import cases
from tfcourse.device import make_generator
from tfcourse.reference import nb03_positional_encodings as ref

pytestmark = pytest.mark.nb03

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor
        from transformers.models.gptj import modeling_gptj as gptj
        from transformers.models.llama import modeling_llama as llama
        from transformers.models.t5.modeling_t5 import T5Attention
    MISSING = None
except ImportError as error:  # transformers is a test-only dependency
    MISSING = f"transformers is not installed ({error})"

needs_hf = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=make_generator(seed), dtype=dtype)


def _llama_config(head_dim: int, rope_parameters: dict) -> LlamaConfig:
    return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, num_hidden_layers=1,
                       intermediate_size=8, vocab_size=8, max_position_embeddings=16384,
                       rope_parameters=rope_parameters)


# ---------------------------------------------------------------------------------------------
# rotate-half RoPE: Llama
# ---------------------------------------------------------------------------------------------
@needs_hf
@pytest.mark.parametrize(("head_dim", "base"), [(16, 10000.0), (64, 500000.0), (2, 100.0)])
def test_rope_cos_sin_is_llamas_rotary_embedding(head_dim, base):
    emb = llama.LlamaRotaryEmbedding(_llama_config(head_dim, {"rope_type": "default", "rope_theta": base}))
    positions = torch.stack([torch.arange(7), torch.tensor([0, 5, 5, 99, 4000, 1, 2])])  # (B, T)
    hf_cos, hf_sin = emb(torch.zeros(2, 7, 4 * head_dim), positions)
    cos, sin = ref.rope_cos_sin(positions, head_dim, base)
    torch.testing.assert_close(cos, hf_cos, atol=1e-6, rtol=0)
    torch.testing.assert_close(sin, hf_sin, atol=1e-6, rtol=0)
    cos1, sin1 = ref.rope_cos_sin(positions[1], head_dim, base)  # (T,) positions give the same rows
    torch.testing.assert_close(cos1, hf_cos[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(sin1, hf_sin[1], atol=1e-6, rtol=0)


@needs_hf
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_rotate_half_and_apply_rope_are_llamas(dtype):
    q, k = _randn(1, 2, 3, 6, 8).to(dtype), _randn(2, 2, 3, 6, 8).to(dtype)
    assert torch.equal(ref.rotate_half(q), llama.rotate_half(q))
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [9, 10, 11, 12, 13, 14]])
    cos, sin = ref.rope_cos_sin(positions, 8)
    hf_q, hf_k = llama.apply_rotary_pos_emb(q, k, cos.to(dtype), sin.to(dtype))  # (B, T, Dh): unsqueeze_dim=1
    torch.testing.assert_close(ref.apply_rope(q, cos, sin), hf_q, atol=0, rtol=0)
    torch.testing.assert_close(ref.apply_rope(k, cos, sin), hf_k, atol=0, rtol=0)
    hf_q2, _ = llama.apply_rotary_pos_emb(q, k, cos[1].to(dtype), sin[1].to(dtype), unsqueeze_dim=0)
    torch.testing.assert_close(ref.apply_rope(q, cos[1], sin[1]), hf_q2, atol=0, rtol=0)


# ---------------------------------------------------------------------------------------------
# interleaved RoPE: GPT-J
# ---------------------------------------------------------------------------------------------
def _gptj_rotary(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """GPT-J's rotary on x (B, H, T, Dh) at positions (B, T), as GPTJAttention.forward applies it."""
    table = gptj.create_sinusoidal_positions(int(positions.max()) + 1, x.shape[-1])  # [sin | cos]
    sincos = table[positions].to(x.dtype)
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    return gptj.apply_rotary_pos_emb(x.transpose(1, 2), sin, cos).transpose(1, 2)


@needs_hf
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_apply_rope_interleaved_is_gptjs_rotary(dtype):
    x = _randn(3, 2, 4, 5, 16).to(dtype)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 300, 2, 2, 4000]])
    torch.testing.assert_close(ref.apply_rope_interleaved(x, positions), _gptj_rotary(x, positions),
                               atol=1e-5 if dtype == torch.float32 else 1e-12, rtol=0)
    torch.testing.assert_close(ref.apply_rope_interleaved(x, positions[0]), _gptj_rotary(x, positions[:1].expand(2, 5)),
                               atol=1e-5 if dtype == torch.float32 else 1e-12, rtol=0)


@needs_hf
@pytest.mark.parametrize(("num_heads", "head_dim"), [(2, 8), (4, 16), (1, 6)])
def test_permuted_weights_give_gptj_scores_under_llama_rotary(num_heads, head_dim):
    d = num_heads * head_dim
    wq, wk, x = _randn(4, d, d) / d**0.5, _randn(5, d, d) / d**0.5, _randn(6, 1, 9, d)
    positions = torch.arange(9)[None]

    def heads(w: torch.Tensor) -> torch.Tensor:
        return (x @ w.T).view(1, 9, num_heads, head_dim).transpose(1, 2)  # (1, H, T, Dh)

    q, k = _gptj_rotary(heads(wq), positions), _gptj_rotary(heads(wk), positions)
    gptj_scores = q @ k.transpose(-2, -1)
    pq, pk = ref.permute_for_rotate_half(wq, num_heads), ref.permute_for_rotate_half(wk, num_heads)
    cos, sin = ref.rope_cos_sin(positions, head_dim)
    lq, lk = llama.apply_rotary_pos_emb(heads(pq), heads(pk), cos.double(), sin.double())
    torch.testing.assert_close(lq @ lk.transpose(-2, -1), gptj_scores, atol=1e-5, rtol=1e-5)
    if head_dim > 4:  # without the permutation the scores differ (the check is not vacuous)
        lq0, lk0 = llama.apply_rotary_pos_emb(heads(wq), heads(wk), cos.double(), sin.double())
        assert (lq0 @ lk0.transpose(-2, -1) - gptj_scores).abs().max() > 1e-2


# ---------------------------------------------------------------------------------------------
# ALiBi: BLOOM
# ---------------------------------------------------------------------------------------------
@needs_hf
@pytest.mark.parametrize("num_heads", range(1, 33))
def test_alibi_slopes_are_blooms(num_heads):
    bloom = build_alibi_tensor(torch.ones(1, 4), num_heads, torch.float32)  # (H, 1, S): slope · key_pos
    torch.testing.assert_close(ref.alibi_slopes(num_heads), bloom[:, 0, 1], atol=0, rtol=1e-6)


@needs_hf
@pytest.mark.parametrize(("num_heads", "t"), [(6, 7), (8, 5), (12, 1)])
def test_alibi_bias_is_blooms_up_to_a_constant_per_row(num_heads, t):
    ours = ref.alibi_bias(num_heads, t).double()  # (H, T, T)
    bloom = build_alibi_tensor(torch.ones(1, t), num_heads, torch.float64)  # (H, 1, T)
    diff = ours - bloom
    torch.testing.assert_close(diff, diff[..., :1].expand_as(diff), atol=1e-6, rtol=0)  # constant per row
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    scores = _randn(7, num_heads, t, t)

    def attention(bias: torch.Tensor) -> torch.Tensor:
        return torch.softmax((scores + bias).masked_fill(~causal, float("-inf")), dim=-1)

    torch.testing.assert_close(attention(ours), attention(bloom), atol=1e-6, rtol=0)
    if t > 1:  # and the tensors themselves differ: the check that names BLOOM's form is needed
        assert (ours - bloom).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------
# T5 buckets
# ---------------------------------------------------------------------------------------------
@needs_hf
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (64, 256), (16, 40), (10, 50), (8, 20)])
def test_relative_position_bucket_is_t5s(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-3000, 3001)
    expected = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                     max_distance=max_distance)
    got = ref.relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    assert got.dtype == torch.long and torch.equal(got, expected)


# ---------------------------------------------------------------------------------------------
# Llama 3.1 frequencies
# ---------------------------------------------------------------------------------------------
@needs_hf
@pytest.mark.parametrize(("head_dim", "params"), [
    (128, {"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}),
    (64, {"rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}),
    (256, {"rope_theta": 1e6, "factor": 16.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
           "original_max_position_embeddings": 4096}),
])
def test_llama3_inv_freq_is_hugging_faces(head_dim, params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](_llama_config(head_dim, {"rope_type": "llama3", **params}), "cpu")
    got = ref.llama3_inv_freq(head_dim, params["rope_theta"], params["factor"], params["low_freq_factor"],
                              params["high_freq_factor"], params["original_max_position_embeddings"])
    torch.testing.assert_close(got, inv_freq.float(), atol=0, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Hugging Face's own functions pass the visible checks
# ---------------------------------------------------------------------------------------------
def _bloom_slopes(num_heads: int) -> torch.Tensor:
    if num_heads < 1:
        raise ValueError(f"num_heads = {num_heads} must be >= 1")
    return build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)[:, 0, 1].contiguous()


@needs_hf
@pytest.mark.parametrize("exercise", ["rotate_half", "relative_position_bucket", "alibi_slopes"])
def test_hugging_face_functions_pass_the_checks(exercise):
    answer = {"rotate_half": lambda: llama.rotate_half,
              "relative_position_bucket": lambda: T5Attention._relative_position_bucket,
              "alibi_slopes": lambda: _bloom_slopes}[exercise]()
    with redirect_stdout(io.StringIO()) as printed:
        getattr(checks, f"check_{exercise}")(answer)
    assert printed.getvalue().startswith("✓")


# ---------------------------------------------------------------------------------------------
# The angle-scaled tolerance: every correct form passes with room, every catalogued mistake fails
# (no transformers needed), and each catalogued mistake is told apart by the visible cases
# ---------------------------------------------------------------------------------------------
def _exp_log_table(t: int, d: int) -> torch.Tensor:  # the PyTorch tutorial's float32 form
    position = torch.arange(t).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    pe = torch.zeros(t, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return pe


def _polar(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:  # Meta's precompute_freqs_cis
    dim = x.shape[-1]
    freqs = positions.float()[..., None] / (10000.0 ** (torch.arange(0, dim, 2).float() / dim))
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_ * torch.polar(torch.ones_like(freqs), freqs)).flatten(-2).type_as(x)


@pytest.mark.slow  # tens of seconds: the full suite only
def test_angle_tolerance_accepts_every_correct_form_and_catches_every_mistake_at_position_4095():
    t, d = 4096, 64
    want, tol = cases.sinusoid64(t, d), cases.angle_atol(t - 1)
    ratios = {"reference": ref.sinusoidal_position_encoding(t, d), "exp/log": _exp_log_table(t, d),
              "float64": cases.sinusoid64(t, d).float()}
    worst = max(float((v.double() - want).abs().max()) / tol for v in ratios.values())
    bugs = {m.name: float((m.fn(t, d).double() - want).abs().max()) / tol
            for m in checks.MISTAKES["sinusoidal_position_encoding"] if m.name != "base ignored"}
    x, positions = _randn(8, 2, 4, 16, 64), torch.arange(4080, 4096)
    exact, rtol = cases.interleaved_oracle(x, positions), cases.rotation_atol(x, 4095)
    for answer in (ref.apply_rope_interleaved(x, positions), _polar(x, positions),
                   ref.apply_rope_interleaved(x.float(), positions)):
        worst = max(worst, float((answer.double() - exact).abs().max()) / rtol)
    for m in checks.MISTAKES["apply_rope_interleaved"]:
        # equal to correct here by design (angles in x's dtype are float64 angles for float64 x)
        if m.name not in ("base ignored", "batch paired with heads", "angles in x's dtype (half)"):
            bugs[m.name] = float((m.fn(x, positions).double() - exact).abs().max()) / rtol
    print(f"\nworst correct {worst:.3f} of the tolerance; smallest bug {min(bugs.values()):.0f}x")
    assert worst < 0.5, worst
    assert min(bugs.values()) > 50, bugs


@pytest.mark.parametrize("exercise", checks.NOTEBOOK.exercises)
def test_every_catalogued_mistake_fails_its_check_with_its_own_hint(exercise):
    """A hint is shown only when one catalogued mistake explains the answer: each mistake, taken
    as the answer, must fail the visible checks and get its own hint (no other mistake on that
    case reproduces it)."""
    for mistake in checks.MISTAKES[exercise]:
        with pytest.raises(CheckFailed) as failure, redirect_stdout(io.StringIO()):
            getattr(checks, f"check_{exercise}")(mistake.fn)
        assert f"hint: {mistake.hint}" in str(failure.value), (mistake.name, str(failure.value))
