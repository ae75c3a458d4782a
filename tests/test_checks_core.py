"""The shared check machinery: what comes back from a call, feedback text, plain-data transport."""

from __future__ import annotations

import math

import pytest
import torch

from tfcourse.checks import Call, CheckFailed, run_call, show
from tfcourse.checks.call import DEVICE, TorchModule
from tfcourse.checks.case import Case, judge_case
from tfcourse.checks.hints import Mistake
from tfcourse.checks.run import run_checks
from tfcourse.checks.show import checks_passed
from tfcourse.checks.wire import call_from_json, call_to_json, outcome_from_json, outcome_to_json


class Sneaky(torch.Tensor):
    def __eq__(self, other):  # claims equality with anything
        return True


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __bool__(self):
        return True


def _case(fn_expected, **kw) -> Case:
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3)

    def judge(j):
        j.close(j.tensor(shape=(2, 3), dtype=torch.float64), fn_expected(x), oracle="oracle")

    return Case("double", "doubles its input", [Call("double", (x,))], judge, seed=7, **kw)


@pytest.mark.parametrize("answer", [
    lambda x: x.as_subclass(Sneaky) * 2,
    lambda x: AlwaysEqual(),
    lambda x: (x * 2).tolist(),
    lambda x: (x * 2).numpy(),
])
def test_only_plain_tensors_count(answer):
    o = run_call(Call("double", (torch.ones(2),)), {"double": answer})
    assert o.kind == "bad_type" and not o.ok
    result = judge_case(_case(lambda x: 2 * x), [run_call(_case(lambda x: 2 * x).calls[0], {"double": answer})])
    assert result.status == "failed" and "expected one torch.Tensor" in result.message


def test_feedback_names_property_inputs_difference_tolerance_and_hint():
    hint = "multiply by 2, not 3"
    case = _case(lambda x: 2 * x, mistakes=(Mistake("triple", hint, lambda x: 3 * x),))
    result = judge_case(case, [run_call(case.calls[0], {"double": lambda x: 3 * x})])
    lines = result.message.splitlines()
    assert result.status == "failed" and len(lines) <= 8
    assert lines[0] == "✗ double: doubles its input"
    assert "<(2, 3) float64>" in lines[1] and "seed 7" in lines[1]
    assert "largest difference 5 at [1, 2]" in result.message and "atol 1e-10" in result.message
    assert lines[-1] == f"  hint: {hint}"
    # a different wrong answer gets no (misleading) hint
    other = judge_case(case, [run_call(case.calls[0], {"double": lambda x: x + 1})])
    assert "hint" not in other.message


def test_the_entry_furthest_outside_its_tolerance_can_be_the_one_shown():
    """For outputs whose entries differ by orders of magnitude, the largest absolute difference can
    sit where the answer is relatively closest: worst="relative" shows the entry most out of
    tolerance, and the tolerance is named by the dtype given, not float64's."""
    expected = torch.tensor([1000.0, 1e-3], dtype=torch.float64)
    actual = torch.tensor([1000.02, 1e-3 + 1e-4], dtype=torch.float64)

    def message(**kw):
        case = Case("f", "close", [Call("f", (torch.zeros(1),))],
                    lambda j: j.close(actual, expected, atol=1e-6, rtol=1e-5, **kw))
        return judge_case(case, [run_call(case.calls[0], {"f": lambda x: x})]).message

    absolute, relative = message(), message(worst="relative", tol_dtype=torch.float32)
    assert "largest difference 0.02 at [0]" in absolute and "(float64)" in absolute
    assert "furthest outside its tolerance: difference 0.0001 (allowed 1.01e-06) at [1]" in relative
    assert "(float32)" in relative and "float64" not in relative
    with pytest.raises(ValueError, match="worst"):
        message(worst="largest")


def test_shape_is_reported_before_values_and_nan_is_named():
    case = _case(lambda x: 2 * x)
    r = judge_case(case, [run_call(case.calls[0], {"double": lambda x: (2 * x).T})])
    assert "shape (3, 2); expected (2, 3)" in r.message
    r = judge_case(case, [run_call(case.calls[0], {"double": lambda x: torch.full_like(x, math.nan)})])
    assert "NaN at [0, 0]" in r.message


def test_exceptions_are_errors_and_sys_exit_does_not_escape():
    case = _case(lambda x: 2 * x)

    def leave(x):
        raise SystemExit(3)

    r = judge_case(case, [run_call(case.calls[0], {"double": leave})])
    assert r.status == "error" and "SystemExit" in r.message
    with pytest.raises(CheckFailed, match="not attempted"):
        run_checks("double", lambda x: (_ for _ in ()).throw(NotImplementedError()), [case])


def test_run_checks_prints_one_line(capsys):
    run_checks("double", lambda x: x * 2, [_case(lambda x: 2 * x)])
    assert capsys.readouterr().out == "✓ double: the check passed\n"


def test_success_lines_count_in_the_singular_and_name_their_part(capsys):
    cases = [_case(lambda x: 2 * x), _case(lambda x: 2 * x)]
    run_checks("double", lambda x: x * 2, cases)
    run_checks("double", lambda x: x * 2, cases[:1], part="core")
    assert capsys.readouterr().out == "✓ double: all 2 checks passed\n✓ double (core): the check passed\n"
    assert checks_passed(1, "f", "real") == "✓ f (real): the check passed"
    assert "all 1 checks" not in checks_passed(1, "f") and checks_passed(0, "f").startswith("✓ f: all 0")


def test_in_a_jupyter_kernel_a_pass_is_a_green_box_with_the_plain_line_as_fallback(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(show, "in_jupyter_kernel", lambda: object())
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data))
    run_checks("double", lambda x: x * 2, [_case(lambda x: 2 * x)])
    assert capsys.readouterr().out == ""
    (data,) = shown
    assert data["text/plain"] == "✓ double: the check passed"
    box = data["text/html"]
    assert "tfcourse-pass" in box and "✓ double: the check passed" in box and "<script" not in box
    # words stay whole in the box; its style is inline, with no style sheet repeated per pass
    assert box.count("word-break: normal; overflow-wrap: break-word") == 1 and "<style" not in box
    assert "&lt;b&gt;" in show.success_html("✓ <b>")  # the line is text, never markup


def test_the_failure_wrapping_rule_is_shown_once_per_kernel(monkeypatch):
    shown = []
    monkeypatch.setattr(show, "in_jupyter_kernel", lambda: object())
    monkeypatch.setattr(show, "_STYLE_SHOWN", False)
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data))
    show.show_style()
    show.show_style()
    (data,) = shown  # JupyterLab's failure box breaks words anywhere (break-all) without it
    assert data["text/plain"] == "" and "vnd.jupyter.stderr" in data["text/html"]
    assert "word-break: normal; overflow-wrap: break-word" in data["text/html"]


def test_calls_round_trip_as_plain_data():
    lin = torch.nn.Linear(3, 2)
    call = Call("f", (torch.randn(2, 3), 4, None, (1.5, "a")), {"mask": torch.ones(2, dtype=torch.bool),
                "device": DEVICE}, state={"w": torch.zeros(2)},
                forward_args=(TorchModule("Linear", {"in_features": 3, "out_features": 2}, lin.state_dict()),))
    tensors: dict = {}
    spec = call_to_json(call, tensors, "p")
    back = call_from_json(__import__("json").loads(__import__("json").dumps(spec)), tensors)
    assert back.target == "f" and back.args[1:3] == (4, None) and back.args[3] == (1.5, "a")
    assert torch.equal(back.args[0], call.args[0]) and back.kwargs["device"] == DEVICE
    assert isinstance(back.forward_args[0], TorchModule) and back.forward_args[0].build()(torch.ones(1, 3)).shape == (1, 2)


def test_outcomes_from_a_child_are_validated():
    o = run_call(Call("f", (torch.ones(2),)), {"f": lambda x: (x, x + 1)})
    tensors: dict = {}
    spec = outcome_to_json(o, tensors, "c")
    back = outcome_from_json(spec, tensors)
    assert back.kind == "tuple" and torch.equal(back.tensors[1], torch.full((2,), 2.0))
    for forged in ({"kind": "passed"}, {**spec, "tensors": ["nope"]}, {**spec, "devices": []},
                   {**spec, "error_type": 3}, "tensor", {"kind": "tensor", "tensors": [], "devices": []}):
        with pytest.raises(ValueError):
            outcome_from_json(forged, tensors)


def test_torch_module_arguments_are_whitelisted():
    with pytest.raises(ValueError, match="not one of"):
        TorchModule("Module", {}, {}).build()


def _double(x, *, scale=2.0):
    return x * scale


def _double_in_place(x, *, scale=2.0):
    x *= scale
    return x


def _double_into_a_view(x, *, scale=2.0):
    out = x.view(-1)  # a view shares the caller's memory
    out[0] = 7.0
    return x.clone() * scale


def _double_in_place_in_a_list(xs, *, scale=2.0):
    xs[1].mul_(scale)
    return xs[0] * scale


@pytest.mark.parametrize("answer, changed", [
    (_double, None), (_double_in_place, "`x`"), (_double_into_a_view, "`x`"),
])
def test_an_answer_that_writes_into_its_input_keeps_its_result_and_gets_a_note_that_costs_nothing(answer, changed):
    x = torch.tensor([[1.0, float("nan")], [3.0, 4.0]], dtype=torch.float64)  # NaN: unchanged is not "!="
    outcome = run_call(Call("f", (x,)), {"f": answer})
    assert torch.isnan(x[0, 1]) and x[0, 0] == 1.0, "the check's own tensor must never change"
    assert outcome.ok, outcome
    if changed is None:
        assert outcome.note == ""
        return
    assert changed in outcome.note and "in place" in outcome.note and "x.clone()" in outcome.note

    def judge(j):
        j.require(j.tensor(shape=(2, 2), dtype=torch.float64).shape == (2, 2), "shape")

    result = judge_case(Case("f", "doubles x", [Call("f", (x,))], judge), [outcome])
    assert result.status == "passed" and "the tensor passed as `x`" in result.note


def test_tensors_inside_a_list_argument_and_module_inputs_are_watched():
    xs = [torch.ones(3), torch.ones(3)]
    outcome = run_call(Call("f", (xs,)), {"f": _double_in_place_in_a_list})
    assert outcome.ok and "`xs`[1]" in outcome.note

    class Scale(torch.nn.Module):
        def __init__(self, in_place: bool):
            super().__init__()
            self.in_place = in_place

        def forward(self, hidden):
            return hidden.mul_(2) if self.in_place else hidden * 2

    for in_place in (False, True):
        outcome = run_call(Call("Scale", (in_place,), forward_args=(torch.ones(2, 3),)), {"Scale": Scale})
        assert outcome.ok and bool(outcome.note) == in_place, outcome
        assert not in_place or "`hidden`" in outcome.note


def _halve(x, scale=2.0):
    return x / scale


def _halve_in_place(x, scale=2.0):
    x /= scale
    return x


@pytest.mark.parametrize("answer, written", [(_halve, False), (_halve_in_place, True)])
def test_a_twice_call_returns_both_results_and_the_arguments_after_them(answer, written):
    x = torch.tensor([2.0, 8.0], dtype=torch.float64)
    call = Call("f", (x,), {"scale": 2.0}, twice=True)
    outcome = run_call(call, {"f": answer})
    assert outcome.kind == "tuple" and len(outcome.tensors) == 3, outcome
    first, second, after = outcome.tensors
    assert torch.equal(first, x / 2) and torch.equal(x, torch.tensor([2.0, 8.0], dtype=torch.float64))
    # an in-place write divides twice, and the argument comes back written: both judged from values
    assert torch.equal(second, x / 4 if written else x / 2)
    assert torch.equal(after, x / 4 if written else x)
    assert wire_roundtrip(call).twice


def wire_roundtrip(call):
    from tfcourse.checks.wire import call_from_json, call_to_json

    tensors: dict = {}
    return call_from_json(call_to_json(call, tensors, "c"), tensors)


class _Scale(torch.nn.Module):
    def __init__(self, dim: int, cut: str = ""):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.bias = torch.nn.Parameter(torch.zeros(dim))
        self.cut = cut

    def forward(self, x):
        weight = self.weight.detach() if self.cut == "weight" else self.weight
        if self.cut == "all":
            with torch.no_grad():
                return x * weight + self.bias
        return x * weight + (self.bias.detach() if self.cut == "bias" else self.bias)


def test_a_backward_call_returns_the_gradients_and_names_a_parameter_it_never_reaches():
    x = torch.randn(2, 3, dtype=torch.float64)
    state = {"weight": torch.full((3,), 2.0, dtype=torch.float64), "bias": torch.zeros(3, dtype=torch.float64)}
    call = Call("Scale", (3,), state=state, forward_args=(x,), grad_of=("weight",))
    tensors: dict = {}
    assert call_from_json(call_to_json(call, tensors, "c"), tensors).grad_of == ("weight",)
    outcome = run_call(call, {"Scale": _Scale})
    assert outcome.kind == "tuple"
    out, grad = outcome.tensors
    g = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)  # grad_output_for
    assert torch.equal(out, x * 2) and torch.allclose(grad, (g * x).sum(0))
    # the bias is not asked for: cutting it is not this call's business
    assert run_call(call, {"Scale": lambda d: _Scale(d, cut="bias")}).ok
    for cut, says in (("weight", "`weight`"), ("all", "cut the graph")):
        bad = run_call(call, {"Scale": lambda d, cut=cut: _Scale(d, cut=cut)})
        assert bad.kind == "error" and bad.error_type == "NoGradient" and says in bad.error_message, bad
    assert "no gradient" in judge_case(Case("Scale", "trains", [call], lambda j: j.values(n=2)), [bad]).message



class _Routed(torch.nn.Module):
    """Returns (y, aux) like MoE's (y, router_logits); ``detach``: y does not reach weight."""

    def __init__(self, d: int, detach: bool = False):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.detach = detach

    def forward(self, x):
        w = self.weight.detach() if self.detach else self.weight
        return x * w, x @ self.weight[:, None]


def test_a_backward_call_on_a_tuple_output_back_propagates_its_first_tensor():
    x = torch.randn(2, 3, dtype=torch.float64)
    call = Call("Routed", (3,), state={"weight": torch.full((3,), 2.0, dtype=torch.float64)}, forward_args=(x,),
                grad_of=("weight",))
    outcome = run_call(call, {"Routed": _Routed})
    assert outcome.kind == "tuple" and len(outcome.tensors) == 3
    y, aux, grad = outcome.tensors
    g = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)
    assert torch.equal(y, x * 2) and torch.allclose(aux, x @ torch.full((3, 1), 2.0, dtype=torch.float64))
    assert torch.allclose(grad, (g * x).sum(0))  # through y only, not through aux
    bad = run_call(call, {"Routed": lambda d: _Routed(d, detach=True)})
    assert bad.error_type == "NoGradient" and "cut the graph" in bad.error_message

def test_a_function_call_can_return_the_gradients_of_its_arguments():
    logits = torch.randn(5, 3, dtype=torch.float64)
    call = Call("loss", (logits, 2), grad_of=("router_logits",))

    def loss(router_logits, top_k):
        return router_logits.softmax(-1).mean(0).square().sum() * top_k

    outcome = run_call(call, {"loss": loss})
    assert outcome.kind == "tuple"
    value, grad = outcome.tensors
    leaf = logits.clone().requires_grad_(True)
    (loss(leaf, 2) * grad_output_for_scalar()).backward()
    assert torch.allclose(value, loss(logits, 2)) and torch.allclose(grad, leaf.grad)

    def rebuilt(router_logits, top_k):  # a number put back into a new tensor: no graph
        return torch.tensor(loss(router_logits, top_k).item(), dtype=router_logits.dtype)

    def half_cut(router_logits, top_k):
        return loss(router_logits.detach(), top_k) + 0 * torch.ones((), dtype=router_logits.dtype)

    for wrong in (rebuilt, half_cut):
        out = run_call(call, {"loss": wrong})
        assert out.error_type == "NoGradient" and "`router_logits`" in out.error_message


def grad_output_for_scalar() -> torch.Tensor:
    from tfcourse.checks.evidence import grad_output_for
    return grad_output_for(torch.zeros((), dtype=torch.float64))


def test_a_mistake_matches_at_the_tolerance_the_case_judges_with():
    """A float64 answer judged at float32 level (atol 1e-5) that makes a catalogued mistake in
    float64 gets the hint of that mistake written in float32 (they differ by ~1e-7, far above
    float64's tolerance but within the case's)."""
    x = torch.linspace(-2, 2, 12, dtype=torch.float64)

    def wrong64(t):
        return torch.sin(t) * 1.5

    def wrong32(t):  # float32 arithmetic, and a float32-sized offset: 2e-6 from wrong64
        return (torch.sin(t.float()) * 1.5).to(t.dtype) + 2e-6

    def judge(j):
        j.close(j.tensor(shape=(12,), dtype=torch.float64), torch.sin(x), oracle="sin", atol=1e-5, rtol=1e-5)

    case = Case("f", "sin", [Call("f", (x,))], judge, mistakes=(Mistake("scaled", "do not scale by 1.5", wrong32),))
    result = judge_case(case, [run_call(Call("f", (x,)), {"f": wrong64})])
    assert result.status == "failed" and "do not scale by 1.5" in result.message
    old_match = torch.allclose(wrong64(x), wrong32(x), atol=1e-9, rtol=1e-6)  # 10x float64's tolerance
    assert not old_match


def test_the_notebook_check_refuses_the_notebooks_own_reference_module():
    """The grader hides tfcourse.reference.<this notebook>: an answer that imports from it must fail
    in the notebook too (nb06's review: a generate using the reference's sample_next_token passed the
    check and got a bare ModuleNotFoundError in the grader). Other modules' names are fine."""
    from tfcourse.checks.protocol import NotebookChecks
    from tfcourse.checks.run import reference_dependencies

    book = NotebookChecks("01_attention")
    book.exercise("f")(list)
    from tfcourse.reference.nb01_attention import causal_mask

    namespace = {"causal_mask": causal_mask, "torch": torch}
    exec("def f(t):\n    return causal_mask(t, t)\n\ndef g(t):\n    return torch.ones(t, t)\n", namespace)
    assert reference_dependencies("f", namespace["f"], book) == ["causal_mask"]
    assert reference_dependencies("g", namespace["g"], book) == []
    assert reference_dependencies("f", causal_mask, book) == ["f"]
    case = Case("f", "t = 2", [Call("f", (2,))], lambda j: None)
    with pytest.raises(CheckFailed, match="hides that module"):
        run_checks("f", namespace["f"], [case], notebook=book)
    run_checks("g", namespace["g"], [case], notebook=book, verbose=False)


def test_a_hidden_reference_import_is_explained():
    """In the grader, importing the graded notebook's own reference raises ModuleNotFoundError:
    the feedback says why, instead of the bare error."""
    def answer(x):
        import tfcourse.reference.nb99_nowhere  # noqa: F401 - as the grader's child sees nbNN's own
        return x

    case = Case("f", "ref", [Call("f", (torch.ones(2),))], lambda j: j.tensor(shape=(2,)))
    result = judge_case(case, [run_call(Call("f", (torch.ones(2),)), {"f": answer})])
    assert result.status == "error" and "hides the course's solutions" in result.message


def test_a_step_with_an_empty_name_reads_what_the_function_returned():
    # notebook 08's first_divergent_layer returns an int or None: Step("", attribute=True) keeps both
    from tfcourse.checks.call import Step

    def pick(x, none=False):
        return None if none else int(x.argmax())

    x = torch.tensor([0.0, 3.0, 1.0])
    found = run_call(Call("pick", (x,), steps=(Step("", attribute=True),)), {"pick": pick})
    assert found.ok and found.tensors[0].dtype == torch.int64 and int(found.tensors[0]) == 1
    none = run_call(Call("pick", (x,), {"none": True}, steps=(Step("", attribute=True),)), {"pick": pick})
    assert none.ok and none.tensors[0].shape == (0,) and none.tensors[0].dtype == torch.float64


def test_an_any_order_pattern_refuses_the_sizes_in_every_layout():
    from tfcourse.checks.evidence import ANY_ORDER, shape_matches

    per_head_k = (ANY_ORDER, 7, 3, 6)  # S = 7, H = 3, dn = 6
    for layout in ((2, 3, 7, 6), (2, 3, 6, 7), (7, 2, 3, 6), (3, 6, 2, 7), (3, 7, 6)):
        assert shape_matches(layout, per_head_k), layout
    for legit in ((2, 3, 3, 7), (2, 3, 3, 6), (2, 7, 9), (3, 6, 9), (2, 3, 7, 4)):
        assert not shape_matches(legit, per_head_k), legit
    assert shape_matches((2, 3, 3, 3), (ANY_ORDER, 3, 3)) and not shape_matches((2, 3, 4), (ANY_ORDER, 3, 3))
    assert shape_matches((9, 5, 6), (-1, 5, 6)) and not shape_matches((5, 6, 9), (-1, 5, 6))  # trailing as before
