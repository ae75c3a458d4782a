"""Checks for notebook 08, the capstone on real weights.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. ``probes.py`` writes the tiny GGUF and safetensors files and
builds the models the cases hand to the code under test, ``cases.py`` holds the cases of the
loaders and ``mean_pool``, ``debugging.py`` those of ``first_divergent_layer`` (the answer known by
construction) and ``attention_rollout``, ``oracles.py`` the oracles (``transformers``'
LlamaForCausalLM and BertModel on the same weights), ``mistakes.py`` the catalogue of known wrong
answers whose hints the feedback shows.

Call graph: none between the exercises (``first_divergent_layer`` is handed models, it does not
load them).
"""

from __future__ import annotations

from . import debugging  # noqa: F401 - registers exercises 4-5 after cases.py's, as in the notebook
from .cases import NOTEBOOK
from .mistakes import HINTS, MISTAKES

__all__ = ["HINTS", "MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
