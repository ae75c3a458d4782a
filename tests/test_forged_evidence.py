"""Evidence gathered in the learner's process cannot be forged into a point (issue 25, part 5).

Three test cells used to rest on what code in the learner's own process observed, and each was
forged (docs/grading.md, "Evidence gathered in the child"):

* ``generate``'s ``cache_use``: recomputing the whole sequence at every step, then rewriting the
  probe's call record (its module's ``_RECORDS``) or swapping ``model.__class__`` for a subclass
  with a fake ``record``. Now the probe keeps no record: its logits depend on how it is called,
  and the grading process compares the tokens with the reference's.
* ``MoE``'s ``sparse``: every expert on every token through ``type(expert).forward(expert, h)``
  (which the row counter did not wrap) plus a throwaway call with the routed rows, or masking with
  ``torch.where``. Now the experts are probes that return NaN for a call holding a token not
  routed to them, and y is judged.
* ``MultiHeadLatentAttention``'s ``absorb``: the naive path inside
  ``torch._C.DisableTorchFunction()``, or after replacing the watcher in ``sys.modules``. Now the
  watcher also runs as a dispatch mode and is bound at import, before learner code runs (still
  evidence in the child: docs/grading.md says what remains forgeable).

Each forgery, a catalogue entry, is graded here through the real grader: its cell scores 0 and
the exercise's other cells keep their points where the forgery computes them honestly. Honest
alternatives from the catalogue keep every point. The cheap in-process counterparts (every
catalogue entry through the checks) are in tests/test_catalogue.py.
"""

from __future__ import annotations

import pytest

from grader.grading import grade_submission
from tests.catalogue import load_catalogues
from tests.test_catalogue import Item, _submission

# (notebook, exercise, catalogue entry, the test cell it must not earn, the cells it keeps)
FORGERIES = [
    ("06_kv_cache", "generate", "recomputes every step, rewrites the probe module's _RECORDS",
     "test_generate__cache_use", ("test_generate",)),
    ("06_kv_cache", "generate", "recomputes every step, swaps model.__class__ for one with a fake record",
     "test_generate__cache_use", ("test_generate",)),
    ("05_feed_forward", "MoE", "type(expert).forward on every token, a throwaway call with the routed rows",
     "test_MoE__sparse", ("test_MoE", "test_MoE__validation")),
    ("05_feed_forward", "MoE", "every expert on every token, torch.where keeps the routed rows",
     "test_MoE__sparse", ("test_MoE", "test_MoE__validation")),
    ("07_gqa_mla", "MultiHeadLatentAttention", "absorbed: the naive path inside torch._C.DisableTorchFunction()",
     "test_MultiHeadLatentAttention__absorb", ("test_MultiHeadLatentAttention", "test_MultiHeadLatentAttention__cache")),
    ("07_gqa_mla", "MultiHeadLatentAttention",
     "absorbed: the naive path after replacing the checks' watcher in sys.modules",
     "test_MultiHeadLatentAttention__absorb", ("test_MultiHeadLatentAttention", "test_MultiHeadLatentAttention__cache")),
]

HONEST = [
    ("06_kv_cache", "generate", "prefill before the loop, then decode steps (nanoGPT/HF style, a list of new tokens)"),
    ("05_feed_forward", "MoE", "grouped dispatch: tokens sorted by expert, one chunk per expert (split by counts)"),
    ("05_feed_forward", "MoE", "one token at a time"),
    ("07_gqa_mla", "MultiHeadLatentAttention", "Hugging Face DeepseekV3Attention logic, einsum absorbed path"),
]


def _item(notebook: str, exercise: str, name: str, wrong: bool) -> Item:
    module = load_catalogues()[notebook]
    (entry,) = [e for e in (module.WRONG if wrong else module.CORRECT)[exercise] if e.name == name]
    return Item(notebook, exercise, wrong, entry)


def _graded(item: Item, tmp_path) -> dict:
    (nb,) = grade_submission(_submission(item, tmp_path), notebooks=[item.notebook])["notebooks"]
    (row,) = [r for r in nb["exercises"] if r["exercise"] == item.exercise]
    return row


def test_every_forgery_and_honest_entry_is_in_the_catalogue():
    for notebook, exercise, name, *_ in FORGERIES:
        _item(notebook, exercise, name, True)
    for notebook, exercise, name in HONEST:
        _item(notebook, exercise, name, False)


@pytest.mark.slow
@pytest.mark.parametrize(("notebook", "exercise", "name", "cell", "kept"), FORGERIES, ids=[f[2] for f in FORGERIES])
def test_a_forgery_earns_no_point_of_the_cell_it_forges(notebook, exercise, name, cell, kept, tmp_path):
    row = _graded(_item(notebook, exercise, name, True), tmp_path)
    parts = {p["test_cell"]: p for p in row["parts"]}
    assert parts[cell]["score"] == 0 and not parts[cell]["passed"], row["feedback"]
    for other in kept:
        assert parts[other]["passed"] and parts[other]["score"] == parts[other]["max_score"], row["feedback"]


@pytest.mark.slow
@pytest.mark.parametrize(("notebook", "exercise", "name"), HONEST, ids=[h[2] for h in HONEST])
def test_an_honest_alternative_keeps_every_point(notebook, exercise, name, tmp_path):
    row = _graded(_item(notebook, exercise, name, False), tmp_path)
    assert row["status"] == "passed" and row["score"] == row["max_score"], row["feedback"]
