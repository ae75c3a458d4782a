"""Wrong and correct implementations of notebook 08's exercises, written as learners write them.

Each source is a whole solution cell; it runs after the course's setup cell (``math``, ``torch``,
``F``, ``nn``, ``load_file``, ``permute_for_rotate_half``, ``read_gguf``, ``LlamaDecoder``,
``BertEncoder``, ...). Wrong entries are plausible attempts; ``hint`` is a substring of the hint
the feedback should show (``tfcourse.checks.nb08_real_weights.HINTS`` or a case's own hint for an
error), None when no hint fits. Correct entries include the forms public code uses: a name map
given to ``model.load_state_dict``, ``transformers``' own GGUF conversion followed by a
Hugging Face -> course map (peer code), sentence-transformers' mean pooling, a manual
block-by-block loop, ``functools.reduce``.

There is no call graph between the exercises: every wrong entry loses its own exercise's points
only.
"""

from __future__ import annotations

from tests.catalogue import entry as _e
from tests.catalogue import variant as _variant
from tests.catalogue import without_blocks as _without

NOTEBOOK = "08_real_weights"


# ---------------------------------------------------------------------------------------------
# load_decoder_weights
# ---------------------------------------------------------------------------------------------
_DECODER = '''
def load_decoder_weights(model, gguf_path):
    tensors, _ = read_gguf(gguf_path)
    H = model.blocks[0].attn.num_heads
    G = model.blocks[0].attn.num_kv_heads
    names = {"tok_emb.weight": "token_embd.weight", "final_norm.weight": "output_norm.weight"}
    if model.lm_head.weight is not model.tok_emb.weight:
        names["lm_head.weight"] = "output.weight"
    parts = {"attn_norm": "attn_norm", "attn_q": "attn.q_proj", "attn_k": "attn.k_proj",
             "attn_v": "attn.v_proj", "attn_output": "attn.o_proj", "ffn_norm": "ffn_norm",
             "ffn_gate": "ffn.gate_proj", "ffn_up": "ffn.up_proj", "ffn_down": "ffn.down_proj"}
    for i in range(len(model.blocks)):
        for src, dst in parts.items():
            names[f"blocks.{i}.{dst}.weight"] = f"blk.{i}.{src}.weight"
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, src in names.items():
            if src not in tensors:
                raise ValueError(f"{src} is missing from the file")
            w = tensors[src]
            if src.endswith("attn_q.weight"):
                w = permute_for_rotate_half(w, H)
            if src.endswith("attn_k.weight"):
                w = permute_for_rotate_half(w, G)
            if w.shape != params[name].shape:
                raise ValueError(f"{src}: shape {tuple(w.shape)} vs {tuple(params[name].shape)}")
            params[name].copy_(w)
    return model
'''

DECODER_WRONG = [
    _e("q and k copied without the permutation", _variant(
        _DECODER,
        ("            if src.endswith(\"attn_q.weight\"):\n                w = permute_for_rotate_half(w, H)\n"
         "            if src.endswith(\"attn_k.weight\"):\n                w = permute_for_rotate_half(w, G)\n", "")),
       "q and k rows are stored interleaved"),
    _e("k permuted with H heads", _variant(_DECODER, ("w = permute_for_rotate_half(w, G)",
                                                      "w = permute_for_rotate_half(w, H)")),
       "attn_k has G = num_kv_heads heads"),
    _e("gate and up swapped", _variant(_DECODER, ('"ffn_gate": "ffn.gate_proj", "ffn_up": "ffn.up_proj"',
                                                  '"ffn_gate": "ffn.up_proj", "ffn_up": "ffn.gate_proj"')),
       "ffn_gate.weight is the SwiGLU gate"),
    _e("embedding assigned as a new Parameter (unties the head)", _variant(
        _DECODER, ("            params[name].copy_(w)",
                   "            if name == \"tok_emb.weight\":\n"
                   "                model.tok_emb.weight = nn.Parameter(w.clone())\n"
                   "            else:\n                params[name].copy_(w)")),
       "a tied model has ONE Parameter"),
    _e("p.data = w: no cast to the parameter's dtype (a float64 model becomes float32)", _variant(
        _DECODER, ("            params[name].copy_(w)", "            params[name].data = w")),
       "cast each to its parameter's dtype"),
    _e("output.weight never read", _variant(
        _DECODER, ('    if model.lm_head.weight is not model.tok_emb.weight:\n        names["lm_head.weight"] = '
                   '"output.weight"\n', "")),
       "an untied model's lm_head.weight comes from the file's output.weight"),
    _e("SmolLM2's 9 and 3 heads hard-coded", _variant(
        _DECODER, ("    H = model.blocks[0].attn.num_heads\n    G = model.blocks[0].attn.num_kv_heads",
                   "    H, G = 9, 3  # SmolLM2")),
       "read H and G from the model"),
    _e("weights transposed (as if GGUF stored (in, out))", _variant(_DECODER, ("            w = tensors[src]",
                                                                          "            w = tensors[src].T")),
       "no transpose"),
    _e("correct math, no validation",
       _without(_DECODER, "if src not in tensors:", "if w.shape != params[name].shape:"),
       "ValueError"),
]

DECODER_CORRECT = [
    _e("the reference's loop", _DECODER),
    _e("a state dict for load_state_dict", '''
def load_decoder_weights(model, gguf_path):
    tensors, _ = read_gguf(gguf_path)
    attn = model.blocks[0].attn
    tied = model.lm_head.weight is model.tok_emb.weight
    state = {"tok_emb.weight": "token_embd.weight", "final_norm.weight": "output_norm.weight"}
    if not tied:
        state["lm_head.weight"] = "output.weight"
    for i in range(len(model.blocks)):
        p, b = f"blk.{i}.", f"blocks.{i}."
        state.update({b + "attn_norm.weight": p + "attn_norm.weight", b + "attn.q_proj.weight": p + "attn_q.weight",
                      b + "attn.k_proj.weight": p + "attn_k.weight", b + "attn.v_proj.weight": p + "attn_v.weight",
                      b + "attn.o_proj.weight": p + "attn_output.weight", b + "ffn_norm.weight": p + "ffn_norm.weight",
                      b + "ffn.gate_proj.weight": p + "ffn_gate.weight", b + "ffn.up_proj.weight": p + "ffn_up.weight",
                      b + "ffn.down_proj.weight": p + "ffn_down.weight"})
    current = model.state_dict()
    new = {}
    for ours, theirs in state.items():
        if theirs not in tensors:
            raise ValueError(f"missing tensor {theirs}")
        w = tensors[theirs]
        if w.shape != current[ours].shape:
            raise ValueError(f"{theirs} has shape {list(w.shape)}, expected {list(current[ours].shape)}")
        if theirs.endswith("attn_q.weight"):
            w = permute_for_rotate_half(w, attn.num_heads)
        elif theirs.endswith("attn_k.weight"):
            w = permute_for_rotate_half(w, attn.num_kv_heads)
        new[ours] = w
    model.load_state_dict(new, strict=False)  # in place: a tied head follows tok_emb
    return model
'''),
]

# ---------------------------------------------------------------------------------------------
# load_encoder_weights
# ---------------------------------------------------------------------------------------------
# The decoder's loop with BERT's names: a weight and a bias for every part, no permutation.
_ENCODER = _variant(_DECODER, ("""
def load_decoder_weights(model, gguf_path):
...
             "ffn_gate": "ffn.gate_proj", "ffn_up": "ffn.up_proj", "ffn_down": "ffn.down_proj"}
""", '''
def load_encoder_weights(model, safetensors_path):
    tensors = load_file(str(safetensors_path))
    tensors = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in tensors.items()}
    names = {"tok_emb.weight": "embeddings.word_embeddings.weight",
             "pos_emb.weight": "embeddings.position_embeddings.weight",
             "type_emb.weight": "embeddings.token_type_embeddings.weight",
             "emb_norm.weight": "embeddings.LayerNorm.weight", "emb_norm.bias": "embeddings.LayerNorm.bias"}
    parts = {"attention.self.query": "attn.q_proj", "attention.self.key": "attn.k_proj",
             "attention.self.value": "attn.v_proj", "attention.output.dense": "attn.o_proj",
             "attention.output.LayerNorm": "attn_norm", "intermediate.dense": "ffn.up_proj",
             "output.dense": "ffn.down_proj", "output.LayerNorm": "ffn_norm"}
'''), ('            names[f"blocks.{i}.{dst}.weight"] = f"blk.{i}.{src}.weight"', '''
            for kind in ("weight", "bias"):
                names[f"blocks.{i}.{dst}.{kind}"] = f"encoder.layer.{i}.{src}.{kind}"
'''), ("""
            w = tensors[src]
...
            params[name].copy_(w)
""", '''
            if tensors[src].shape != params[name].shape:
                raise ValueError(f"{src}: shape {tuple(tensors[src].shape)} vs {tuple(params[name].shape)}")
            params[name].copy_(tensors[src])
'''))

# The same loader written for load_state_dict: the keys renamed, every tensor checked first.
_ENCODER_RENAMED = '''
def load_encoder_weights(model, safetensors_path):
    raw = load_file(str(safetensors_path))
    if all(k.startswith("bert.") for k in raw):
        raw = {k[5:]: v for k, v in raw.items()}
    rename = [("embeddings.word_embeddings", "tok_emb"), ("embeddings.position_embeddings", "pos_emb"),
              ("embeddings.token_type_embeddings", "type_emb"), ("embeddings.LayerNorm", "emb_norm"),
              ("encoder.layer.", "blocks."), ("attention.self.query", "attn.q_proj"),
              ("attention.self.key", "attn.k_proj"), ("attention.self.value", "attn.v_proj"),
              ("attention.output.dense", "attn.o_proj"), ("attention.output.LayerNorm", "attn_norm"),
              ("intermediate.dense", "ffn.up_proj"), ("output.dense", "ffn.down_proj"),
              ("output.LayerNorm", "ffn_norm")]
    state, origin = {}, {}
    for key, value in raw.items():
        if key.startswith("pooler.") or key == "embeddings.position_ids":
            continue
        new = key
        for old, repl in rename:
            new = new.replace(old, repl)
        state[new], origin[new] = value, key
    own = model.state_dict()
    for name, param in own.items():
        if name not in state:
            raise ValueError(f"no tensor in the file for {name}")
        if state[name].shape != param.shape:
            raise ValueError(f"{origin[name]} has shape {tuple(state[name].shape)}, {name} needs {tuple(param.shape)}")
    model.load_state_dict({k: v for k, v in state.items() if k in own})
    return model
'''

ENCODER_WRONG = [
    _e("query and key swapped", _variant(_ENCODER, ('"attention.self.query": "attn.q_proj", "attention.self.key": '
                                                    '"attn.k_proj"', '"attention.self.query": "attn.k_proj", '
                                                    '"attention.self.key": "attn.q_proj"')),
       "attention.self.query is q_proj"),
    _e("the two LayerNorms swapped", _variant(_ENCODER, ('"attention.output.LayerNorm": "attn_norm"',
                                                         '"attention.output.LayerNorm": "ffn_norm"'),
                                              ('"output.LayerNorm": "ffn_norm"', '"output.LayerNorm": "attn_norm"')),
       "attention.output.LayerNorm is attn_norm"),
    _e("intermediate and output dense swapped", _variant(_ENCODER, ('"intermediate.dense": "ffn.up_proj"',
                                                                    '"intermediate.dense": "ffn.down_proj"'),
                                                         ('"output.dense": "ffn.down_proj"',
                                                          '"output.dense": "ffn.up_proj"')),
       "intermediate.dense is ffn.up_proj"),
    _e("token type embeddings never loaded", _variant(
        _ENCODER, ('             "type_emb.weight": "embeddings.token_type_embeddings.weight",\n', "")),
       "embeddings.token_type_embeddings.weight goes into type_emb.weight"),
    _e("the 'bert.' prefix kept", _variant(
        _ENCODER, ('    tensors = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in tensors.items()}\n',
                   "")),
       "strip the 'bert.' prefix"),
    _e("load_state_dict(strict=False) without checks (no ValueError)", _variant(_ENCODER_RENAMED, ('''
    raw = load_file(str(safetensors_path))
    if all(k.startswith("bert.") for k in raw):
        raw = {k[5:]: v for k, v in raw.items()}
''', '    tensors = {k.removeprefix("bert."): v for k, v in load_file(str(safetensors_path)).items()}'),
        ("state, origin = {}, {}", "state = {}"), ("for key, value in raw.items():", "for key, value in tensors.items():"),
        ('if key.startswith("pooler.") or key == "embeddings.position_ids":',
         'if key.startswith("pooler") or key.endswith("position_ids"):'), ('''
        new = key
        for old, repl in rename:
            new = new.replace(old, repl)
        state[new], origin[new] = value, key
''', '''
        for old, new in rename:
            key = key.replace(old, new)
        state[key] = value
'''), ('''
    own = model.state_dict()
    ...
    model.load_state_dict({k: v for k, v in state.items() if k in own})
''', "    model.load_state_dict(state, strict=False)")), "check every tensor before copying"),
    _e("correct math, no validation",
       _without(_ENCODER, "if src not in tensors:", "if tensors[src].shape != params[name].shape:"),
       "ValueError"),
]

ENCODER_CORRECT = [
    _e("the reference's loop", _ENCODER),
    _e("renamed keys for load_state_dict, checked first", _ENCODER_RENAMED),
]

# ---------------------------------------------------------------------------------------------
# mean_pool
# ---------------------------------------------------------------------------------------------
_POOL_CHECK = '''
def mean_pool(hidden, attention_mask):
    if attention_mask.shape != hidden.shape[:2]:
        raise ValueError("attention_mask must be (B, T)")
'''

POOL_WRONG = [
    _e("mean over every position", _POOL_CHECK + "    return hidden.mean(dim=1)\n", "average over the real tokens only"),
    _e("divided by T", _POOL_CHECK + '''
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(dim=1) / hidden.shape[1]
''', "not by T"),
    _e("mask read the other way round", _POOL_CHECK + '''
    pad = attention_mask.bool().unsqueeze(-1)
    kept = hidden.masked_fill(pad, 0.0)
    return kept.sum(dim=1) / (~pad).sum(dim=1).clamp(min=1)
''', "attention_mask is 1 (True) for a real token"),
    _e("L2-normalised inside", _POOL_CHECK + '''
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    return F.normalize(pooled, p=2, dim=-1)
''', "L2 normalisation is a separate step"),
    _e("mask as float32 (half in, float32 out)", _POOL_CHECK + '''
    m = attention_mask.unsqueeze(-1).float()
    return (hidden * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
''', "return the input's dtype"),
    _e("no shape check (broadcasting)", '''
def mean_pool(hidden, attention_mask):
    m = attention_mask.to(hidden.dtype)[..., None]
    return (hidden * m).sum(-2) / m.sum(-2).clamp(min=1e-9)
''', "compare hidden.shape[:2] with attention_mask.shape"),
    _e("correct math, no validation",
       _variant(_POOL_CHECK, ('    if attention_mask.shape != hidden.shape[:2]:', None),
                             ('        raise ValueError("attention_mask must be (B, T)")', None))
       + "    real = attention_mask.to(hidden.dtype).unsqueeze(-1)\n"
         "    return (hidden * real).sum(1) / real.sum(1).clamp(min=1e-9)\n",
       "ValueError"),
]

POOL_CORRECT = [
    _e("sentence-transformers' mean pooling", _POOL_CHECK + '''
    input_mask_expanded = attention_mask.unsqueeze(-1).expand(hidden.size()).to(hidden.dtype)
    sum_embeddings = torch.sum(hidden * input_mask_expanded, 1)
    sum_mask = torch.clamp(input_mask_expanded.sum(1), min=1e-9)
    return sum_embeddings / sum_mask
'''),
    _e("masked_fill and a count", _POOL_CHECK + '''
    real = attention_mask.bool()
    total = hidden.masked_fill(~real[..., None], 0).sum(dim=1)
    count = real.sum(dim=1, keepdim=True).clamp(min=1)
    return total / count.to(hidden.dtype)
'''),
]

# ---------------------------------------------------------------------------------------------
# first_divergent_layer
# ---------------------------------------------------------------------------------------------
_DIVERGE = '''
def first_divergent_layer(model_a, model_b, input_ids, atol=1e-4):
    if len(model_a.blocks) != len(model_b.blocks):
        raise ValueError("the models have different numbers of blocks")

    def outputs(model):
        outs = []
        handles = [block.register_forward_hook(lambda mod, args, out: outs.append(out)) for block in model.blocks]
        try:
            with torch.no_grad():
                model(input_ids)
        finally:
            for h in handles:
                h.remove()
        return outs

    for i, (a, b) in enumerate(zip(outputs(model_a), outputs(model_b))):
        if not torch.allclose(a, b, rtol=0, atol=atol):
            return i
    return None
'''

DIVERGE_WRONG = [
    _e("the last block that differs", _variant(_DIVERGE, ("""
    for i, (a, b) in enumerate(zip(outputs(model_a), outputs(model_b))):
        if not torch.allclose(a, b, rtol=0, atol=atol):
            return i
    return None
""", """
    found = None
    for i, (a, b) in enumerate(zip(outputs(model_a), outputs(model_b))):
        if not torch.allclose(a, b, rtol=0, atol=atol):
            found = i
    return found
""")), "return the FIRST block"),
    _e("layers counted from 1", _variant(_DIVERGE, ("            return i", "            return i + 1")),
       "block indices start at 0"),
    _e("max |a - b| > atol (NaN slips through)", _variant(
        _DIVERGE, ("        if not torch.allclose(a, b, rtol=0, atol=atol):", "        if (a - b).abs().max() > atol:")),
       "is False when it is NaN"),
    _e("torch.allclose with its default rtol", _variant(
        _DIVERGE, ("        if not torch.allclose(a, b, rtol=0, atol=atol):",
                   "        if not torch.allclose(a, b, atol=atol):")),
       "pass rtol=0"),
    _e("only the first sequence compared", _variant(
        _DIVERGE, ("        if not torch.allclose(a, b, rtol=0, atol=atol):",
                   "        if not torch.allclose(a[0], b[0], rtol=0, atol=atol):")),
       "compare the whole batch"),
    _e("hooks never removed", '''
def first_divergent_layer(model_a, model_b, input_ids, atol=1e-4):
    if len(model_a.blocks) != len(model_b.blocks):
        raise ValueError("the models have different numbers of blocks")
    outs_a, outs_b = [], []
    for block in model_a.blocks:
        block.register_forward_hook(lambda m, i, o: outs_a.append(o))
    for block in model_b.blocks:
        block.register_forward_hook(lambda m, i, o: outs_b.append(o))
    with torch.no_grad():
        model_a(input_ids)
        model_b(input_ids)
    for i in range(len(outs_a)):
        if not torch.allclose(outs_a[i], outs_b[i], rtol=0, atol=atol):
            return i
    return None
''', "remove every hook you registered"),
    _e("correct math, no validation",
       _without(_DIVERGE, "if len(model_a.blocks) != len(model_b.blocks):"),
       "ValueError"),
]

DIVERGE_CORRECT = [
    _e("forward hooks removed in finally", _DIVERGE),
    _e("a manual block-by-block loop", '''
@torch.no_grad()
def first_divergent_layer(model_a, model_b, input_ids, atol=1e-4):
    if len(model_a.blocks) != len(model_b.blocks):
        raise ValueError(f"{len(model_a.blocks)} != {len(model_b.blocks)} blocks")
    x_a = model_a.tok_emb(input_ids)
    x_b = model_b.tok_emb(input_ids)
    for i, (block_a, block_b) in enumerate(zip(model_a.blocks, model_b.blocks)):
        x_a, x_b = block_a(x_a), block_b(x_b)
        diff = (x_a - x_b).abs()
        if torch.isnan(diff).any() or (diff > atol).any():
            return i
    return None
'''),
]

# ---------------------------------------------------------------------------------------------
# attention_rollout
# ---------------------------------------------------------------------------------------------
_ROLLOUT = '''
def attention_rollout(attentions):
    if len(attentions) == 0:
        raise ValueError("no layers")
    result = None
    for att in attentions:
        a = att.mean(dim=1)
        a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)
        a = a / a.sum(dim=-1, keepdim=True)
        result = a if result is None else a @ result
    return result
'''

ROLLOUT_WRONG = [
    _e("no residual identity", _variant(_ROLLOUT, ("        a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)\n",
                                                   "")),
       "add the residual"),
    _e("earlier layers on the left", _variant(_ROLLOUT, ("a @ result", "result @ a")), "later layers multiply on the left"),
    _e("max over heads", _variant(_ROLLOUT, ("att.mean(dim=1)", "att.max(dim=1).values")), "average the heads"),
    _e("no ValueError for an empty list", _variant(_ROLLOUT, ('    if len(attentions) == 0:\n        raise ValueError'
                                                             '("no layers")\n', "")),
       "raise ValueError(...)` first"),
    _e("float64 identity (float32 in, float64 out)", _variant(_ROLLOUT, ("dtype=a.dtype", "dtype=torch.float64")),
       "return the input's dtype"),
]

ROLLOUT_CORRECT = [
    _e("a loop", _ROLLOUT),
    _e("functools.reduce", '''
import functools


def attention_rollout(attentions):
    if not attentions:
        raise ValueError("attentions is empty")
    T = attentions[0].shape[-1]
    eye = torch.eye(T, dtype=attentions[0].dtype, device=attentions[0].device)
    mats = []
    for att in attentions:
        a = (att.mean(1) + eye) / 2
        mats.append(a / a.sum(-1, keepdim=True))
    return functools.reduce(lambda acc, m: m @ acc, mats[1:], mats[0])
'''),
]

WRONG = {
    "load_decoder_weights": DECODER_WRONG,
    "load_encoder_weights": ENCODER_WRONG,
    "mean_pool": POOL_WRONG,
    "first_divergent_layer": DIVERGE_WRONG,
    "attention_rollout": ROLLOUT_WRONG,
}

CORRECT = {
    "load_decoder_weights": DECODER_CORRECT,
    "load_encoder_weights": ENCODER_CORRECT,
    "mean_pool": POOL_CORRECT,
    "first_divergent_layer": DIVERGE_CORRECT,
    "attention_rollout": ROLLOUT_CORRECT,
}
