"""Half precision: the tolerances of float16/bfloat16 cases accept every correct way and catch bugs.

The hidden half-precision cases (grader/cases/half.py) compare an answer's float16 or bfloat16
outputs with the reference computed in float64 on the same half-valued inputs, within
``HALF_TOLERANCE``. Here every CORRECT catalogue entry of the exercises judged in half (the ones
that compute in half and the ones that compute in float32 and cast back) must pass every half
case, and the WRONG entries with a value bug must fail at least one. The margins are printed:
``worst correct`` is the largest |error| / (atol + rtol·|expected|) of a correct entry (must stay
below 1), ``smallest bug`` the smallest such ratio among the bugs' worst cases (far above 1).
"""

from __future__ import annotations

import functools

import pytest
import torch

from grader.cases import cases_for
from grader.cases.half import HALF_DTYPES, reference64
from tests.test_catalogue import Item, _define, _items
from tfcourse.checks.call import run_call
from tfcourse.checks.case import judge_case
from tfcourse.checks.tolerance import HALF_TOLERANCE

EXERCISES = {"01_attention": ("softmax", "scaled_dot_product_attention"),
             "02_multi_head_attention": ("MultiHeadAttention",),
             "03_positional_encodings": ("apply_rope", "apply_rope_interleaved"),
             "04_normalisation": ("layer_norm", "rms_norm", "RMSNorm"),
             "05_feed_forward": ("gelu", "FeedForward", "SwiGLU")}
# repeat_kv (07) only copies numbers: it has no half-precision cases (docs/grading.md)

# WRONG entries whose bug changes the values: at least one half case must fail them.
VALUE_BUGS = {
    "softmax": ("no max shift", "nan on all -inf slice", "normalised over the whole tensor",
                "shift by one global max"),
    "scaled_dot_product_attention": ("no 1/sqrt(Dh) scale", "divides by Dh", "softmax over the queries",
                                     "inverted mask polarity", "masked scores multiplied to 0",
                                     "NaN on fully masked rows", "mask applied after the softmax",
                                     "scores divided twice by sqrt(Dh)", "-1e9 fill (raises on float16)"),
    "MultiHeadAttention": ("split with view(B, H, T, Dh)", "merge without transpose", "scaled by sqrt(d_model)",
                           "forgot o_proj", "q scaled, then nb01 attention scales again", "keys and values from x",
                           "mask inverted (nn.MultiheadAttention habit)"),
    "layer_norm": ("unbiased variance (x.var default)", "statistics over T and D", "statistics in fp16 (no upcast)"),
    "rms_norm": ("mean subtracted", "squares in fp16", "Gemma's (1 + w)", "x.norm instead of RMS", "no square root"),
    "RMSNorm": ("Gemma: zeros and (1 + w)",),
    "apply_rope": ("minus instead of plus", "sin times x", "cos and sin swapped", "GPT-J pairing on rotate-half tables"),
    "apply_rope_interleaved": ("rotate-half pairs", "positions ignored", "rotates by -theta",
                               "cat tables with rotate_every_two", "exponent i/Dh"),
    "gelu": ("erf(x) without dividing by sqrt(2)", "quick GELU x * sigmoid(1.702 x)",
             "tanh form without the cubic term"),
    "FeedForward": ("ReLU (the 2017 Transformer)", "GELU after the second layer"),
    "SwiGLU": ("sigmoid gate (GLU)", "SiLU after the product", "gate and up swapped", "GELU gate (GeGLU)"),
}


def test_half_tolerances_are_stated_for_both_half_dtypes():
    assert set(HALF_TOLERANCE) == set(HALF_DTYPES)
    for atol, rtol in HALF_TOLERANCE.values():
        assert 0 < atol < 0.1 and 0 < rtol < 0.1


@functools.cache
def _half_cases(notebook: str, exercise: str):
    cases = [c for c in cases_for(notebook, exercise) if c.hidden and "half precision" in c.title]
    assert cases, f"{notebook} {exercise}: no half-precision case"
    found = {t.dtype for c in cases for t in c.calls[0].args + tuple(c.calls[0].forward_args or ())
             if isinstance(t, torch.Tensor) and t.is_floating_point()}
    # both half dtypes; float32 only as a side input (apply_rope's cos/sin tables)
    assert set(HALF_DTYPES) <= found <= set(HALF_DTYPES) | {torch.float32}, found
    return cases


def _ratio(outcome, expected, dtype) -> float:
    """Largest |got - expected| / (atol + rtol·|expected|) over the returned tensors (inf if unusable)."""
    if not outcome.ok or len(outcome.tensors) != len(expected.tensors):
        return float("inf")
    atol, rtol = HALF_TOLERANCE[dtype]
    worst = 0.0
    for got, want in zip(outcome.tensors, expected.tensors, strict=True):
        if got.shape != want.shape or got.dtype != dtype:
            return float("inf")
        err = (got.double() - want).abs().nan_to_num(nan=float("inf"))
        worst = max(worst, float((err / (atol + rtol * want.abs())).max()))
    return worst


def _run(item: Item):
    """[(case, result, ratio)] for every half case of ``item``'s exercise."""
    obj = _define(item)
    rows = []
    for case in _half_cases(item.notebook, item.exercise):
        call = case.calls[0]
        dtype = next(t.dtype for t in call.args + tuple(call.forward_args or ()) if isinstance(t, torch.Tensor))
        outcomes = [run_call(c, {item.exercise: obj}) for c in case.calls]
        rows.append((case, judge_case(case, outcomes), _ratio(outcomes[0], reference64(item.notebook, call), dtype)))
    return rows


def _selected(wrong: bool) -> list:
    return [pytest.param(it, id=it.id) for it in _items()
            if it.wrong == wrong and it.exercise in EXERCISES.get(it.notebook, ())
            and (not wrong or it.entry.name in VALUE_BUGS[it.exercise])]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("item", _selected(False))
def test_correct_entries_pass_every_half_case(item):
    rows = _run(item)
    failed = [r.message for _, r, _ in rows if r.status != "passed"]
    assert not failed, "a correct implementation fails a half-precision case:\n" + "\n".join(failed)
    print(f"{item.id}: worst correct {max(ratio for *_, ratio in rows):.2f} of the tolerance")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("item", _selected(True))
def test_value_bugs_fail_a_half_case(item):
    rows = _run(item)
    failed = [(case, r, ratio) for case, r, ratio in rows if r.status != "passed"]
    assert failed, f"{item.id} passes every half-precision case"
    print(f"{item.id}: fails {len(failed)} of {len(rows)} half cases; worst {max(x for *_, x in rows):.3g}x the "
          "tolerance")
    if "-1e9" in item.entry.name:  # the exception float16 raises gets its hint
        assert any("float32 constant such as -1e9" in r.message for _, r, _ in failed), failed[0][1].message


def test_every_value_bug_is_catalogued():
    names = {(it.exercise, it.entry.name) for it in _items() if it.wrong}
    missing = [(ex, n) for ex, entries in VALUE_BUGS.items() for n in entries if (ex, n) not in names]
    assert not missing, f"VALUE_BUGS names entries the catalogue lacks: {missing}"
