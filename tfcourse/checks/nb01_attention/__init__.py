"""Checks for notebook 01, scaled dot-product attention.

Each ``check_<name>(fn)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. Visible cases judge with oracles that do not hand out the
answer: PyTorch built-ins (``torch.softmax``, ``torch.autograd.functional.jacobian``,
``F.scaled_dot_product_attention``, ``torch.tril``) and properties (rows sum to 1, causality,
no NaN on fully masked rows). ``MISTAKES`` is the catalogue of known wrong implementations whose
hints the feedback shows.
"""

from __future__ import annotations

from .cases import NOTEBOOK
from .mistakes import MISTAKES

__all__ = ["MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
