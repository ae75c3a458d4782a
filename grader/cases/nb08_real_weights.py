"""Grading cases for notebook 08 (the capstone on real weights).

The visible cases come from ``tfcourse.checks.nb08_real_weights`` (tiny files written by its
probes, ``transformers`` as the oracle, the packaged SmolLM2 and MiniLM). The hidden ones below are
drawn from the grader's seed and compared with the reference solution run on the same calls: other
tiny GGUF / BERT files (other weights, prompts, padding, prefix), files with a tensor missing or
one row short (the same exception type as the reference), ``mean_pool`` on random shapes and
dtypes, ``first_divergent_layer`` on model pairs with a bug of a random kind at a random block,
``attention_rollout`` on random attention maps. One hidden case runs the packaged MiniLM on two
other sentences; its reference result is computed once per grading process (functools.cache),
since loading a real model for every submission would cost seconds each. SmolLM2 gets no hidden
case: a second load of 135M parameters in the sandbox would take most of the exercise's 30 s, and
its visible case is already judged at atol 1e-4 against transformers' own GGUF conversion.

Tolerances: logits and hidden states atol 1e-4 (rtol 0) against the reference on tiny files (the
same float32 modules: a correct loader reproduces them exactly), MiniLM atol 1e-5 on the real
tokens; mean_pool and rollout the dtype's tolerance; block indices exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from tfcourse.checks.call import Call, Instance, Step
from tfcourse.checks.case import Case, Judge, fmt_dtype
from tfcourse.checks.nb08_real_weights import MISTAKES, NOTEBOOK, probes
from tfcourse.checks.nb08_real_weights.cases import (
    PROBES,
    minilm_call,
    step_tensors,
    well_formed_file_raised,
)
from tfcourse.device import make_generator

from . import HiddenCases, hidden_case, seeded

__all__ = ["HIDDEN", "cases", "hidden_cases"]

HIDDEN = HiddenCases(NOTEBOOK)
# "Weights ship inside a wheel." / "Mean pooling" in MiniLM's tokenizer, padded
MINILM_HIDDEN_BATCH = (torch.tensor([[101, 15871, 2911, 2503, 1037, 5217, 1012, 102],
                                     [101, 2812, 4770, 2075, 102, 0, 0, 0]]),
                       torch.tensor([[1] * 8, [1] * 5 + [0] * 3]))


def _int(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high, (1,), generator=g))


def _hidden(exercise: str, title: str, calls: list[Call], seed: int, *, part: str = "core",
            atol: float | None = None, rtol: float | None = None, raised_hint: bool = False) -> Case:
    def file_hints(judge: Callable[[Judge], None]) -> Callable[[Judge], None]:
        def wrapped(j: Judge) -> None:
            if j.expected and j.expected[0].ok:
                well_formed_file_raised(j, "bert." if "bert." in repr(j.case.calls[0].args) else "")
            judge(j)

        return wrapped

    return hidden_case(exercise, f"hidden case: {title}", calls, seed, mistakes=MISTAKES[exercise], part=part,
                       atol=atol, rtol=rtol, wrap=file_hints if raised_hint else None, every_tensor=True)


@HIDDEN.exercise("load_decoder_weights")
def _decoder(seed: int) -> list[Case]:
    out = []
    for i, s, g, config in seeded(seed, 100, ("tied", "untied")):
        c = probes.LLAMA[config]
        ids = torch.randint(c["vocab_size"], (_int(g, 1, 3), _int(g, 3, 9)), generator=g)
        model = Instance(PROBES + "tiny_decoder", kwargs={"config": config, "seed": s + 7}, key="m")
        path = Instance(PROBES + "tiny_gguf", kwargs={"config": config, "seed": s, "quantized": bool(i == 0)})
        call = Call("load_decoder_weights", (model, path),
                    steps=(Step("__call__", (ids,)), Step("probe_tied", on="m"), Step("__call__", (ids,), on="m")))
        out.append(_hidden("load_decoder_weights", f"another {config} file (seed {s}), ids {tuple(ids.shape)}: logits, "
                           "tie, the given model's logits", [call], s, atol=1e-4, rtol=0, raised_hint=True))
    s = seed * 1000 + 150
    g = make_generator(s)
    layer = _int(g, 0, 2)
    kind = ("attn_k.weight", "attn_output.weight", "ffn_gate.weight", "attn_norm.weight")[_int(g, 0, 4)]
    calls = [Call("load_decoder_weights", (Instance(PROBES + "tiny_decoder", kwargs={"config": "tied"}),
                                           Instance(PROBES + "tiny_gguf", kwargs={"config": "tied", "seed": s, **kw})),
                  steps=(Step("probe_tied"),))
             for kw in ({"drop": f"blk.{layer}.{kind}"}, {"reshape": f"blk.{1 - layer}.{kind}"})]
    out.append(_hidden("load_decoder_weights", f"blk.{layer}.{kind} missing; blk.{1 - layer}.{kind} one row short",
                       calls, s, part="validation"))
    return out


@HIDDEN.exercise("load_encoder_weights")
def _encoder(seed: int) -> list[Case]:
    out = []
    for _, s, g, (config, prefix) in seeded(seed, 200, (("small", "bert."), ("square", ""))):
        c = probes.BERT[config]
        b, t = 2, _int(g, 4, 10)
        ids = torch.randint(c["vocab_size"], (b, t), generator=g)
        lengths = torch.tensor([t, _int(g, 1, t)])
        mask = (torch.arange(t)[None] < lengths[:, None]).long()
        types = torch.randint(2, (b, t), generator=g) * mask
        model = Instance(PROBES + "tiny_encoder", kwargs={"config": config, "seed": s + 7}, key="m")
        path = Instance(PROBES + "tiny_bert", kwargs={"config": config, "seed": s, "prefix": prefix})
        fwd = {"attention_mask": mask, "token_type_ids": types}
        call = Call("load_encoder_weights", (model, path),
                    steps=(Step("__call__", (ids * mask,), fwd), Step("__call__", (ids * mask,), fwd, on="m")))
        out.append(_hidden("load_encoder_weights", f"another {config} file{' (prefix bert.)' if prefix else ''}, "
                           f"(B, T) = ({b}, {t}), real tokens {lengths.tolist()}", [call], s, atol=1e-4, rtol=0,
                           raised_hint=True))
    s = seed * 1000 + 250
    g = make_generator(s)
    name = ("encoder.layer.0.attention.self.value.bias", "embeddings.position_embeddings.weight",
            "encoder.layer.1.output.LayerNorm.weight")[_int(g, 0, 3)]
    calls = [Call("load_encoder_weights", (Instance(PROBES + "tiny_encoder"),
                                           Instance(PROBES + "tiny_bert", kwargs={"seed": s, **kw})),
                  steps=(Step("probe_parameters", ("tok_emb.weight",)),))
             for kw in ({"drop": name}, {"reshape": name, "prefix": "bert."})]
    out.append(_hidden("load_encoder_weights", f"{name} missing; one row short (prefixed file)", calls, s,
                       part="validation"))
    out.append(_minilm_case(seed))
    return out


@functools.cache
def _reference_minilm_hidden() -> torch.Tensor:
    """The reference loader's MiniLM on MINILM_HIDDEN_BATCH (computed once per process)."""
    from tfcourse.reference.nb08_real_weights import load_encoder_weights

    model = load_encoder_weights(probes.minilm_encoder(), probes.minilm_path())
    with torch.no_grad():
        return model(MINILM_HIDDEN_BATCH[0], attention_mask=MINILM_HIDDEN_BATCH[1])


def _minilm_case(seed: int) -> Case:
    ids, mask = MINILM_HIDDEN_BATCH
    call = minilm_call(ids, mask)

    def judge(j: Judge) -> None:
        well_formed_file_raised(j)
        (hidden,) = step_tensors(j, 0, 1, "MiniLM's hidden states")
        want = _reference_minilm_hidden()
        keep = mask.bool()[..., None].expand_as(want)
        j.close(torch.where(keep, hidden, 0.0) if hidden.shape == want.shape else hidden, torch.where(keep, want, 0.0),
                name="hidden states (real tokens)", atol=1e-5, rtol=1e-5, oracle="reference")  # as the visible

    return Case("load_encoder_weights", "hidden case: the packaged MiniLM on two other padded sentences vs the "
                "reference", [call], judge, seed=seed, hidden=True, part="real")


@HIDDEN.exercise("mean_pool")
def _mean_pool(seed: int) -> list[Case]:
    out = []
    for _, s, g, (dtype, mask_dtype) in seeded(seed, 300, ((torch.float64, torch.bool), (torch.float32, torch.float32),
                                                           (torch.bfloat16, torch.int64))):
        b, t, d = _int(g, 1, 5), _int(g, 2, 9), _int(g, 1, 9)
        hidden = (torch.randn(b, t, d, generator=g, dtype=torch.float64) * 3).to(dtype)
        lengths = torch.randint(1, t + 1, (b,), generator=g)
        mask = (torch.arange(t)[None] < lengths[:, None]).to(mask_dtype)
        out.append(_hidden("mean_pool", f"(B, T, D) = ({b}, {t}, {d}) {fmt_dtype(dtype)}, a {fmt_dtype(mask_dtype)} "
                           f"mask, real tokens {lengths.tolist()}", [Call("mean_pool", (hidden, mask))], s,
                           part="half" if dtype == torch.bfloat16 else "core"))
    return out


@HIDDEN.exercise("first_divergent_layer")
def _divergence(seed: int) -> list[Case]:
    out = []
    s = seed * 1000 + 400
    g = make_generator(s)
    ids = torch.randint(probes.DIVERGENCE["vocab_size"], (2, _int(g, 3, 8)), generator=g)
    ids[0] = ids[0, 0]  # the first sequence repeats one token
    bugs = [{"bug": "ffn", "layer": _int(g, 0, 4), "size": 0.3}, {"bug": "scale", "layer": _int(g, 0, 4), "size": 0.8}]
    for i, bug in enumerate(bugs):
        a = Instance(PROBES + "divergence_model", kwargs={"seed": s + i}, key="a")
        b = Instance(PROBES + "divergence_model", kwargs={"seed": s + i, **bug}, key="b")
        call = Call("first_divergent_layer", (a, b, ids), steps=(Step("", attribute=True),))
        out.append(_hidden("first_divergent_layer", f"{bug['bug']} bug at block {bug['layer']}", [call], s + i))
    kinds = [{"bug": "nan", "layer": _int(g, 0, 4), "training": True}, {"bug": "final_norm", "size": 0.2},
             {"bug": "output_scale", "layer": _int(g, 0, 4), "size": 5e-6}]
    for i, bug in enumerate(kinds):
        a = Instance(PROBES + "divergence_model", kwargs={"seed": s + 10 + i, "training": True}, key="a")
        b = Instance(PROBES + "divergence_model", kwargs={"seed": s + 10 + i, **bug}, key="b")
        call = Call("first_divergent_layer", (a, b, ids), {"atol": 1e-7 if bug["bug"] == "output_scale" else 1e-4},
                    steps=(Step("", attribute=True), Step("probe_state", on="a"), Step("probe_state", on="b")))
        out.append(_hidden("first_divergent_layer", f"{bug['bug']} at block {bug.get('layer', 'none')}; models left "
                           "as they were", [call], s + 10 + i, part="edges"))
    return out


@HIDDEN.exercise("attention_rollout")
def _rollout(seed: int) -> list[Case]:
    out = []
    for _, s, g, dtype in seeded(seed, 500, (torch.float64, torch.float32)):
        layers, b, h, t = _int(g, 1, 5), _int(g, 1, 3), _int(g, 1, 5), _int(g, 2, 8)
        atts = [torch.softmax(torch.randn(b, h, t, t, generator=g, dtype=torch.float64) * 2, -1).to(dtype)
                for _ in range(layers)]
        out.append(_hidden("attention_rollout", f"L = {layers}, (B, H, T) = ({b}, {h}, {t}) {fmt_dtype(dtype)}",
                           [Call("attention_rollout", (atts,))], s))
    return out

cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
