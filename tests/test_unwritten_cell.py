"""'The inputs are left unwritten' is a stated extra, scored from values by a test cell of its own.

``sample_next_token``'s task states that ``logits`` is left unchanged. Its ``unwritten`` test cell
(half a point) runs the answer twice on the very same logits and generator (``Call.twice``) and
the grading process judges what comes back: both draws against the distribution of the logits
as given, and the logits as they are after the calls against what was sent. An answer with the
right math that writes into its input (``logits /= temperature``) keeps every other cell and loses
this one. The child's own before/after comparison (``evidence.modified_input``) only writes a note
that costs nothing, so forging it (rewriting its "before" copy through ``sys._getframe``, or
replacing the detector in ``sys.modules``) earns nothing either: each forgery below loses the
cell exactly as the honest in-place answer does.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from grader.build import SOLUTIONS
from grader.grading import grade_submission
from tests.catalogue import load_catalogues, variant

NOTEBOOK = "06_kv_cache"
EXERCISE = "sample_next_token"
IN_PLACE = "logits divided in place (logits /= temperature)"


def _base() -> str:
    return next(e.source for e in load_catalogues()[NOTEBOOK].CORRECT[EXERCISE] if e.name == "multinomial, HF order")


def _in_place() -> str:
    return next(e.source for e in load_catalogues()[NOTEBOOK].WRONG[EXERCISE] if e.name == IN_PLACE)


# the write, then every 'before' copy the caller's frames keep made equal to the written tensor
# (the old detector compared the input with such a copy, taken in the child before the call)
_FRAME_REWRITE = '''    logits /= temperature
    frame = sys._getframe(1)
    while frame is not None:
        watched = frame.f_locals.get("watched")
        if isinstance(watched, list):
            for kept in watched:
                if isinstance(kept, tuple) and len(kept) == 3 and isinstance(kept[2], torch.Tensor):
                    kept[2].copy_(kept[1])
        frame = frame.f_back'''

# the detector replaced, in every module that holds it, when the cell is defined
_DETECTOR = '''import sys

for _name in ("tfcourse.checks.evidence", "tfcourse.checks.call"):
    if _name in sys.modules:
        sys.modules[_name].modified_input = lambda watched: None

'''


def _answers() -> dict[str, str]:
    in_place = _in_place()
    return {
        "honest in place": in_place,
        "frame rewrite of the before copy": "import sys\n\n" + variant(
            in_place, ("    logits /= temperature", _FRAME_REWRITE)),
        "the detector replaced in sys.modules": _DETECTOR + in_place,
    }


def _graded(source: str, root: Path) -> dict:
    nb = nbformat.read(SOLUTIONS / f"{NOTEBOOK}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == EXERCISE:
            cell.source = source
    folder = root / "submission"
    folder.mkdir()
    nbformat.write(nb, folder / f"{NOTEBOOK}.ipynb")
    (nb_report,) = grade_submission(folder, notebooks=[NOTEBOOK])["notebooks"]
    return {r["exercise"]: r for r in nb_report["exercises"]}


def test_the_answers_differ_from_the_base_only_where_they_say():
    answers = _answers()
    assert _in_place() != _base() and "logits /= temperature" in _in_place()
    assert "sys._getframe" in answers["frame rewrite of the before copy"]
    assert "modified_input = lambda" in answers["the detector replaced in sys.modules"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if i == 0 else [pytest.mark.slow])
                                  for i, n in enumerate(_answers())])
def test_an_in_place_write_loses_the_unwritten_cell_only_and_forging_the_detector_earns_nothing(name, tmp_path):
    rows = _graded(_answers()[name], tmp_path)
    row = rows[EXERCISE]
    parts = {p["test_cell"]: p["passed"] for p in row["parts"]}
    assert parts.pop(f"test_{EXERCISE}__unwritten") is False, f"{name}: the unwritten cell passed:\n{row['feedback']}"
    assert all(parts.values()), f"{name}: lost more than the unwritten cell: {parts}\n{row['feedback']}"
    assert row["score"] == row["max_score"] - 0.5, row
    assert "clone first" in row["feedback"], row["feedback"]
    others = [r for n, r in rows.items() if n != EXERCISE and r["status"] != "passed"]
    # generate uses the learner's sample_next_token; its single calls are unaffected by the write
    assert not others, [(r["exercise"], r["status"], r["feedback"]) for r in others]
