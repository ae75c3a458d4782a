"""Checks for notebook 02, multi-head attention.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. Visible cases judge with oracles that do not hand out the
answer: PyTorch's own ``nn.MultiheadAttention`` (with its opposite mask polarity) and
``F.scaled_dot_product_attention`` run head by head, the paper's "Concat(head_1, ..., head_H)"
written with ``torch.cat``, and properties: tokens stay tokens when heads are split and merged,
causality under a causal mask, permutation equivariance without a mask. ``MISTAKES`` is the
catalogue of known wrong implementations whose hints the feedback shows.

Module exercises are called as ``Call("MultiHeadAttention", (D, H), {"bias": ...}, state=...,
forward_args=(x,), forward_kwargs={"context": ..., "mask": ...})``: the weights are loaded by the
parameter names of docs/conventions.md (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``), so an
answer is judged on its outputs for weights the check chooses. Module cases run in
``MODULE_DTYPE`` (float64; the call machinery gives a module the dtype of the weights it loads).

``mha_from_torch`` is judged against ``nn.MultiheadAttention`` (the hidden cases: the reference),
never against the learner's own ``MultiHeadAttention``: a conversion built on a broken module
fails, and the course's module stands in for the broken one (the call graph, one bug costs
points once), so a right conversion still gets its points and a conversion that copies nothing
gets none. Every case also runs the learner's ``MultiHeadAttention`` with the converted weights
loaded by name, for the hint only: when the conversion gives what that module gives and the
module is what disagrees with PyTorch, the feedback says to fix exercise 3 first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...device import make_generator
from ..call import Call, TorchModule
from ..case import Case, Judge, fmt_dtype
from ..protocol import NotebookChecks
from ..shared import HALF_FILL_ERROR, half_precision_errors
from ..shared import with_error_hints as _with_error_hints
from ..tolerance import tolerance
from .mistakes import MISTAKES, PROJECTIONS

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks("02_multi_head_attention",
                          calls={"MultiHeadAttention": ("split_heads", "merge_heads"),
                                 "mha_from_torch": ("MultiHeadAttention",)})

# Module cases run in float64 (tight tolerances); float32 cases are separate.
MODULE_DTYPE = torch.float64


# ---------------------------------------------------------------------------------------------
# Oracles (trusted code, run by the judge)
# ---------------------------------------------------------------------------------------------
def _split_oracle(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, Dh): head h is the h-th chunk of D columns of every token."""
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # (B, H, T, Dh)


def _concat_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, Dh) -> (B, T, H·Dh): Concat(head_1, ..., head_H) along the features."""
    return torch.cat(x.unbind(dim=1), dim=-1)  # (B, T, D)


def to_torch_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Course names (q_proj.weight, ...) -> nn.MultiheadAttention's (in_proj_weight, ...)."""
    out = {"in_proj_weight": torch.cat([state[f"{p}.weight"] for p in PROJECTIONS[:3]]),
           "out_proj.weight": state["o_proj.weight"]}
    if "q_proj.bias" in state:
        out["in_proj_bias"] = torch.cat([state[f"{p}.bias"] for p in PROJECTIONS[:3]])
        out["out_proj.bias"] = state["o_proj.bias"]
    return out


def from_torch_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """nn.MultiheadAttention's names -> the course's (the inverse of :func:`to_torch_state`)."""
    out = dict(zip((f"{p}.weight" for p in PROJECTIONS[:3]), state["in_proj_weight"].chunk(3), strict=True))
    out["o_proj.weight"] = state["out_proj.weight"]
    if "in_proj_bias" in state:
        out.update(zip((f"{p}.bias" for p in PROJECTIONS[:3]), state["in_proj_bias"].chunk(3), strict=True))
        out["o_proj.bias"] = state["out_proj.bias"]
    return {k: v.clone() for k, v in out.items()}


def _torch_module(torch_state: dict[str, torch.Tensor], num_heads: int) -> nn.MultiheadAttention:
    weight = torch_state["in_proj_weight"]
    module = nn.MultiheadAttention(weight.size(1), num_heads, bias="in_proj_bias" in torch_state,
                                   batch_first=True, dtype=weight.dtype)
    module.load_state_dict(torch_state, strict=True)
    return module.eval()


def torch_oracle(torch_state: dict[str, torch.Tensor], num_heads: int, x: torch.Tensor,
                  context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """nn.MultiheadAttention's output; ``mask`` in the course's polarity (True = may attend)."""
    module = _torch_module(torch_state, num_heads)
    source = x if context is None else context
    attn_mask = None
    if mask is not None:  # nn.MultiheadAttention: bool True = may NOT attend, (B·H, T, S)
        b, t, s = x.size(0), x.size(1), source.size(1)
        attn_mask = ~mask.expand(b, num_heads, t, s).reshape(b * num_heads, t, s)
    with torch.no_grad():
        return module(x, source, source, attn_mask=attn_mask, need_weights=False)[0]  # (B, T, D)


def per_head_sdpa_oracle(state: dict[str, torch.Tensor], num_heads: int, x: torch.Tensor,
                          context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """head_i = F.scaled_dot_product_attention(x W_Q^i, c W_K^i, c W_V^i) one head at a time,
    then Concat(head_1..head_H) W_O (Vaswani et al. 2017, §3.2.2)."""
    source = x if context is None else context
    d_model = x.size(-1)
    head_dim = d_model // num_heads
    heads = []
    for h in range(num_heads):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        proj = {p: (state[f"{p}.weight"][cols], state.get(f"{p}.bias")) for p in PROJECTIONS[:3]}
        q, k, v = (F.linear(inp, w, None if b is None else b[cols])
                   for inp, (w, b) in zip((x, source, source), proj.values(), strict=True))
        attn_mask = None if mask is None else mask.expand(x.size(0), num_heads, x.size(1), source.size(1))[:, h]
        heads.append(F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask))  # (B, T, Dh)
    return F.linear(torch.cat(heads, dim=-1), state["o_proj.weight"], state.get("o_proj.bias"))  # (B, T, D)


# ---------------------------------------------------------------------------------------------
# Errors with a known cause: a hint instead of a bare traceback line.
# ---------------------------------------------------------------------------------------------
NAMES_HINT = ("create self.q_proj, self.k_proj, self.v_proj, self.o_proj = nn.Linear(d_model, d_model, "
              "bias=bias) and no other parameters: the grader loads weights by these names")
SIZES_HINT = "each projection is nn.Linear(d_model, d_model): one (D, D) weight holds all H heads"
FROM_TORCH_NAMES_HINT = ("load a state dict with MultiHeadAttention's names (q_proj.weight, ..., o_proj.bias), "
                         "and build it with bias=True exactly when torch_mha has biases")
FROM_TORCH_SIZES_HINT = "in_proj_weight (3D, D) splits into three (D, D) blocks along dim 0: .chunk(3)"
VIEW_ERROR = (r"view size is not compatible", "after a transpose the tensor is not contiguous: use "
              ".reshape(...) (or .contiguous().view(...)) instead of .view(...)")
CONTEXT_ERROR = (r"must match the size of tensor", "with `context` (B, S, D) the scores are (B, H, T, S): "
                 "keys and values come from context, queries from x")


def _cross_other_length(call: Call) -> bool:
    """Whether ``call`` runs cross-attention with a context whose length S differs from T."""
    x, context = (call.forward_args or (None,))[0], call.forward_kwargs.get("context")
    return isinstance(x, torch.Tensor) and isinstance(context, torch.Tensor) and context.size(1) != x.size(1)


KV_LENGTH_ERROR = (r"shape '\[[0-9, ]+\]' is invalid for input of size", "keys and values have "
                   "S = context.size(1) tokens, not T = x.size(1): reshape k and v with S (or -1)", _cross_other_length)
DTYPE_ERROR = (r"same dtype|expected scalar type|expected both", "build the module in the dtype (and on "
               "the device) of the weights it copies: .to(torch_mha.in_proj_weight.dtype)")


def with_error_hints(judge: Callable[[Judge], None], known: Sequence[tuple] = (VIEW_ERROR,),
                     *, calls: Sequence[int] | None = None,
                     load_hints: tuple[str, str] = (NAMES_HINT, SIZES_HINT)) -> Callable[[Judge], None]:
    """:func:`tfcourse.checks.shared.with_error_hints` with this notebook's defaults: the
    non-contiguous view error, and MultiHeadAttention's parameter names and sizes."""
    return _with_error_hints(judge, known, calls=calls, load_hints=load_hints)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def random_mha_state(seed: int, d_model: int, bias: bool, dtype: torch.dtype = MODULE_DTYPE
                     ) -> dict[str, torch.Tensor]:
    """Weights by the course's names, of a realistic scale: std 1/sqrt(D) (unit-variance q, k, v
    for unit-variance x), biases std 0.5 so that forgetting one shows."""
    g = make_generator(seed)
    state = {}
    for p in PROJECTIONS:
        state[f"{p}.weight"] = torch.randn(d_model, d_model, generator=g, dtype=dtype) / math.sqrt(d_model)
        if bias:
            state[f"{p}.bias"] = torch.randn(d_model, generator=g, dtype=dtype) * 0.5
    return state


def random_torch_mha_state(seed: int, d_model: int, bias: bool, dtype: torch.dtype = MODULE_DTYPE
                           ) -> dict[str, torch.Tensor]:
    """The same, in nn.MultiheadAttention's names (in_proj_weight (3D, D), out_proj.weight, ...)."""
    return to_torch_state(random_mha_state(seed, d_model, bias, dtype))


def mha_call(d_model: int, num_heads: int, bias: bool, state: dict[str, torch.Tensor], x: torch.Tensor,
             context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> Call:
    """``MultiHeadAttention(d_model, num_heads, bias=bias)`` with ``state``, called on x."""
    kwargs: dict[str, Any] = {}
    if context is not None:
        kwargs["context"] = context
    if mask is not None:
        kwargs["mask"] = mask
    return Call("MultiHeadAttention", (d_model, num_heads), {"bias": bias}, state=state,
                forward_args=(x,), forward_kwargs=kwargs)


def from_torch_calls(num_heads: int, torch_state: dict[str, torch.Tensor], x: torch.Tensor,
                     context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> list[Call]:
    """[mha_from_torch(nn.MultiheadAttention with torch_state)(x, ...), and the learner's own
    MultiHeadAttention with the same weights loaded by name (see the module docstring)]."""
    d_model = torch_state["in_proj_weight"].size(1)
    bias = "in_proj_bias" in torch_state
    module = TorchModule("MultiheadAttention", {"embed_dim": d_model, "num_heads": num_heads, "bias": bias,
                                                "batch_first": True}, torch_state)
    own = mha_call(d_model, num_heads, bias, from_torch_state(torch_state), x, context, mask)
    return [Call("mha_from_torch", (module,), forward_args=own.forward_args, forward_kwargs=own.forward_kwargs),
            own]


def random_input(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=make_generator(seed), dtype=dtype)


def _case(exercise: str, title: str, calls: list[Call], judge, seed: int | None = None) -> Case:
    return Case(exercise, title, calls, with_error_hints(judge), seed=seed, mistakes=MISTAKES[exercise])


# ---------------------------------------------------------------------------------------------
# Visible cases: split_heads
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("split_heads", parts=("core", "validation"))
def _split_cases() -> list[Case]:
    """Check ``split_heads(x, num_heads)``: (B, T, D) -> (B, H, T, Dh), ValueError if D % H != 0."""
    cases = []
    x = random_input(401, 2, 5, 12)  # B=2, T=5, D=12; H=3, Dh=4 (T, H, Dh all differ: shapes tell mistakes apart)

    def chunks(j: Judge, x=x):
        got = j.tensor(shape=(2, 3, 5, 4), dtype=x.dtype)
        j.close(got, _split_oracle(x, 3), oracle="expected")

    cases.append(_case("split_heads", "head h holds columns h·Dh … (h+1)·Dh − 1 of every token, (B, H, T, Dh)",
                       [Call("split_heads", (x, 3))], chunks, seed=401))

    x2 = x.clone()
    x2[:, 3] = random_input(402, 2, 12)  # change token 3 only

    def tokens_stay(j: Judge):
        before = j.tensor(0, shape=(2, 3, 5, 4), dtype=torch.float64)
        after = j.tensor(1, shape=(2, 3, 5, 4), dtype=torch.float64)
        changed = [t for t in range(5) if not torch.equal(before[:, :, t], after[:, :, t])]
        j.require(changed == [3], f"changing token 3 of x changed out[:, :, t] for t = {changed}; only "
                  "t = 3 may change (a reshape that mixes tokens passes any shape test)", call=1)

    cases.append(_case("split_heads", "tokens stay tokens: changing token 3 of x changes only out[:, :, 3]",
                       [Call("split_heads", (x, 3)), Call("split_heads", (x2, 3))], tokens_stay, seed=402))

    x3 = random_input(403, 3, 1, 8, dtype=torch.float32)

    def edge(j: Judge, x=x3):
        one = j.tensor(0, shape=(3, 1, 1, 8), dtype=torch.float32)
        j.close(one, x[:, None], call=0, oracle="x[:, None] (one head is the whole width)")
        per_col = j.tensor(1, shape=(3, 8, 1, 1), dtype=torch.float32)
        j.close(per_col, _split_oracle(x, 8), call=1, oracle="one column per head")

    cases.append(_case("split_heads", "T = 1, float32, H = 1 (Dh = D) and H = D (Dh = 1)",
                       [Call("split_heads", (x3, 1)), Call("split_heads", (x3, 8))], edge, seed=403))

    bad = random_input(404, 2, 3, 18)

    def not_divisible(j: Judge):
        o = j.raised(0)
        if o is None:
            j.fail("returned without an error for d_model = 18, num_heads = 4; expected a ValueError",
                   hint="check d_model % num_heads != 0 first and raise ValueError(...)")
        j.require(o.error_type == "ValueError", f"raised {o.error_line()[:90]}; expected a ValueError",
                  hint="check d_model % num_heads != 0 yourself and raise ValueError(...): an assert or a "
                       "failing view raises other errors")
        j.require("18" in o.error_message and "4" in o.error_message,
                  f"the message {o.error_message.strip()[:70]!r} should give both numbers",
                  hint="say what is wrong with which values, e.g. f\"d_model = {d_model} is not divisible "
                       "by num_heads = {num_heads}\"")

    cases.append(Case("split_heads", "D = 18, H = 4: raises ValueError naming both numbers",
                      [Call("split_heads", (bad, 4))], not_divisible, seed=404, part="validation"))
    return cases


# ---------------------------------------------------------------------------------------------
# Visible cases: merge_heads
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("merge_heads")
def _merge_cases() -> list[Case]:
    """Check ``merge_heads(x)``: (B, H, T, Dh) -> (B, T, H·Dh), the inverse of the split."""
    cases = []
    x = random_input(411, 2, 3, 5, 4)  # B=2, H=3, T=5, Dh=4

    def concat(j: Judge, x=x):
        got = j.tensor(shape=(2, 5, 12), dtype=x.dtype)
        j.close(got, _concat_heads(x), oracle="Concat(head_1, …, head_H)")

    cases.append(_case("merge_heads", "out[b, t] = Concat(head_1, …, head_H)[b, t], shape (B, T, H·Dh)",
                       [Call("merge_heads", (x,))], concat, seed=411))

    tokens = random_input(412, 2, 6, 16, dtype=torch.float32)  # (B, T, D) = (2, 6, 16), H = 4
    split = _split_oracle(tokens, 4).contiguous()  # (B, H, T, Dh)

    def inverse(j: Judge, tokens=tokens):
        got = j.tensor(shape=(2, 6, 16), dtype=torch.float32)
        j.close(got, tokens, atol=0.0, rtol=0.0, oracle="the tokens before the split")

    cases.append(_case("merge_heads", "undoes the split exactly: merge_heads(split(x)) == x (float32)",
                       [Call("merge_heads", (split,))], inverse, seed=412))

    x3 = x.clone()
    x3[:, :, 2] = random_input(413, 2, 3, 4)  # token 2 of every head

    def tokens_stay(j: Judge):
        before = j.tensor(0, shape=(2, 5, 12), dtype=torch.float64)
        after = j.tensor(1, shape=(2, 5, 12), dtype=torch.float64)
        changed = [t for t in range(5) if not torch.equal(before[:, t], after[:, t])]
        j.require(changed == [2], f"changing token 2 of every head changed out[:, t] for t = {changed}; "
                  "only t = 2 may change", call=1)

    cases.append(_case("merge_heads", "tokens stay tokens: changing token 2 of the heads changes only out[:, 2]",
                       [Call("merge_heads", (x,)), Call("merge_heads", (x3,))], tokens_stay, seed=413))
    return cases


# ---------------------------------------------------------------------------------------------
# Visible cases: MultiHeadAttention
# ---------------------------------------------------------------------------------------------
MHA_ERRORS = (VIEW_ERROR, CONTEXT_ERROR, KV_LENGTH_ERROR, HALF_FILL_ERROR)
FROM_TORCH_ERRORS = (VIEW_ERROR, DTYPE_ERROR)
FROM_TORCH_LOAD_HINTS = (FROM_TORCH_NAMES_HINT, FROM_TORCH_SIZES_HINT)


def _mha_case(title: str, calls: list[Call], judge, seed: int, part: str | None = None) -> Case:
    """A MultiHeadAttention case, scored by the core test cell (self-attention without a mask)
    or, when a call passes a mask or a context, by ``test_MultiHeadAttention__cross_and_masks``
    (``part`` names another: "half")."""
    masked = any(c.forward_kwargs.get("mask") is not None or c.forward_kwargs.get("context") is not None
                 for c in calls)
    return Case("MultiHeadAttention", title, calls, with_error_hints(judge, MHA_ERRORS), seed=seed,
                mistakes=MISTAKES["MultiHeadAttention"], part=part or ("cross_and_masks" if masked else "core"))


@NOTEBOOK.exercise("MultiHeadAttention", parts=("core", "cross_and_masks", "half"))
def _mha_cases() -> list[Case]:
    """Check the ``MultiHeadAttention(d_model, num_heads, bias=False)`` module against
    nn.MultiheadAttention, per-head F.scaled_dot_product_attention and properties.

    part: "core" (self-attention without a mask), "cross_and_masks" (masks and cross-attention)
    or "half" (float16 and bfloat16), the three test cells that score it; None checks all."""
    cases = []
    dt = MODULE_DTYPE

    # 1. self-attention, no mask, no biases: nn.MultiheadAttention
    state = random_mha_state(421, 12, bias=False)
    x = random_input(422, 2, 5, 12, dtype=dt)

    def plain(j: Judge, state=state, x=x):
        got = j.tensor(shape=(2, 5, 12), dtype=dt)
        j.close(got, torch_oracle(to_torch_state(state), 3, x), oracle="nn.MultiheadAttention")

    cases.append(_mha_case(f"self-attention, D = 12, H = 3, no biases ({fmt_dtype(dt)}): matches nn.MultiheadAttention",
                           [mha_call(12, 3, False, state, x)], plain, seed=421))

    # 2. biases and a causal mask: nn.MultiheadAttention with the opposite polarity
    state2 = random_mha_state(423, 16, bias=True)
    x2 = random_input(424, 2, 6, 16, dtype=dt)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()  # (T, S), True = may attend

    def biased_causal(j: Judge, state=state2, x=x2, mask=causal):
        got = j.tensor(shape=(2, 6, 16), dtype=dt)
        j.close(got, torch_oracle(to_torch_state(state), 4, x, mask=mask),
                oracle="nn.MultiheadAttention(attn_mask=~mask)")

    cases.append(_mha_case("bias=True, causal mask (T, S) with True = may attend: matches nn.MultiheadAttention "
                           "given attn_mask=~mask", [mha_call(16, 4, True, state2, x2, mask=causal)],
                           biased_causal, seed=423))

    # 3. cross-attention, T != S, no mask; 3b. S = T: an answer that uses context only when its
    # length differs passes 3
    state3 = random_mha_state(425, 16, bias=True)
    x3 = random_input(426, 2, 3, 16, dtype=dt)
    ctx = random_input(427, 2, 7, 16, dtype=dt)

    def cross_case(title: str, h: int, x: torch.Tensor, context: torch.Tensor, seed: int) -> Case:
        def cross(j: Judge) -> None:
            got = j.tensor(shape=tuple(x.shape), dtype=dt)
            j.close(got, torch_oracle(to_torch_state(state3), h, x, context=context),
                    oracle="nn.MultiheadAttention(x, context, context)")

        return _mha_case(title, [mha_call(16, h, True, state3, x, context=context)], cross, seed=seed)

    cases.append(cross_case("cross-attention: queries from x (T = 3), keys/values from context (S = 7)",
                            2, x3, ctx, 425))
    cases.append(cross_case("cross-attention with S = T = 5: keys/values still come from context, not x",
                            4, random_input(435, 2, 5, 16, dtype=dt), random_input(436, 2, 5, 16, dtype=dt), 435))

    # 4. cross-attention with a padding mask (B, 1, 1, S): per-head F.scaled_dot_product_attention
    lengths = torch.tensor([7, 4])
    pad = (torch.arange(7)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)

    def cross_pad(j: Judge, state=state3, x=x3, ctx=ctx, pad=pad):
        got = j.tensor(shape=(2, 3, 16), dtype=dt)
        j.close(got, per_head_sdpa_oracle(state, 4, x, context=ctx, mask=pad),
                oracle="Concat(F.scaled_dot_product_attention per head) W_O")

    cases.append(_mha_case("cross-attention with a padding mask (B, 1, 1, S), H = 4: matches "
                           "F.scaled_dot_product_attention head by head",
                           [mha_call(16, 4, True, state3, x3, context=ctx, mask=pad)], cross_pad, seed=425))

    # 5. causality: outputs at t < 4 unchanged when tokens 4, 5 change
    state5 = random_mha_state(428, 8, bias=True)
    x5 = random_input(429, 1, 6, 8, dtype=dt)
    x5b = x5.clone()
    x5b[:, 4:] = random_input(430, 1, 2, 8, dtype=dt)

    def causality(j: Judge):
        before = j.tensor(0, shape=(1, 6, 8), dtype=dt)
        after = j.tensor(1, shape=(1, 6, 8), dtype=dt)
        j.close(after[:, :4], before[:, :4], name="out[:, :4]", call=1,
                oracle="the output before tokens 4, 5 changed")
        j.require(not torch.allclose(after[:, 4:], before[:, 4:]),
                  "out[:, 4:] did not change when tokens 4, 5 changed", call=1)

    causal6 = torch.ones(6, 6, dtype=torch.bool).tril()
    cases.append(_mha_case("causal mask: outputs at t < 4 don't change when tokens 4, 5 change",
                           [mha_call(8, 2, True, state5, x5, mask=causal6),
                            mha_call(8, 2, True, state5, x5b, mask=causal6)], causality, seed=428))

    # 6. permutation equivariance without a mask
    perm = torch.tensor([3, 0, 4, 1, 2])
    state6 = random_mha_state(431, 8, bias=False)
    x6 = random_input(432, 2, 5, 8, dtype=dt)

    def equivariant(j: Judge, perm=perm):
        out = j.tensor(0, shape=(2, 5, 8), dtype=dt)
        out_perm = j.tensor(1, shape=(2, 5, 8), dtype=dt)
        j.close(out_perm, out[:, perm], name="output for x[:, perm]", call=1,
                oracle="the output for x, permuted the same way")

    cases.append(_mha_case("no mask: permuting the tokens permutes the outputs the same way (no positions yet)",
                           [mha_call(8, 4, False, state6, x6), mha_call(8, 4, False, state6, x6[:, perm])],
                           equivariant, seed=431))

    # 7. a query that may attend no key: zero attention output, so o_proj's bias; never NaN
    state7 = random_mha_state(433, 8, bias=True)
    x7 = random_input(434, 1, 3, 8, dtype=dt)
    rows = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])

    def empty_row(j: Judge, state=state7, x=x7, rows=rows):
        got = j.tensor(shape=(1, 3, 8), dtype=dt)
        j.require(not bool(torch.isnan(got).any()), "query 1 may attend no key, and the output holds NaN",
                  hint="use the nb01 scaled_dot_product_attention: a row with no allowed key gives zeros")
        expected = per_head_sdpa_oracle(state, 2, x, mask=rows)
        expected[:, 1] = state["o_proj.bias"]  # o_proj(0) = its bias
        j.close(got, expected, oracle="expected (row 1: o_proj(0) = o_proj.bias)")

    cases.append(_mha_case("a query that may attend no key gives o_proj(0) = o_proj.bias, not NaN",
                           [mha_call(8, 2, True, state7, x7, mask=rows)], empty_row, seed=433))

    # 8. half precision (the `half` test cell): float16 weights and x, a causal mask
    state8 = {k: v.to(torch.float16) for k, v in random_mha_state(435, 16, bias=True, dtype=torch.float32).items()}
    x8 = random_input(436, 2, 5, 16, dtype=torch.float32).to(torch.float16)
    causal8 = torch.ones(5, 5, dtype=torch.bool).tril()

    def half(j: Judge, state=state8, x=x8, mask=causal8):
        half_precision_errors(j)
        got = j.tensor(shape=(2, 5, 16), dtype=torch.float16)
        state64 = {k: v.double() for k, v in state.items()}
        j.close(got, torch_oracle(to_torch_state(state64), 4, x.double(), mask=mask), tol_dtype=torch.float16,
                oracle="nn.MultiheadAttention in float64")

    cases.append(_mha_case("float16 weights and x with a causal mask (as models run attention): float16 out, close "
                           "to float64", [mha_call(16, 4, True, state8, x8, mask=causal8)], half, seed=435,
                           part="half"))
    return cases


# ---------------------------------------------------------------------------------------------
# Visible cases: mha_from_torch
# ---------------------------------------------------------------------------------------------
def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    atol, rtol = tolerance(b.dtype)
    return torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)


OWN_MODULE_HINT = ("your conversion computes what your own MultiHeadAttention computes with these weights, "
                   "and that module differs from nn.MultiheadAttention: make exercise 3 pass first")


def judge_from_torch(j: Judge, expected: torch.Tensor, oracle: str) -> None:
    """Judge call 0 (mha_from_torch's module) against ``expected`` (PyTorch, or the reference).
    The learner's own MultiHeadAttention (call 1, the same weights loaded by name) only chooses
    the hint: when it is what disagrees with ``expected`` and the conversion agrees with it."""
    got = j.tensor(0, shape=tuple(expected.shape), dtype=expected.dtype)
    own = j.outcomes[1] if len(j.outcomes) > 1 else None
    hint = None
    if own is not None and own.kind == "tensor" and own.tensors[0].shape == expected.shape \
            and own.tensors[0].dtype == expected.dtype and not _same(own.tensors[0], expected) \
            and _same(got, own.tensors[0]):
        hint = OWN_MODULE_HINT
    j.close(got, expected, oracle=oracle, hint=hint)


def from_torch_judge(expected: Callable[[Judge], tuple[torch.Tensor, str]]) -> Callable[[Judge], None]:
    """The judge of an ``mha_from_torch`` case (calls from :func:`from_torch_calls`).

    ``expected(j)`` gives (expected output, name of the oracle). When the converted module
    raises what the learner's own MultiHeadAttention raises too, the feedback says so;
    other errors get the checks' error hints; outputs go to :func:`judge_from_torch`.
    """
    checked = with_error_hints(lambda j: judge_from_torch(j, *expected(j)), FROM_TORCH_ERRORS, calls=(0,),
                               load_hints=FROM_TORCH_LOAD_HINTS)

    def judge(j: Judge) -> None:
        mine, own = j.outcomes[0], j.outcomes[1]
        if mine.kind == "error" and own.kind == "error" and own.error_type == mine.error_type:
            j.fail(f"raised {mine.error_line()[:100]}",
                   "and your MultiHeadAttention raises the same with these weights loaded by name",
                   hint="make exercise 3 (MultiHeadAttention) pass first: the converted module is one")
        checked(j)

    return judge


def _from_torch_case(title: str, num_heads: int, torch_state, x, context=None, mask=None, *, seed: int) -> Case:
    def expected(j: Judge) -> tuple[torch.Tensor, str]:
        return (torch_oracle(torch_state, num_heads, x, context, mask),
                "nn.MultiheadAttention" + ("(attn_mask=~mask)" if mask is not None else ""))

    return Case("mha_from_torch", title, from_torch_calls(num_heads, torch_state, x, context, mask),
                from_torch_judge(expected), seed=seed, mistakes=MISTAKES["mha_from_torch"])


@NOTEBOOK.exercise("mha_from_torch", uses=("MultiHeadAttention",))
def _from_torch_cases() -> list[Case]:
    """Check ``mha_from_torch(torch_mha)``: the returned module computes what torch_mha does."""
    dt = MODULE_DTYPE
    cases = []
    state = random_torch_mha_state(441, 16, bias=True)
    x = random_input(442, 2, 5, 16, dtype=dt)
    cases.append(_from_torch_case(f"nn.MultiheadAttention(16, 4, bias=True) ({fmt_dtype(dt)}): same outputs",
                                  4, state, x, seed=441))
    state2 = random_torch_mha_state(443, 12, bias=False)
    x2 = random_input(444, 1, 4, 12, dtype=dt)
    cases.append(_from_torch_case("bias=False (in_proj_bias and out_proj.bias are None), H = 6",
                                  6, state2, x2, seed=443))
    ctx = random_input(445, 2, 6, 16, dtype=dt)
    x3 = x[:, :3]
    cases.append(_from_torch_case("cross-attention: module(x, context=c) equals torch_mha(x, c, c)",
                                  2, state, x3, context=ctx, seed=445))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    cases.append(_from_torch_case("with a mask: module(x, mask=m) equals torch_mha(x, x, x, attn_mask=~m)",
                                  8, state, x, mask=causal, seed=446))
    return cases
