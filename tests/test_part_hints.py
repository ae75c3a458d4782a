"""Feedback that names the right cause and the right call.

* A test cell's hint is right when the bug sits in another part: ``generate`` that makes new
  caches at every step passes the sampling options on correctly, so its ``cache_use`` cell must
  not tell it to "pass temperature, top_k, top_p and generator on" (it did); it names the fresh
  caches, which the probe's tokens show. The learner's own greedy run only chooses that hint; the verdict
  still compares with the reference's tokens.
* The ``inputs:`` line shows the call a failure is about, not always the first one, and a call
  that must raise is not described as returning "a Python int".
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from tests.catalogue import load_catalogues
from tests.test_catalogue import Item, _check, _define
from tfcourse.checks.call import INT_STEP, Call
from tfcourse.checks.case import Case, CheckFailed

NB06 = "06_kv_cache"


def _entry(notebook: str, exercise: str, name: str, wrong: bool = True) -> Item:
    module = load_catalogues()[notebook]
    entries = (module.WRONG if wrong else module.CORRECT)[exercise]
    (entry,) = [e for e in entries if e.name == name]
    return Item(notebook, exercise, wrong, entry)


def _feedback(item: Item, **kwargs) -> str:
    with redirect_stdout(io.StringIO()), pytest.raises(CheckFailed) as failure:
        _check(item)(_define(item), **kwargs)
    return str(failure.value)


def test_fresh_caches_are_not_told_to_pass_the_options_on():
    item = _entry(NB06, "generate", "new caches at every step")
    core = _feedback(item, part="core")
    assert "hint: create the caches once, before the loop" in core, core
    cache_use = _feedback(item, part="cache_use")
    assert "pass temperature, top_k, top_p and generator on" not in cache_use, cache_use
    # its first failing cache_use case is how it calls the model, read off the tokens of a probe whose
    # logits depend on the calls: the same hint as core's (the options case would say "the options do
    # reach sample_next_token")
    assert "hint: create the caches once, before the loop" in cache_use, cache_use


def test_options_not_passed_on_still_get_that_hint():
    item = _entry(NB06, "generate", "only the temperature passed on")
    feedback = _feedback(item, part="cache_use")
    assert "hint: pass temperature, top_k, top_p and generator on to sample_next_token" in feedback, feedback


_BYTES_HALF_VALIDATED = Item(NB06, "kv_cache_bytes", True, _entry(NB06, "kv_cache_bytes", "batch_size ignored").entry
                             ._replace(name="validates num_layers only", source='''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_element=2):
    if num_layers < 0:
        raise ValueError("num_layers must be >= 0")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
'''))


def test_the_inputs_line_shows_the_call_that_failed():
    feedback = _feedback(_BYTES_HALF_VALIDATED)
    lines = feedback.splitlines()
    assert lines[0] == "✗ kv_cache_bytes: ValueError for a negative argument", feedback
    assert lines[1] == "  inputs: kv_cache_bytes(2, 8, 128, -5) (call 2 of 3)", feedback
    assert "which must be a Python int" not in feedback, feedback


def test_inputs_names_one_call_or_the_first_and_how_many_more():
    calls = [Call("f", (1,)), Call("f", (2,), steps=(INT_STEP,)), Call("f", (3,))]
    case = Case("f", "title", calls, lambda j: None)
    assert case.inputs() == "f(1) (+2 more calls)"
    assert case.inputs(1) == "f(2), which must be a Python int (call 2 of 3)"
    assert case.inputs(7) == case.inputs()  # out of range: the default line, never a crash
    one = Case("f", "title", calls[:1], lambda j: None, seed=5)
    assert one.inputs(0) == one.inputs() == "f(1); seed 5"
