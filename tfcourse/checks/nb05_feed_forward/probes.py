"""Probe experts that notebook 05's ``sparse`` checks put into the learner's ``MoE`` (plain torch only).

The grader's sandboxed child builds them by name (``Instance("tfcourse.checks.nb05_feed_forward.
probes:RoutedExpert", ...)``, in ``Call.replace``), so this module imports nothing from
``tfcourse.reference``.

A ``RoutedExpert`` is expert ``index`` of a MoE whose router weight it is given: a SwiGLU with
the case's weights plus a fixed vector ``marker`` (so its output is not the SwiGLU of its three
projections: the module itself must be called), and a pure function of the rows it receives. It
works out from each row, with the router weight, whether the row's top K hold ``index``; if one
row does not, the output of the whole call is NaN. So the MoE's ``y`` comes out right only when
every expert's forward receives only tokens routed to it: running every expert on every token
and masking (a zero weight, ``torch.where``, ``type(expert).forward(expert, h)``) gives NaN, and
the verdict is the value of ``y``, judged in the grading process. Nothing is counted or recorded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["RoutedExpert"]


class RoutedExpert(nn.Module):
    """Expert ``index`` of ``top_k``-of-E routing by ``router`` (E, D): SwiGLU(h) + marker on rows
    routed to it, NaN for the whole call when a row is not (see the module docstring).

    gate_proj, up_proj: (F, D); down_proj: (D, F); marker: (D,); all in the case's dtype.
    """

    def __init__(self, router: torch.Tensor, index: int, top_k: int, gate_proj: torch.Tensor,
                 up_proj: torch.Tensor, down_proj: torch.Tensor, marker: torch.Tensor):
        super().__init__()
        d_ff, d_model = gate_proj.shape
        self.index, self.top_k = int(index), int(top_k)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False, dtype=gate_proj.dtype)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False, dtype=up_proj.dtype)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False, dtype=down_proj.dtype)
        with torch.no_grad():
            self.gate_proj.weight.copy_(gate_proj)
            self.up_proj.weight.copy_(up_proj)
            self.down_proj.weight.copy_(down_proj)
        self.register_buffer("router", router.clone(), persistent=False)
        self.register_buffer("marker", marker.clone(), persistent=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)) + self.marker
        rows = h.detach().reshape(-1, h.size(-1)).double()
        if rows.size(0):
            probs = torch.softmax(rows @ self.router.double().T, dim=-1)  # (n, E)
            chosen = probs.topk(self.top_k, dim=-1).indices  # (n, K)
            if not bool((chosen == self.index).any(dim=-1).all()):
                return torch.full_like(out, float("nan"))  # a row not routed here: the whole call
        return out
