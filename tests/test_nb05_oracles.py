"""Notebook 05's reference agrees with PyTorch's and Hugging Face's feed-forward layers.

The course's ``gelu``, ``SwiGLU``, ``MoE`` and ``load_balancing_loss``
(tfcourse.reference.nb05_feed_forward) are compared, on the same weights, with ``torch.nn.GELU``
(both forms), transformers' ``LlamaMLP`` and ``MixtralSparseMoeBlock`` (random-init configs, no
downloads; Mixtral 5.x stores its experts fused, ``gate_up_proj`` (E, 2F, D) and ``down_proj``
(E, D, F), so the weights are mapped) and Hugging Face's ``load_balancing_loss_func``, which
divides the assignment counts by N tokens instead of N·K slots and so gives K times the course's
loss (docs/conventions.md, "Where correct public code differs"; the course refuses it with a hint). HF's LlamaMLP used as a
learner's ``SwiGLU`` passes every case. The figures are printed (``-s``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grader.cases import cases_for
from tests.oracles import assert_passes_every_case
from tfcourse.checks.call import run_call
from tfcourse.checks.case import judge_case
from tfcourse.checks.nb05_feed_forward import check_SwiGLU
from tfcourse.checks.nb05_feed_forward.cases import swiglu_state
from tfcourse.checks.nb05_feed_forward.routing import (
    check_margin,
    circulant_logits,
    moe_inputs,
)
from tfcourse.checks.tolerance import HALF_TOLERANCE
from tfcourse.reference import nb05_feed_forward as ref

pytestmark = pytest.mark.nb05

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# float64 at float64 tolerance where the layer keeps float64 (GELU, SwiGLU); routing at float32 level
TOL = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-10, 1e-7), **HALF_TOLERANCE}
ROUTER_TOL = (1e-6, 1e-5)


def _assert_close(got: torch.Tensor, want: torch.Tensor, what: str, tol: tuple[float, float]) -> None:
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    diff = float((got.double() - want.double()).abs().max())
    print(f"{what} {got.dtype}: max |diff| {diff:.3g}")
    torch.testing.assert_close(got.double(), want.double(), atol=tol[0], rtol=tol[1], msg=what)


def _modeling(name: str):
    return pytest.importorskip(f"transformers.models.{name}.modeling_{name}",
                               reason="transformers is not installed (test-only oracle)")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("approximate", ("none", "tanh"))
def test_gelu_matches_torch_nn_gelu(dtype, approximate):
    x = (torch.linspace(-10, 10, 401, dtype=torch.float64) * 1.0).to(dtype)
    with torch.no_grad():
        want = nn.GELU(approximate=approximate)(x)
    _assert_close(ref.gelu(x, approximate=approximate), want, f"gelu {approximate} vs nn.GELU", TOL[dtype])


def test_the_two_gelu_forms_differ_by_far_more_than_float64_rounding():
    """The task text quotes the largest gap between the exact and the tanh form (about 4.7e-4):
    a float64 check at float64 tolerance tells them apart, a half-precision one cannot."""
    x = torch.linspace(-8, 8, 160001, dtype=torch.float64)
    gap = (nn.GELU()(x) - nn.GELU(approximate="tanh")(x)).abs().max()
    print(f"max |GELU - GELU_tanh| on [-8, 8]: {float(gap):.3g}")
    assert 4.5e-4 < float(gap) < 4.9e-4
    assert float(gap) > 1e3 * TOL[torch.float64][0] and float(gap) < HALF_TOLERANCE[torch.float16][0]


def _llama_mlp(d: int, f: int, dtype: torch.dtype, state: dict[str, torch.Tensor]) -> nn.Module:
    modeling = _modeling("llama")
    config = modeling.LlamaConfig(hidden_size=d, intermediate_size=f, hidden_act="silu", mlp_bias=False,
                                  num_attention_heads=1, num_key_value_heads=1)
    module = modeling.LlamaMLP(config).to(dtype)
    module.load_state_dict(state)
    return module.eval()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_swiglu_matches_hf_llama_mlp(dtype):
    d, f = 16, 40
    state = swiglu_state(7, d, f, dtype)
    x = (torch.randn(2, 5, d, generator=torch.Generator().manual_seed(8), dtype=torch.float64) * 2).to(dtype)
    mine = ref.SwiGLU(d, f).to(dtype)
    mine.load_state_dict(state)
    with torch.no_grad():
        _assert_close(mine(x), _llama_mlp(d, f, dtype, state)(x), "SwiGLU vs LlamaMLP",
                      TOL[dtype] if dtype != torch.float64 else (1e-12, 1e-12))


def test_hf_llama_mlp_passes_every_swiglu_case():
    modeling = _modeling("llama")

    class SwiGLU(modeling.LlamaMLP):
        def __init__(self, d_model: int, d_ff: int):
            super().__init__(modeling.LlamaConfig(hidden_size=d_model, intermediate_size=d_ff, hidden_act="silu",
                                                  num_attention_heads=1, num_key_value_heads=1))

    assert_passes_every_case("05_feed_forward", "SwiGLU", check_SwiGLU, SwiGLU)


def _mixtral(d: int, f: int, e: int, k: int, dtype: torch.dtype, state: dict[str, torch.Tensor]) -> nn.Module:
    """transformers' MixtralSparseMoeBlock holding the course MoE's weights (fused experts: gate_up_proj[e]
    is gate_proj.weight stacked on up_proj.weight, as its forward splits it with chunk(2))."""
    modeling = _modeling("mixtral")
    config = modeling.MixtralConfig(hidden_size=d, intermediate_size=f, num_local_experts=e, num_experts_per_tok=k,
                                    router_jitter_noise=0.0, hidden_act="silu", num_attention_heads=1,
                                    num_key_value_heads=1)
    block = modeling.MixtralSparseMoeBlock(config).to(dtype)
    fused = {
        "gate.weight": state["gate.weight"],
        "experts.gate_up_proj": torch.stack([torch.cat([state[f"experts.{i}.gate_proj.weight"],
                                                        state[f"experts.{i}.up_proj.weight"]]) for i in range(e)]),
        "experts.down_proj": torch.stack([state[f"experts.{i}.down_proj.weight"] for i in range(e)]),
    }
    block.load_state_dict(fused, strict=True)
    return block.eval()


@pytest.mark.parametrize(("e", "k", "dtype"), [(4, 2, torch.float64), (8, 2, torch.float32), (8, 1, torch.float64),
                                               (6, 3, torch.float32)], ids=str)
def test_moe_matches_hf_mixtral_sparse_moe_block(e, k, dtype):
    d, f = 16, 32
    _, x, state = moe_inputs(100 * e + k, (2, 6, d), f, e, k, dtype)
    block = _mixtral(d, f, e, k, dtype, state)
    mine = ref.MoE(d, f, e, k).to(dtype)
    mine.load_state_dict(state)
    with torch.no_grad():
        y, logits = mine(x)
        want_y = block(x)
        want_logits = block.gate(x.reshape(-1, d))[0]
    tol = ROUTER_TOL if dtype == torch.float64 else TOL[dtype]
    _assert_close(logits, want_logits, "router_logits vs Mixtral's router", tol)
    _assert_close(y, want_y, "MoE vs MixtralSparseMoeBlock", tol)


def test_hf_load_balancing_loss_is_top_k_times_the_courses():
    modeling = _modeling("mixtral")
    g = torch.Generator().manual_seed(3)
    for n, e, k in ((32, 8, 2), (20, 4, 1), (12, 16, 4)):
        logits = torch.randn(n, e, generator=g)
        assert check_margin(torch.softmax(logits.double(), -1), k) > 1e-6  # no tie at the top-K boundary
        hf = modeling.load_balancing_loss_func((logits,), num_experts=e, top_k=k)
        ours = ref.load_balancing_loss(logits, k)
        print(f"N={n} E={e} K={k}: HF {float(hf):.6f}, ours {float(ours):.6f}, ratio {float(hf / ours):.4f}")
        torch.testing.assert_close(hf, k * ours, atol=1e-6, rtol=1e-5)
    balanced = circulant_logits([2.0, 1.0, 0.0, -1.5]).float()
    assert float(ref.load_balancing_loss(balanced, 2)) == pytest.approx(1.0, abs=1e-6)
    assert float(modeling.load_balancing_loss_func((balanced,), num_experts=4, top_k=2)) == pytest.approx(2.0, abs=1e-5)


def test_a_load_error_inside_the_experts_points_to_swiglu_not_to_the_router():
    """A SwiGLU with biases inside a MoE: every bad key is experts.N.*.bias, so the hint names
    exercise 3's SwiGLU (not "the router has no bias", which the review saw)."""
    namespace = dict(vars(ref))

    class BiasSwiGLU(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(d_model, d_ff), nn.Linear(d_model, d_ff)
            self.down_proj = nn.Linear(d_ff, d_model)

        def forward(self, x):
            return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class BiasedRouterMoE(ref.MoE):
        def __init__(self, d_model, d_ff, num_experts, top_k):
            super().__init__(d_model, d_ff, num_experts, top_k)
            self.gate = nn.Linear(d_model, num_experts)

    def moe_with_biased_experts(d_model, d_ff, num_experts, top_k):
        moe = ref.MoE(d_model, d_ff, num_experts, top_k)
        moe.experts = nn.ModuleList(BiasSwiGLU(d_model, d_ff) for _ in range(num_experts))
        return moe

    case = next(c for c in cases_for("05_feed_forward", "MoE") if c.part == "core" and not c.hidden)
    for cls, says in ((moe_with_biased_experts, "your SwiGLU from exercise 3"), (BiasedRouterMoE, "router has no bias")):
        namespace["MoE"] = cls
        result = judge_case(case, [run_call(call, namespace) for call in case.calls])
        assert result.status == "failed" and says in result.message, result.message


def test_a_bug_in_the_exact_form_costs_the_core_cell_only():
    """Each gelu check cell runs its own form (also in half precision): an exact form with
    x / 2 instead of x / sqrt(2) fails the core cell and keeps the tanh point (the newcomer saw
    0/3 when the tanh cell ran the exact form's half cases too)."""
    import math as _math

    from tfcourse.checks import CheckFailed
    from tfcourse.checks.nb05_feed_forward import check_gelu

    def gelu(x, approximate="none"):
        if approximate == "none":
            y = 0.5 * x.float() * (1 + torch.erf(x.float() / 2.0))
        elif approximate == "tanh":
            xf = x.float()
            y = 0.5 * xf * (1 + torch.tanh(_math.sqrt(2 / _math.pi) * (xf + 0.044715 * xf ** 3)))
        else:
            raise ValueError(approximate)
        return y.to(x.dtype) if x.dtype != torch.float64 else (
            0.5 * x * (1 + torch.erf(x / 2.0)) if approximate == "none"
            else 0.5 * x * (1 + torch.tanh(_math.sqrt(2 / _math.pi) * (x + 0.044715 * x ** 3))))

    check_gelu(gelu, part="tanh")
    with pytest.raises(CheckFailed):
        check_gelu(gelu, part="core")
