"""Checks for notebook 06, causal decoding and the KV cache.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution where the answer is deterministic) in a sandbox. ``cases.py`` holds the cases
of exercises 1-4 and their oracles (the attention, block and model written with torch's own pieces
and run on the whole sequence: cached == uncached), ``sampling.py`` those of the decoding
exercises 5-8 (sampling frequencies against the softmax of the filtered logits), ``mistakes.py``
the catalogue of known wrong implementations whose hints the feedback shows (their words in
``hint_texts.py``), ``probes.py`` the tiny deterministic model ``generate`` is checked on.

Call graph (one bug costs points once): the cases build the learner's ``KVCache`` for
``CausalSelfAttention``, ``DecoderBlock`` and ``DecoderLM`` (and ``generate`` builds its own);
``DecoderBlock`` builds ``CausalSelfAttention``, ``DecoderLM`` builds ``DecoderBlock`` (hence
``CausalSelfAttention``); ``generate`` calls ``sample_next_token``. A callee that fails its own
checks is replaced by the course's version while the caller is checked. The chain is listed
transitively, since a stand-in ``DecoderBlock`` builds whatever ``CausalSelfAttention`` its
namespace holds.
"""

from __future__ import annotations

from . import sampling  # noqa: F401 - registers exercises 5-8 after cases.py's, as in the notebook
from .cases import NOTEBOOK
from .hint_texts import HINTS
from .mistakes import MISTAKES

__all__ = ["HINTS", "MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
