"""Checks for notebook 03, positional encodings.

Each ``check_<name>(fn)`` runs the visible cases of exercise ``<name>`` in this process and prints
one line when they pass; the grader runs the same cases (plus hidden ones that compare with the
reference solution) in a sandbox. ``cases.py`` holds the visible cases and their oracles (the
float64 formulas with the angle-scaled tolerance of docs/conventions.md, rotations written as
complex products, RoPE's properties, Press et al.'s slope code, the q·k scores a weight
permutation must keep); ``mistakes.py`` the catalogue of known wrong implementations whose hints
the feedback shows.
"""

from __future__ import annotations

from ..run import NotebookChecks, run_checks
from .cases import EXERCISES, visible_cases
from .mistakes import MISTAKES

__all__ = [
    "EXERCISES",
    "MISTAKES",
    "NOTEBOOK",
    "check_alibi_bias",
    "check_alibi_slopes",
    "check_apply_rope",
    "check_apply_rope_interleaved",
    "check_llama3_inv_freq",
    "check_permute_for_rotate_half",
    "check_relative_position_bucket",
    "check_rope_cos_sin",
    "check_rotate_half",
    "check_sinusoidal_position_encoding",
    "visible_cases",
]

# Another exercise an answer calls and that fails its own check is replaced by the course's
# version while the answer is checked: one bug costs points once (the grader does the same).
NOTEBOOK = NotebookChecks(EXERCISES, lambda exercise: visible_cases(exercise),
                          "tfcourse.reference.nb03_positional_encodings", "03_positional_encodings.ipynb",
                          calls={"apply_rope": ("rotate_half",), "alibi_bias": ("alibi_slopes",)})


def _run(exercise: str, obj, part: str | None = None) -> None:
    run_checks(exercise, obj, visible_cases(exercise), part=part, notebook=NOTEBOOK)


def check_sinusoidal_position_encoding(sinusoidal_position_encoding) -> None:
    """Check ``sinusoidal_position_encoding(num_positions, d_model, base=10000.0)`` against the float64
    formula (interleaved sin/cos), with the base as a parameter and ValueError for odd d_model."""
    _run("sinusoidal_position_encoding", sinusoidal_position_encoding)


def check_rope_cos_sin(rope_cos_sin) -> None:
    """Check ``rope_cos_sin(positions, head_dim, base=10000.0)``: rotate-half tables for (T,) and
    (B, T) positions, float32, ValueError for odd head_dim."""
    _run("rope_cos_sin", rope_cos_sin)


def check_rotate_half(rotate_half) -> None:
    """Check ``rotate_half(x)`` = cat(−x2, x1) on the last axis, exactly."""
    _run("rotate_half", rotate_half)


def check_apply_rope(apply_rope, part: str | None = None) -> None:
    """Check ``apply_rope(x, cos, sin)``: part "core" ((T, Dh) tables, norms preserved, scores depend on
    m − n only) or "batched" ((B, T, Dh) tables); None checks both."""
    _run("apply_rope", apply_rope, part)


def check_apply_rope_interleaved(apply_rope_interleaved) -> None:
    """Check ``apply_rope_interleaved(x, positions, base=10000.0)``: pairs (2i, 2i+1), (T,) and (B, T)
    positions, norms preserved, scores depend on m − n only."""
    _run("apply_rope_interleaved", apply_rope_interleaved)


def check_permute_for_rotate_half(permute_for_rotate_half) -> None:
    """Check ``permute_for_rotate_half(weight, num_heads)`` by the q·k scores it must keep, its rows, and
    its ValueErrors."""
    _run("permute_for_rotate_half", permute_for_rotate_half)


def check_alibi_slopes(alibi_slopes, part: str | None = None) -> None:
    """Check ``alibi_slopes(num_heads)`` against Press et al.'s code: part "core" (powers of two) or
    "other_head_counts" (6, 12, 20 heads, and ValueError for 0); None checks both."""
    _run("alibi_slopes", alibi_slopes, part)


def check_alibi_bias(alibi_bias) -> None:
    """Check ``alibi_bias(num_heads, t_q, t_k=None)`` = −slope·(q_pos − k_pos), bottom-right positions."""
    _run("alibi_bias", alibi_bias)


def check_relative_position_bucket(relative_position_bucket, part: str | None = None) -> None:
    """Check ``relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
    max_distance=128)`` against T5's buckets and their properties: part "core" (bidirectional) or
    "unidirectional"; None checks both."""
    _run("relative_position_bucket", relative_position_bucket, part)


def check_llama3_inv_freq(llama3_inv_freq) -> None:
    """Check ``llama3_inv_freq(head_dim, ...)`` (optional challenge) against Meta's apply_scaling."""
    _run("llama3_inv_freq", llama3_inv_freq)
