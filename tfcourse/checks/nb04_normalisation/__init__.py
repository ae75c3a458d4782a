"""Checks for notebook 04, normalisation: LayerNorm, RMSNorm, pre-norm and post-norm residuals.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. Oracles: ``F.layer_norm``, ``F.rms_norm``, ``torch.nn.RMSNorm``,
torch modules for the residual blocks, ``torch.autograd`` for the backward challenge (``cases.py``);
the catalogue of known mistakes and their hints is ``mistakes.py``.

``RMSNorm`` is called as ``Call("RMSNorm", (dim,), {"eps": ...}, state={"weight": w},
forward_args=(x,))``: the weight is loaded by name, so it must be the module's one parameter.
``RMSNorm`` calls ``rms_norm`` (the course's call graph): a broken ``rms_norm`` does not cost
``RMSNorm``'s points, the course's ``rms_norm`` stands in for it.
"""

from __future__ import annotations

from ..run import NotebookChecks, run_checks
from .cases import EXERCISES, visible_cases
from .mistakes import HINTS, MISTAKES

__all__ = [
    "EXERCISES",
    "HINTS",
    "MISTAKES",
    "NOTEBOOK",
    "check_RMSNorm",
    "check_layer_norm",
    "check_post_norm_residual",
    "check_pre_norm_residual",
    "check_rms_norm",
    "check_rms_norm_backward",
    "visible_cases",
]

NOTEBOOK = NotebookChecks(EXERCISES, lambda exercise: visible_cases(exercise),
                          "tfcourse.reference.nb04_normalisation", "04_normalisation.ipynb",
                          calls={"RMSNorm": ("rms_norm",)})


def check_layer_norm(layer_norm, part: str | None = None) -> None:
    """Check ``layer_norm(x, weight, bias, eps=1e-5)`` against F.layer_norm and properties.

    part: "core" (float32/float64, tiny inputs, eps) or "half" (float16/bfloat16), the two test
    cells that score it; None checks both."""
    run_checks("layer_norm", layer_norm, visible_cases("layer_norm"), part=part, notebook=NOTEBOOK)


def check_rms_norm(rms_norm, part: str | None = None) -> None:
    """Check ``rms_norm(x, weight, eps=1e-6)`` against F.rms_norm and properties.

    part: "core" or "half" (float16/bfloat16), the two test cells that score it; None checks both."""
    run_checks("rms_norm", rms_norm, visible_cases("rms_norm"), part=part, notebook=NOTEBOOK)


def check_RMSNorm(RMSNorm) -> None:  # the exercise's own name
    """Check the ``RMSNorm(dim, eps=1e-6)`` module against torch.nn.RMSNorm holding the same weight."""
    run_checks("RMSNorm", RMSNorm, visible_cases("RMSNorm"), notebook=NOTEBOOK)


def check_pre_norm_residual(pre_norm_residual) -> None:
    """Check ``pre_norm_residual(x, sublayer, norm)`` = x + sublayer(norm(x))."""
    run_checks("pre_norm_residual", pre_norm_residual, visible_cases("pre_norm_residual"), notebook=NOTEBOOK)


def check_post_norm_residual(post_norm_residual) -> None:
    """Check ``post_norm_residual(x, sublayer, norm)`` = norm(x + sublayer(x))."""
    run_checks("post_norm_residual", post_norm_residual, visible_cases("post_norm_residual"), notebook=NOTEBOOK)


def check_rms_norm_backward(rms_norm_backward) -> None:
    """Check ``rms_norm_backward(grad_out, x, weight, eps=1e-6)`` (optional, 0 points) against
    torch.autograd."""
    run_checks("rms_norm_backward", rms_norm_backward, visible_cases("rms_norm_backward"), notebook=NOTEBOOK)
