"""Checks for notebook 07, MQA, GQA and MLA.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones judged against the
reference solution) in a sandbox. ``cases.py`` holds the cases and their float64 oracles (GQA
with ``F.scaled_dot_product_attention(enable_gqa=True)``, MLA written with torch's pieces, both
on the whole sequence: cached == uncached, absorbed == naive): those of repeat_kv and GQA there,
of LatentCache, MLA and the cache bytes per token in ``mla.py``, of the optional mha_to_gqa in
``to_gqa.py``; ``mistakes.py`` the catalogue of known wrong implementations whose hints the
feedback shows (the forward pass of its wrong MLA classes in ``mla_mistakes.py``).

Call graph (one bug costs points once): ``GroupedQueryAttention`` calls ``repeat_kv``;
``MultiHeadLatentAttention`` is checked with the learner's ``LatentCache`` (the cases build it);
``mha_to_gqa`` builds a ``GroupedQueryAttention``. A callee that fails its own checks is replaced
by the course's version while the caller is checked.
"""

from __future__ import annotations

from . import to_gqa  # noqa: F401 - registers exercises 3-6 after cases.py's (it imports mla.py)
from .cases import NOTEBOOK
from .mistakes import HINTS, MISTAKES

__all__ = ["HINTS", "MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
