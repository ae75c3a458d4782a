"""Only what the task cell states is graded, and what it states is graded (issue 25).

Every hidden input of notebooks 01-08 comes from the domain that the exercise's task cell (the
markdown cell "### Exercise N — `name`"), its stub's docstring or docs/conventions.md states.
:data:`TABLE` lists, per exercise, each domain the hidden cases draw from as a predicate on a
call's arguments, next to the sentence that states it. The tests generate the hidden cases for
seeds 0..19 and check that every call of the exercise satisfies every predicate, and that each
sentence is in the exercise's task cell / docstring / docs/conventions.md (so a draw that leaves
its domain, or a text that stops stating it, fails). Inputs that are deliberately invalid (a case
that expects a stated ``ValueError``) are listed as such (``invalid=True``: the predicate picks
them out, the sentence states the error); they are exempt from the other predicates, and the
reference must raise ``ValueError`` on them. An error sentence may also state the domain of
inputs that no hidden case makes invalid ("`ValueError` when H is not a multiple of G": the hidden
cases keep H a multiple of G). Every graded exercise (points > 0) needs an entry.

Found this way: notebook 07's ``attention_cache_bytes_per_token`` drew G = 30 for H = 33 ("gqa"),
which an answer applying exercise 2's rule (H a multiple of G) rejected.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.names import module_name
from tfcourse.checks.call import Call, Instance, Step, TorchModule, run_call
from tfcourse.notebook import grade_points, read_notebook

ROOT = Path(__file__).resolve().parents[1]
SEEDS = range(20)
NOTEBOOKS = ("01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation",
             "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights")


@dataclass(frozen=True)
class Domain:
    """notebook, exercise; text: the sentence that states the domain (whitespace-insensitive);
    holds(call): whether a call of the exercise is in it (``invalid``: whether the call is one of
    the deliberately invalid inputs that ``text`` says raise ValueError); where: "task" (the task
    cell), "doc" (the stub's docstring) or "conventions" (docs/conventions.md)."""

    notebook: str
    exercise: str
    text: str
    holds: Callable[[Call], bool]
    where: str = "task"
    invalid: bool = False


# -- reading a call's arguments ----------------------------------------------------------------
def arg(call: Call, index: int, name: str, default: Any = None) -> Any:
    """The argument at position ``index`` or keyword ``name`` of the call itself."""
    return call.args[index] if len(call.args) > index else call.kwargs.get(name, default)


def step_args(call: Call, method: str) -> list[tuple]:
    return [step.args for step in call.steps if step.method == method]


def forward_inputs(call: Call) -> list[torch.Tensor]:
    """The first argument of every forward call: ``forward_args`` and the ``__call__`` steps."""
    calls = ([call.forward_args] if call.forward_args else []) + step_args(call, "__call__")
    return [args[0] for args in calls if args and isinstance(args[0], torch.Tensor)]


def forward_kwargs(call: Call) -> list[dict]:
    kwargs = [call.forward_kwargs] if call.forward_args else []
    return kwargs + [step.kwargs for step in call.steps if step.method == "__call__"]


def floating(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def integer(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_floating_point() and x.dtype != torch.bool


def broadcasts(mask: Any, shape: tuple[int, ...]) -> bool:
    if mask is None:
        return True
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        return False
    try:
        return torch.broadcast_shapes(tuple(mask.shape), shape) == shape
    except RuntimeError:
        return False


def positive_int(v: Any) -> bool:
    return type(v) is int and v > 0


def module_sizes_fit(call: Call) -> bool:
    """pre/post_norm_residual: sublayer and norm are torch.nn modules (..., D) -> (..., D)."""
    x, sub, norm = call.args
    d = x.shape[-1]
    for m in (sub, norm):
        if not isinstance(m, TorchModule) or m.cls not in ("Linear", "LayerNorm", "RMSNorm"):
            return False
        sizes = [m.kwargs[k] for k in ("in_features", "out_features", "normalized_shape") if k in m.kwargs]
        if any(s != d for s in sizes):
            return False
    return True


def cache_updates_fit(call: Call) -> bool:
    """KVCache: every update's k and v have one shape, and B, G, Dh and the dtype of the first."""
    updates = step_args(call, "update")
    if not updates:
        return True
    first = updates[0][0]
    return all(k.shape == v.shape and all(k.shape[d] == first.shape[d] for d in (0, 1, 3))
               and k.dtype == v.dtype == first.dtype for k, v in updates)


def latent_updates_fit(call: Call) -> bool:
    """LatentCache: every update's two tensors share (B, T), and B, Dc, dr and the dtype of the first."""
    updates = step_args(call, "update")
    if not updates:
        return True
    c0, r0 = updates[0]
    return all(c.shape[:2] == r.shape[:2] and c.shape[0] == c0.shape[0] and c.shape[2] == c0.shape[2]
               and r.shape[2] == r0.shape[2] and c.dtype == r.dtype == c0.dtype for c, r in updates)


def heads_fit(d: int, h: int) -> bool:
    return d % h == 0 and (d // h) % 2 == 0


def gqa_fits(call: Call) -> bool:
    d, h, g = call.args[:3]
    head_dim = arg(call, 3, "head_dim")
    return h % g == 0 and (head_dim is not None or d % h == 0)


def gqa_head_dim_even(call: Call) -> bool:
    d, h = call.args[:2]
    head_dim = arg(call, 3, "head_dim")
    return (head_dim if head_dim is not None else d // h) % 2 == 0


def bytes_sizes(call: Call) -> bool:
    kind, layers, heads, dh = call.args
    kw = call.kwargs
    if not all(positive_int(v) for v in (layers, heads, dh, kw.get("bytes_per_element", 2))):
        return False
    if kind == "gqa":
        return positive_int(kw["num_kv_heads"]) and heads % kw["num_kv_heads"] == 0
    if kind == "mla":
        return positive_int(kw["kv_lora_rank"]) and kw["qk_rope_head_dim"] % 2 == 0
    return True


def sampling_options(call: Call) -> bool:
    kw = call.kwargs
    return (kw.get("temperature", 1.0) >= 0 and (kw.get("top_k") is None or kw["top_k"] >= 1)
            and (kw.get("top_p") is None or 0 < kw["top_p"] <= 1))


def probe_kwargs(x: Any) -> dict:
    return x.kwargs if isinstance(x, Instance) else {}


def broken_file(call: Call) -> bool:
    return any(probe_kwargs(a).get(k) for a in call.args for k in ("drop", "reshape"))


def same_config(call: Call, default: str) -> bool:
    model, path = call.args
    return probe_kwargs(model).get("config", default) == probe_kwargs(path).get("config", default)


def tied_model_untied_file(call: Call) -> bool:
    """A tied LlamaDecoder probe given a file with output.weight (the "untied" configuration's)."""
    model, path = (probe_kwargs(a) for a in call.args)
    tied = model.get("tie_embeddings", model.get("config", "tied") == "tied")
    return bool(tied) and path.get("config", "tied") == "untied"


def real_tokens(call: Call) -> bool:
    hidden, mask = call.args
    m = mask.to(torch.float64)
    return (tuple(mask.shape) == tuple(hidden.shape[:2]) and bool(((m == 0) | (m == 1)).all())
            and bool((m.sum(1) >= 1).all()))


def probability_vector(p: Any) -> bool:
    return (floating(p) and p.dim() == 1 and bool((p >= 0).all())
            and abs(float(p.double().sum()) - 1) < 1e-5)


def sdpa_shapes(call: Call) -> bool:
    q, k, v = call.args[:3]
    return (q.shape[:-2] == k.shape[:-2] == v.shape[:-2] and q.shape[-1] == k.shape[-1]
            and k.shape[-2] == v.shape[-2])


def sdpa_mask(call: Call) -> bool:
    q, k = call.args[:2]
    return broadcasts(arg(call, 3, "mask"), (*q.shape[:-1], k.shape[-2]))


def mha_mask(call: Call) -> bool:
    d, h = call.args[:2]
    for x, kw in zip(forward_inputs(call), forward_kwargs(call), strict=True):
        s = kw["context"].shape[1] if kw.get("context") is not None else x.shape[1]
        if not broadcasts(kw.get("mask"), (x.shape[0], h, x.shape[1], s)):
            return False
    return True


def from_torch_module(call: Call) -> bool:
    m = call.args[0]
    return (isinstance(m, TorchModule) and m.cls == "MultiheadAttention" and m.kwargs.get("batch_first") is True
            and m.kwargs["embed_dim"] % m.kwargs["num_heads"] == 0)


def width_is(index: int) -> Callable[[Call], bool]:
    """A module built with width ``call.args[index]``: every forward input ends with it."""
    return lambda call: all(x.shape[-1] == call.args[index] for x in forward_inputs(call))


def weights_in_input_dtype(call: Call) -> bool:
    dtypes = {t.dtype for t in (call.state or {}).values()}
    return all(dtypes <= {x.dtype} for x in forward_inputs(call))


def ids_below_vocab(call: Call) -> bool:
    return all(integer(x) and x.dim() == 2 and 0 <= int(x.min()) and int(x.max()) < call.args[0]
               for x in forward_inputs(call))


def caches_per_block(call: Call) -> bool:
    return all(len(kw["caches"]) == call.args[2] for kw in forward_kwargs(call) if kw.get("caches") is not None)


def rope_tables(call: Call) -> bool:
    x, cos, sin = call.args
    b, _, t, dh = x.shape
    return (cos.shape == sin.shape and tuple(cos.shape) in ((t, dh), (b, t, dh)) and cos.dtype == torch.float32)


def rows_per_head(call: Call) -> bool:
    w, h = call.args
    return w.shape[0] % h == 0 and (w.shape[0] // h) % 2 == 0


N1, N2, N3, N4 = NOTEBOOKS[:4]
N5, N6, N7, N8 = NOTEBOOKS[4:]
D = Domain

TABLE: list[Domain] = [
    # -- 01 ------------------------------------------------------------------------------------
    D(N1, "softmax", "`x` of any shape, e.g. (B, H, T, S), floating dtype", lambda c: floating(c.args[0])),
    D(N1, "softmax", "`dim` may be any axis, not only the last.",
      lambda c: -max(c.args[0].dim(), 1) <= arg(c, 1, "dim", -1) < max(c.args[0].dim(), 1)),
    D(N1, "softmax", "A slice that is entirely `-inf` gives zeros, not `nan`.",
      lambda c: not bool(torch.isnan(c.args[0]).any() or torch.isposinf(c.args[0]).any())),
    D(N1, "softmax_jacobian", "Given a probability vector `p = softmax(z)`", lambda c: probability_vector(c.args[0])),
    D(N1, "scaled_dot_product_attention", 'with the same leading axes "..." (e.g. (B, H), or none)', sdpa_shapes),
    D(N1, "scaled_dot_product_attention", "`mask` is `None` or a boolean tensor that broadcasts to (..., T, S), "
      "**`True` = may attend**.", sdpa_mask),
    D(N1, "causal_mask", "Raise `ValueError` when S < T",
      lambda c: positive_int(c.args[0]) and arg(c, 1, "t_k", c.args[0]) >= c.args[0]),
    D(N1, "padding_mask", "`lengths` (B,) integers", lambda c: integer(c.args[0]) and c.args[0].dim() == 1),
    D(N1, "padding_mask", "Each `lengths[b]` is between 0 (no real key) and S.",
      lambda c: bool(((c.args[0] >= 0) & (c.args[0] <= c.args[1])).all())),
    # -- 02 ------------------------------------------------------------------------------------
    D(N2, "split_heads", "`x` (B, T, D), `num_heads` = H → (B, H, T, Dh)",
      lambda c: c.args[0].dim() == 3 and positive_int(c.args[1])),
    D(N2, "split_heads", "Raise `ValueError` when D is not divisible by H",
      lambda c: c.args[0].shape[-1] % c.args[1] != 0, invalid=True),
    D(N2, "merge_heads", "`x` (B, H, T, Dh) → (B, T, H·Dh)", lambda c: c.args[0].dim() == 4),
    D(N2, "MultiHeadAttention", "num_heads: H (D % H == 0, head width Dh = D // H)",
      lambda c: c.args[0] % c.args[1] == 0, where="doc"),
    D(N2, "MultiHeadAttention", "`mask` `None` or boolean, broadcastable to (B, H, T, S), **`True` = may attend**",
      mha_mask),
    D(N2, "MultiHeadAttention", "`x` (B, T, D); `context` (B, S, D) or `None`", width_is(0)),
    D(N2, "mha_from_torch", "`nn.MultiheadAttention(embed_dim=D, num_heads=H, bias=..., batch_first=True)`",
      from_torch_module),
    # -- 03 ------------------------------------------------------------------------------------
    D(N3, "sinusoidal_position_encoding", "`num_positions` = T, `d_model` = D",
      lambda c: positive_int(c.args[0]) and positive_int(c.args[1])),
    D(N3, "sinusoidal_position_encoding", "Raise `ValueError` when `d_model` is odd",
      lambda c: c.args[1] % 2 == 1, invalid=True),
    D(N3, "rope_cos_sin", "`positions` an integer tensor (T,) or (B, T)",
      lambda c: integer(c.args[0]) and c.args[0].dim() in (1, 2)),
    D(N3, "rope_cos_sin", "Raise `ValueError` when `head_dim` is odd.", lambda c: c.args[1] % 2 == 1, invalid=True),
    D(N3, "rotate_half", "`x` (..., Dh) with Dh even", lambda c: c.args[0].shape[-1] % 2 == 0),
    D(N3, "apply_rope", "`cos` and `sin` from `rope_cos_sin`, either (T, Dh) (the same positions for every "
      "sequence) or (B, T, Dh)", rope_tables),
    D(N3, "apply_rope_interleaved", "`x` (B, H, T, Dh), Dh even; `positions` an integer tensor (T,) or (B, T)",
      lambda c: c.args[0].dim() == 4 and c.args[0].shape[-1] % 2 == 0 and integer(c.args[1])
      and tuple(c.args[1].shape) in ((c.args[0].shape[2],), (c.args[0].shape[0], c.args[0].shape[2]))),
    D(N3, "permute_for_rotate_half", "`weight` (H·Dh, D), the rows of a q or k projection",
      lambda c: c.args[0].dim() == 2 and positive_int(c.args[1])),
    D(N3, "permute_for_rotate_half", "Raise `ValueError` when the number of rows is not divisible by `num_heads`, "
      "or when Dh is odd.", lambda c: not rows_per_head(c), invalid=True),
    D(N3, "alibi_slopes", "**Contract:** `num_heads` = H", lambda c: type(c.args[0]) is int),
    D(N3, "alibi_slopes", "Raise `ValueError` when H < 1.", lambda c: c.args[0] < 1, invalid=True),
    D(N3, "alibi_bias", "with a KV cache the T new queries are the last T of the S positions.",
      lambda c: positive_int(c.args[0]) and positive_int(c.args[1]) and arg(c, 2, "t_k", c.args[1]) >= c.args[1]),
    D(N3, "relative_position_bucket", "`relative_position` an integer tensor of any shape",
      lambda c: integer(c.args[0])),
    # -- 04 ------------------------------------------------------------------------------------
    D(N4, "layer_norm", "`weight` (D,) and `bias` (D,), in x's dtype",
      lambda c: all(t.shape == c.args[0].shape[-1:] and t.dtype == c.args[0].dtype for t in c.args[1:3])),
    D(N4, "rms_norm", "`weight` (D,) in x's dtype",
      lambda c: c.args[1].shape == c.args[0].shape[-1:] and c.args[1].dtype == c.args[0].dtype),
    D(N4, "RMSNorm", "`forward(x)`: `x` (..., dim) → (..., dim)", width_is(0)),
    D(N4, "pre_norm_residual", "`torch.nn` modules such as `nn.Linear` and `nn.LayerNorm` or `nn.RMSNorm`",
      module_sizes_fit),
    D(N4, "post_norm_residual", "`sublayer` and `norm` callables (..., D) → (..., D)", module_sizes_fit),
    # -- 05 ------------------------------------------------------------------------------------
    D(N5, "gelu", "`x` any shape", lambda c: floating(c.args[0])),
    D(N5, "gelu", "any other value raises `ValueError`",
      lambda c: arg(c, 1, "approximate", "none") not in ("none", "tanh"), invalid=True),
    D(N5, "FeedForward", "`forward(x)`: `x` (..., D) → (..., D)", width_is(0)),
    D(N5, "FeedForward", "a float16 or bfloat16 `x` (with weights of that dtype)", weights_in_input_dtype),
    D(N5, "SwiGLU", "`forward(x)`: `x` (..., D) → (..., D)", width_is(0)),
    D(N5, "SwiGLU", "a float16 or bfloat16 `x` (with weights of that dtype)", weights_in_input_dtype),
    D(N5, "swiglu_hidden_dim", "`ValueError` when `d_model` or `multiple_of` is not a positive `int`",
      lambda c: not (positive_int(c.args[0]) and positive_int(c.kwargs.get("multiple_of", 256))), invalid=True),
    D(N5, "swiglu_hidden_dim", "`swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None)`",
      lambda c: c.kwargs.get("ffn_dim_multiplier") is None or c.kwargs["ffn_dim_multiplier"] > 0),
    D(N5, "MoE", "`ValueError` unless `1 <= top_k <= num_experts`",
      lambda c: not 1 <= c.args[3] <= c.args[2], invalid=True),
    D(N5, "MoE", "`forward(x)`: `x` (B, T, D) → a tuple `(y, router_logits)`",
      lambda c: all(x.dim() == 3 and x.shape[-1] == c.args[0] for x in forward_inputs(c))),
    D(N5, "load_balancing_loss", "`router_logits` (N, E) (what `MoE.forward` returns)",
      lambda c: floating(c.args[0]) and c.args[0].dim() == 2 and 1 <= c.args[1] <= c.args[0].shape[1]),
    # -- 06 ------------------------------------------------------------------------------------
    D(N6, "KVCache", "`update(k, v)`: `k`, `v` (B, G, T, Dh)",
      lambda c: all(k.dim() == 4 and v.dim() == 4 for k, v in step_args(c, "update"))),
    D(N6, "KVCache", "`ValueError` when `k` and `v` have different shapes, or when B, G, Dh or the dtype of the new "
      "`k` differ from what is cached.", lambda c: not cache_updates_fit(c), invalid=True),
    D(N6, "CausalSelfAttention", "num_heads: H (D % H == 0, else ValueError); head_dim Dh = D // H (even, for RoPE)",
      lambda c: heads_fit(*c.args[:2]) and width_is(0)(c), where="doc"),
    D(N6, "DecoderBlock", "**`attn`** = `CausalSelfAttention(D, H, rope_theta)`",
      lambda c: heads_fit(*c.args[:2]) and width_is(0)(c)),
    D(N6, "DecoderLM", "`input_ids` (B, T) int64 → logits (B, T, V)",
      lambda c: ids_below_vocab(c) and heads_fit(*c.args[1:4:2])),
    D(N6, "DecoderLM", "a list of L `KVCache`, one per block", caches_per_block),
    D(N6, "sample_next_token", "`logits` (B, V) float", lambda c: floating(c.args[0]) and c.args[0].dim() == 2),
    D(N6, "sample_next_token", "`ValueError` when temperature < 0, top_k < 1, or top_p is not in (0, 1].",
      sampling_options),
    D(N6, "generate", "`input_ids` (B, T) int64 → (B, T + N) int64",
      lambda c: c.args[1].dtype == torch.int64 and c.args[1].dim() == 2 and type(c.args[2]) is int
      and c.args[2] >= 0),
    D(N6, "generate", "it need not be your `DecoderLM`", lambda c: isinstance(c.args[0], Instance)),
    D(N6, "kv_cache_bytes", "`ValueError` when any argument is negative; 0 is allowed (and gives 0).",
      lambda c: any(v < 0 for v in (*c.args, *c.kwargs.values())), invalid=True),
    D(N6, "kv_cache_bytes", "`kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, "
      "bytes_per_element=2)`", lambda c: all(type(v) is int for v in (*c.args, *c.kwargs.values()))),
    # -- 07 ------------------------------------------------------------------------------------
    D(N7, "repeat_kv", "`repeat_kv(x, n_rep)`: `x` (B, G, S, Dh), `n_rep` = R",
      lambda c: c.args[0].dim() == 4 and type(c.args[1]) is int),
    D(N7, "repeat_kv", "`ValueError` when `n_rep < 1`.", lambda c: c.args[1] >= 1),
    D(N7, "GroupedQueryAttention", "`ValueError` when H is not a multiple of G, or when `head_dim` is `None` and D "
      "is not a multiple of H.", gqa_fits),
    D(N7, "GroupedQueryAttention", "RoPE on q and k (never v) with the setup's "
      "`rope_cos_sin(positions, head_dim, rope_theta)`", gqa_head_dim_even),
    D(N7, "GroupedQueryAttention", "`forward(x, cache=None)`: `x` (B, T, D) → (B, T, D)", width_is(0)),
    D(N7, "LatentCache", "`update(c_kv, k_rope)`: `c_kv` (B, T, Dc) and `k_rope` (B, T, dr)",
      lambda c: all(a.dim() == 3 and b.dim() == 3 for a, b in step_args(c, "update"))),
    D(N7, "LatentCache", "`ValueError` when the two inputs differ in B or T, or when B, Dc, dr or the dtype of the "
      "new tensors differ from what is cached", lambda c: not latent_updates_fit(c), invalid=True),
    D(N7, "MultiHeadLatentAttention", "qk_rope_head_dim: dr (even)", lambda c: c.args[4] % 2 == 0, where="doc"),
    D(N7, "MultiHeadLatentAttention", "`forward(x, cache=None, absorb=False)`: `x` (B, T, D) → (B, T, D)",
      width_is(0)),
    D(N7, "attention_cache_bytes_per_token", "and for any other `kind`.",
      lambda c: c.args[0] not in ("mha", "mqa", "gqa", "mla"), invalid=True),
    D(N7, "attention_cache_bytes_per_token", "The checks use sizes a real model can have: for `\"gqa\"` H is a "
      "multiple of G (exercise 2's rule), and for `\"mla\"` $d_r$ is even.", bytes_sizes),
    # -- 08 ------------------------------------------------------------------------------------
    D(N8, "load_decoder_weights", "`model` a `LlamaDecoder` (any size", lambda c: same_config(c, "tied")),
    D(N8, "load_decoder_weights", "(A tied model given a file with `output.weight`: not graded.)",
      lambda c: not tied_model_untied_file(c)),
    D(N8, "load_decoder_weights", "`ValueError` whose message names the file's tensor when its shape differs from "
      "its parameter's, or when the model needs a tensor the file lacks.", broken_file, invalid=True),
    D(N8, "load_encoder_weights", "accept files with and without it.",
      lambda c: probe_kwargs(c.args[1]).get("prefix", "") in ("", "bert.") and same_config(c, "small")),
    D(N8, "load_encoder_weights", "`ValueError` whose message names the file's tensor when its shape differs from "
      "its parameter's, or when the model needs a tensor the file lacks.", broken_file, invalid=True),
    D(N8, "mean_pool", "A row without any real token is not graded", real_tokens),
    D(N8, "mean_pool", "`hidden` (B, T, D) floating point", lambda c: floating(c.args[0]) and c.args[0].dim() == 3),
    D(N8, "first_divergent_layer", "Both models have `blocks` (an `nn.ModuleList`, the same length L)",
      lambda c: probe_kwargs(c.args[0]).get("num_layers") == probe_kwargs(c.args[1]).get("num_layers")),
]


# -- the texts -------------------------------------------------------------------------------
def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@cache
def _cells(notebook: str) -> list[dict]:
    return json.loads((ROOT / "solutions" / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]


def task_cell(notebook: str, exercise: str) -> str:
    """The markdown cell whose heading is "### Exercise N ... — `exercise`"."""
    heading = re.compile(r"^### Exercise \d+[^\n]*`" + re.escape(exercise) + "`", re.M)
    found = [_flat("".join(c["source"])) for c in _cells(notebook)
             if c["cell_type"] == "markdown" and heading.search("".join(c["source"]))]
    assert len(found) == 1, f"{notebook}: {len(found)} task cells for {exercise}"
    return found[0]


def docstring(notebook: str, exercise: str) -> str:
    """The solution cell that defines ``exercise`` (its docstring and signature)."""
    define = re.compile(r"^(def|class) " + re.escape(exercise) + r"\b", re.M)
    found = [_flat("".join(c["source"]).split("### BEGIN SOLUTION")[0]) for c in _cells(notebook)
             if c["cell_type"] == "code" and define.search("".join(c["source"]))]
    assert len(found) == 1, f"{notebook}: {len(found)} solution cells define {exercise}"
    return found[0]


def stated_in(domain: Domain) -> str:
    if domain.where == "task":
        return task_cell(domain.notebook, domain.exercise)
    if domain.where == "doc":
        return docstring(domain.notebook, domain.exercise)
    assert domain.where == "conventions", domain.where
    return _flat((ROOT / "docs" / "conventions.md").read_text(encoding="utf-8"))


def graded(notebook: str) -> list[str]:
    points = grade_points(read_notebook(ROOT / "solutions" / f"{notebook}.ipynb"))
    return [name for name, p in points.items() if p > 0]


def _id(domain: Domain) -> str:
    return f"{domain.notebook[:2]}-{domain.exercise}-{'invalid' if domain.invalid else 'domain'}-{domain.text[:30]}"


# -- the tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_graded_exercise_is_in_the_table(notebook: str) -> None:
    listed = {d.exercise for d in TABLE if d.notebook == notebook and not d.invalid}
    missing = [name for name in graded(notebook) if name not in listed]
    assert not missing, f"{notebook}: graded exercises without a hidden-input domain in TABLE: {missing}"


@pytest.mark.parametrize("domain", TABLE, ids=_id)
def test_the_sentence_is_stated(domain: Domain) -> None:
    assert _flat(domain.text) in stated_in(domain), (
        f"{domain.notebook} {domain.exercise}: the {domain.where} text no longer states {domain.text!r}")


def _calls(notebook: str, exercise: str, seed: int) -> list[Call]:
    """The hidden calls of ``exercise`` itself (a case may also build an oracle by another name)."""
    module = importlib.import_module(f"grader.cases.{module_name(notebook)}")
    return [call for case in module.hidden_cases(exercise, seed) for call in case.calls if call.target == exercise]


def _describe(call: Call) -> str:
    def short(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            return f"tensor{tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}"
        return repr(v)[:60]

    return f"{call.target}({', '.join([short(a) for a in call.args] + [f'{k}={short(v)}' for k, v in call.kwargs.items()])})"


@pytest.mark.parametrize("exercise", sorted({(d.notebook, d.exercise) for d in TABLE}), ids="-".join)
def test_hidden_inputs_stay_in_their_domains(exercise: tuple[str, str]) -> None:
    notebook, name = exercise
    domains = [d for d in TABLE if (d.notebook, d.exercise) == exercise]
    valid = [d for d in domains if not d.invalid]
    invalid = [d for d in domains if d.invalid]
    matched: set[str] = set()
    checked = 0
    for seed in SEEDS:
        for call in _calls(notebook, name, seed):
            marked = [d for d in invalid if d.holds(call)]
            if marked:
                matched.update(d.text for d in marked)
                continue
            checked += 1
            for d in valid:
                assert d.holds(call), (f"{notebook} {name}, seed {seed}: {_describe(call)} leaves the domain that "
                                       f"the {d.where} text states: {d.text!r}")
    assert checked, f"{notebook} {name}: no valid hidden call checked"
    stale = [d.text for d in invalid if d.text not in matched]
    assert not stale, f"{notebook} {name}: listed invalid inputs that no hidden case draws: {stale}"


@pytest.mark.parametrize("exercise", sorted({(d.notebook, d.exercise) for d in TABLE if d.invalid}), ids="-".join)
def test_invalid_inputs_raise_the_stated_error(exercise: tuple[str, str]) -> None:
    notebook, name = exercise
    invalid = [d for d in TABLE if (d.notebook, d.exercise) == exercise and d.invalid]
    reference = vars(importlib.import_module(f"tfcourse.reference.{module_name(notebook)}"))
    for call in _calls(notebook, name, 0):
        if any(d.holds(call) for d in invalid):
            outcome = run_call(call, reference, "cpu")
            assert outcome.kind == "error" and outcome.error_type == "ValueError", (
                f"{notebook} {name}: the reference does not raise ValueError on {_describe(call)}")


def test_steps_are_read() -> None:
    """The helpers see a cache's update steps (a guard against a Step field renamed)."""
    call = Call("KVCache", (), steps=(Step("update", (torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 2, 2))),
                                      Step("update", (torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2)))))
    assert len(step_args(call, "update")) == 2
    assert not cache_updates_fit(call)
    probe = "tfcourse.checks.nb08_real_weights.probes:"
    loaded = Call("load_decoder_weights", (Instance(probe + "tiny_decoder"),
                                           Instance(probe + "tiny_gguf", kwargs={"config": "untied"})))
    assert tied_model_untied_file(loaded) and not same_config(loaded, "tied")
