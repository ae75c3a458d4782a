"""Notebook 02 specifics that the generic catalogue harness (tests/test_catalogue.py) does not cover.

* every mistake of ``MISTAKES`` fails its exercise's check and gets its own hint;
* the property cases catch what they are there for on their own (a split that mixes tokens
  is caught by values, a module that ignores the mask by causality, ...);
* the checks' two oracles (``nn.MultiheadAttention`` with the opposite mask polarity, and
  ``F.scaled_dot_product_attention`` head by head) agree, in float64;
* the reference solution passes every visible and hidden case, for two grader seeds;
* the grader loads weights by parameter name: other names, other sizes or an ignored ``bias``
  fail with a hint that says so;
* ``split_heads`` must raise ValueError with both numbers, in the visible and the hidden cases;
* ``mha_from_torch`` is judged through the learner's own ``MultiHeadAttention``, so a bug of
  exercise 3 is not charged to exercise 4 again, while a wrong conversion still fails.
"""

from __future__ import annotations

import importlib
import io
from contextlib import redirect_stdout
from typing import Any

import pytest
import torch

from grader.build import NOTEBOOKS, SOLUTIONS
from grader.cases import nb02_multi_head_attention as graded
from tfcourse.checks import nb02_multi_head_attention as nb02
from tfcourse.checks.call import run_call
from tfcourse.checks.case import CheckFailed, judge_case
from tfcourse.checks.nb02_multi_head_attention import cases as nb02_cases
from tfcourse.checks.nb02_multi_head_attention import mistakes as nb02_mistakes
from tfcourse.checks.tolerance import tolerance
from tfcourse.notebook import read_notebook, setup_source

pytestmark = pytest.mark.nb02

NOTEBOOK = "02_multi_head_attention"
REFERENCE = importlib.import_module("tfcourse.reference.nb02_multi_head_attention")


def _feedback(exercise: str, obj: Any) -> str:
    """The CheckFailed message of check_<exercise>(obj); fails the test if the check passes."""
    with redirect_stdout(io.StringIO()), pytest.raises(CheckFailed) as failure:
        getattr(nb02, f"check_{exercise}")(obj)
    return str(failure.value)


def _hint(feedback: str) -> str:
    hints = [line for line in feedback.splitlines() if line.startswith("  hint:")]
    assert len(hints) <= 1, feedback
    return hints[0] if hints else ""


def _cell_namespace(*sources: str) -> dict[str, Any]:
    """The released notebook's setup cell, then ``sources``, in a fresh namespace."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    setup = setup_source(read_notebook(NOTEBOOKS / f"{NOTEBOOK}.ipynb"))
    exec(compile(setup, "<setup>", "exec"), namespace)
    for source in sources:
        exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


MISTAKE_PARAMS = [pytest.param(ex, m, id=f"{ex}::{m.name}") for ex, ms in nb02.MISTAKES.items() for m in ms]


@pytest.mark.parametrize(("exercise", "mistake"), MISTAKE_PARAMS)
def test_every_catalogued_mistake_is_caught_with_its_own_hint(exercise, mistake):
    feedback = _feedback(exercise, mistake.fn)
    assert len(feedback.splitlines()) <= 8, feedback
    assert mistake.hint in _hint(feedback), feedback


def _only_case(exercise: str, title_part: str):
    (case,) = [c for c in nb02.NOTEBOOK.cases(exercise) if title_part in c.title]
    return case


def _judge(case, namespace: dict[str, Any], expected=None):
    outcomes = [run_call(call, namespace) for call in case.calls]
    return judge_case(case, outcomes, expected)


@pytest.mark.parametrize(("exercise", "title_part", "mistake_name", "says"), [
    ("split_heads", "tokens stay tokens", "view without transpose", "only t = 3 may change"),
    ("merge_heads", "tokens stay tokens", "reshape without transpose", "only t = 2 may change"),
    ("MultiHeadAttention", "causal mask: outputs at t < 4", "mask ignored", "out[:, :4]"),
    ("MultiHeadAttention", "permuting the tokens", "split view without transpose", "output for x[:, perm]"),
    ("MultiHeadAttention", "may attend no key", "inverted mask", "expected (row 1"),
])
def test_property_cases_catch_their_mistake_on_their_own(exercise, title_part, mistake_name, says):
    case = _only_case(exercise, title_part)
    (mistake,) = [m for m in nb02.MISTAKES[exercise] if m.name == mistake_name]
    result = _judge(case, {exercise: mistake.fn})
    assert result.status == "failed" and says in result.message, result.message
    assert _judge(case, vars(REFERENCE)).status == "passed"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("t", "s", "mask_kind"), [(5, None, None), (6, None, "causal"), (3, 7, "padding"),
                                                   (4, 6, "random")])
def test_the_two_oracles_agree(dtype, t, s, mask_kind):
    g = torch.Generator().manual_seed(7)
    d_model, num_heads, batch = 16, 4, 2
    state = nb02_cases.random_mha_state(3, d_model, bias=True, dtype=dtype)
    x = torch.randn(batch, t, d_model, generator=g, dtype=dtype)
    context = None if s is None else torch.randn(batch, s, d_model, generator=g, dtype=dtype)
    s_len = t if s is None else s
    mask = {None: None,
            "causal": torch.ones(t, s_len, dtype=torch.bool).tril(s_len - t),
            "padding": (torch.arange(s_len)[None, :] < torch.tensor([s_len, 2])[:, None])[:, None, None, :],
            "random": (torch.rand(batch, 1, t, s_len, generator=g) > 0.5) | torch.eye(t, s_len, dtype=torch.bool),
            }[mask_kind]
    by_torch = nb02_cases.torch_oracle(nb02_cases.to_torch_state(state), num_heads, x, context, mask)
    by_heads = nb02_cases.per_head_sdpa_oracle(state, num_heads, x, context, mask)
    atol, rtol = tolerance(dtype)
    torch.testing.assert_close(by_torch, by_heads, atol=atol, rtol=rtol)
    # the state conversions are inverses
    back = nb02_cases.from_torch_state(nb02_cases.to_torch_state(state))
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("exercise", nb02.NOTEBOOK.exercises)
def test_reference_passes_every_case(exercise, seed):
    cases = graded.cases(exercise, seed)
    assert any(c.hidden for c in cases) and any(not c.hidden for c in cases)
    for case in cases:
        expected = [run_call(call, vars(REFERENCE)) for call in case.calls] if case.reference else None
        result = _judge(case, vars(REFERENCE), expected)
        assert result.status == "passed", result.message


def test_hidden_inputs_follow_the_grader_seed():
    a, b = graded.hidden_cases("MultiHeadAttention", 0), graded.hidden_cases("MultiHeadAttention", 1)
    assert not torch.equal(a[0].calls[0].forward_args[0], b[0].calls[0].forward_args[0])
    assert [c.title for c in a] == [c.title for c in b]


# ---------------------------------------------------------------------------------------------
# Weights are loaded by name
# ---------------------------------------------------------------------------------------------
_FORWARD = '''
    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        B, T, D = x.shape
        q = self.{q}(x).view(B, T, self.h, -1).transpose(1, 2)
        k = self.{k}(c).view(B, c.shape[1], self.h, -1).transpose(1, 2)
        v = self.{v}(c).view(B, c.shape[1], self.h, -1).transpose(1, 2)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.{o}(out.transpose(1, 2).reshape(B, T, D))
'''


def _module(init: str, names=("q_proj", "k_proj", "v_proj", "o_proj")) -> str:
    q, k, v, o = names
    return ("class MultiHeadAttention(nn.Module):\n"
            "    def __init__(self, d_model, num_heads, bias=False):\n"
            "        super().__init__()\n"
            "        self.h = num_heads\n" + init + _FORWARD.format(q=q, k=k, v=v, o=o))


@pytest.mark.parametrize(("name", "source", "hint"), [
    ("other names", _module(
        "        self.query = nn.Linear(d_model, d_model, bias=bias)\n"
        "        self.key = nn.Linear(d_model, d_model, bias=bias)\n"
        "        self.value = nn.Linear(d_model, d_model, bias=bias)\n"
        "        self.out = nn.Linear(d_model, d_model, bias=bias)\n", ("query", "key", "value", "out")),
     nb02_cases.NAMES_HINT),
    ("bias argument ignored", _module(
        "        self.q_proj = nn.Linear(d_model, d_model)\n"
        "        self.k_proj = nn.Linear(d_model, d_model)\n"
        "        self.v_proj = nn.Linear(d_model, d_model)\n"
        "        self.o_proj = nn.Linear(d_model, d_model)\n"), nb02_cases.NAMES_HINT),
    ("an extra parameter", _module(
        "        self.q_proj = nn.Linear(d_model, d_model, bias=bias)\n"
        "        self.k_proj = nn.Linear(d_model, d_model, bias=bias)\n"
        "        self.v_proj = nn.Linear(d_model, d_model, bias=bias)\n"
        "        self.o_proj = nn.Linear(d_model, d_model, bias=bias)\n"
        "        self.temperature = nn.Parameter(torch.ones(()))\n"), nb02_cases.NAMES_HINT),
    ("projections to one head's width", _module(
        "        self.q_proj = nn.Linear(d_model, d_model // num_heads, bias=bias)\n"
        "        self.k_proj = nn.Linear(d_model, d_model // num_heads, bias=bias)\n"
        "        self.v_proj = nn.Linear(d_model, d_model // num_heads, bias=bias)\n"
        "        self.o_proj = nn.Linear(d_model, d_model, bias=bias)\n"), nb02_cases.SIZES_HINT),
])
def test_weights_are_loaded_by_parameter_name(name, source, hint):
    feedback = _feedback("MultiHeadAttention", _cell_namespace(source)["MultiHeadAttention"])
    assert "the weights could not be loaded" in feedback and hint in _hint(feedback), feedback


def test_the_right_names_with_the_same_maths_pass():
    source = _module("".join(f"        self.{p} = nn.Linear(d_model, d_model, bias=bias)\n"
                             for p in ("q_proj", "k_proj", "v_proj", "o_proj")))
    with redirect_stdout(io.StringIO()):
        nb02.check_MultiHeadAttention(_cell_namespace(source)["MultiHeadAttention"])


# ---------------------------------------------------------------------------------------------
# split_heads: ValueError
# ---------------------------------------------------------------------------------------------
_SPLIT = '''
def split_heads(x, num_heads):
    B, T, D = x.shape
    {check}
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)
'''


@pytest.mark.parametrize(("check", "hint"), [
    ("", "raise ValueError"),
    ("assert D % num_heads == 0", "an assert or a failing view"),
    ("if D % num_heads: raise TypeError(f'{D} % {num_heads} != 0')", "raise ValueError"),
    ("if D % num_heads: raise ValueError('bad head count')", "say what is wrong with which values"),
])
def test_split_heads_must_raise_value_error_with_both_numbers(check, hint):
    split_heads = _cell_namespace(_SPLIT.format(check=check))["split_heads"]
    assert hint in _hint(_feedback("split_heads", split_heads))


def test_hidden_split_case_requires_the_reference_s_value_error():
    (case,) = [c for c in graded.hidden_cases("split_heads", 0)
               if c.calls[0].args[0].shape[-1] % c.calls[0].args[1]]
    expected = [run_call(call, vars(REFERENCE)) for call in case.calls]
    assert expected[0].error_type == "ValueError"
    runtime_error = _cell_namespace(_SPLIT.format(check=""))
    result = _judge(case, runtime_error, expected)
    assert result.status == "failed" and "expected ValueError" in result.message, result.message
    assert _judge(case, vars(REFERENCE), expected).status == "passed"


# ---------------------------------------------------------------------------------------------
# mha_from_torch is judged against PyTorch (the reference), never against the learner's own
# MultiHeadAttention; a broken module is replaced by the course's (one bug costs points once)
# ---------------------------------------------------------------------------------------------
def _from_torch_source() -> str:
    nb = read_notebook(SOLUTIONS / f"{NOTEBOOK}.ipynb")
    (cell,) = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "mha_from_torch"]
    return cell.source


def _with_module(module_cls, from_torch_source: str) -> dict[str, Any]:
    namespace = _cell_namespace()
    namespace["MultiHeadAttention"] = module_cls
    exec(compile(from_torch_source, "<cell mha_from_torch>", "exec"), namespace)
    return namespace


WRONG_MODULES = [pytest.param(m.fn, id=m.name) for m in nb02.MISTAKES["MultiHeadAttention"]]


@pytest.mark.parametrize("wrong_module", WRONG_MODULES)
def test_a_right_conversion_passes_with_a_wrong_module(wrong_module):
    """The visible check stands the course's module in (in-process); the hidden cases pass once the
    course's module stands in, as in the grader's second run."""
    namespace = _with_module(wrong_module, _from_torch_source())
    printed = io.StringIO()
    with redirect_stdout(printed):
        nb02.check_mha_from_torch(namespace["mha_from_torch"])  # visible cases, in-process
    hidden = graded.hidden_cases("mha_from_torch", 0)
    expected = {id(case): [run_call(call, vars(REFERENCE)) for call in case.calls] for case in hidden}
    namespace["MultiHeadAttention"] = REFERENCE.MultiHeadAttention  # the stand-in
    for case in hidden:
        result = _judge(case, namespace, expected[id(case)])
        assert result.status == "passed", result.message


def test_a_conversion_that_copies_nothing_gets_nothing_next_to_a_constant_module():
    """The expected values never come from the learner's own module: a constant MultiHeadAttention
    and a conversion that copies no weights used to agree with each other and pass."""
    constant = ("class MultiHeadAttention(nn.Module):\n"
                "    def __init__(self, d_model, num_heads, bias=False):\n"
                "        super().__init__()\n"
                "        for p in ('q_proj', 'k_proj', 'v_proj', 'o_proj'):\n"
                "            setattr(self, p, nn.Linear(d_model, d_model, bias=bias))\n"
                "    def forward(self, x, context=None, mask=None):\n"
                "        return torch.zeros_like(x)\n")
    copies_nothing = ("def mha_from_torch(torch_mha):\n"
                      "    d = torch_mha.embed_dim\n"
                      "    module = MultiHeadAttention(d, torch_mha.num_heads, bias=torch_mha.in_proj_bias is not None)\n"
                      "    return module.to(torch_mha.in_proj_weight.dtype)\n")
    namespace = _cell_namespace(constant, copies_nothing)
    feedback = _feedback("mha_from_torch", namespace["mha_from_torch"])
    assert feedback.startswith("✗ mha_from_torch"), feedback
    hidden = graded.hidden_cases("mha_from_torch", 0)
    expected = {id(case): [run_call(call, vars(REFERENCE)) for call in case.calls] for case in hidden}
    for case in hidden:
        assert _judge(case, namespace, expected[id(case)]).status != "passed", case.title
    namespace["MultiHeadAttention"] = REFERENCE.MultiHeadAttention  # the grader's second run
    for case in hidden:
        assert _judge(case, namespace, expected[id(case)]).status != "passed", case.title


def test_a_conversion_that_follows_a_broken_module_is_told_to_fix_that_module():
    namespace = _with_module(nb02.MISTAKES["MultiHeadAttention"][0].fn, _from_torch_source())
    case = nb02.NOTEBOOK.cases("mha_from_torch")[0]
    result = _judge(case, namespace, None)
    assert result.status == "failed" and "make exercise 3 pass first" in result.message, result.message


@pytest.mark.parametrize("wrong_module", [None, *WRONG_MODULES[:3]])
def test_a_wrong_conversion_fails_with_either_module(wrong_module):
    """With a right module the conversion's own mistake is named; with a wrong one the course's
    module stands in (one bug costs once), so the conversion's mistake is still what is named."""
    wrong = _from_torch_source().replace("w_q, w_k, w_v = weight", "w_k, w_q, w_v = weight")
    wrong = wrong.replace("b_q, b_k, b_v = torch_mha", "b_k, b_q, b_v = torch_mha")
    assert wrong.count("w_k, w_q") == wrong.count("b_k, b_q") == 1
    namespace = _with_module(wrong_module or REFERENCE.MultiHeadAttention, wrong)
    feedback = _feedback("mha_from_torch", namespace["mha_from_torch"])
    assert "in_proj_weight stacks" in _hint(feedback), feedback
    assert namespace["MultiHeadAttention"] is (wrong_module or REFERENCE.MultiHeadAttention)  # restored


def _passes_with_stand_in(obj: Any) -> str:
    printed = io.StringIO()
    with redirect_stdout(printed):
        nb02.check_mha_from_torch(obj)
    return printed.getvalue()


def test_a_conversion_is_not_charged_for_an_unfinished_module():
    namespace = _cell_namespace("class MultiHeadAttention(nn.Module):\n"
                                "    def __init__(self, d_model, num_heads, bias=False):\n"
                                "        raise NotImplementedError()\n", _from_torch_source())
    printed = _passes_with_stand_in(namespace["mha_from_torch"])
    assert printed.startswith("✓") and "course's `MultiHeadAttention` in place of yours" in printed, printed


def test_a_conversion_is_not_charged_for_a_module_that_raises():
    class Raises(nb02_mistakes._MHA):
        def forward(self, x, context=None, mask=None):
            out = super().forward(x, context, mask)
            return out.transpose(1, 2).view(out.shape)  # RuntimeError: view after transpose

    namespace = _with_module(Raises, _from_torch_source())
    printed = _passes_with_stand_in(namespace["mha_from_torch"])
    assert printed.startswith("✓") and "course's `MultiHeadAttention`" in printed, printed
    assert namespace["MultiHeadAttention"] is Raises  # the learner's module is back in place


def test_without_the_course_solutions_a_module_that_raises_is_blamed_on_exercise_3(monkeypatch):
    """Where the course's reference is not installed (nothing can stand in), the feedback says
    the learner's own module raises the same."""
    class Raises(nb02_mistakes._MHA):
        def forward(self, x, context=None, mask=None):
            out = super().forward(x, context, mask)
            return out.transpose(1, 2).view(out.shape)

    monkeypatch.setattr(nb02.NOTEBOOK, "reference", "tfcourse.reference.absent")
    feedback = _feedback("mha_from_torch", _with_module(Raises, _from_torch_source())["mha_from_torch"])
    assert "raises the same" in feedback and "exercise 3" in _hint(feedback), feedback


def test_merging_with_view_after_transpose_gets_the_contiguity_hint():
    source = _module("".join(f"        self.{p} = nn.Linear(d_model, d_model, bias=bias)\n"
                             for p in ("q_proj", "k_proj", "v_proj", "o_proj")))
    source = source.replace(".transpose(1, 2).reshape(B, T, D)", ".transpose(1, 2).view(B, T, D)")
    assert ".view(B, T, D)" in source
    feedback = _feedback("MultiHeadAttention", _cell_namespace(source)["MultiHeadAttention"])
    assert "not contiguous" in _hint(feedback), feedback


def test_a_float32_module_for_float64_weights_is_caught():
    wrong = _from_torch_source().replace("module = module.to(dtype=weight.dtype, device=weight.device)", "")
    namespace = _with_module(REFERENCE.MultiHeadAttention, wrong)
    assert "torch_mha.in_proj_weight.dtype" in _hint(_feedback("mha_from_torch", namespace["mha_from_torch"]))
