"""Checks for notebook 05, feed-forward layers: GELU, the GELU MLP, SwiGLU and its width,
a mixture of experts, the load-balancing loss and (optional) capacity routing.

Each ``check_<name>(obj)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. Oracles (``cases.py``): ``F.gelu``, the FFN formulas written with
``F.linear`` on the same weights, Meta's Llama widths, a dense MoE (every expert weighted by the
renormalised top-K), hand-computable balance losses and a loop over the capacity queue;
``mistakes.py`` is the catalogue of known wrong implementations whose hints the feedback shows.

Modules are built and loaded by parameter name, e.g. ``Call("MoE", (D, F, E, K), state=...,
forward_args=(x,), count_rows_of="experts")``: the sparse part counts the rows each expert's
forward receives. ``FeedForward`` calls ``gelu`` and ``MoE`` calls ``SwiGLU`` (the course's call
graph): a broken ``gelu`` or ``SwiGLU`` does not cost the caller's points, the course's version
stands in for it.
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
    "check_FeedForward",
    "check_MoE",
    "check_SwiGLU",
    "check_gelu",
    "check_load_balancing_loss",
    "check_route_with_capacity",
    "check_swiglu_hidden_dim",
    "visible_cases",
]

NOTEBOOK = NotebookChecks(EXERCISES, lambda exercise: visible_cases(exercise),
                          "tfcourse.reference.nb05_feed_forward", "05_feed_forward.ipynb",
                          calls={"FeedForward": ("gelu",), "MoE": ("SwiGLU",)})


def _run(exercise: str, obj, part: str | None = None) -> None:
    run_checks(exercise, obj, visible_cases(exercise), part=part, notebook=NOTEBOOK)


def check_gelu(gelu, part: str | None = None) -> None:
    """Check ``gelu(x, approximate="none")`` against F.gelu.

    part: "core" (the exact form, float32/float64) or "tanh" (the tanh form, float16/bfloat16 for
    both forms, and the ValueError for another `approximate`), the two test cells that score it;
    None checks both."""
    _run("gelu", gelu, part)


def check_FeedForward(FeedForward) -> None:  # the exercise's own name
    """Check ``FeedForward(d_model, d_ff, bias=True)`` = down_proj(gelu(up_proj(x))), weights loaded
    by name (up_proj, down_proj), with and without bias."""
    _run("FeedForward", FeedForward)


def check_SwiGLU(SwiGLU) -> None:  # the exercise's own name
    """Check ``SwiGLU(d_model, d_ff)`` = down_proj(silu(gate_proj(x)) * up_proj(x)), weights loaded
    by name, no biases."""
    _run("SwiGLU", SwiGLU)


def check_swiglu_hidden_dim(swiglu_hidden_dim) -> None:
    """Check ``swiglu_hidden_dim(d_model, multiple_of=256, ffn_dim_multiplier=None)`` against
    Llama's published widths (a Python int), and its ValueErrors."""
    _run("swiglu_hidden_dim", swiglu_hidden_dim)


def check_MoE(MoE, part: str | None = None) -> None:  # the exercise's own name
    """Check ``MoE(d_model, d_ff, num_experts, top_k)``: (y, router_logits (N, E)) against a dense
    weighted sum of the experts.

    part: "core" (values, router logits, ValueError, attributes) or "sparse" (each expert's
    forward receives only the tokens routed to it), the two test cells; None checks both."""
    _run("MoE", MoE, part)


def check_load_balancing_loss(load_balancing_loss) -> None:
    """Check ``load_balancing_loss(router_logits, top_k)`` = E·Σ f·P: 1.0 for balanced routing."""
    _run("load_balancing_loss", load_balancing_loss)


def check_route_with_capacity(route_with_capacity) -> None:
    """Check ``route_with_capacity(router_logits, top_k, capacity)`` (optional, 0 points) against a
    loop over the queue: slot 0 of every token first, each expert keeps the first `capacity`."""
    _run("route_with_capacity", route_with_capacity)
