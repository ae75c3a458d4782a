"""Checks for notebook 02, multi-head attention.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. ``cases.py`` holds the visible cases and their oracles
(PyTorch's own ``nn.MultiheadAttention`` and ``F.scaled_dot_product_attention`` run head by head,
the paper's "Concat(head_1, ..., head_H)" and properties), ``mistakes.py`` the catalogue of known
wrong implementations whose hints the feedback shows, ``packed.py`` the optional challenge.
"""

from __future__ import annotations

from . import packed  # noqa: F401 - registers the optional challenge, last as in the notebook
from .cases import NOTEBOOK
from .mistakes import MISTAKES

__all__ = ["MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
