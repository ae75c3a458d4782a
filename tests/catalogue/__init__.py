"""Catalogues of wrong and correct implementations, one module per notebook.

Each ``tests/catalogue/nbNN_topic.py`` defines::

    NOTEBOOK = "NN_topic"
    WRONG = {exercise: [Entry(name, source, hint), ...]}    # >= 4 per exercise
    CORRECT = {exercise: [Entry(name, source), ...]}        # >= 2 per exercise

``source`` is a whole learner cell (``def``/``class`` ...), written the way a learner would write
it; it runs after the course's setup cell, so it may use the names that cell imports. ``hint`` is
a substring expected in the feedback's ``  hint:`` line, or None when no hint is expected.
``tests/test_catalogue.py`` runs every entry through the notebook's checks and through the grader.

A module has one section per exercise: a base source ``_NAME`` (a correct solution as a learner
would write it), then ``NAME_WRONG`` and ``NAME_CORRECT``. An entry that is the base with a mistake
(or another correct form) patched in is written ``variant(_NAME, (old, new), ...)``, so that it
shows only what it changes; a short entry (up to a few lines), or another implementation
altogether, is written out. Where several entries share a second hand (other names, another
idiom), that hand is kept once too (``_NAME_...``, itself a variant of the base where it can be),
and a block of base lines that several entries replace may be named (``_..._LINES``). An entry
that is the base without some of its statements (its input validation, most often) is written
``without_blocks(_NAME, "if ...:")``. Where a base's piece (a constructor, most often) is the
course's reference code as a learner would write it, it is taken from there and patched:
``variant(reference_source("nb06_kv_cache", "CausalSelfAttention.__init__"), ...)``.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from textwrap import dedent
from types import ModuleType
from typing import NamedTuple

__all__ = ["Entry", "entry", "load_catalogues", "reference_source", "variant", "without_blocks"]

HERE = Path(__file__).resolve().parent
REFERENCE = HERE.parents[1] / "tfcourse" / "reference"


class Entry(NamedTuple):
    """One implementation of one exercise: a name (used in test ids), the cell source, the hint."""

    name: str
    source: str
    hint: str | None = None


def entry(name: str, source: str, hint: str | None = None) -> Entry:
    """An Entry whose source is written indented in a triple-quoted string (dedented here)."""
    return Entry(name, dedent(source).lstrip("\n"), hint)


_GAP = re.compile(r"\n[ \t]*\.\.\.[ \t]*\n")


def variant(base: str, *replacements: tuple[str, str | None]) -> str:
    """``base`` (dedented) with each ``(old, new)`` replaced, in order; AssertionError if ``old`` is
    absent, so a variant cannot silently equal its base.

    ``(old, None)`` deletes the whole lines ``old`` is (``(old, "")`` leaves an empty line). A long
    ``old`` may be written as its first line(s), a line ``...``, and its last line(s): it then
    stands for the lines of the source from the first part (which must occur once) through the
    next occurrence of the last part.
    """
    source = dedent(base).lstrip("\n")
    for old, new in replacements:
        old = _span(source, old.strip("\n"))
        assert old in source, old
        if new is None:
            lines = "\n" + old + "\n"
            assert lines in "\n" + source, f"not whole lines: {old}"
            source = ("\n" + source).replace(lines, "\n")[1:]
        else:
            source = source.replace(old, new.strip("\n"))
    return source


def without_blocks(base: str, *heads: str) -> str:
    """``base`` (dedented) without each block that starts with a line reading ``head`` (stripped;
    it must occur once): that line and the lines indented under it. The usual "correct math, no
    validation" entry: ``without_blocks(_NAME, "if d_model % 2:")`` drops the check and its raise.
    """
    lines = dedent(base).lstrip("\n").split("\n")
    for head in heads:
        found = [i for i, line in enumerate(lines) if line.strip() == head]
        assert len(found) == 1, f"{head!r} is not one line of the source ({len(found)} found)"
        start = found[0]
        indent = len(lines[start]) - len(lines[start].lstrip())
        end = start + 1
        while end < len(lines) and (not lines[end].strip()
                                    or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        while end > start + 1 and not lines[end - 1].strip():  # blank lines after the block stay
            end -= 1
        del lines[start:end]
    return "\n".join(lines)


def reference_source(module: str, name: str) -> str:
    """The source of ``name`` in the course's reference solutions ``tfcourse/reference/<module>.py``
    (built from ``solutions/``), dedented: a function, a class, or a method written
    ``Class.method``, with its decorators and docstring. The file is parsed, not imported.
    """
    text = (REFERENCE / f"{module}.py").read_text(encoding="utf-8")
    node: ast.AST = ast.parse(text)
    for part in name.split("."):
        found = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part]
        assert len(found) == 1, f"{module} has {len(found)} definitions of {part!r}"
        node = found[0]
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return dedent("".join(text.splitlines(keepends=True)[first - 1:node.end_lineno]))


def _span(source: str, old: str) -> str:
    """``old``, or the text of ``source`` that ``old`` written with a ``...`` line stands for."""
    if old in source or not _GAP.search(old):
        return old
    head, tail = _GAP.split(old, maxsplit=1)
    assert source.count(head) == 1, head
    start = source.index(head)
    end = source.find("\n" + tail, start + len(head))
    assert end >= 0, tail
    return source[start:end + 1 + len(tail)]


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
