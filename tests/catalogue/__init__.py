"""Catalogues of wrong and correct implementations, one module per notebook.

Each ``tests/catalogue/nbNN_topic.py`` defines::

    NOTEBOOK = "NN_topic"
    WRONG = {exercise: [Entry(name, source, hint), ...]}    # >= 4 per exercise
    CORRECT = {exercise: [Entry(name, source), ...]}        # >= 2 per exercise

``source`` is a whole learner cell (``def``/``class`` ...), written the way a learner would write
it; it runs after the course's setup cell, so it may use the names that cell imports. ``hint`` is
a substring expected in the feedback's ``  hint:`` line, or None when no hint is expected.
``tests/test_catalogue.py`` runs every entry through the notebook's checks and through the grader.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from textwrap import dedent
from types import ModuleType
from typing import NamedTuple

__all__ = ["Entry", "entry", "load_catalogues", "variant"]

HERE = Path(__file__).resolve().parent


class Entry(NamedTuple):
    """One implementation of one exercise: a name (used in test ids), the cell source, the hint."""

    name: str
    source: str
    hint: str | None = None


def entry(name: str, source: str, hint: str | None = None) -> Entry:
    """An Entry whose source is written indented in a triple-quoted string (dedented here)."""
    return Entry(name, dedent(source).lstrip("\n"), hint)


def variant(base: str, *replacements: tuple[str, str]) -> str:
    """``base`` (dedented) with each ``(old, new)`` replaced; AssertionError if ``old`` is absent,
    so a variant cannot silently equal its base."""
    source = dedent(base).lstrip("\n")
    for old, new in replacements:
        old, new = old.strip("\n"), new.strip("\n")
        assert old in source, old
        source = source.replace(old, new)
    return source


def load_catalogues() -> dict[str, ModuleType]:
    """``{notebook name: module}`` for every ``tests/catalogue/nb*.py``, in file order.

    Raises ValueError when a module lacks NOTEBOOK, WRONG or CORRECT, or when two modules claim
    the same notebook.
    """
    found: dict[str, ModuleType] = {}
    for path in sorted(HERE.glob("nb*.py")):
        module = importlib.import_module(f"{__name__}.{path.stem}")
        missing = [attr for attr in ("NOTEBOOK", "WRONG", "CORRECT") if not hasattr(module, attr)]
        if missing:
            raise ValueError(f"{path.name} does not define {', '.join(missing)}")
        if module.NOTEBOOK in found:
            raise ValueError(f"{path.name} and {found[module.NOTEBOOK].__name__} both catalogue "
                             f"notebook {module.NOTEBOOK}")
        found[module.NOTEBOOK] = module
    return found
