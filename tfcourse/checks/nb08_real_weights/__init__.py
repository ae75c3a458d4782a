"""Checks for notebook 08, the capstone on real weights.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. ``probes.py`` writes the tiny GGUF and safetensors files and
builds the models the cases hand to the code under test, ``cases.py`` holds the cases and their
oracles (``transformers``' LlamaForCausalLM and BertModel on the same weights; the answer known by
construction for ``first_divergent_layer``), ``mistakes.py`` the catalogue of known wrong answers
whose hints the feedback shows.

Call graph: none between the exercises (``first_divergent_layer`` is handed models, it does not
load them).
"""

from __future__ import annotations

from ..run import NotebookChecks, run_checks
from .cases import EXERCISES, visible_cases
from .mistakes import HINTS, MISTAKES

__all__ = [
    "EXERCISES",
    "HINTS",
    "MISTAKES",
    "NOTEBOOK",
    "check_attention_rollout",
    "check_first_divergent_layer",
    "check_load_decoder_weights",
    "check_load_encoder_weights",
    "check_mean_pool",
    "visible_cases",
]

NOTEBOOK = NotebookChecks(EXERCISES, lambda exercise: visible_cases(exercise), "tfcourse.reference.nb08_real_weights",
                          "08_real_weights.ipynb", calls={})


def _run(exercise: str, obj, part: str | None = None) -> None:
    run_checks(exercise, obj, visible_cases(exercise), part=part, notebook=NOTEBOOK)


def check_load_decoder_weights(load_decoder_weights, part: str | None = None) -> None:
    """Check ``load_decoder_weights(model, gguf_path) -> model``.

    part: "core" (tiny GGUF files written here: parameters, tie, logits vs transformers'
    LlamaForCausalLM, the ValueErrors) or "real" (the packaged SmolLM2 file's logits vs
    transformers' own GGUF conversion, atol 1e-4); None: both."""
    _run("load_decoder_weights", load_decoder_weights, part)


def check_load_encoder_weights(load_encoder_weights, part: str | None = None) -> None:
    """Check ``load_encoder_weights(model, safetensors_path) -> model``.

    part: "core" (tiny BERT files, with and without the "bert." prefix, the ValueErrors) or "real"
    (the packaged MiniLM vs transformers' BertModel, atol 1e-5 on real tokens); None: both."""
    _run("load_encoder_weights", load_encoder_weights, part)


def check_mean_pool(mean_pool) -> None:
    """Check ``mean_pool(hidden, attention_mask) -> (B, D)``: the mean over real tokens, hidden's dtype."""
    _run("mean_pool", mean_pool)


def check_first_divergent_layer(first_divergent_layer, part: str | None = None) -> None:
    """Check ``first_divergent_layer(model_a, model_b, input_ids, atol=1e-4) -> int | None``.

    part: "core" (bugs at known blocks, equal models, differences below atol, only atol decides)
    or "edges" (NaN, a bug after the last block, a bug in the embedding, models left as found,
    ValueError); None: both."""
    _run("first_divergent_layer", first_divergent_layer, part)


def check_attention_rollout(attention_rollout) -> None:
    """Check ``attention_rollout(attentions) -> (B, T, T)`` (optional, 0 points)."""
    _run("attention_rollout", attention_rollout)
