"""Notebook 07's optional challenge (★★★, 0 points): ``mha_to_gqa``, an MHA module converted to
GQA by mean-pooling its key and value heads, judged against the GQA oracle run with the pooled
weights. It registers last, after mla.py's exercises (imported here for that), as in the notebook.
"""

from __future__ import annotations

import torch

from ..call import Call, Instance, Step
from ..case import Case, Judge
from . import mla  # noqa: F401 - exercises 3-5 register before this one (the notebook's order)
from .cases import (
    ATTN_TOL,
    LOADER,
    NOTEBOOK,
    errors_case,
    gqa_oracle,
    gqa_state,
    make_case,
    randn,
    step_tensors,
)
from .mistakes import HINTS

__all__ = ["pooled_state"]


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
    x = randn(seed, b, t, d)
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

    return make_case("mha_to_gqa", title, [call], judge, seed=seed)


def _to_gqa_errors(seed: int) -> Case:
    d, h = 16, 4
    mha = gqa_state(seed, d, h, h, d // h, torch.float64)
    gqa = gqa_state(seed + 10, d, h, 2, d // h, torch.float64)

    def built(state: dict[str, torch.Tensor], g: int) -> Instance:
        return Instance(LOADER, (Instance("GroupedQueryAttention", (d, h, g)),
                                 *(state[f"{n}_proj.weight"] for n in "qkvo")))

    calls = [Call("mha_to_gqa", (built(gqa, 2), 1)), Call("mha_to_gqa", (built(mha, h), 3))]
    return errors_case("mha_to_gqa", "ValueError when the input is not MHA (G != H) or when H is not a multiple of "
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
