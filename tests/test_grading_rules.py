"""The grading rules the task cells state, checked in the notebook and through the grader alike.

* partial credit: every case of an exercise is scored by one of its test cells, and each test
  cell is scored by at least one case (no free points, no unscored checks);
* one bug costs points once: an exercise that calls another, failing, exercise is graded with
  the course's version of that one in its place;
* cells a learner adds (a helper, an import) are run by the grader in notebook order, but the
  course's demo cells are not, and the feedback says so;
* modules are loaded by parameter name: extra buffers (a registered causal mask) are allowed,
  a parameter the grader cannot set is not.

The in-notebook verdict (``check_<exercise>``) and the grader's must agree on each submission.
"""

from __future__ import annotations

import builtins
import io
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import nbformat
import pytest

from grader.build import NOTEBOOKS, SOLUTIONS
from grader.cases import cases_for
from grader.course import load_course
from grader.grading import grade_submission
from tests.catalogue.nb02_multi_head_attention import MHA_WRONG
from tfcourse.checks.case import CheckFailed
from tfcourse.notebook import CORE_PART, demo_names, setup_source

# ---------------------------------------------------------------------------------------------
# partial credit: cases and test cells match (fast)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("notebook", sorted(load_course()))
def test_every_case_is_scored_by_a_test_cell_and_every_test_cell_by_a_case(notebook):
    for ex in load_course()[notebook].exercises:
        parts = {part for part, _ in ex.parts}
        used = {case.part for case in cases_for(notebook, ex.name)}
        assert used == parts, f"{notebook}/{ex.name}: cases score {sorted(used)}, test cells {sorted(parts)}"


def test_exercises_worth_three_points_or_more_are_split():
    """Issue 7: one missed edge case must not cost all the points of a big exercise."""
    for nb in load_course().values():
        for ex in nb.exercises:
            if ex.points >= 3:
                assert len(ex.parts) >= 2 and CORE_PART in dict(ex.parts), (nb.name, ex.name, ex.parts)


def test_stand_ins_follow_chains_and_the_instances_the_cases_build():
    """A callee stands in when the caller names it, when a callee it reaches names it (notebook
    06: DecoderLM -> DecoderBlock -> CausalSelfAttention, a learner's DecoderLM never names the
    attention), or when the caller's own cases build it (``Instance("KVCache")``: the modules
    take a cache but never write its class name)."""
    from grader.grading import _reached_callees
    from tfcourse.checks.call import Call, Instance, Step
    from tfcourse.checks.case import Case

    lm = "class DecoderLM(nn.Module):\n    def __init__(self):\n        self.blocks = [DecoderBlock() for _ in range(2)]\n"
    sources = {"DecoderBlock": "class DecoderBlock:\n    def __init__(self):\n        self.attn = CausalSelfAttention()\n",
               "CausalSelfAttention": "class CausalSelfAttention:\n    pass\n", "KVCache": "class KVCache:\n    pass\n"}
    graph = ("DecoderBlock", "CausalSelfAttention", "KVCache")

    def case(*calls: Call) -> list[Case]:
        return [Case("DecoderLM", "t", list(calls), lambda j: None)]

    plain = case(Call("DecoderLM", ()))
    cached = case(Call("DecoderLM", (), steps=(Step("__call__", (), {"caches": [Instance("KVCache", key="c")]}),)))
    assert _reached_callees(lm, graph, sources, plain) == {"DecoderBlock", "CausalSelfAttention"}
    assert _reached_callees(lm, graph, sources, cached) == set(graph)
    assert _reached_callees("class DecoderLM:\n    pass\n", graph, sources, plain) == set()


STAND_IN_CHAINS = {  # notebook: (sources of the failing first runs, {exercise: callees standing in})
    # a broken repeat_kv fails GroupedQueryAttention's first run, which passes with the course's repeat_kv;
    # mha_to_gqa (-> GroupedQueryAttention -> repeat_kv) is graded again with the course's repeat_kv only
    "07_gqa_mla": ({"repeat_kv": "def repeat_kv(x, n_rep):\n    return x.repeat(1, n_rep, 1, 1)\n",
                    "GroupedQueryAttention": None,
                    "mha_to_gqa": "def mha_to_gqa(mha, g):\n    return GroupedQueryAttention(16, 4, g)\n"},
                   {"GroupedQueryAttention": {"repeat_kv"}, "mha_to_gqa": {"repeat_kv"}}),
    # the call graph names only MultiHeadAttention for mha_from_torch: the chain's split_heads stands in
    "02_multi_head_attention": ({"split_heads": "def split_heads(x, num_heads):\n    return x\n",
                                 "MultiHeadAttention": "class MultiHeadAttention(nn.Module):\n    def forward(self, x):\n"
                                                       "        return merge_heads(split_heads(x, 2))\n",
                                 "mha_from_torch": "def mha_from_torch(m):\n    return MultiHeadAttention(4, 2)\n"},
                                {"MultiHeadAttention": {"split_heads"}, "mha_from_torch": {"split_heads"}}),
}


@pytest.mark.parametrize("notebook", sorted(STAND_IN_CHAINS))
def test_only_the_callees_that_still_fail_stand_in_and_are_named(notebook, monkeypatch):
    """A callee that passes once its own failing callees stand in does not stand in for its callers,
    nor is it named in their note ("which lost points on its own" was wrong): those callees stand in
    instead (fast: the runs are faked, every regraded run passes)."""
    import grader.grading as grading

    nb = load_course()[notebook]
    sources, expected = STAND_IN_CHAINS[notebook]
    to_run = {n: src if src is not None else dict(nb.solutions)[n] for n, src in sources.items()}
    points = {e.name: e.points for e in nb.exercises}

    def verdict(name: str, passed: bool) -> dict:
        return {"exercise": name, "status": "passed" if passed else "failed", "score": points[name] if passed
                else 0.0, "max_score": points[name], "feedback": "✗ first run", "parts": [], "cases_total": 1}

    verdicts = {n: verdict(n, n not in to_run) for n in points}
    stood_in: dict[str, set[str]] = {}

    class Run:
        def __init__(self, cases: dict) -> None:
            self.exercises = dict.fromkeys(cases)

    def fake_run(name, setup, cells, cases, *, stand_ins=None, **kwargs):
        (exercise,) = cases
        stood_in[exercise] = set(stand_ins or {})
        return Run(cases)

    monkeypatch.setattr(grading, "run_notebook", fake_run)
    monkeypatch.setattr(grading, "_judge_run", lambda nb, ex, run, cases, *a: verdict(ex.name, True))
    grading._grade_with_stand_ins(nb, verdicts, to_run, dict(to_run), {n: [] for n in to_run}, {},
                                  device="cpu", limits=None, seed=0)
    assert stood_in == expected
    for name, names in expected.items():
        note = verdicts[name]["feedback"]
        assert all(f"`{n}`" in note for n in names), note
        assert not any(f"`{c}`" in note for c in points if c not in names), note


def test_in_the_notebook_too_only_the_callees_that_still_fail_stand_in():
    """check_mha_to_gqa with a tiling repeat_kv and a correct GroupedQueryAttention: the course's
    repeat_kv stands in, and the line names only that one (as the grader's note does)."""
    from tfcourse.checks import nb07_gqa_mla

    nb = load_course()["07_gqa_mla"]
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(nb.setup, namespace)
    for name, source in nb.solutions:
        exec(STAND_IN_CHAINS["07_gqa_mla"][0]["repeat_kv"] if name == "repeat_kv" else source, namespace)
    printed = io.StringIO()
    with redirect_stdout(printed):
        nb07_gqa_mla.check_mha_to_gqa(namespace["mha_to_gqa"])
    text = printed.getvalue()
    assert text.startswith("✓") and "course's `repeat_kv` in place" in text and "GroupedQueryAttention" not in text, text


def test_a_cache_that_writes_into_its_inputs_does_not_cost_generate():
    """A KVCache that caches copies and then zeroes the k and v it was given is noted, not scored
    (docs/grading.md), and must not make a correct generate fail: the probe model that checks
    generate hands every layer's cache tensors of its own (a view of its token ids once made the
    next layer read zeros, and generate lost 3 points for the cache's write)."""
    from tests.catalogue.nb06_kv_cache import KV_CORRECT
    from tfcourse.checks import nb06_kv_cache

    (entry,) = [e for e in KV_CORRECT if "zeroed in place" in e.name]
    nb = load_course()["06_kv_cache"]
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(nb.setup, namespace)
    for name, source in nb.solutions:
        exec(entry.source if name == "KVCache" else source, namespace)
    for check, obj in (("check_KVCache", "KVCache"), ("check_generate", "generate")):
        printed = io.StringIO()
        with redirect_stdout(printed):
            getattr(nb06_kv_cache, check)(namespace[obj])
        assert printed.getvalue().startswith("✓"), printed.getvalue()


# ---------------------------------------------------------------------------------------------
# submissions: the solutions notebook with some cells replaced or added
# ---------------------------------------------------------------------------------------------
NAN_SOFTMAX = "def softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)  # NaN on an all -inf slice\n"
SDPA_ON_OWN_SOFTMAX = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # fully masked rows: relies on softmax
    return weights @ v, weights
'''
SDPA_UNSCALED_ON_OWN_SOFTMAX = SDPA_ON_OWN_SOFTMAX.replace(" / math.sqrt(q.size(-1))", "")
SDPA_WITH_HELPER = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
'''
HELPER_CELL = "import math as _m\n\n\ndef _scores(q, k):\n    return q @ k.transpose(-2, -1) / _m.sqrt(q.size(-1))\n"
# a name only the course's demo cells of notebook 01 define: the grader does not run demo cells
DEMO_NAME = sorted(demo_names(nbformat.read(NOTEBOOKS / "01_attention.ipynb", as_version=4))
                   - set(dir(builtins)))[0]
SDPA_ON_DEMO_NAME = SDPA_WITH_HELPER.replace("_scores(q, k)", f"_scores(q, k) + 0 * bool({DEMO_NAME})").replace(
    "def scaled_dot_product_attention", HELPER_CELL + "\n\ndef scaled_dot_product_attention")

# The catalogue's MultiHeadAttention whose keys and values are viewed with the query length T:
# right for self-attention, wrong for cross-attention (S != T).
MHA_NO_CROSS = next(e.source for e in MHA_WRONG if e.name == "keys and values reshaped with the query length T")
MHA_WITH_BUFFER_SUFFIX = '''

class _WithBuffer(MultiHeadAttention):
    """A correct module that also registers a causal-mask buffer, as some courses do."""

    def __init__(self, d_model, num_heads, bias=False):
        super().__init__(d_model, num_heads, bias)
        self.register_buffer("causal", torch.ones(64, 64, dtype=torch.bool).tril(), persistent=True)
        self.note = "not a parameter"


MultiHeadAttention = _WithBuffer
'''
MHA_EXTRA_PARAMETER_SUFFIX = MHA_WITH_BUFFER_SUFFIX.replace(
    'self.register_buffer("causal", torch.ones(64, 64, dtype=torch.bool).tril(), persistent=True)',
    "self.temperature = nn.Parameter(torch.ones(()))")


def _solution_sources(notebook: str) -> dict[str, str]:
    return dict(load_course()[notebook].solutions)


def _build(notebook: str, replaced: dict[str, str | None], added_before: dict[str, str] | None = None,
           added_after: dict[str, str] | None = None) -> Any:
    """The solutions notebook with cells replaced (by grade_id; None: the released stub) and code
    cells added before or after a cell (new cells, without metadata, as JupyterLab makes them)."""
    nb = nbformat.read(SOLUTIONS / f"{notebook}.ipynb", as_version=4)
    stubs = {e.name: e.stub for e in load_course()[notebook].exercises}
    cells = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if added_before and gid in added_before:
            cells.append(nbformat.v4.new_code_cell(added_before[gid]))
        if gid in replaced:
            cell.source = stubs[gid] if replaced[gid] is None else replaced[gid]
        cells.append(cell)
        if added_after and gid in added_after:
            cells.append(nbformat.v4.new_code_cell(added_after[gid]))
    nb.cells = cells
    return nb


# Hostile: attention that returns zeros unless the course's solution of the (unattempted)
# challenge stands in, which it then uses: a stand-in is only ever a callee of the course's
# call graph, never a challenge, so this gets nothing.
SDPA_USING_A_CHALLENGE = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    mea = globals().get("memory_efficient_attention")
    if mea is not None and mea.__code__.co_filename.startswith("<course"):
        eye = torch.eye(k.size(-2), dtype=v.dtype)
        return mea(q, k, v, mask), mea(q, k, eye.expand(*k.shape[:-2], *eye.shape), mask)
    return (torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype),
            torch.zeros(*q.shape[:-1], k.size(-2), dtype=q.dtype))
'''
# Hostile: with a broken softmax, attention fails its first run; in the stand-in run it raises the
# course's softmax source on masked cases: nothing of that run but test-cell scores may show.
SDPA_LEAKING_THE_STAND_IN = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    sm = softmax
    if not sm.__code__.co_filename.startswith("<course"):
        raise RuntimeError("first run")
    if mask is not None:
        import json, os, sys
        raise RuntimeError("LEAK " + json.load(open(os.path.join(sys.argv[1], "job.json")))["stand_ins"]["softmax"])
    w = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    return w @ v, w
'''
PADDING_WITH_HELPER_BELOW_ITS_CHECK = '''
def padding_mask(lengths, t_k):
    return _key_is_real(lengths, t_k)[:, None, None, :]
'''
HELPER_BELOW = "def _key_is_real(lengths, t_k):\n    return torch.arange(t_k) < lengths[:, None]\n"


# a constant MultiHeadAttention next to a conversion that copies no weights: they agree with each
# other, and both must get 0 (expected values come from the reference, never from the learner's module)
MHA_CONSTANT = """\
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=False):
        super().__init__()
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, p, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, x, context=None, mask=None):
        return torch.zeros_like(x)
"""
FROM_TORCH_COPYING_NOTHING = """\
def mha_from_torch(torch_mha):
    module = MultiHeadAttention(torch_mha.embed_dim, torch_mha.num_heads, bias=torch_mha.in_proj_bias is not None)
    return module.to(torch_mha.in_proj_weight.dtype)
"""


ADDED_AFTER = {  # submission: {grade_id: source of a cell the learner added right after that cell}
    "defined_below_stub": {"softmax_jacobian": _solution_sources("01_attention")["softmax_jacobian"]},
    "helper_below_check": {"test_padding_mask": HELPER_BELOW},
}


SUBMISSIONS = {
    "one_bug_nb01": ("01_attention", {"softmax": NAN_SOFTMAX, "scaled_dot_product_attention": SDPA_ON_OWN_SOFTMAX},
                     None),
    "one_bug_nb02": ("02_multi_head_attention", {"MultiHeadAttention": MHA_NO_CROSS}, None),
    "constant_mha": ("02_multi_head_attention", {"MultiHeadAttention": MHA_CONSTANT,
                                                 "mha_from_torch": FROM_TORCH_COPYING_NOTHING}, None),
    "two_bugs_nb01": ("01_attention", {"softmax": NAN_SOFTMAX,
                                       "scaled_dot_product_attention": SDPA_UNSCALED_ON_OWN_SOFTMAX}, None),
    "helper_cell": ("01_attention", {"scaled_dot_product_attention": SDPA_WITH_HELPER},
                    {"scaled_dot_product_attention": HELPER_CELL}),
    "demo_name": ("01_attention", {"scaled_dot_product_attention": SDPA_ON_DEMO_NAME}, None),
    "buffer": ("02_multi_head_attention",
               {"MultiHeadAttention": _solution_sources("02_multi_head_attention")["MultiHeadAttention"]
                + MHA_WITH_BUFFER_SUFFIX}, None),
    "challenge_stand_in": ("01_attention", {"scaled_dot_product_attention": SDPA_USING_A_CHALLENGE}, None),
    "leak": ("01_attention", {"softmax": NAN_SOFTMAX, "scaled_dot_product_attention": SDPA_LEAKING_THE_STAND_IN},
             None),
    "defined_below_stub": ("01_attention", {"softmax_jacobian": None}, None),
    "helper_below_check": ("01_attention", {"padding_mask": PADDING_WITH_HELPER_BELOW_ITS_CHECK}, None),
    "extra_parameter": ("02_multi_head_attention",
                        {"MultiHeadAttention": _solution_sources("02_multi_head_attention")["MultiHeadAttention"]
                         + MHA_EXTRA_PARAMETER_SUFFIX}, None),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """{submission: {exercise: verdict}}, graded two at a time by the real grader."""
    root = tmp_path_factory.mktemp("rules")

    def grade(name: str) -> tuple[str, dict]:
        notebook, replaced, added = SUBMISSIONS[name]
        folder = root / name
        folder.mkdir()
        nbformat.write(_build(notebook, replaced, added, ADDED_AFTER.get(name)), folder / f"{notebook}.ipynb")
        (report,) = grade_submission(folder, notebooks=[notebook])["notebooks"]
        return name, {ex["exercise"]: ex for ex in report["exercises"]}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(grade, SUBMISSIONS))


def _in_notebook(name: str, exercise: str) -> tuple[bool, str]:
    """Run the submission's setup and code cells as Run All would (demo cells of the course
    excluded here: the learner's own demo-cell definitions are what the rule is about), then
    the exercise's check with every part; (passed, what it printed or raised)."""
    notebook, replaced, added = SUBMISSIONS[name]
    nb = _build(notebook, replaced, added)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(setup_source(nb), namespace)
    if name == "demo_name":
        namespace[DEMO_NAME] = 1  # the learner ran the demo cell that defines it
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or not meta and "check_" not in cell.source
                                         and cell.source in (added or {}).values()):
            exec(cell.source, namespace)
    module = __import__(f"tfcourse.checks.nb{notebook[:2]}_{notebook[3:]}", fromlist=["x"])
    printed = io.StringIO()
    try:
        with redirect_stdout(printed):
            getattr(module, f"check_{exercise}")(namespace[exercise])
    except CheckFailed as failure:
        return False, str(failure)
    return True, printed.getvalue()


@pytest.mark.slow
def test_one_bug_in_softmax_costs_only_softmax(graded):
    verdicts = graded["one_bug_nb01"]
    assert verdicts["softmax"]["score"] == 0
    sdpa = verdicts["scaled_dot_product_attention"]
    assert sdpa["status"] == "passed" and sdpa["score"] == sdpa["max_score"], sdpa["feedback"]
    assert "course's `softmax` in place of yours" in sdpa["feedback"]
    passed, text = _in_notebook("one_bug_nb01", "scaled_dot_product_attention")
    assert passed and "course's `softmax`" in text, text
    assert not _in_notebook("one_bug_nb01", "softmax")[0]


@pytest.mark.slow
def test_a_caller_with_a_bug_of_its_own_keeps_its_loss_and_is_told_where_to_see_it(graded):
    """The stand-in run does not help an attention that forgot the scale: its score stays, and
    its feedback says that the check cell (which uses the course's softmax) names its own bug,
    since the messages shown came from the run with the learner's NaN softmax."""
    sdpa = graded["two_bugs_nb01"]["scaled_dot_product_attention"]
    assert sdpa["score"] < sdpa["max_score"]
    assert "problem of its own" in sdpa["feedback"] and "course's `softmax`" in sdpa["feedback"]
    assert graded["two_bugs_nb01"]["softmax"]["score"] == 0


def test_a_multi_head_attention_without_cross_attention_does_not_cost_mha_from_torch(graded):
    verdicts = graded["one_bug_nb02"]
    mha = verdicts["MultiHeadAttention"]
    assert mha["status"] == "failed" and 0 < mha["score"] < mha["max_score"], mha  # core part kept
    conversion = verdicts["mha_from_torch"]
    assert conversion["status"] == "passed", conversion["feedback"]
    passed, text = _in_notebook("one_bug_nb02", "mha_from_torch")
    assert passed, text


@pytest.mark.slow
def test_a_conversion_that_copies_nothing_gets_nothing_next_to_a_constant_module(graded):
    verdicts = graded["constant_mha"]
    assert verdicts["MultiHeadAttention"]["score"] == 0, verdicts["MultiHeadAttention"]
    conversion = verdicts["mha_from_torch"]
    assert conversion["score"] == 0 and conversion["status"] == "failed", conversion
    assert not _in_notebook("constant_mha", "mha_from_torch")[0]


@pytest.mark.slow
def test_a_helper_in_a_cell_the_learner_added_counts(graded):
    sdpa = graded["helper_cell"]["scaled_dot_product_attention"]
    assert sdpa["status"] == "passed", sdpa["feedback"]
    assert _in_notebook("helper_cell", "scaled_dot_product_attention")[0]


@pytest.mark.slow
def test_a_name_from_a_course_demo_cell_is_refused_with_the_rule(graded):
    sdpa = graded["demo_name"]["scaled_dot_product_attention"]
    assert sdpa["status"] == "error" and sdpa["score"] == 0
    assert "not the course's demo cells" in sdpa["feedback"], sdpa["feedback"]
    passed, text = _in_notebook("demo_name", "scaled_dot_product_attention")
    assert not passed and "demo cell" in text, text


@pytest.mark.slow
def test_extra_buffers_are_allowed(graded):
    mha = graded["buffer"]["MultiHeadAttention"]
    assert mha["status"] == "passed", mha["feedback"]
    passed, text = _in_notebook("buffer", "MultiHeadAttention")
    assert passed, text


@pytest.mark.slow
def test_a_parameter_the_grader_cannot_set_is_named(graded):
    mha = graded["extra_parameter"]["MultiHeadAttention"]
    assert mha["score"] == 0 and re.search(r"temperature", mha["feedback"]), mha["feedback"]
    passed, text = _in_notebook("extra_parameter", "MultiHeadAttention")
    assert not passed and "temperature" in text, text


@pytest.mark.slow
def test_no_challenge_ever_stands_in(graded):
    sdpa = graded["challenge_stand_in"]["scaled_dot_product_attention"]
    assert sdpa["score"] == 0 and "course's" not in sdpa["feedback"], sdpa


@pytest.mark.slow
def test_nothing_of_the_stand_in_run_but_scores_reaches_the_report(graded):
    sdpa = graded["leak"]["scaled_dot_product_attention"]
    assert sdpa["score"] == 1.5, sdpa  # the core part, with the course's softmax in place of the NaN one
    assert "LEAK" not in sdpa["feedback"] and "def softmax" not in sdpa["feedback"], sdpa["feedback"]
    for part in sdpa["parts"]:  # nor the test cells' own feedback (a JSON report and the gradebook show it)
        assert "LEAK" not in part["feedback"] and "def softmax" not in part["feedback"], part
    masks = next(p for p in sdpa["parts"] if p["test_cell"].endswith("__masks"))
    assert "run that check cell in your notebook" in masks["feedback"], masks
    assert "test_scaled_dot_product_attention 1.5/1.5" in sdpa["feedback"]
    first = sdpa["feedback"].splitlines()[0]  # the score that counts, and why it is not all
    assert first.startswith("✗ scaled_dot_product_attention: test_scaled_dot_product_attention 1.5/1.5, "
                            "test_scaled_dot_product_attention__masks 0/2, test_scaled_dot_product_attention__half "
                            "0/0.5, graded with the course's `softmax`")
    assert "run that check cell in your notebook" in sdpa["feedback"]


@pytest.mark.slow
def test_an_exercise_defined_in_a_cell_added_below_its_stub_is_graded(graded):
    jac = graded["defined_below_stub"]["softmax_jacobian"]
    assert jac["status"] == "passed" and "a cell you added defines" in jac["feedback"], jac


@pytest.mark.slow
def test_a_helper_defined_below_the_check_cell_is_not_there_when_the_check_runs(graded):
    """Run All order: the check cell runs before the cell below it, in the notebook and the grader."""
    pad = graded["helper_below_check"]["padding_mask"]
    assert pad["status"] == "error" and "_key_is_real" in pad["feedback"], pad


def test_submissions_here_are_built_from_existing_cells():
    for notebook, replaced, added in SUBMISSIONS.values():
        ids = {c.metadata.get("nbgrader", {}).get("grade_id") for c in
               nbformat.read(SOLUTIONS / f"{notebook}.ipynb", as_version=4).cells}
        assert set(replaced) | set(added or {}) <= ids
    assert Path(SOLUTIONS).is_dir()


GELU_WRONG_TANH = '''
import math
import torch

def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(approximate)
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if approximate == "tanh":  # 0.5 instead of 0.044715: the tanh test cell must say so, the core one pass
        y = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.5 * h ** 3)))
    else:
        y = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    return y.to(x.dtype)
'''


def test_each_test_cell_of_an_exercise_gets_its_own_message(tmp_path):
    """An exercise with several test cells: each part of the row says what its own checks found,
    and the autograded notebook shows that under the test cell (not the exercise's first failure
    under every cell)."""
    from grader.instructor.grade import _output

    nb = _build("05_feed_forward", {"gelu": GELU_WRONG_TANH, "swiglu_hidden_dim": None})
    nbformat.write(nb, tmp_path / "05_feed_forward.ipynb")
    row = grade_submission(tmp_path, notebooks=["05_feed_forward"])
    (ex,) = [e for e in row["notebooks"][0]["exercises"] if e["exercise"] == "gelu"]
    core, tanh, validation, half = ex["parts"]
    assert ex["status"] == "failed" and core["passed"] and not tanh["passed"] and validation["passed"], ex
    assert not half["passed"] and "tanh" in half["feedback"], half  # its float16 cases run the tanh form too
    assert core["feedback"].startswith(f"✓ {core['test_cell']}: all ") and "✗" not in core["feedback"]
    assert tanh["feedback"].startswith("✗") and "checks of this test cell passed" in tanh["feedback"]
    assert "tanh" in tanh["feedback"], tanh["feedback"]
    # not judged check by check (not attempted here): every part still has a feedback, empty
    untouched = [e for e in row["notebooks"][0]["exercises"] if e["status"] == "not_attempted"]
    assert untouched and all(p["feedback"] == "" for e in untouched for p in e["parts"])
    shown = {p["test_cell"]: "\n".join(_output(p, ex).get("traceback", [])) or _output(p, ex)["text"]
             for p in ex["parts"]}
    assert "✗" not in shown[core["test_cell"]] and tanh["feedback"].splitlines()[0] in shown[tanh["test_cell"]]
