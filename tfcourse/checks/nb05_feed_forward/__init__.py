"""Checks for notebook 05, feed-forward layers: GELU, the GELU MLP, SwiGLU and its width,
a mixture of experts, the load-balancing loss and (optional) capacity routing.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. Oracles (``cases.py``): ``F.gelu``, the FFN formulas written with
``F.linear`` on the same weights, Meta's Llama widths; (``routing.py``) a dense MoE (every expert
weighted by the renormalised top-K), hand-computable balance losses and a loop over the capacity
queue; ``mistakes.py`` is the catalogue of known wrong implementations whose hints the feedback
shows, ``hint_texts.py`` the words of the hints.

Modules are built and loaded by parameter name, e.g. ``Call("MoE", (D, F, E, K), state=...,
forward_args=(x,))``; the sparse part replaces the experts by probes (``probes.py``,
``Call.replace``) whose output is NaN for a call holding a token not routed to them, and judges y. ``FeedForward`` calls ``gelu`` and ``MoE`` calls ``SwiGLU`` (the course's call
graph): a broken ``gelu`` or ``SwiGLU`` does not cost the caller's points, the course's version
stands in for it.
"""

from __future__ import annotations

from . import routing  # noqa: F401 - registers exercises 5-7 after cases.py's, as in the notebook
from .cases import NOTEBOOK
from .hint_texts import HINTS
from .mistakes import MISTAKES

__all__ = ["HINTS", "MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
