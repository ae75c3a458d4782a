"""tfcourse.yours: a demo runs the learner's code only when it passes its checks, says whose code
it used, and does not rerun checks that already passed with the same object."""

from __future__ import annotations

import torch

from tfcourse.checks.nb01_attention import NOTEBOOK, check_softmax
from tfcourse.yours import first_failure, yours_or_reference


def softmax(x, dim=-1):
    z = x - x.amax(dim=dim, keepdim=True).nan_to_num(neginf=0.0)
    e = torch.exp(z)
    s = e.sum(dim=dim, keepdim=True)
    return torch.where(s > 0, e / s.clamp(min=torch.finfo(x.dtype).tiny), torch.zeros_like(e))


def wrong_softmax(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)


def test_a_passing_answer_is_used_and_a_failing_or_missing_one_is_named(capsys):
    assert first_failure(NOTEBOOK, "softmax", softmax) is None
    assert "not defined" in first_failure(NOTEBOOK, "softmax", None)
    why = first_failure(NOTEBOOK, "softmax", wrong_softmax)
    assert why and "\n" not in why and not why.startswith("✗")
    reference = object()
    assert yours_or_reference(NOTEBOOK, "softmax", softmax, reference) == (softmax, True)
    assert yours_or_reference(NOTEBOOK, "softmax", wrong_softmax, reference) == (reference, False)
    out = capsys.readouterr().out
    assert "using your softmax" in out and f"using the course's softmax: yours does not pass its checks yet ({why})" in out


def test_a_check_cell_that_passed_is_not_run_again(monkeypatch):
    check_softmax(softmax)  # the check cell, run by the learner
    ran = []
    monkeypatch.setattr(NOTEBOOK, "run", lambda *a, **k: ran.append(a))
    assert first_failure(NOTEBOOK, "softmax", softmax) is None and ran == []
    def redefined(x, dim=-1):  # the cell edited and run again: another object, checked afresh
        return softmax(x, dim)

    assert first_failure(NOTEBOOK, "softmax", redefined) is None and len(ran) == len(NOTEBOOK.parts("softmax"))
