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

from .cases import NOTEBOOK
from .mistakes import HINTS, MISTAKES

__all__ = ["HINTS", "MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
