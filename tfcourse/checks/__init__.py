"""The checks learners run under each exercise, and that the grader reuses.

``tfcourse.checks.nbNN_<topic>`` holds notebook NN's ``check_<exercise>`` functions, its visible
cases and its catalogue of known mistakes. The shared core, one job a module:

* :mod:`~tfcourse.checks.call`: a :class:`Call` (plain data) and :func:`run_call`;
* :mod:`~tfcourse.checks.outcome`: what a call gives back (:class:`Outcome`);
* :mod:`~tfcourse.checks.evidence`: what is measured while a call runs (inputs written, gradients,
  intermediate shapes, rows per expert);
* :mod:`~tfcourse.checks.wire`: calls and outcomes as JSON + safetensors, for the grader's child;
* :mod:`~tfcourse.checks.case`: a :class:`Case`, its :class:`Judge` and :func:`judge_case`;
* :mod:`~tfcourse.checks.hints`: known mistakes (:class:`Mistake`) and how answers match them;
* :mod:`~tfcourse.checks.tolerance`: the tolerance per dtype;
* :mod:`~tfcourse.checks.run`: running checks in a notebook (:func:`run_checks`, stand-ins).
* :mod:`~tfcourse.checks.show`: how a verdict appears (one line; in a Jupyter kernel a green box).

The first four also run inside the grader's sandboxed child: standard library and torch only.
"""

from .call import Call, Instance, Step, TorchModule, run_call
from .case import Case, CaseResult, CheckFailed, Judge, judge_case
from .hints import Mistake
from .outcome import Outcome
from .run import run_checks

__all__ = [
    "Call", "Case", "CaseResult", "CheckFailed", "Instance", "Judge", "Mistake", "Outcome", "Step", "TorchModule",
    "judge_case", "run_call", "run_checks",
]
