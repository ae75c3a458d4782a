"""Hints name the learner's real mistake, or nothing (issue 7, item 1).

``Judge.mistake_hint`` shows a catalogued mistake's hint only when that mistake reproduces the
answer on every call of the failing case and no mistake with another hint does as well. Here:

* the rule itself, on small hand-made cases (ambiguity gives no hint; one call is not enough);
* the issue's example: a softmax shifted by one global max, on x = [[1000, 999, 0],
  [-1000, -1001, -1002]], is never told to "normalise each slice";
* over the whole catalogue: at least 80 % of the WRONG entries get a hint naming them (the
  figure is printed), and no wrong entry ever gets a hint naming another mistake.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
import torch

from tests.test_catalogue import _check, _define, _hint_lines, _items
from tfcourse.checks.call import Call, run_call
from tfcourse.checks.case import Case, CheckFailed, Judge, judge_case
from tfcourse.checks.hints import Mistake
from tfcourse.checks.nb01_attention import MISTAKES, NOTEBOOK

MIN_COVERAGE = 0.8


def _double(x):
    return x * 2


def _double_again(x):
    return x + x


def _triple(x):
    return x * 3


def _judge_hint(fn, calls, mistakes) -> str | None:
    case = Case("f", "title", calls, lambda j: None, mistakes=mistakes)
    outcomes = [run_call(c, {"f": fn}) for c in calls]
    return Judge(case, outcomes).mistake_hint(0)


def test_one_matching_mistake_gives_its_hint():
    x = torch.arange(3.0)
    assert _judge_hint(_double, [Call("f", (x,))], [Mistake("double", "doubled", _double),
                                                    Mistake("triple", "tripled", _triple)]) == "doubled"


def test_two_mistakes_with_other_hints_give_no_hint():
    x = torch.arange(3.0)
    mistakes = [Mistake("double", "doubled", _double), Mistake("double again", "added twice", _double_again)]
    assert _judge_hint(_double, [Call("f", (x,))], mistakes) is None


def test_two_mistakes_with_the_same_hint_are_one_explanation():
    x = torch.arange(3.0)
    mistakes = [Mistake("double", "doubled", _double), Mistake("double again", "doubled", _double_again)]
    assert _judge_hint(_double, [Call("f", (x,))], mistakes) == "doubled"


def test_a_mistake_must_reproduce_every_call_of_the_case():
    def doubles_small(x):  # doubles only inputs below 10
        return torch.where(x < 10, x * 2, x)

    calls = [Call("f", (torch.arange(3.0),)), Call("f", (torch.arange(10.0, 13.0),))]
    assert _judge_hint(doubles_small, calls, [Mistake("double", "doubled", _double)]) is None
    assert _judge_hint(doubles_small, calls[:1], [Mistake("double", "doubled", _double)]) == "doubled"


def test_an_answer_that_raised_matches_only_a_mistake_that_raises_the_same():
    def raises(x):
        raise ValueError("no")

    case = Case("f", "t", [Call("f", (torch.ones(2),)), Call("f", (torch.ones(3),))], lambda j: None,
                mistakes=[Mistake("double", "doubled", _double)])
    outcomes = [run_call(case.calls[0], {"f": _double}), run_call(case.calls[1], {"f": raises})]
    assert outcomes[1].kind == "error"
    assert Judge(case, outcomes).mistake_hint(0) is None


# ---------------------------------------------------------------------------------------------
# The issue's example
# ---------------------------------------------------------------------------------------------
def _global_shift_zeroed(x, dim=-1):
    e = torch.exp(x - x.max())
    total = e.sum(dim=dim, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros_like(e))


def _clamped_shift(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True).clamp(min=0)
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize("answer", [_global_shift_zeroed, _clamped_shift])
def test_issue_example_shift_by_one_max_is_not_told_to_normalise_each_slice(answer):
    x = torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -1002.0]], dtype=torch.float64)
    (case,) = [c for c in NOTEBOOK.cases("softmax") if torch.equal(c.calls[0].args[0], x)]
    result = judge_case(case, [run_call(c, {"softmax": answer}) for c in case.calls])
    assert result.status == "failed"
    hints = _hint_lines(result.message)
    assert not any("normalise each slice" in h for h in hints), result.message
    assert all("its own max" in h for h in hints), result.message
    # and on that input alone the global-sum mistake would fit as well: the hint comes from the
    # moderate logits the case also runs, or not at all
    alone = Case("softmax", "t", case.calls[:1], lambda j: None, mistakes=MISTAKES["softmax"])
    hint = Judge(alone, [run_call(case.calls[0], {"softmax": answer})]).mistake_hint(0)
    assert hint is None or "its own max" in hint


# ---------------------------------------------------------------------------------------------
# Over the catalogue
# ---------------------------------------------------------------------------------------------
def _feedback(item) -> str:
    try:
        with redirect_stdout(io.StringIO()):
            _check(item)(_define(item))
    except CheckFailed as failure:
        return str(failure)
    return ""


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_hint_coverage_and_no_misleading_hint():
    wrong = [it for it in _items() if it.wrong]
    named, misleading = [], []
    for item in wrong:
        hints = _hint_lines(_feedback(item))
        if item.entry.hint is not None and any(item.entry.hint in h for h in hints):
            named.append(item.id)
        elif hints:  # a hint line that does not name this entry's mistake
            misleading.append(f"{item.id}: {hints[0].strip()}")
    coverage = len(named) / len(wrong)
    print(f"\nhint coverage: {len(named)} of {len(wrong)} wrong entries ({coverage:.0%}) get a hint naming them")
    assert not misleading, "hints that name another mistake:\n" + "\n".join(misleading)
    assert coverage >= MIN_COVERAGE, f"only {coverage:.0%} of the wrong entries get their hint"



def test_a_failing_check_works_out_its_lazy_hint_and_a_passing_one_does_not():
    """``hint=lambda: ...`` runs only when the check fails; None from it falls back to the catalogue."""
    x = torch.arange(3.0)
    calls = [Call("f", (x,))]
    ran = []

    def judge(j: Judge) -> None:
        j.require(True, "never shown", hint=lambda: ran.append("passing") or "unused")
        j.close(j.tensor(), x * 3, hint=lambda: ran.append("failing") or None)

    case = Case("f", "title", calls, judge, mistakes=[Mistake("double", "doubled", _double)])
    result = judge_case(case, [run_call(c, {"f": _double}) for c in calls])
    assert ran == ["failing"]
    assert result.status == "failed" and "hint: doubled" in result.message, result.message


def _hidden_and_visible_cases():
    from grader.cases import cases_for
    from grader.course import load_course
    from grader.names import DEFAULT_SEED

    for name, notebook in load_course().items():
        for exercise in notebook.exercises:
            yield name, exercise.name, cases_for(name, exercise.name, DEFAULT_SEED)


def test_the_reference_passes_every_case_without_running_the_catalogue(monkeypatch):
    """A passing answer costs no hint: judging the reference's own outcomes (every visible and
    hidden case of the course) never runs a catalogued mistake. Before hints were lazy, each
    ``hint=j.mistake_hint()`` argument ran the catalogue on every case, failing or not: about 6 s
    of a full submission's grading."""
    from grader.expected import reference_outcomes_of

    def no_catalogue(self, mistake, call):
        raise AssertionError(f"{self.case.exercise}: the catalogue ran ({mistake.name}) on a passing case")

    monkeypatch.setattr(Judge, "_mistake_outcome", no_catalogue)
    judged = 0
    for notebook, exercise, cases in _hidden_and_visible_cases():
        for case in cases:
            outcomes = reference_outcomes_of(notebook, case)
            result = judge_case(case, outcomes, outcomes)
            assert result.status == "passed", f"{notebook} {exercise}: {case.title}: {result.message}"
            judged += bool(case.mistakes)
    assert judged > 100, judged  # cases with a catalogue to run: the check above can fail
