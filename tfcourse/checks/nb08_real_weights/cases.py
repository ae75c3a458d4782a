"""Notebook 08's visible cases: files the checks write themselves, oracles from ``transformers``.

The checks judge without the course's solutions (a learner's environment need not have them):

* ``load_decoder_weights`` on tiny GGUF files written by ``probes.tiny_gguf`` (llama.cpp's names
  and interleaved q/k rows, F32 and Q8_0 tensors, 1 < G < H, a tied and an untied file): the
  loaded parameters are compared with the weights the probe wrote (Hugging Face layout, which is
  the course's), and the logits with ``transformers``' LlamaForCausalLM holding those weights
  (float64, atol 1e-4); the packaged SmolLM2 file's logits with LlamaForCausalLM loaded through
  ``transformers``' own GGUF conversion (``load_gguf_checkpoint``, its own name map and
  permutation), atol 1e-4.
* ``load_encoder_weights`` the same way with tiny BERT safetensors files (with and without the
  "bert." prefix; pooler.* and embeddings.position_ids present) and ``BertModel``; the packaged
  MiniLM against ``BertModel.from_pretrained`` of its folder, atol 1e-5 on the real tokens.
* ``mean_pool`` against a per-row mean over the real tokens; ``first_divergent_layer`` on pairs of
  tiny LlamaDecoders (``probes.divergence_model``) with a bug at a known block, where the answer is
  known by construction; ``attention_rollout`` against a product written with ``torch.linalg``.

The ``transformers`` oracles are in oracles.py (each computed once per process). This module holds
the helpers every case uses and exercises 1-3 (the two loaders, ``mean_pool``); debugging.py
exercises 4-5 (``first_divergent_layer``, ``attention_rollout``), which register after these (it
imports this module).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..call import Call, Instance, Step
from ..case import Case, Judge, fmt_dtype
from ..protocol import NotebookChecks
from . import probes
from .mistakes import HINTS, MISTAKES
from .oracles import (
    MINILM_BATCH,
    SMOLLM2_PROMPT,
    hf_bert_hidden,
    hf_llama_logits,
    minilm_oracle_hidden,
    smollm2_oracle_logits,
)

__all__ = ["NOTEBOOK", "PROBES", "decoder_case", "encoder_case", "errors_case", "make_case", "minilm_call",
           "step_tensors", "well_formed_file_raised"]

NOTEBOOK = NotebookChecks("08_real_weights")


PROBES = "tfcourse.checks.nb08_real_weights.probes:"
DECODER_ATOL = 1e-4
ENCODER_ATOL = 1e-5
# The real models are compared in float32 with atol + REAL_RTOL·|expected|: float32 rounding alone
# moves SmolLM2's logits (|x| up to ~27, 30 layers) by ~5e-5 and depends on the thread count, so an
# absolute 1e-4 left a correct loader a factor of two. Every catalogued wrong answer is off by > 0.1.
REAL_RTOL = 1e-5
LLAMA_PARAMETERS = ("blocks.0.attn.q_proj.weight", "blocks.1.attn.k_proj.weight", "blocks.0.attn.v_proj.weight",
                    "blocks.1.ffn.gate_proj.weight", "blocks.1.ffn.up_proj.weight", "tok_emb.weight",
                    "lm_head.weight")
_HF_LLAMA = {"blocks.0.attn.q_proj.weight": "model.layers.0.self_attn.q_proj.weight",
             "blocks.1.attn.k_proj.weight": "model.layers.1.self_attn.k_proj.weight",
             "blocks.0.attn.v_proj.weight": "model.layers.0.self_attn.v_proj.weight",
             "blocks.1.ffn.gate_proj.weight": "model.layers.1.mlp.gate_proj.weight",
             "blocks.1.ffn.up_proj.weight": "model.layers.1.mlp.up_proj.weight",
             "tok_emb.weight": "model.embed_tokens.weight", "lm_head.weight": "lm_head.weight"}
BERT_PARAMETERS = ("blocks.0.attn.q_proj.weight", "blocks.1.attn.k_proj.bias", "blocks.0.attn_norm.weight",
                   "blocks.1.ffn.up_proj.weight", "type_emb.weight")
_HF_BERT = {"blocks.0.attn.q_proj.weight": "encoder.layer.0.attention.self.query.weight",
            "blocks.1.attn.k_proj.bias": "encoder.layer.1.attention.self.key.bias",
            "blocks.0.attn_norm.weight": "encoder.layer.0.attention.output.LayerNorm.weight",
            "blocks.1.ffn.up_proj.weight": "encoder.layer.1.intermediate.dense.weight",
            "type_emb.weight": "embeddings.token_type_embeddings.weight"}


def make_case(exercise: str, title: str, calls: list[Call], judge: Callable[[Judge], None], *, seed: int | None = None,
              part: str = "core", mistakes: bool = True) -> Case:
    return Case(exercise, title, calls, judge, seed=seed, mistakes=MISTAKES[exercise] if mistakes else (), part=part)


def step_tensors(j: Judge, call: int, count: int, what: str) -> list[torch.Tensor]:
    """The ``count`` tensors a call with steps returned, or a failure that says why not."""
    o = j.outcomes[call]
    if o.kind == "error":
        if "no Instance with key ''" in o.error_message:
            j.fail(f"{j.case.exercise} returned None: return the model you were given (filled in place)")
        if "object has no attribute 'probe_" in o.error_message:
            j.fail(f"{j.case.exercise} returned another object: fill the model you were given and return it")
        j.values(call)  # raises: the judge reports the exception
    if o.kind == "bad_type":
        j.fail(f"{what}: got {o.type_name} where tensors were expected")
    if len(o.tensors) != count:
        j.fail(f"{what}: got {len(o.tensors)} tensors back; expected {count}")
    return o.tensors


def well_formed_file_raised(j: Judge, prefix: str = "") -> None:
    """Fail with a hint when the loader raised on a well-formed file (a case that expects numbers)."""
    o = j.outcomes[0]
    if o.kind != "error" or "no Instance with key" in o.error_message:
        return
    msg = o.error_message
    if o.error_type not in ("ValueError", "KeyError", "RuntimeError", "IndexError") or "memory" in msg.lower() \
            or "allocate" in msg:
        return  # not a mapping problem (a memory or file limit, ...): reported as the error it is
    hint = None
    if prefix and not any(w in msg for w in ("shape", "size")):  # the same loader passed the file without it
        hint = "strip the 'bert.' prefix from every key first (checkpoints saved from BertForX have it)"
    elif any(n in msg for n in ("intermediate.dense", "output.dense", "up_proj", "down_proj")) and \
            "attention.output.dense" not in msg:
        hint = HINTS["bert_dense"]
    elif any(w in msg for w in ("shape", "size")):
        hint = ("the files store weights in nn.Linear's layout (out, in), as read_gguf / safetensors return them: "
                "no transpose; and check the name map (a tensor went to a parameter of another shape)")
    elif o.error_type == "KeyError":
        hint = ("the file has tensors the model does not (pooler.*, embeddings.position_ids, output.weight of a "
                "tied model ...): map what the model needs and ignore the rest")
    j.fail(f"raised {o.error_line()} on a well-formed file", hint=hint)


def errors_case(exercise: str, calls: list[Call], must_name: list[tuple[str, ...]], what: list[str],
                part: str = "core") -> Case:
    """Every call must raise ValueError whose message names the tensor (one of ``must_name[i]``)."""

    def judge(j: Judge) -> None:
        for i, o in enumerate(j.outcomes):
            if o.kind != "error":
                j.fail(f"{what[i]}: nothing was raised; expected ValueError naming the tensor",
                       hint="check every tensor before copying: raise ValueError(f'... {name} ...') when the "
                       "file lacks one the model needs, or when its shape differs from the parameter's")
            if o.error_type != "ValueError":
                hint = ("strip the 'bert.' prefix from every key first (checkpoints saved from BertForX have it)"
                        if o.error_type == "KeyError" and "bert." in repr(j.case.calls[i]) else
                        "check it yourself and raise ValueError: torch's own errors (a KeyError, a RuntimeError of "
                        "copy_ or load_state_dict) are not the contract's")
                j.fail(f"{what[i]}: raised {o.error_line()}; expected ValueError", hint=hint)
            if not any(n in o.error_message for n in must_name[i]):
                j.fail(f"{what[i]}: the ValueError says {o.error_message.strip()[:100]!r}; it must name the "
                       f"tensor ({' or '.join(must_name[i])})")

    return make_case(exercise, "ValueError naming the tensor: " + "; ".join(what), calls, judge, part=part)


# ---------------------------------------------------------------------------------------------
# load_decoder_weights
# ---------------------------------------------------------------------------------------------
def decoder_case(config: str, seed: int, ids: torch.Tensor, *, quantized: bool = True, title: str = "",
                 model_seed: int = 1000, dtype: torch.dtype = torch.float32) -> Case:
    """A tiny GGUF file loaded into a fresh LlamaDecoder (float32, or float64 to grade the cast to
    the parameter's dtype): its parameters, its tie, its logits."""
    c = probes.LLAMA[config]
    names = tuple(n for n in LLAMA_PARAMETERS if n != "lm_head.weight" or not c["tie_embeddings"])
    kwargs = {"config": config, "seed": model_seed}
    if dtype != torch.float32:
        kwargs["dtype"] = str(dtype).removeprefix("torch.")
    model = Instance(PROBES + "tiny_decoder", kwargs=kwargs, key="m")
    path = Instance(PROBES + "tiny_gguf", kwargs={"config": config, "seed": seed, "quantized": quantized})
    steps = (Step("__call__", (ids,)), Step("probe_tied", on="m"), Step("probe_parameters", names, on="m"),
             Step("__call__", (ids,), on="m"))
    call = Call("load_decoder_weights", (model, path), steps=steps)
    tied = c["tie_embeddings"]

    def judge(j: Judge) -> None:
        well_formed_file_raised(j)
        got = step_tensors(j, 0, 3 + len(names), "the loaded model's logits, tie and parameters")
        logits, is_tied, params, again = got[0], bool(got[1]), got[2:-1], got[-1]
        weights = probes.llama_weights(config, seed, quantized)
        for name, p in zip(names, params, strict=True):
            want = weights[_HF_LLAMA[name]] if name != "lm_head.weight" or not tied else weights["model.embed_tokens.weight"]
            permuted = ".q_proj." in name or ".k_proj." in name
            j.close(p.to(want.dtype), want, name=f"model.{name} after loading", atol=1e-6, rtol=0,
                    oracle="the file's tensor after the q/k permutation" if permuted else "the file's tensor")
            if p.dtype != dtype:
                j.fail(f"model.{name} is {fmt_dtype(p.dtype)} after loading a {fmt_dtype(dtype)} model: "
                       "cast each tensor to its parameter's dtype", hint=HINTS["no_cast"])
        if is_tied != tied:
            j.fail("lm_head.weight is tok_emb.weight is False after loading a tied model: they are two "
                   "Parameters now" if tied else "an untied model came back tied",
                   hint=lambda: j.mistake_hint())
        want = hf_llama_logits(config, seed, quantized, tuple(map(tuple, ids.tolist())))
        j.close(logits, want, name="logits", atol=DECODER_ATOL, rtol=0, oracle="transformers' LlamaForCausalLM")
        j.require(torch.equal(again, logits), "the model you were given and the model you returned give other "
                  "logits: fill the given model in place and return it")

    what = title or (f"a tiny {'tied' if tied else 'untied'} GGUF file (H = {c['num_heads']}, G = "
                     f"{c['num_kv_heads']}, L = {c['num_layers']}, {'F32 + Q8_0' if quantized else 'F32'})"
                     + ("" if dtype == torch.float32 else f" into a {fmt_dtype(dtype)} model") +
                     ": parameters, tie and logits vs transformers' LlamaForCausalLM")
    return make_case("load_decoder_weights", what, [call], judge, seed=seed)


def real_decoder_case() -> Case:
    model = Instance(PROBES + "smollm2_decoder", key="m")
    call = Call("load_decoder_weights", (model, Instance(PROBES + "smollm2_path")),
                steps=(Step("__call__", (SMOLLM2_PROMPT,)), Step("probe_tied", on="m")))

    def judge(j: Judge) -> None:
        well_formed_file_raised(j)
        logits, is_tied = step_tensors(j, 0, 2, "SmolLM2's logits and tie")
        j.require(bool(is_tied), "lm_head.weight is not tok_emb.weight after loading SmolLM2 (tied embeddings)",
                  hint=HINTS["tie_broken"])
        j.close(logits, smollm2_oracle_logits(), name="logits", atol=DECODER_ATOL, rtol=REAL_RTOL,
                oracle="transformers' LlamaForCausalLM (its own GGUF conversion)")

    return make_case("load_decoder_weights", "the packaged SmolLM2-135M file: logits on a 5-token prompt vs "
                     "transformers' LlamaForCausalLM (atol 1e-4 + 1e-5·|expected|)", [call], judge, part="real",
                     mistakes=False)


def decoder_errors_case(seed: int = 5) -> Case:
    def call(config: str, model_kwargs: dict, **file_kwargs) -> Call:
        return Call("load_decoder_weights", (Instance(PROBES + "tiny_decoder", kwargs={"config": config, **model_kwargs}),
                                             Instance(PROBES + "tiny_gguf", kwargs={"config": config, "seed": seed,
                                                                                     **file_kwargs})))
    calls = [call("tied", {}, drop="blk.1.ffn_up.weight"), call("untied", {}, reshape="output_norm.weight"),
             call("tied", {"tie_embeddings": False})]
    return errors_case("load_decoder_weights", calls,
                       [("blk.1.ffn_up", "blocks.1.ffn.up_proj"), ("output_norm", "final_norm"), ("output", "lm_head")],
                       ["a file without blk.1.ffn_up.weight", "output_norm.weight one row short",
                        "an untied model and a file without output.weight"], part="validation")


# ---------------------------------------------------------------------------------------------
# load_encoder_weights
# ---------------------------------------------------------------------------------------------
def _real_tokens_close(j: Judge, hidden: torch.Tensor, want: torch.Tensor, mask: torch.Tensor, atol: float,
                       oracle: str, rtol: float = 0.0) -> None:
    keep = mask.bool()[..., None].expand_as(want)
    if tuple(hidden.shape) != tuple(want.shape):
        j.close(hidden, want, name="hidden states", oracle=oracle)  # fails on the shape
    # compared in float64, judged as the float32 computation it is; the entry shown is the one
    # furthest outside its tolerance: MiniLM's hidden features differ in size by orders of magnitude
    # (a feature whose LayerNorm gain is near zero stays tiny), so the largest absolute difference
    # can sit where the answer is relatively closest
    j.close(torch.where(keep, hidden.double(), 0.0), torch.where(keep, want.double(), 0.0),
            name="hidden states (real tokens; padding set to 0 on both sides)", atol=atol, rtol=rtol, oracle=oracle,
            tol_dtype=want.dtype if want.is_floating_point() else None, worst="relative")


def encoder_case(config: str, seed: int, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor, *,
                 prefix: str = "", model_seed: int = 2000) -> Case:
    model = Instance(PROBES + "tiny_encoder", kwargs={"config": config, "seed": model_seed}, key="m")
    path = Instance(PROBES + "tiny_bert", kwargs={"config": config, "seed": seed, "prefix": prefix})
    steps = (Step("__call__", (ids,), {"attention_mask": mask, "token_type_ids": types}),
             Step("probe_parameters", BERT_PARAMETERS, on="m"),
             Step("__call__", (ids,), {"attention_mask": mask, "token_type_ids": types}, on="m"))
    call = Call("load_encoder_weights", (model, path), steps=steps)

    def judge(j: Judge) -> None:
        well_formed_file_raised(j, prefix)
        got = step_tensors(j, 0, 2 + len(BERT_PARAMETERS), "the loaded model's hidden states and parameters")
        hidden, params, again = got[0], got[1:-1], got[-1]
        weights = probes.bert_weights(config, seed)
        for name, p in zip(BERT_PARAMETERS, params, strict=True):
            j.close(p, weights[_HF_BERT[name]], name=f"model.{name} after loading", atol=1e-6, rtol=0,
                    oracle="the file's tensor")
        want = hf_bert_hidden(config, seed, *(tuple(map(tuple, t.tolist())) for t in (ids, mask, types)))
        _real_tokens_close(j, hidden, want, mask, 1e-4, "transformers' BertModel")
        j.require(torch.equal(again, hidden), "the model you were given and the model you returned give other "
                  "outputs: fill the given model in place and return it")

    c = probes.BERT[config]
    title = (f"a tiny BERT safetensors file{' with the ' + repr(prefix) + ' prefix' if prefix else ''} (D = "
             f"{c['d_model']}, F = {c['d_ff']}, L = {c['num_layers']}; pooler.* and position_ids in it): "
             "parameters and hidden states vs transformers' BertModel")
    return make_case("load_encoder_weights", title, [call], judge, seed=seed)


def minilm_call(ids: torch.Tensor, mask: torch.Tensor) -> Call:
    """``load_encoder_weights`` on the real all-MiniLM-L6-v2 file, then the loaded model run on ``ids``
    with ``attention_mask=mask`` (the visible case and the hidden one)."""
    return Call("load_encoder_weights", (Instance(PROBES + "minilm_encoder"), Instance(PROBES + "minilm_path")),
                steps=(Step("__call__", (ids,), {"attention_mask": mask}),))


def real_encoder_case() -> Case:
    ids, mask = MINILM_BATCH
    call = minilm_call(ids, mask)

    def judge(j: Judge) -> None:
        well_formed_file_raised(j)
        (hidden,) = step_tensors(j, 0, 1, "MiniLM's hidden states")
        _real_tokens_close(j, hidden, minilm_oracle_hidden(), mask, ENCODER_ATOL,
                           "transformers' BertModel.from_pretrained", rtol=REAL_RTOL)

    return make_case("load_encoder_weights", "the packaged all-MiniLM-L6-v2: hidden states of two padded sentences vs "
                     "transformers' BertModel (atol 1e-5 + 1e-5·|expected| on the real tokens)", [call], judge,
                     part="real", mistakes=False)


def encoder_errors_case(seed: int = 6) -> Case:
    def call(**file_kwargs) -> Call:
        return Call("load_encoder_weights", (Instance(PROBES + "tiny_encoder"),
                                             Instance(PROBES + "tiny_bert", kwargs={"seed": seed, **file_kwargs})))
    calls = [call(drop="encoder.layer.1.output.dense.weight"),
             call(prefix="bert.", reshape="embeddings.token_type_embeddings.weight")]
    return errors_case("load_encoder_weights", calls,
                       [("encoder.layer.1.output.dense", "blocks.1.ffn.down_proj"),
                        ("token_type_embeddings", "type_emb")],
                       ["a file without encoder.layer.1.output.dense.weight",
                        "a 'bert.'-prefixed file whose token_type_embeddings has one row too few"],
                       part="validation")


# ---------------------------------------------------------------------------------------------
# mean_pool
# ---------------------------------------------------------------------------------------------
def pool_oracle(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row by row: the mean of hidden[b] over the positions where mask[b] is nonzero (float64)."""
    rows = [hidden[b][mask[b] != 0].double().mean(dim=0) for b in range(hidden.size(0))]
    return torch.stack(rows)


def pool_case(seed: int, b: int, t: int, d: int, lengths: list[int], dtype: torch.dtype, mask_dtype: torch.dtype,
              *, title: str = "", part: str = "core") -> Case:
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(b, t, d, generator=g, dtype=torch.float64) * 2 + 1).to(dtype)
    mask = (torch.arange(t)[None] < torch.tensor(lengths)[:, None]).to(mask_dtype)
    want = pool_oracle(hidden, mask)

    def judge(j: Judge) -> None:
        got = j.tensor(shape=(b, d), dtype=dtype)
        tol = {} if dtype in (torch.float16, torch.bfloat16) else {"atol": 1e-5 if dtype == torch.float32 else 1e-10}
        j.close(got, want, oracle="the mean over each row's real tokens", tol_dtype=dtype, **tol)

    what = title or (f"(B, T, D) = ({b}, {t}, {d}) {fmt_dtype(dtype)}, a {fmt_dtype(mask_dtype)} mask, real tokens "
                     f"per row {lengths}")
    return make_case("mean_pool", what, [Call("mean_pool", (hidden, mask))], judge, seed=seed, part=part)


def pool_errors_case() -> Case:
    h = torch.zeros(2, 4, 3)
    calls = [Call("mean_pool", (h, torch.ones(2, 5))), Call("mean_pool", (h, torch.ones(3, 4, dtype=torch.bool)))]

    def judge(j: Judge) -> None:
        for i, o in enumerate(j.outcomes):
            shape = tuple(j.case.calls[i].args[1].shape)
            j.require(o.kind == "error" and o.error_type == "ValueError",
                      f"attention_mask of shape {shape} for hidden (2, 4, 3): "
                      f"{'raised ' + o.error_line() if o.kind == 'error' else 'nothing was raised'}; expected "
                      "ValueError", hint="compare hidden.shape[:2] with attention_mask.shape and raise ValueError "
                      "when they differ (broadcasting would hide the mistake)")

    return make_case("mean_pool", "ValueError when attention_mask's shape is not hidden's (B, T)", calls, judge,
                     part="validation")


@NOTEBOOK.exercise("load_decoder_weights", parts=("core", "real", "validation"))
def _load_decoder_weights_cases() -> list[Case]:
    """Check ``load_decoder_weights(model, gguf_path) -> model``.

    part: "core" (tiny GGUF files written here: parameters, tie, logits vs transformers'
    LlamaForCausalLM), "real" (the packaged SmolLM2 file's logits vs transformers' own GGUF
    conversion, atol 1e-4) or "validation" (the ValueErrors naming the tensor); None: all."""
    return [decoder_case("tied", 1, torch.tensor([[3, 14, 15, 9, 26, 5], [2, 7, 1, 8, 28, 18]])),
            decoder_case("untied", 2, torch.tensor([[1, 4, 1, 42, 13, 5, 6]])),
            decoder_case("tied", 7, torch.tensor([[5, 3, 8, 1]]), quantized=False, dtype=torch.float64),
            decoder_errors_case(), real_decoder_case()]


@NOTEBOOK.exercise("load_encoder_weights", parts=("core", "real", "validation"))
def _load_encoder_weights_cases() -> list[Case]:
    """Check ``load_encoder_weights(model, safetensors_path) -> model``.

    part: "core" (tiny BERT files, with and without the "bert." prefix), "real" (the packaged
    MiniLM vs transformers' BertModel, atol 1e-5 on real tokens) or "validation" (the ValueErrors
    naming the tensor); None: all."""
    ids = torch.tensor([[2, 9, 33, 4, 17, 3, 1], [2, 44, 12, 3, 0, 0, 0]])
    mask = torch.tensor([[1] * 7, [1, 1, 1, 1, 0, 0, 0]])
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]])
    return [encoder_case("small", 3, ids, mask, types),
            encoder_case("square", 4, ids[:, :6], mask[:, :6], torch.zeros_like(ids[:, :6]), prefix="bert."),
            encoder_errors_case(), real_encoder_case()]


@NOTEBOOK.exercise("mean_pool", parts=("core", "validation", "half"))
def _mean_pool_cases() -> list[Case]:
    """Check ``mean_pool(hidden, attention_mask) -> (B, D)``: the mean over real tokens, hidden's dtype.

    part: "core" (float64/float32), "validation" (the ValueError for the mask's shape) or "half"
    (a float16 ``hidden`` with a float32 mask returns float16); None checks all."""
    return [pool_case(31, 3, 6, 5, [6, 2, 4], torch.float64, torch.bool),
            pool_case(32, 2, 5, 8, [3, 5], torch.float32, torch.int64),
            pool_case(33, 2, 7, 4, [1, 7], torch.float16, torch.float32, part="half"),
            pool_errors_case()]
