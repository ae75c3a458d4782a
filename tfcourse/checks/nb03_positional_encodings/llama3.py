"""Notebook 03's optional challenge (★★★, 0 points): ``llama3_inv_freq``, Llama 3.1's scaled RoPE
frequencies, judged against Meta's apply_scaling written per band in float64; its oracle and cases
(its catalogued mistakes are in mistakes.py). It registers last, after relative.py's exercises
(imported here for that), as in the notebook.
"""

from __future__ import annotations

import math

import torch

from ..call import Call
from ..case import Case, Judge
from . import relative  # noqa: F401 - exercises 7-9 register before this one (the notebook's order)
from .cases import F32, F64, NOTEBOOK, inv_freq64, make_case, returned_tensor

__all__ = ["llama3_oracle"]


# ---------------------------------------------------------------------------------------------
# the oracle (float64)
# ---------------------------------------------------------------------------------------------
def llama3_oracle(head_dim: int, base: float = 500000.0, factor: float = 8.0, low_freq_factor: float = 1.0,
                  high_freq_factor: float = 4.0, original_max_position_embeddings: int = 8192) -> torch.Tensor:
    """Llama 3.1's scaled frequencies in float64 (Meta's apply_scaling, written per band)."""
    old = original_max_position_embeddings
    out = []
    for f in inv_freq64(head_dim, base).tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / high_freq_factor:
            out.append(f)
        elif wavelen > old / low_freq_factor:
            out.append(f / factor)
        else:
            s = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - s) * f / factor + s * f)
    return torch.tensor(out, dtype=F64)


# ---------------------------------------------------------------------------------------------
# 10. llama3_inv_freq (optional challenge)
# ---------------------------------------------------------------------------------------------
@NOTEBOOK.exercise("llama3_inv_freq")
def _llama3_cases() -> list[Case]:
    """Check ``llama3_inv_freq(head_dim, ...)`` (optional challenge) against Meta's apply_scaling."""
    name = "llama3_inv_freq"
    cases = []
    for args, kwargs, what in (((128,), {}, "Dh = 128, Llama 3.1's defaults"),
                               ((64,), {"base": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 2.0, "original_max_position_embeddings": 1024},
                                "Dh = 64, base 10000, factor 4, high_freq_factor 2, 1024 original positions")):
        def judge(j: Judge, args=args, kwargs=kwargs) -> None:
            want = llama3_oracle(*args, **kwargs)
            got = returned_tensor(j, shape=want.shape, dtype=F32)
            j.close(got, want, atol=0.0, rtol=1e-5, oracle="Meta's apply_scaling", tol_dtype=F32)

        cases.append(make_case(name, f"{what}: (Dh/2,) scaled frequencies", [Call(name, args, kwargs)], judge))
    return cases
