"""tfcourse.pretrained (notebook 08's library) reproduces the real packaged models.

SmolLM2-135M-Instruct is loaded into ``LlamaDecoder`` with a name map written out here (not the
notebook's reference, so this file tests the library alone): its greedy continuation of "The
capital of France is" names Paris, and its logits agree (<= 1e-4) with transformers'
``LlamaForCausalLM`` loaded by transformers' own GGUF loader, which dequantizes and un-permutes
q/k its own way. all-MiniLM-L6-v2 loaded into ``BertEncoder`` agrees (<= 1e-5 on real tokens)
with transformers' ``BertModel`` from the packaged folder. The configs are read from the files;
``attention_weights`` rows sum to 1 and respect the masks. Nothing is downloaded
(HF_HUB_OFFLINE=1). The weight packages are installed by the README's commands: these tests
are not skipped when they are missing, they fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tfcourse import pretrained as P
from tfcourse import weight_files
from tfcourse.reference.nb03_positional_encodings import permute_for_rotate_half
from tfcourse.reference.nb06_kv_cache import generate

ROOT = Path(__file__).resolve().parents[1]

os.environ["HF_HUB_OFFLINE"] = "1"
pytestmark = pytest.mark.nb08

_LAYER = {"attn_norm": "attn_norm", "attn_q": "attn.q_proj", "attn_k": "attn.k_proj",
          "attn_v": "attn.v_proj", "attn_output": "attn.o_proj", "ffn_norm": "ffn_norm",
          "ffn_gate": "ffn.gate_proj", "ffn_up": "ffn.up_proj", "ffn_down": "ffn.down_proj"}


@pytest.fixture(scope="module")
def smollm2():
    cfg = P.smollm2_config()
    tensors, _ = P.read_gguf(P.smollm2_gguf_path())
    model = P.LlamaDecoder(**cfg)
    state = {"tok_emb.weight": tensors["token_embd.weight"],
             "final_norm.weight": tensors["output_norm.weight"]}
    for i in range(cfg["num_layers"]):
        for gguf_name, name in _LAYER.items():
            w = tensors[f"blk.{i}.{gguf_name}.weight"]
            if gguf_name == "attn_q":
                w = permute_for_rotate_half(w, cfg["num_heads"])
            elif gguf_name == "attn_k":
                w = permute_for_rotate_half(w, cfg["num_kv_heads"])
            state[f"blocks.{i}.{name}.weight"] = w
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected  # tied: the same Parameter as tok_emb
    return model.eval()


@pytest.fixture(scope="module")
def minilm():
    from safetensors.torch import load_file

    cfg = P.minilm_config()
    model = P.BertEncoder(**cfg)
    w = load_file(P.minilm_dir() / "model.safetensors")
    state = {"tok_emb.weight": w["embeddings.word_embeddings.weight"],
             "pos_emb.weight": w["embeddings.position_embeddings.weight"],
             "type_emb.weight": w["embeddings.token_type_embeddings.weight"],
             "emb_norm.weight": w["embeddings.LayerNorm.weight"],
             "emb_norm.bias": w["embeddings.LayerNorm.bias"]}
    parts = {"attention.self.query": "attn.q_proj", "attention.self.key": "attn.k_proj",
             "attention.self.value": "attn.v_proj", "attention.output.dense": "attn.o_proj",
             "attention.output.LayerNorm": "attn_norm", "intermediate.dense": "ffn.up_proj",
             "output.dense": "ffn.down_proj", "output.LayerNorm": "ffn_norm"}
    for i in range(cfg["num_layers"]):
        for hf, name in parts.items():
            for kind in ("weight", "bias"):
                state[f"blocks.{i}.{name}.{kind}"] = w[f"encoder.layer.{i}.{hf}.{kind}"]
    model.load_state_dict(state, strict=True)
    return model.eval()


def test_configs_read_from_the_files():
    assert P.smollm2_config() == {
        "vocab_size": 49152, "d_model": 576, "num_layers": 30, "num_heads": 9, "num_kv_heads": 3,
        "d_ff": 1536, "rope_theta": 100000.0, "eps": 1e-5, "tie_embeddings": True}
    assert P.minilm_config() == {
        "vocab_size": 30522, "d_model": 384, "num_layers": 6, "num_heads": 12, "d_ff": 1536,
        "max_positions": 512, "type_vocab_size": 2, "eps": 1e-12}


def test_read_gguf_layout_and_metadata():
    tensors, meta = P.read_gguf(P.smollm2_gguf_path())
    assert meta["llama.block_count"] == 30 and meta["general.architecture"] == "llama"
    assert len(tensors) == 2 + 9 * 30  # token_embd, output_norm, 9 per block; no output.weight
    q, k = tensors["blk.0.attn_q.weight"], tensors["blk.0.attn_k.weight"]
    assert q.shape == (576, 576) and k.shape == (192, 576)  # (out, in): 3 KV heads of 64
    assert tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
    assert tensors["token_embd.weight"].shape == (49152, 576)
    for t in (q, tensors["token_embd.weight"]):
        assert t.dtype == torch.float32 and t.is_contiguous() and torch.isfinite(t).all()
    q.add_(0)  # writable (torch warns about read-only numpy memory otherwise)


def test_a_warmed_file_is_handed_over_once_and_each_call_gets_its_own_tensors():
    """warm_smollm2 (the grader's warm worker runs it before forking notebook 08's children):
    the next read_gguf of the file gets exactly what a cold read gives, the one after that a
    fresh dequantization, so one caller's in-place edits never reach another's tensors."""
    path = P.smollm2_gguf_path()
    cold, _ = P.read_gguf(path)
    weight_files.warm_smollm2()
    assert weight_files._WARM
    handed, meta = P.read_gguf(str(path))  # a str path finds the same entry
    assert not weight_files._WARM and meta["llama.block_count"] == 30
    assert list(handed) == list(cold) and all(torch.equal(handed[n], cold[n]) for n in cold)
    name = "blk.0.attn_q.weight"
    before = handed[name].clone()
    handed[name].mul_(0)
    again, _ = P.read_gguf(path)
    assert torch.equal(again[name], before) and again[name].data_ptr() != handed[name].data_ptr()
    # the warmed reader stays, however many other files are read after it (the notebook's
    # cases read several small ones before SmolLM2's config)
    pinned = P.gguf_reader(path)
    weight_files._cached_reader.cache_clear()
    assert P.gguf_reader(path) is pinned


def test_the_weight_file_readers_use_no_reference_solution():
    """The grader's warm worker, which must never hold a reference solution, imports
    tfcourse.weight_files for the warm-up; tfcourse.pretrained re-exports the same functions."""
    code = ("import sys, tfcourse.weight_files as w; "
            "leaked = [m for m in sys.modules if m.startswith('tfcourse.reference')]; assert not leaked, leaked; "
            "import tfcourse.pretrained as p; assert p.read_gguf is w.read_gguf and p.gguf_reader is w.gguf_reader; "
            "print('ok')")
    _prints_ok(code)


def test_the_zygote_warms_notebook_08_once_without_reference_code_and_stays_safe_to_fork():
    """A job for notebook 08 asks the zygote to warm SmolLM2's file (fastpath.NOTEBOOK_WARM_UPS): it is
    parsed and dequantized once, in the zygote, before the fork; no reference module comes with
    it, the zygote still has one thread and no writable shared mapping (the file's memory map is
    read-only), an unknown warm-up is ignored and a failing one is only reported."""
    code = ("import sys; sys.path.insert(0, 'grader/isolation'); import zygote;"
            "zygote.warm(); zygote.warm_up(['smollm2', 'no-such-warm-up']);"
            "from tfcourse import weight_files as w; assert len(w._WARM) == 1; key, = w._WARM;"
            "assert zygote.unsafe_to_fork() == '', zygote.unsafe_to_fork();"
            "leaked = [m for m in sys.modules if m.startswith('tfcourse.reference')]; assert not leaked, leaked;"
            "w._WARM.clear(); zygote.warm_up(['smollm2']); assert not w._WARM and len(w._PINNED) == 1;"  # once per zygote
            "zygote.WARM_UPS['broken'] = ('tfcourse.weight_files', 'no_such_function'); zygote.warm_up(['broken']);"
            "from grader.isolation import fastpath; assert set(fastpath.warm_ups('08_real_weights', 0)) <= set(zygote.WARM_UPS);"
            "assert fastpath.warm_ups('08_real_weights', 4096) and not fastpath.warm_ups('08_real_weights', 2048);"
            "assert not fastpath.warm_ups('07_gqa_mla', 0);"
            "print('ok')")
    _prints_ok(code, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # as the zygote's environment (views.child_env)


def _prints_ok(code: str, **env: str) -> None:
    """Run ``code`` in a fresh interpreter from the checkout, with ``env`` added; it must print ok."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_gguf_reader_parses_what_gguf_s_own_reader_parses():
    """The course's reader (a plain-array view of gguf's memory map, for speed) gives gguf's own
    GGUFReader's fields and tensors, value for value and byte for byte."""
    import gguf
    import numpy as np

    ours, theirs = P.gguf_reader(P.smollm2_gguf_path()), gguf.GGUFReader(P.smollm2_gguf_path())
    assert isinstance(ours, gguf.GGUFReader) and type(ours) is not gguf.GGUFReader
    assert list(ours.fields) == list(theirs.fields)
    for name, field in theirs.fields.items():
        assert ours.fields[name].types == field.types, name
        assert ours.fields[name].contents() == field.contents(), name
    assert [(t.name, t.tensor_type, list(t.shape)) for t in ours.tensors] == \
        [(t.name, t.tensor_type, list(t.shape)) for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
        assert np.array_equal(np.asarray(a.data), np.asarray(b.data)), a.name


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(weight_files.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="requirements-weights.txt"):
        P.smollm2_gguf_path()
    with pytest.raises(FileNotFoundError, match="--no-deps"):
        P.minilm_dir()


def test_smollm2_greedy_says_paris(smollm2):
    tok = P.smollm2_tokenizer()
    ids = tok("The capital of France is", return_tensors="pt").input_ids  # (1, 5)
    out = generate(smollm2, ids, max_new_tokens=4)
    text = tok.decode(out[0, ids.size(1):])
    print(repr(text))
    assert "Paris" in text
    assert smollm2.lm_head.weight is smollm2.tok_emb.weight


@pytest.mark.slow  # tens of seconds: the full suite only
def test_smollm2_logits_match_transformers_gguf_loader(smollm2):
    from transformers import LlamaForCausalLM

    path = P.smollm2_gguf_path()
    hf = LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                          local_files_only=True).eval()
    ids = P.smollm2_tokenizer()("The capital of France is", return_tensors="pt").input_ids
    ids = torch.cat((ids, ids.flip(1)))  # (2, 5): a batch of two different sequences
    with torch.no_grad():
        ours, theirs = smollm2(ids), hf(ids).logits  # (2, 5, V) each
    diff = (ours - theirs).abs().max().item()
    print(f"max |logits - LlamaForCausalLM| = {diff:.2e}")
    assert diff <= 1e-4


def test_kv_cache_generation_equals_full_recompute(smollm2):
    ids = P.smollm2_tokenizer()("Once upon a time", return_tensors="pt").input_ids
    cached = generate(smollm2, ids, 6, use_cache=True)
    full = generate(smollm2, ids, 6, use_cache=False)
    assert torch.equal(cached, full)


def test_minilm_matches_transformers_bert_model(minilm):
    from transformers import BertModel

    hf = BertModel.from_pretrained(P.minilm_dir(), local_files_only=True).eval()
    batch = P.minilm_tokenizer()(["A man is eating food.", "Someone plays a guitar on stage."],
                                 padding=True, return_tensors="pt")
    batch["token_type_ids"][1, :3] = 1  # a second segment: the token-type table is used
    with torch.no_grad():
        ours = minilm(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        theirs = hf(**batch).last_hidden_state  # (2, T, 384)
    real = batch["attention_mask"].bool()  # padding positions may differ: compare real tokens
    assert not real.all()  # the batch is padded
    diff = (ours - theirs)[real].abs().max().item()
    print(f"max |hidden - BertModel| on real tokens = {diff:.2e}")
    assert diff <= 1e-5


def test_attention_weights_rows_and_masks(smollm2, minilm):
    ids = torch.tensor([[504, 3575, 282, 4649, 314]])
    llama = P.attention_weights(smollm2, ids)
    assert len(llama) == 30 and llama[0].shape == (1, 9, 5, 5)
    assert torch.allclose(llama[7].sum(-1), torch.ones(1, 9, 5), atol=1e-5)
    assert (llama[7].triu(1) == 0).all()  # causal
    assert not smollm2.blocks[0].attn._forward_pre_hooks  # hooks removed
    mask = torch.tensor([[1, 1, 1, 0]])
    bert = P.attention_weights(minilm, torch.tensor([[101, 7592, 102, 0]]), mask)
    assert len(bert) == 6 and bert[0].shape == (1, 12, 4, 4)
    assert (bert[3][..., 3] == 0).all() and torch.allclose(bert[3].sum(-1), torch.ones(1, 12, 4))
