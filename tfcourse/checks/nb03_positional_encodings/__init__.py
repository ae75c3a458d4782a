"""Checks for notebook 03, positional encodings.

Each ``check_<name>(fn)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. ``cases.py`` holds the visible cases and their oracles (the
float64 formulas with the angle-scaled tolerance of docs/conventions.md, rotations written as
complex products, RoPE's properties, the q·k scores a weight permutation must keep) of exercises
1-6, ``relative.py`` those of ALiBi and T5's buckets (Press et al.'s slope code, T5's bucketing;
exercises 7-9), ``llama3.py`` the optional challenge (10); ``mistakes.py`` (with
``relative_mistakes.py``) the catalogue of known wrong implementations whose hints the feedback
shows.
"""

from __future__ import annotations

from . import llama3  # noqa: F401 - registers exercises 7-10 after cases.py's (it imports relative.py)
from .cases import NOTEBOOK
from .mistakes import MISTAKES

__all__ = ["MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
