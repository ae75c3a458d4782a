"""Notebook 04's reference agrees with PyTorch's and Hugging Face's normalisation layers.

The course's ``layer_norm``, ``rms_norm`` and ``RMSNorm`` (tfcourse.reference.nb04_normalisation)
are compared, on the same weights, with ``torch.nn.LayerNorm``, ``torch.nn.RMSNorm`` and
transformers' ``LlamaRMSNorm`` (random-init, no downloads) in float32, float64, float16 and
bfloat16; ``rms_norm_backward`` with torch.autograd. HF's module itself, used as a learner's
``RMSNorm``, passes every visible and hidden case (docs/conventions.md, "Where correct public code differs": HF keeps float32 statistics for
float64 input and casts to half before multiplying by the weight; both must pass). The figures
are printed (``-s``).
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
import torch
from torch import nn

from tests.oracles import assert_passes_every_case
from tfcourse.checks.call import run_call
from tfcourse.checks.case import judge_case
from tfcourse.checks.nb04_normalisation import NOTEBOOK as NB04
from tfcourse.checks.nb04_normalisation import (
    check_layer_norm,
    check_rms_norm,
    check_RMSNorm,
)
from tfcourse.checks.tolerance import HALF_TOLERANCE
from tfcourse.reference import nb04_normalisation as ref

pytestmark = pytest.mark.nb04

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
HALF = (torch.float16, torch.bfloat16)
# float32 and float64 as the hidden cases judge them; half: the checks' half tolerances
TOL = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-6, 1e-5), **HALF_TOLERANCE}


def _inputs(dtype: torch.dtype, d: int = 48, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    scale = 400.0 if dtype == torch.float16 else 2.0  # float16: squares overflow float16
    x = (torch.randn(2, 5, d, generator=g, dtype=torch.float64) * scale + 0.5).to(dtype)
    w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    b = (0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    return x, w, b


def _assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert got.dtype == want.dtype == dtype, (what, got.dtype, want.dtype)
    atol, rtol = TOL[dtype]
    diff = float((got.double() - want.double()).abs().max())
    print(f"{what} {dtype}: max |diff| {diff:.3g}")
    assert torch.isfinite(got).all(), what
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol, msg=what)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layer_norm_matches_torch_layernorm(dtype):
    x, w, b = _inputs(dtype)
    module = nn.LayerNorm(x.size(-1), eps=1e-5, dtype=dtype)
    module.load_state_dict({"weight": w, "bias": b})
    with torch.no_grad():
        want = module(x)
    _assert_close(ref.layer_norm(x, w, b), want, dtype, "layer_norm vs nn.LayerNorm")
    if dtype == torch.float64:  # float64 stays float64: tight
        torch.testing.assert_close(ref.layer_norm(x, w, b), want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_and_module_match_torch_rmsnorm(dtype):
    x, w, _ = _inputs(dtype, seed=1)
    module = nn.RMSNorm(x.size(-1), eps=1e-6, dtype=dtype)
    module.load_state_dict({"weight": w})
    mine = ref.RMSNorm(x.size(-1), eps=1e-6).to(dtype)
    mine.load_state_dict({"weight": w})
    with torch.no_grad():
        want, got_module = module(x), mine(x)
    _assert_close(ref.rms_norm(x, w), want, dtype, "rms_norm vs nn.RMSNorm")
    _assert_close(got_module, want, dtype, "RMSNorm vs nn.RMSNorm")


def _llama(dim: int, eps: float, dtype: torch.dtype, weight: torch.Tensor) -> nn.Module:
    modeling = pytest.importorskip("transformers.models.llama.modeling_llama",
                                   reason="transformers is not installed (test-only oracle)")
    module = modeling.LlamaRMSNorm(dim, eps=eps).to(dtype)
    module.load_state_dict({"weight": weight})
    return module.eval()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_matches_hf_llama_rmsnorm(dtype):
    x, w, _ = _inputs(dtype, seed=2)
    hf = _llama(x.size(-1), 1e-6, dtype, w)
    mine = ref.RMSNorm(x.size(-1)).to(dtype)
    mine.load_state_dict({"weight": w})
    with torch.no_grad():
        want, got = hf(x), mine(x)
    _assert_close(ref.rms_norm(x, w), want, dtype, "rms_norm vs LlamaRMSNorm")
    _assert_close(got, want, dtype, "RMSNorm vs LlamaRMSNorm")


class _HFAsLearner:
    """transformers' LlamaRMSNorm under the course's signature RMSNorm(dim, eps=1e-6)."""

    @staticmethod
    def make() -> type:
        modeling = pytest.importorskip("transformers.models.llama.modeling_llama",
                                       reason="transformers is not installed (test-only oracle)")

        class RMSNorm(modeling.LlamaRMSNorm):
            def __init__(self, dim: int, eps: float = 1e-6):
                super().__init__(dim, eps=eps)

        return RMSNorm


def test_hf_llama_rmsnorm_passes_every_rmsnorm_case():
    learner = _HFAsLearner.make()
    assert_passes_every_case("04_normalisation", "RMSNorm", check_RMSNorm, learner)


def test_hf_gemma_rmsnorm_fails_with_the_one_plus_w_hint():
    """Gemma's RMSNorm (weight starts at 0, scales by 1 + weight) is the catalogued variant: a fresh
    one normalises like ours, one holding loaded weights does not, and the hint names (1 + weight)."""
    modeling = pytest.importorskip("transformers.models.gemma.modeling_gemma",
                                   reason="transformers is not installed (test-only oracle)")

    class RMSNorm(modeling.GemmaRMSNorm):
        pass

    fresh, loaded = NB04.cases("RMSNorm")[:2]
    for case, status in ((fresh, "passed"), (loaded, "failed")):
        result = judge_case(case, [run_call(c, {"RMSNorm": RMSNorm}) for c in case.calls])
        assert result.status == status, result.message
    assert "(1 + weight) is Gemma's variant" in result.message, result.message


def test_builtins_pass_the_checks():
    """The task cells ask not to call F.layer_norm / F.rms_norm; the grader does not enforce it."""
    def layer_norm(x, weight, bias, eps=1e-5):
        return torch.nn.functional.layer_norm(x, (x.size(-1),), weight, bias, eps)

    def rms_norm(x, weight, eps=1e-6):
        return torch.nn.functional.rms_norm(x, (x.size(-1),), weight, eps)

    with redirect_stdout(io.StringIO()):
        check_layer_norm(layer_norm)
        check_rms_norm(rms_norm)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=str)
def test_rms_norm_backward_matches_autograd(dtype):
    x, w, _ = _inputs(dtype, d=16, seed=3)
    x, w = x.requires_grad_(True), w.requires_grad_(True)
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(4), dtype=dtype)
    gx, gw = torch.autograd.grad(ref.rms_norm(x, w, 1e-6), (x, w), grad_out)
    mine_x, mine_w = ref.rms_norm_backward(grad_out, x.detach(), w.detach(), 1e-6)
    _assert_close(mine_x, gx, dtype, "grad_x vs autograd")
    _assert_close(mine_w, gw, dtype, "grad_weight vs autograd")
