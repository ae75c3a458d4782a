"""Checks for notebook 03, positional encodings.

Each ``check_<name>(fn)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. ``cases.py`` holds the visible cases and their oracles (the
float64 formulas with the angle-scaled tolerance of docs/conventions.md, rotations written as
complex products, RoPE's properties, Press et al.'s slope code, the q·k scores a weight
permutation must keep); ``mistakes.py`` the catalogue of known wrong implementations whose hints
the feedback shows.
"""

from __future__ import annotations

from .cases import NOTEBOOK
from .mistakes import MISTAKES

__all__ = ["MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
