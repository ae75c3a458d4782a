"""Files and models that notebook 08's checks hand to the code under test.

The grader's sandboxed child builds these by name (``Instance("tfcourse.checks.nb08_real_weights.
probes:tiny_gguf", kwargs={...})``), so this module imports nothing from ``tfcourse.reference``;
``tfcourse.pretrained`` (public, given to learners), ``gguf`` and ``safetensors`` are imported
inside the functions.

Every file is deterministic from its keyword arguments: the judging process writes the same file
again (into its own temporary folder) when it needs the weights, and both processes cache the path
per arguments. The weights are drawn in the Hugging Face layout (``llama_weights`` /
``bert_weights``, float32): q/k rows in the rotate-half order that ``transformers`` and the
course use. ``tiny_gguf`` then stores them the way llama.cpp's ``convert_hf_to_gguf.py`` does:
llama.cpp's names, q rows permuted with H heads and k rows with G heads into the interleaved
order (rows [h, a, j] -> [h, j, a], a the half, j the pair), tensors F32 or Q8_0
(``gguf.quants.quantize``; the weights handed back are then the dequantized values, exactly what
the file holds). ``tiny_bert`` writes a safetensors file with BERT's names (optionally all under
"bert."), including ``pooler.*`` and ``embeddings.position_ids``, which a loader must ignore.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

__all__ = ["BERT", "LLAMA", "bert_weights", "divergence_model", "llama_weights", "minilm_encoder",
           "minilm_path", "smollm2_decoder", "smollm2_path", "tiny_bert", "tiny_decoder", "tiny_encoder",
           "tiny_gguf"]

# The configurations of the synthetic files: constructor kwargs of LlamaDecoder / BertEncoder.
# "tied": H 6, G 2, head_dim 48, so a loader that hard-codes SmolLM2's 9 / 3 heads still runs
# (288 = 9·32 query rows, 96 = 3·32 key rows) and gives wrong numbers rather than an error.
LLAMA = {
    "tied": {"vocab_size": 64, "d_model": 288, "num_layers": 2, "num_heads": 6, "num_kv_heads": 2,
             "d_ff": 128, "rope_theta": 10000.0, "eps": 1e-5, "tie_embeddings": True},
    "untied": {"vocab_size": 48, "d_model": 64, "num_layers": 3, "num_heads": 4, "num_kv_heads": 2,
               "d_ff": 96, "rope_theta": 500.0, "eps": 1e-6, "tie_embeddings": False},
}
BERT = {
    "small": {"vocab_size": 50, "d_model": 32, "num_layers": 2, "num_heads": 4, "d_ff": 64,
              "max_positions": 16, "type_vocab_size": 2, "eps": 1e-12},
    # d_ff == d_model: a loader that swaps intermediate.dense and output.dense still runs
    "square": {"vocab_size": 50, "d_model": 32, "num_layers": 2, "num_heads": 2, "d_ff": 32,
               "max_positions": 16, "type_vocab_size": 2, "eps": 1e-12},
}

_FOLDERS: list[str] = []


@atexit.register
def _remove_folders() -> None:
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


def _folder() -> Path:
    folder = tempfile.mkdtemp(prefix="tfcourse-nb08-")
    _FOLDERS.append(folder)
    return Path(folder)


def _draw(g: torch.Generator, *shape: int, scale: float) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float32) * scale


def _norm_weight(g: torch.Generator, n: int) -> torch.Tensor:
    return 1.0 + _draw(g, n, scale=0.2)


# ---------------------------------------------------------------------------------------------
# Llama / GGUF
# ---------------------------------------------------------------------------------------------
@functools.cache
def llama_weights(config: str, seed: int, quantized: bool = True) -> dict[str, torch.Tensor]:
    """The Hugging Face LlamaForCausalLM state (float32) a ``tiny_gguf`` file of these arguments
    holds: names as in transformers, q/k rows rotate-half. With ``quantized``, ffn_up and
    ffn_down are stored as Q8_0 and these are their dequantized values. Do not modify."""
    import gguf

    c = LLAMA[config]
    v, d, f, L = c["vocab_size"], c["d_model"], c["d_ff"], c["num_layers"]
    h, kv = c["num_heads"], c["num_kv_heads"]
    dh = d // h
    g = torch.Generator().manual_seed(int(seed))
    sd = {"model.embed_tokens.weight": _draw(g, v, d, scale=1.0)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = _norm_weight(g, d)
        sd[p + "self_attn.q_proj.weight"] = _draw(g, h * dh, d, scale=1.5 / d ** 0.5)
        sd[p + "self_attn.k_proj.weight"] = _draw(g, kv * dh, d, scale=1.5 / d ** 0.5)
        sd[p + "self_attn.v_proj.weight"] = _draw(g, kv * dh, d, scale=1.0 / d ** 0.5)
        sd[p + "self_attn.o_proj.weight"] = _draw(g, d, h * dh, scale=1.0 / d ** 0.5)
        sd[p + "post_attention_layernorm.weight"] = _norm_weight(g, d)
        sd[p + "mlp.gate_proj.weight"] = _draw(g, f, d, scale=1.0 / d ** 0.5)
        sd[p + "mlp.up_proj.weight"] = _draw(g, f, d, scale=1.0 / d ** 0.5)
        sd[p + "mlp.down_proj.weight"] = _draw(g, d, f, scale=1.0 / f ** 0.5)
    sd["model.norm.weight"] = _norm_weight(g, d)
    if not c["tie_embeddings"]:
        sd["lm_head.weight"] = _draw(g, v, d, scale=1.0 / d ** 0.5)
    if quantized:
        q8 = gguf.GGMLQuantizationType.Q8_0
        for name in list(sd):
            if name.endswith(("mlp.up_proj.weight", "mlp.down_proj.weight")) and sd[name].shape[1] % 32 == 0:
                data = gguf.quants.quantize(sd[name].numpy(), q8)
                sd[name] = torch.from_numpy(gguf.quants.dequantize(data, q8).copy()).reshape(sd[name].shape)
    for t in sd.values():
        t.requires_grad_(False)
    return sd


def interleave_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's convert_hf_to_gguf permute: rotate-half rows [h, a, j] -> interleaved [h, j, a]."""
    rest = w.shape[1:]
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *rest).transpose(1, 2).reshape(w.shape).contiguous()


_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = hf.split(".", 3)
    return f"blk.{i}.{_GGUF_NAMES[rest]}"


@functools.cache
def finish_gguf(writer) -> None:
    """Write a ``gguf.GGUFWriter``'s header, metadata and tensors to its file, in the order gguf
    requires, and close it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tiny_gguf(config: str = "tied", seed: int = 0, quantized: bool = True, drop: str = "",
              reshape: str = "") -> str:
    """Write a tiny llama GGUF file (see the module docstring) and return its path (a str).

    drop: a GGUF tensor name left out of the file. reshape: a GGUF tensor name stored with one
    row too few (its shape then differs from the model's parameter)."""
    import gguf

    c = LLAMA[config]
    sd = llama_weights(config, seed, quantized)
    path = _folder() / f"tiny-{config}-{seed}.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"tfcourse tiny {config}")
    writer.add_context_length(64)
    writer.add_embedding_length(c["d_model"])
    writer.add_block_count(c["num_layers"])
    writer.add_feed_forward_length(c["d_ff"])
    writer.add_head_count(c["num_heads"])
    writer.add_head_count_kv(c["num_kv_heads"])
    writer.add_rope_dimension_count(c["d_model"] // c["num_heads"])
    writer.add_rope_freq_base(c["rope_theta"])
    writer.add_layer_norm_rms_eps(c["eps"])
    writer.add_vocab_size(c["vocab_size"])
    q8 = gguf.GGMLQuantizationType.Q8_0
    for hf, w in sd.items():
        name = _gguf_name(hf)
        if name == drop:
            continue
        if name.endswith("attn_q.weight"):
            w = interleave_rows(w, c["num_heads"])
        elif name.endswith("attn_k.weight"):
            w = interleave_rows(w, c["num_kv_heads"])
        if name == reshape:
            w = w[:-1]
        array = w.numpy().copy()
        if quantized and hf.endswith(("mlp.up_proj.weight", "mlp.down_proj.weight")) and array.shape[-1] % 32 == 0:
            writer.add_tensor(name, gguf.quants.quantize(array, q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, array)
    finish_gguf(writer)
    return str(path)


def _probed(base: type) -> type:
    """``base`` with two read-only probe methods the checks call after loading."""

    class Probed(base):
        def probe_tied(self) -> bool:
            """Whether lm_head.weight IS tok_emb.weight (one Parameter)."""
            return self.lm_head.weight is self.tok_emb.weight

        def probe_parameters(self, *names: str) -> tuple[torch.Tensor, ...]:
            """Copies of the named parameters (float32, as loaded)."""
            found = dict(self.named_parameters(remove_duplicate=False))
            return tuple(found[n].detach().clone() for n in names)

    Probed.__name__ = Probed.__qualname__ = base.__name__
    return Probed


@functools.cache
def _llama_class() -> type:
    from tfcourse.pretrained import LlamaDecoder

    return _probed(LlamaDecoder)


@functools.cache
def _bert_class() -> type:
    from tfcourse.pretrained import BertEncoder

    class Probed(BertEncoder):
        def probe_parameters(self, *names: str) -> tuple[torch.Tensor, ...]:
            found = dict(self.named_parameters(remove_duplicate=False))
            return tuple(found[n].detach().clone() for n in names)

    Probed.__name__ = Probed.__qualname__ = "BertEncoder"
    return Probed


def tiny_decoder(config: str = "tied", seed: int = 1000, tie_embeddings: bool | None = None,
                 dtype: str = "float32") -> nn.Module:
    """A LlamaDecoder of the configuration ``config``, its parameters random (``seed``), so that
    nothing the loader leaves out can happen to equal the file. tie_embeddings overrides the
    configuration's (an untied model given a tied file); dtype (a torch dtype's name) is the
    parameters' dtype (float64 grades the loader's cast)."""
    kwargs = dict(LLAMA[config])
    if tie_embeddings is not None:
        kwargs["tie_embeddings"] = tie_embeddings
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = _llama_class()(**kwargs)
    return model.to(getattr(torch, dtype)).eval()


def smollm2_path() -> str:
    """The packaged SmolLM2-135M-Instruct GGUF file (a str)."""
    from tfcourse.pretrained import smollm2_gguf_path

    return str(smollm2_gguf_path())


@contextlib.contextmanager
def _no_random_init() -> Iterator[None]:
    """Skip nn.Linear's and nn.Embedding's random initialisation (135M numbers take seconds on a
    busy machine, out of the exercise's 30 s); the parameters are then set to zeros."""
    init = torch.nn.init
    saved = {n: getattr(init, n) for n in ("kaiming_uniform_", "uniform_", "normal_")}
    try:
        for n in saved:
            setattr(init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(init, n, fn)


def smollm2_decoder() -> nn.Module:
    """A LlamaDecoder with SmolLM2's configuration, read from its file, its parameters zeros
    (the norms' ones) until loaded."""
    from tfcourse.pretrained import smollm2_config

    with _no_random_init():
        model = _llama_class()(**smollm2_config())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.zero_()
    return model.eval()


# ---------------------------------------------------------------------------------------------
# BERT / safetensors
# ---------------------------------------------------------------------------------------------
@functools.cache
def bert_weights(config: str, seed: int) -> dict[str, torch.Tensor]:
    """The Hugging Face BertModel state (float32, no prefix, without pooler and position_ids) a
    ``tiny_bert`` file of these arguments holds. Do not modify."""
    c = BERT[config]
    v, d, f, L, p, tv = (c[k] for k in ("vocab_size", "d_model", "d_ff", "num_layers", "max_positions",
                                         "type_vocab_size"))
    g = torch.Generator().manual_seed(int(seed))
    sd = {"embeddings.word_embeddings.weight": _draw(g, v, d, scale=1.0),
          "embeddings.position_embeddings.weight": _draw(g, p, d, scale=0.5),
          "embeddings.token_type_embeddings.weight": _draw(g, tv, d, scale=1.0),
          "embeddings.LayerNorm.weight": _norm_weight(g, d), "embeddings.LayerNorm.bias": _draw(g, d, scale=0.1)}
    for i in range(L):
        q = f"encoder.layer.{i}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            sd[q + part + ".weight"] = _draw(g, d, d, scale=1.5 / d ** 0.5)
            sd[q + part + ".bias"] = _draw(g, d, scale=0.1)
        sd[q + "attention.output.LayerNorm.weight"] = _norm_weight(g, d)
        sd[q + "attention.output.LayerNorm.bias"] = _draw(g, d, scale=0.1)
        sd[q + "intermediate.dense.weight"] = _draw(g, f, d, scale=1.0 / d ** 0.5)
        sd[q + "intermediate.dense.bias"] = _draw(g, f, scale=0.1)
        sd[q + "output.dense.weight"] = _draw(g, d, f, scale=1.0 / f ** 0.5)
        sd[q + "output.dense.bias"] = _draw(g, d, scale=0.1)
        sd[q + "output.LayerNorm.weight"] = _norm_weight(g, d)
        sd[q + "output.LayerNorm.bias"] = _draw(g, d, scale=0.1)
    for t in sd.values():
        t.requires_grad_(False)
    return sd


@functools.cache
def tiny_bert(config: str = "small", seed: int = 0, prefix: str = "", drop: str = "", reshape: str = "") -> str:
    """Write a tiny BERT safetensors file (names as a BertModel's, each under ``prefix``, plus
    pooler.dense.* and embeddings.position_ids) and return its path (a str). drop: a name (without
    prefix) left out; reshape: a name stored with one row too few."""
    from safetensors.torch import save_file

    c = BERT[config]
    sd = dict(bert_weights(config, seed))
    g = torch.Generator().manual_seed(int(seed) + 1)
    sd["embeddings.position_ids"] = torch.arange(c["max_positions"])[None]
    sd["pooler.dense.weight"] = _draw(g, c["d_model"], c["d_model"], scale=0.1)
    sd["pooler.dense.bias"] = _draw(g, c["d_model"], scale=0.1)
    sd.pop(drop, None)
    if reshape:
        sd[reshape] = sd[reshape][:-1]
    path = _folder() / f"tiny-bert-{config}-{seed}.safetensors"
    save_file({prefix + k: v.contiguous().clone() for k, v in sd.items()}, str(path))
    return str(path)


def tiny_encoder(config: str = "small", seed: int = 2000) -> nn.Module:
    """A BertEncoder of the configuration ``config``, its parameters random (``seed``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = _bert_class()(**BERT[config])
    return model.eval()


def minilm_path() -> str:
    """The packaged all-MiniLM-L6-v2 safetensors file (a str)."""
    from tfcourse.pretrained import minilm_dir

    return str(Path(minilm_dir()) / "model.safetensors")


def minilm_encoder() -> nn.Module:
    """A BertEncoder with MiniLM's configuration, read from its config, parameters random."""
    from tfcourse.pretrained import minilm_config

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _bert_class()(**minilm_config())
    return model.eval()


# ---------------------------------------------------------------------------------------------
# first_divergent_layer: a known-good model and a copy with a bug at a known block
# ---------------------------------------------------------------------------------------------
DIVERGENCE = {"vocab_size": 32, "d_model": 32, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2,
              "d_ff": 64, "rope_theta": 10000.0, "eps": 1e-5, "tie_embeddings": True}


def _state_numbers(model: nn.Module) -> torch.Tensor:
    """(hooks on any submodule, training flag, sum of |parameters| in float64) of ``model``."""
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    total = sum(float(p.detach().double().nan_to_num(0.0).abs().sum()) for p in model.parameters())
    return torch.tensor([float(hooks), float(model.training), total], dtype=torch.float64)


@functools.cache
def _divergence_class() -> type:
    from tfcourse.pretrained import LlamaDecoder

    class Probed(LlamaDecoder):
        def probe_state(self) -> torch.Tensor:
            """(forward hooks + pre-hooks on any submodule, training flag, Σ|parameters|) float64."""
            return _state_numbers(self)

    Probed.__name__ = Probed.__qualname__ = "LlamaDecoder"
    return Probed


class ScaledBlock(nn.Module):
    """A block whose output is multiplied by ``factor`` (a relative difference of factor - 1)."""

    def __init__(self, block: nn.Module, factor: float):
        super().__init__()
        self.block, self.factor = block, factor

    def forward(self, x: torch.Tensor, cache=None) -> torch.Tensor:
        return self.block(x, cache) * self.factor


def divergence_model(seed: int = 0, bug: str = "", layer: int = 0, size: float = 1.0, training: bool = False,
                     num_layers: int = 4) -> nn.Module:
    """A LlamaDecoder (``DIVERGENCE``, ``num_layers`` blocks) with random weights (``seed``); with
    ``bug``, the same model changed at block ``layer``:

    "ffn": block ``layer``'s ffn.down_proj.weight += size · noise (every sequence differs there);
    "scale": block ``layer``'s q_proj.weight ·= (1 + size), i.e. a wrong attention scale (a
    sequence of one repeated token does not see it: its values are all equal);
    "output_scale": block ``layer``'s output multiplied by 1 + size (a relative difference);
    "nan": one weight of block ``layer``'s ffn.down_proj set to NaN;
    "embedding": tok_emb.weight += size · noise (shows at block 0);
    "final_norm": final_norm.weight += size (after the last block: nothing shows).
    """
    kwargs = dict(DIVERGENCE, num_layers=num_layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = _divergence_class()(**kwargs)
        g = torch.Generator().manual_seed(int(seed) + 7)
        with torch.no_grad():
            for name, p in model.named_parameters():  # weights that make every block matter
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(torch.randn(p.shape, generator=g) * (1.0 / p.shape[-1] ** 0.5))
            if bug == "ffn":
                w = model.blocks[layer].ffn.down_proj.weight
                w += size * torch.randn(w.shape, generator=g)
            elif bug == "scale":
                model.blocks[layer].attn.q_proj.weight.mul_(1.0 + size)
            elif bug == "output_scale":
                model.blocks[layer] = ScaledBlock(model.blocks[layer], 1.0 + size)
            elif bug == "nan":
                model.blocks[layer].ffn.down_proj.weight[0, 0] = float("nan")
            elif bug == "embedding":
                model.tok_emb.weight.add_(size * torch.randn(model.tok_emb.weight.shape, generator=g))
            elif bug == "final_norm":
                model.final_norm.weight.add_(size)
            elif bug:
                raise ValueError(f"unknown bug {bug!r}")
    return model.train(training)
