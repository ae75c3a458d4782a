"""Notebook 08's reference agrees with Hugging Face on the same weights.

``load_decoder_weights`` is checked on GGUF files written here from random-init transformers
``LlamaForCausalLM`` models (tied and untied, 1 < G < H, float32 and Q8_0 tensors), q and k stored
in llama.cpp's interleaved order exactly as its ``convert_hf_to_gguf`` permutes them: the loaded
``LlamaDecoder``'s logits equal the HF model's; and on the packaged SmolLM2 against transformers'
own GGUF loader. ``load_encoder_weights`` is checked on safetensors files saved from random-init
``BertModel``s (with and without the ``bert.`` prefix, with pooler and position_ids) and on the
packaged MiniLM. ``mean_pool`` is compared with sentence-transformers' pooling formula written
out, ``first_divergent_layer`` with bugs injected at known blocks, and ``attention_rollout`` with
the product written out element by element. No downloads (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import copy
import os

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

from tfcourse import pretrained as P
from tfcourse.checks.nb08_real_weights.probes import finish_gguf
from tfcourse.reference import nb08_real_weights as ref

os.environ["HF_HUB_OFFLINE"] = "1"
pytestmark = pytest.mark.nb08

HF_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
              "post_attention_layernorm": "ffn_norm"}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf LlamaModel.permute: HF rotate-half rows -> interleaved."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(hf: LlamaForCausalLM, path, quantize: bool) -> None:
    cfg = hf.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(cfg.num_hidden_layers)
    for name, tensor in hf.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        w = tensor.detach().numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            out = "token_embd.weight"
        elif name == "model.norm.weight":
            out = "output_norm.weight"
        elif name == "lm_head.weight":
            out = "output.weight"
        else:
            _, _, i, *rest = name.split(".")
            out = f"blk.{i}.{HF_TO_GGUF['.'.join(rest[:-1])]}.weight"
            if "q_proj" in name:
                w = llama_cpp_permute(w, cfg.num_attention_heads)
            elif "k_proj" in name:
                w = llama_cpp_permute(w, cfg.num_key_value_heads)
        if quantize and w.ndim == 2:
            q = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(out, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(out, w)
    finish_gguf(writer)


def dequantized_copy(hf: LlamaForCausalLM) -> None:
    """Round HF's matrices through Q8_0 in place, so it holds what the quantized file holds."""
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 2:
                q = gguf.quants.quantize(p.numpy(), gguf.GGMLQuantizationType.Q8_0)
                p.copy_(torch.from_numpy(gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0)))


@pytest.mark.parametrize("tied, quantize", [(True, False), (False, False), (True, True)])
def test_decoder_loader_matches_llama_for_causal_lm(tmp_path, tied, quantize):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=500.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=tied, max_position_embeddings=64,
                      attn_implementation="eager")
    hf = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial norms, so a norm mapped to the wrong place shows
        for p in hf.parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    path = tmp_path / "tiny.gguf"
    write_gguf(hf, path, quantize)
    if quantize:
        dequantized_copy(hf)
    model = P.LlamaDecoder(96, 64, 2, 4, 2, 96, rope_theta=500.0, eps=1e-5, tie_embeddings=tied)
    assert ref.load_decoder_weights(model, path) is model
    assert (model.lm_head.weight is model.tok_emb.weight) == tied
    ids = torch.randint(0, 96, (2, 7))
    with torch.no_grad():
        diff = (model(ids) - hf(ids).logits).abs().max().item()
    assert diff < 1e-5, diff


def test_decoder_loader_errors(tmp_path):
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    path = tmp_path / "tied.gguf"
    write_gguf(LlamaForCausalLM(cfg), path, quantize=False)
    untied = P.LlamaDecoder(32, 32, 2, 4, 2, 48, tie_embeddings=False)
    with pytest.raises(ValueError, match="output.weight"):
        ref.load_decoder_weights(untied, path)
    wider = P.LlamaDecoder(32, 32, 2, 4, 2, 64)
    with pytest.raises(ValueError, match="ffn_gate"):
        ref.load_decoder_weights(wider, path)
    deeper = P.LlamaDecoder(32, 32, 3, 4, 2, 48)
    with pytest.raises(ValueError, match="blk.2"):
        ref.load_decoder_weights(deeper, path)


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_encoder_loader_matches_bert_model(tmp_path, prefix):
    torch.manual_seed(2)
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=16, type_vocab_size=2,
                     layer_norm_eps=1e-12, attn_implementation="eager")
    hf = BertModel(cfg).eval()  # with a pooler and the position_ids buffer
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "LayerNorm" in name:
                p.copy_(torch.randn_like(p) * 0.3 + (1 if name.endswith("weight") else 0))
    state = {prefix + k: v.contiguous() for k, v in hf.state_dict().items()}
    state[prefix + "embeddings.position_ids"] = torch.arange(16)[None]
    save_file(state, tmp_path / "bert.safetensors")
    model = P.BertEncoder(50, 32, 2, 4, 64, max_positions=16)
    assert ref.load_encoder_weights(model, tmp_path / "bert.safetensors") is model
    ids = torch.randint(0, 50, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    with torch.no_grad():
        ours = model(ids, mask, types)
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    diff = (ours - theirs)[mask.bool()].abs().max().item()
    assert diff < 1e-5, diff
    del state[prefix + "encoder.layer.1.output.LayerNorm.bias"]
    save_file(state, tmp_path / "broken.safetensors")
    with pytest.raises(ValueError, match="encoder.layer.1.output.LayerNorm.bias"):
        ref.load_encoder_weights(P.BertEncoder(50, 32, 2, 4, 64, max_positions=16),
                                 tmp_path / "broken.safetensors")


@pytest.mark.slow  # tens of seconds: the full suite only
def test_reference_loaders_on_the_real_weights():
    path = P.smollm2_gguf_path()
    model = P.smollm2(ref.load_decoder_weights)
    hf = LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                          local_files_only=True).eval()
    ids = P.smollm2_tokenizer()(["The capital of France is"], return_tensors="pt").input_ids
    with torch.no_grad():
        diff = (model(ids) - hf(ids).logits).abs().max().item()
    print(f"SmolLM2, reference loader vs transformers' GGUF loader: {diff:.1e}")
    assert diff <= 1e-4
    encoder = P.minilm(ref.load_encoder_weights)
    bert = BertModel.from_pretrained(P.minilm_dir(), local_files_only=True).eval()
    batch = P.minilm_tokenizer()(["A man is eating food.", "Stock markets fell sharply on Monday."],
                                 padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        theirs = bert(**batch).last_hidden_state
    m = batch["attention_mask"]
    assert (ours - theirs)[m.bool()].abs().max() <= 1e-5
    mf = m.unsqueeze(-1).float()  # sentence-transformers' Pooling (mean), then Normalize
    st = torch.nn.functional.normalize((theirs * mf).sum(1) / mf.sum(1).clamp(min=1e-9), dim=-1)
    emb = torch.nn.functional.normalize(ref.mean_pool(ours, m), dim=-1)
    assert (emb - st).abs().max() <= 1e-5


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.long, torch.float32])
def test_mean_pool_is_sentence_transformers_formula(mask_dtype):
    torch.manual_seed(3)
    hidden = torch.randn(4, 7, 5, dtype=torch.float64)
    mask = torch.ones(4, 7)
    mask[1, 4:] = 0
    mask[2, 1:] = 0
    mask[3, :3] = 0  # left padding
    hidden[mask == 0] = 1e6  # padding holds garbage
    m = mask.unsqueeze(-1).to(hidden.dtype)
    expected = (hidden * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
    got = ref.mean_pool(hidden, mask.to(mask_dtype))
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    with pytest.raises(ValueError):
        ref.mean_pool(hidden, mask[:, :6])


def _tiny(seed: int) -> P.LlamaDecoder:
    torch.manual_seed(seed)
    return P.LlamaDecoder(40, 32, 5, 4, 2, 48).eval()


def test_first_divergent_layer_finds_injected_bugs():
    good = _tiny(4)
    ids = torch.randint(0, 40, (2, 6))
    assert ref.first_divergent_layer(good, copy.deepcopy(good), ids) is None
    for k in range(5):
        bad = copy.deepcopy(good)
        with torch.no_grad():
            bad.blocks[k].ffn.down_proj.weight.mul_(1.5)
        assert ref.first_divergent_layer(good, bad, ids) == k
    bad = copy.deepcopy(good)
    with torch.no_grad():  # a broken attention scale in block 3 (scores times sqrt(Dh))
        bad.blocks[3].attn.q_proj.weight.mul_(bad.blocks[3].attn.head_dim ** 0.5)
    assert ref.first_divergent_layer(good, bad, ids) == 3
    bad = copy.deepcopy(good)
    with torch.no_grad():
        bad.final_norm.weight.mul_(2)  # after the last block: not a block difference
    assert ref.first_divergent_layer(good, bad, ids) is None
    bad = copy.deepcopy(good)
    with torch.no_grad():
        bad.tok_emb.weight[ids[1, 2]] += 1  # only the second sequence's embedding: block 0
    assert ref.first_divergent_layer(good, bad, ids) == 0
    bad = copy.deepcopy(good)
    with torch.no_grad():
        bad.blocks[2].ffn_norm.weight.fill_(float("nan"))
    assert ref.first_divergent_layer(good, bad, ids) == 2
    assert ref.first_divergent_layer(bad, copy.deepcopy(bad), ids) == 2  # NaN in both: different
    bad = copy.deepcopy(good)
    with torch.no_grad():
        bad.blocks[1].ffn.down_proj.weight.add_(1e-9)  # far below atol
    assert ref.first_divergent_layer(good, bad, ids) is None
    good.train()
    assert ref.first_divergent_layer(good, bad, ids) is None and good.training
    assert not any(b._forward_hooks for b in good.blocks)
    with pytest.raises(ValueError):
        ref.first_divergent_layer(good, P.LlamaDecoder(40, 32, 4, 4, 2, 48), ids)


def test_rollout_is_the_product_written_out():
    torch.manual_seed(5)
    layers = [torch.softmax(torch.randn(2, 3, 4, 4, dtype=torch.float64), -1) for _ in range(3)]
    got = ref.attention_rollout(layers)
    hats = []
    for a in layers:
        m = a.mean(1).numpy()
        hat = np.zeros_like(m)
        for b in range(2):
            for i in range(4):
                row = [0.5 * m[b, i, j] + 0.5 * (i == j) for j in range(4)]
                hat[b, i] = np.array(row) / sum(row)
        hats.append(hat)
    expected = np.einsum("bij,bjk,bkl->bil", hats[2], hats[1], hats[0])  # later layers on the left
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-14)
    eye = torch.eye(4).expand(1, 2, 4, 4)
    torch.testing.assert_close(ref.attention_rollout([eye, eye]), torch.eye(4)[None])
    with pytest.raises(ValueError):
        ref.attention_rollout([])


def test_minilm_real_check_names_the_float32_tolerance_and_the_entry_most_out_of_it():
    """A loader off by a hair in the last LayerNorm's gain fails the real check; the message names
    the float32 computation's tolerance (not "(float64)", the dtype it is compared in) and shows the
    entry furthest outside its tolerance; the reference loader passes."""
    from safetensors.torch import load_file

    from tests.catalogue.nb08_real_weights import _ENCODER
    from tfcourse.checks import CheckFailed
    from tfcourse.checks.nb08_real_weights import NOTEBOOK

    scope = {"torch": torch, "load_file": load_file}
    exec(_ENCODER.replace("    return model", "    with torch.no_grad():\n"
                          "        model.blocks[-1].ffn_norm.weight.mul_(1.001)\n    return model"), scope)
    load_encoder_weights = scope["load_encoder_weights"]  # a learner's loop, the last gain off by 0.1 %

    with pytest.raises(CheckFailed) as failed:
        NOTEBOOK.run("load_encoder_weights", load_encoder_weights, "real", verbose=False)
    message = str(failed.value)
    assert "furthest outside its tolerance" in message and "(float32)" in message and "float64" not in message
    exec(_ENCODER, scope)
    NOTEBOOK.run("load_encoder_weights", scope["load_encoder_weights"], "real", verbose=False)
