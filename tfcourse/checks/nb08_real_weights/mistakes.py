"""Known wrong answers to notebook 08's exercises, each with the hint shown when an answer
behaves like it (``MISTAKES``). Each has the exercise's signature. Only ``tfcourse.pretrained``
and notebook 03's reference (``permute_for_rotate_half``, an earlier notebook's, which the grader's
child may import) are used, lazily."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..hints import Mistake

__all__ = ["HINTS", "MISTAKES"]

HINTS = {
    "no_permutation": "q and k rows are stored interleaved in GGUF (llama.cpp's layout): convert attn_q with "
                      "permute_for_rotate_half(w, H) and attn_k with permute_for_rotate_half(w, G) before copying",
    "k_with_h": "attn_k has G = num_kv_heads heads, not H: permute it with permute_for_rotate_half(w, G)",
    "v_permuted": "only q and k are permuted (RoPE rotates q and k); attn_v and attn_output are copied as they are",
    "gate_up": "ffn_gate.weight is the SwiGLU gate (gate_proj, inside SiLU), ffn_up.weight is up_proj: check "
               "which goes where",
    "tie_broken": "a tied model has ONE Parameter for tok_emb and lm_head: copy into tok_emb.weight in place "
                  "(.copy_ under torch.no_grad()); assigning a new nn.Parameter to tok_emb.weight unties them",
    "no_cast": "read_gguf gives float32 tensors: cast each to its parameter's dtype and device (param.copy_(w) "
               "does it; param.data = w replaces the float64 parameter by a float32 tensor)",
    "output_ignored": "an untied model's lm_head.weight comes from the file's output.weight (when the file has it)",
    "hard_coded_heads": "read H and G from the model (model.blocks[0].attn.num_heads / num_kv_heads), not SmolLM2's "
                        "9 and 3: the checks also load files with other head counts",
    "bert_qk": "attention.self.query is q_proj and attention.self.key is k_proj (weights and biases)",
    "bert_norms": "attention.output.LayerNorm is attn_norm (after attention); output.LayerNorm (after the FFN) "
                  "is ffn_norm",
    "bert_dense": "intermediate.dense is ffn.up_proj (D -> F); output.dense is ffn.down_proj (F -> D); "
                  "attention.output.dense is attn.o_proj",
    "bert_types": "embeddings.token_type_embeddings.weight goes into type_emb.weight (it is added even when "
                  "every token type is 0)",
    "mean_all": "average over the real tokens only: sum hidden * mask over T, divided by the number of real "
                "tokens in each row (mask.sum(1)), not hidden.mean(1)",
    "divide_t": "divide by the number of REAL tokens of each row (mask.sum(1)), not by T",
    "inverted": "attention_mask is 1 (True) for a real token and 0 for padding (Hugging Face's convention)",
    "normalised": "mean_pool returns the plain mean: L2 normalisation is a separate step (F.normalize) "
                  "the notebook does afterwards",
    "pool_dtype": "return hidden's dtype: a float32 mask promotes float16/bfloat16 hidden states to float32; cast "
                  "the mask to hidden.dtype (or the result back)",
    "last_layer": "return the FIRST block whose outputs differ (the smallest i), not the last",
    "one_based": "block indices start at 0 and count blocks only: the output of blocks[0] is index 0 (not 1, and "
                 "the embedding is not a layer of its own)",
    "logits_too": "only the blocks' outputs count: a difference that appears only after the last block (final "
                  "norm, lm_head) gives None",
    "nan_missed": "(a - b).abs().max() > atol is False when it is NaN (and equal_nan=True hides NaN in both): use "
                  "not torch.allclose(a, b, rtol=0, atol=atol), which counts NaN as a difference",
    "relative": "torch.allclose has rtol=1e-05 by default: pass rtol=0 so that only atol decides",
    "batch0": "compare the whole batch, not only input_ids[0]'s outputs: here only the second sequence differs",
    "hooks_left": "remove every hook you registered (handle.remove(), e.g. in a finally:), so the models are "
                  "left as you found them",
    "train_flag": "leave each model's training flag as you found it (remember model.training, restore it after "
                  "model.eval()), or just run under torch.no_grad() without changing the mode",
    "no_count_check": "raise ValueError when the two models have different numbers of blocks (zip would stop at "
                      "the shorter one silently)",
    "no_identity": "add the residual: Â = 0.5·A + 0.5·I (A the head-mean), then renormalise the rows",
    "order": "later layers multiply on the left: rollout = Â_L · … · Â_1 (rollout = Â_l @ rollout, layer by layer)",
    "max_heads": "average the heads (mean over H), not their maximum",
}


def _permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    from tfcourse.reference.nb03_positional_encodings import permute_for_rotate_half

    return permute_for_rotate_half(w, heads)


# ---------------------------------------------------------------------------------------------
# load_decoder_weights
# ---------------------------------------------------------------------------------------------
_BLOCK = {"attn_norm.weight": "attn_norm.weight", "attn_q.weight": "attn.q_proj.weight",
          "attn_k.weight": "attn.k_proj.weight", "attn_v.weight": "attn.v_proj.weight",
          "attn_output.weight": "attn.o_proj.weight", "ffn_norm.weight": "ffn_norm.weight",
          "ffn_gate.weight": "ffn.gate_proj.weight", "ffn_up.weight": "ffn.up_proj.weight",
          "ffn_down.weight": "ffn.down_proj.weight"}


def _decoder_loader(*, permute_q: bool = True, permute_k: str = "G", permute_v: bool = False,
                    swap_gate_up: bool = False, tie: str = "copy", use_output: bool = True,
                    heads: tuple[int, int] | None = None) -> Callable:
    def load_decoder_weights(model, gguf_path):
        from tfcourse.pretrained import read_gguf

        tensors, _ = read_gguf(gguf_path)
        attn = model.blocks[0].attn
        h, g = heads or (attn.num_heads, attn.num_kv_heads)
        plan = {"token_embd.weight": "tok_emb.weight", "output_norm.weight": "final_norm.weight"}
        for i in range(len(model.blocks)):
            for src, dst in _BLOCK.items():
                if swap_gate_up and src in ("ffn_gate.weight", "ffn_up.weight"):
                    dst = "ffn.up_proj.weight" if src == "ffn_gate.weight" else "ffn.gate_proj.weight"
                plan[f"blk.{i}.{src}"] = f"blocks.{i}.{dst}"
        tied = model.lm_head.weight is model.tok_emb.weight
        if not tied and use_output:
            plan["output.weight"] = "lm_head.weight"
        params = dict(model.named_parameters())
        with torch.no_grad():
            for src, dst in plan.items():
                if src not in tensors:
                    raise ValueError(f"the file has no tensor {src} (needed for {dst})")
                w = tensors[src]
                if src.endswith("attn_q.weight") and permute_q:
                    w = _permute(w, h)
                elif src.endswith("attn_k.weight") and permute_k:
                    w = _permute(w, h if permute_k == "H" else g)
                elif src.endswith("attn_v.weight") and permute_v:
                    w = _permute(w, g)
                p = params[dst]
                if w.shape != p.shape:
                    raise ValueError(f"{src} has shape {tuple(w.shape)}, but {dst} is {tuple(p.shape)}")
                if tie == "data":
                    p.data = w  # no cast: the parameter takes the file's float32
                    continue
                if dst == "tok_emb.weight" and tie == "new_parameter":
                    model.tok_emb.weight = nn.Parameter(w.to(p.dtype).clone())
                    continue
                p.copy_(w)
        return model

    return load_decoder_weights


def _decoder_no_shape_check(model, gguf_path):
    from tfcourse.pretrained import read_gguf

    tensors, _ = read_gguf(gguf_path)
    attn = model.blocks[0].attn
    sd = {"tok_emb.weight": tensors["token_embd.weight"], "final_norm.weight": tensors["output_norm.weight"]}
    for i in range(len(model.blocks)):
        for src, dst in _BLOCK.items():
            w = tensors[f"blk.{i}.{src}"]
            if src == "attn_q.weight":
                w = _permute(w, attn.num_heads)
            elif src == "attn_k.weight":
                w = _permute(w, attn.num_kv_heads)
            sd[f"blocks.{i}.{dst}"] = w
    if "output.weight" in tensors and model.lm_head.weight is not model.tok_emb.weight:
        sd["lm_head.weight"] = tensors["output.weight"]
    model.load_state_dict(sd, strict=False)  # a shape mismatch raises RuntimeError, a missing name nothing
    return model


# ---------------------------------------------------------------------------------------------
# load_encoder_weights
# ---------------------------------------------------------------------------------------------
_BERT_BLOCK = {
    "attention.self.query": "attn.q_proj", "attention.self.key": "attn.k_proj",
    "attention.self.value": "attn.v_proj", "attention.output.dense": "attn.o_proj",
    "attention.output.LayerNorm": "attn_norm", "intermediate.dense": "ffn.up_proj",
    "output.dense": "ffn.down_proj", "output.LayerNorm": "ffn_norm",
}
_SWAPS = {"qk": ("attention.self.query", "attention.self.key"),
          "norms": ("attention.output.LayerNorm", "output.LayerNorm"),
          "dense": ("intermediate.dense", "output.dense")}


def _encoder_loader(*, swap: str = "", types: bool = True, strip_prefix: bool = True) -> Callable:
    def load_encoder_weights(model, safetensors_path):
        from safetensors.torch import load_file

        tensors = load_file(str(safetensors_path))
        if strip_prefix:
            tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}
        names = dict(_BERT_BLOCK)
        if swap:
            a, b = _SWAPS[swap]
            names[a], names[b] = names[b], names[a]
        plan = {"embeddings.word_embeddings.weight": "tok_emb.weight",
                "embeddings.position_embeddings.weight": "pos_emb.weight",
                "embeddings.LayerNorm.weight": "emb_norm.weight", "embeddings.LayerNorm.bias": "emb_norm.bias"}
        if types:
            plan["embeddings.token_type_embeddings.weight"] = "type_emb.weight"
        for i in range(len(model.blocks)):
            for src, dst in names.items():
                for kind in ("weight", "bias"):
                    plan[f"encoder.layer.{i}.{src}.{kind}"] = f"blocks.{i}.{dst}.{kind}"
        params = dict(model.named_parameters())
        with torch.no_grad():
            for src, dst in plan.items():
                if src not in tensors:
                    raise ValueError(f"the file has no tensor {src} (needed for {dst})")
                if tensors[src].shape != params[dst].shape:
                    raise ValueError(f"{src} has shape {tuple(tensors[src].shape)}, but {dst} is "
                                     f"{tuple(params[dst].shape)}")
                params[dst].copy_(tensors[src])
        return model

    return load_encoder_weights


# ---------------------------------------------------------------------------------------------
# mean_pool
# ---------------------------------------------------------------------------------------------
def _pool_all(hidden, attention_mask):
    if hidden.shape[:2] != attention_mask.shape:
        raise ValueError("shapes")
    return hidden.mean(dim=1)


def _pool_divide_t(hidden, attention_mask):
    if hidden.shape[:2] != attention_mask.shape:
        raise ValueError("shapes")
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(1) / hidden.size(1)


def _pool_inverted(hidden, attention_mask):
    if hidden.shape[:2] != attention_mask.shape:
        raise ValueError("shapes")
    m = (attention_mask == 0).to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def _pool_normalised(hidden, attention_mask):
    if hidden.shape[:2] != attention_mask.shape:
        raise ValueError("shapes")
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return F.normalize((hidden * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)


def _pool_float_mask(hidden, attention_mask):
    if hidden.shape[:2] != attention_mask.shape:
        raise ValueError("shapes")
    m = attention_mask.unsqueeze(-1).float()
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


# ---------------------------------------------------------------------------------------------
# first_divergent_layer
# ---------------------------------------------------------------------------------------------
def _block_outputs(model, input_ids, keep_hooks: bool = False, set_eval: bool = False) -> list[torch.Tensor]:
    outs: list[torch.Tensor] = []
    handles = [b.register_forward_hook(lambda m, i, o: outs.append(o.detach().clone())) for b in model.blocks]
    if set_eval:
        model.eval()
    with torch.no_grad():
        model(input_ids)
    if not keep_hooks:
        for h in handles:
            h.remove()
    return outs


def _divergence(*, differ: str = "allclose", pick: str = "first", offset: int = 0, logits: bool = False,
                batch0: bool = False, keep_hooks: bool = False, set_eval: bool = False,
                check_count: bool = True) -> Callable:
    def first_divergent_layer(model_a, model_b, input_ids, atol=1e-4):
        if check_count and len(model_a.blocks) != len(model_b.blocks):
            raise ValueError("different numbers of blocks")
        ids = input_ids[:1] if batch0 else input_ids
        outs_a = _block_outputs(model_a, ids, keep_hooks, set_eval)
        outs_b = _block_outputs(model_b, ids, keep_hooks, set_eval)
        found = []
        for i, (a, b) in enumerate(zip(outs_a, outs_b, strict=False)):
            if differ == "allclose":
                bad = not torch.allclose(a, b, rtol=0, atol=atol)
            elif differ == "max":
                bad = bool((a - b).abs().max() > atol)
            else:  # default rtol
                bad = not torch.allclose(a, b, atol=atol)
            if bad:
                found.append(i + offset)
        if logits and not found:
            with torch.no_grad():
                if not torch.allclose(model_a(ids), model_b(ids), rtol=0, atol=atol):
                    found.append(len(outs_a) - 1)
        if not found:
            return None
        return found[0] if pick == "first" else found[-1]

    return first_divergent_layer


# ---------------------------------------------------------------------------------------------
# attention_rollout
# ---------------------------------------------------------------------------------------------
def _rollout(*, identity: bool = True, renorm: bool = True, left: bool = True, heads: str = "mean") -> Callable:
    def attention_rollout(attentions):
        if len(attentions) == 0:
            raise ValueError("empty")
        result = None
        for a in attentions:
            m = a.mean(dim=1) if heads == "mean" else a.amax(dim=1)
            if identity:
                m = 0.5 * m + 0.5 * torch.eye(m.size(-1), dtype=m.dtype, device=m.device)
            if renorm:
                m = m / m.sum(dim=-1, keepdim=True)
            result = m if result is None else (m @ result if left else result @ m)
        return result

    return attention_rollout


@functools.cache
def _mistakes() -> dict[str, tuple[Mistake, ...]]:
    return {
        "load_decoder_weights": (
            Mistake("q/k not permuted", HINTS["no_permutation"], _decoder_loader(permute_q=False, permute_k="")),
            Mistake("k permuted with H heads", HINTS["k_with_h"], _decoder_loader(permute_k="H")),
            Mistake("v permuted too", HINTS["v_permuted"], _decoder_loader(permute_v=True)),
            Mistake("gate/up swapped", HINTS["gate_up"], _decoder_loader(swap_gate_up=True)),
            Mistake("tie broken", HINTS["tie_broken"], _decoder_loader(tie="new_parameter")),
            Mistake("p.data = w (no cast to the parameter's dtype)", HINTS["no_cast"], _decoder_loader(tie="data")),
            Mistake("output.weight ignored", HINTS["output_ignored"], _decoder_loader(use_output=False)),
            Mistake("hard-coded 9/3 heads", HINTS["hard_coded_heads"], _decoder_loader(heads=(9, 3))),
        ),
        "load_encoder_weights": (
            Mistake("query/key swapped", HINTS["bert_qk"], _encoder_loader(swap="qk")),
            Mistake("LayerNorms swapped", HINTS["bert_norms"], _encoder_loader(swap="norms")),
            Mistake("dense swapped", HINTS["bert_dense"], _encoder_loader(swap="dense")),
            Mistake("token types ignored", HINTS["bert_types"], _encoder_loader(types=False)),
        ),
        "mean_pool": (
            Mistake("mean over padding", HINTS["mean_all"], _pool_all),
            Mistake("divide by T", HINTS["divide_t"], _pool_divide_t),
            Mistake("inverted mask", HINTS["inverted"], _pool_inverted),
            Mistake("L2-normalised", HINTS["normalised"], _pool_normalised),
            Mistake("float32 mask", HINTS["pool_dtype"], _pool_float_mask),
        ),
        "first_divergent_layer": (
            Mistake("last layer", HINTS["last_layer"], _divergence(pick="last")),
            Mistake("one-based", HINTS["one_based"], _divergence(offset=1)),
            Mistake("logits too", HINTS["logits_too"], _divergence(logits=True)),
            Mistake("NaN missed", HINTS["nan_missed"], _divergence(differ="max")),
            Mistake("relative tolerance", HINTS["relative"], _divergence(differ="rtol")),
            Mistake("batch element 0", HINTS["batch0"], _divergence(batch0=True)),
            Mistake("hooks left", HINTS["hooks_left"], _divergence(keep_hooks=True)),
            Mistake("eval not restored", HINTS["train_flag"], _divergence(set_eval=True)),
            Mistake("no count check", HINTS["no_count_check"], _divergence(check_count=False)),
        ),
        "attention_rollout": (
            Mistake("no identity", HINTS["no_identity"], _rollout(identity=False)),
            Mistake("wrong order", HINTS["order"], _rollout(left=False)),
            Mistake("max over heads", HINTS["max_heads"], _rollout(heads="max")),
        ),
    }


MISTAKES = _mistakes()
