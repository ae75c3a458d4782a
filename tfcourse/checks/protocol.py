"""A notebook's check protocol, declared once: its exercises, their test cells and visible cases,
the course's call graph, and the ``check_<exercise>`` functions learners run.

Each notebook's checks package (``tfcourse.checks.nbNN_topic``) makes one :class:`NotebookChecks`
and registers each exercise's visible-case builder on it::

    NOTEBOOK = NotebookChecks("05_feed_forward", calls={"FeedForward": ("gelu",)})

    @NOTEBOOK.exercise("gelu", parts=("core", "tanh"))
    def gelu_cases() -> list[Case]:
        \"\"\"Check ``gelu(x, approximate="none")`` against F.gelu ...\"\"\"
        ...

and its ``__init__`` exports the generated functions: ``__all__ = NOTEBOOK.export(globals())``
puts ``check_gelu`` (whose docstring is the builder's) and the others in the package. The grader's
hidden cases register on a :class:`grader.cases.HiddenCases` made from the same object, so a
notebook's exercises, parts and call graph are written in one place; tests/test_protocol.py checks
them against the test cells of ``solutions/NN_topic.ipynb``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .call import globals_of
from .case import Case
from .run import run_checks
from .show import show_style

__all__ = ["ExerciseChecks", "NotebookChecks"]

CORE = "core"


@dataclass(frozen=True)
class ExerciseChecks:
    """One exercise's visible checks: ``build()`` makes its cases; ``parts`` are its test cells
    (``"core"`` is ``test_<name>``, another part ``p`` is ``test_<name>__p``), in notebook order;
    ``doc`` says what its check checks (the generated ``check_<name>``'s docstring); ``uses``
    names other exercises the cases call, taken from the answer's own namespace (``mha_from_torch``
    builds the learner's ``MultiHeadAttention``), as they are in the grader's child."""

    name: str
    build: Callable[[], list[Case]]
    parts: tuple[str, ...] = (CORE,)
    doc: str = ""
    uses: tuple[str, ...] = ()


class NotebookChecks:
    """What the checks need to know of one notebook, and the registry of its exercises.

    name: the notebook's name (``"01_attention"``). calls: the course's call graph, stated in the task
    cells: which graded exercises call which others; only these callees ever stand in for a
    failing one (one bug costs points once), never an optional challenge. The course's reference
    module (``tfcourse.reference.nbNN_topic``, whose objects stand in) and the learner notebook's
    file name follow from the name.
    """

    def __init__(self, name: str, *, calls: dict[str, tuple[str, ...]] | None = None) -> None:
        self.name = name
        self.reference = f"tfcourse.reference.nb{name}"
        self.released = f"{name}.ipynb"
        self.calls: dict[str, tuple[str, ...]] = dict(calls or {})
        self._exercises: dict[str, ExerciseChecks] = {}

    def __repr__(self) -> str:
        return f"NotebookChecks({self.name!r}, exercises={list(self._exercises)})"

    # -- declaring ----------------------------------------------------------------------------
    def exercise(self, name: str, *, parts: Sequence[str] = (CORE,), doc: str = "",
                 uses: Sequence[str] = ()) -> Callable[[Callable[[], list[Case]]], Callable[[], list[Case]]]:
        """Register the decorated function as the builder of ``name``'s visible cases (the
        exercises' order is the notebook's). ``doc`` defaults to the builder's docstring."""
        if name in self._exercises:
            raise ValueError(f"{self.name}: exercise {name!r} is registered twice")
        if not parts or parts[0] != CORE or len(set(parts)) != len(parts):
            raise ValueError(f"{self.name}: {name}'s parts must start with {CORE!r} and be distinct: {parts}")

        def register(build: Callable[[], list[Case]]) -> Callable[[], list[Case]]:
            self._exercises[name] = ExerciseChecks(name, build, tuple(parts), doc or (build.__doc__ or ""),
                                                   tuple(uses))
            return build

        return register

    # -- reading ------------------------------------------------------------------------------
    @property
    def exercises(self) -> tuple[str, ...]:
        return tuple(self._exercises)

    def spec(self, exercise: str) -> ExerciseChecks:
        try:
            return self._exercises[exercise]
        except KeyError:
            raise KeyError(f"notebook {self.name} has no exercise {exercise!r}; exercises: "
                           f"{', '.join(self._exercises)}") from None

    def parts(self, exercise: str) -> tuple[str, ...]:
        return self.spec(exercise).parts

    def cases(self, exercise: str) -> list[Case]:
        """The cases a learner runs under ``exercise`` (the grader runs them too)."""
        return self.spec(exercise).build()

    # -- the learner's functions --------------------------------------------------------------
    def run(self, exercise: str, obj: Any, part: str | None = None, *, verbose: bool = True) -> None:
        """Run ``exercise``'s visible checks on ``obj`` in this process (:func:`run_checks`)."""
        spec = self.spec(exercise)
        if part is not None and part not in spec.parts:
            raise ValueError(f"{exercise} has no test cell for part {part!r}; its parts: {', '.join(spec.parts)}")
        scope = globals_of(obj)
        also = {n: scope[n] for n in spec.uses if scope.get(n) is not None} or None
        run_checks(exercise, obj, spec.build(), also=also, part=part, notebook=self, verbose=verbose)

    def check(self, exercise: str) -> Callable[..., None]:
        """``check_<exercise>(obj, part=None)``: what a notebook's check cell calls."""
        spec = self.spec(exercise)

        def check(obj: Any, part: str | None = None) -> None:
            self.run(exercise, obj, part)

        check.__name__ = check.__qualname__ = f"check_{exercise}"
        parts = "" if spec.parts == (CORE,) or "part" in spec.doc else (
            f"\n\npart: one of {', '.join(map(repr, spec.parts))} (the test cells that score it); None checks all.")
        check.__doc__ = (inspect.cleandoc(spec.doc) or f"Check ``{exercise}``.") + parts + (
            "\n\nRaises CheckFailed with the feedback; prints one line on success.")
        return check

    def export(self, namespace: dict[str, Any]) -> list[str]:
        """Put ``check_<exercise>`` for every exercise into ``namespace`` (a package's globals);
        return their names, for ``__all__``."""
        names = []
        for exercise in self._exercises:
            namespace[f"check_{exercise}"] = self.check(exercise)
            names.append(f"check_{exercise}")
        show_style()  # in a Jupyter kernel: failure lines wrap at spaces (tfcourse.checks.show)
        return names
