"""Running the learner's own code in a demo when it passes its checks (notebook 08's showcase),
and saying which code a demo used.

A demo cell must work while an exercise is unsolved, so it falls back to the course's reference;
:func:`yours_or_reference` makes that choice and says which it made, in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .checks.case import CheckFailed
from .checks.protocol import NotebookChecks
from .checks.run import passed_here

__all__ = ["first_failure", "yours_or_reference"]


def first_failure(notebook: NotebookChecks, exercise: str, obj: Any, parts: Sequence[str] | None = None) -> str | None:
    """None when ``obj`` passes ``exercise``'s visible checks of ``parts`` (default: every test
    cell's), else why not, in one line. Parts whose check cell already passed with this very
    ``obj`` in this kernel are not run again."""
    if obj is None:
        return "it is not defined: run its cell"
    for part in parts if parts is not None else notebook.parts(exercise):
        if passed_here(notebook.name, exercise, part, obj):
            continue
        try:
            notebook.run(exercise, obj, part, verbose=False)
        except CheckFailed as failure:
            first = str(failure).splitlines()[0] if str(failure) else "a check failed"
            return first.removeprefix("✗ ").removeprefix(f"{exercise}: ")
        except Exception as error:  # a check that cannot even run it (a wrong signature)
            return f"{type(error).__name__}: {error}"
    return None


def yours_or_reference(notebook: NotebookChecks, exercise: str, obj: Any, reference: Any,
                       parts: Sequence[str] | None = None) -> tuple[Any, bool]:
    """``(obj, True)`` when the learner's ``obj`` passes its checks, else ``(reference, False)``;
    prints which one the demo uses, and why when it is the reference."""
    why = first_failure(notebook, exercise, obj, parts)
    if why is None:
        print(f"using your {exercise} (it passes its checks)")
        return obj, True
    print(f"using the course's {exercise}: yours does not pass its checks yet ({why})")
    return reference, False
