"""The call machinery the checks of notebooks 05-07 use: steps on one instance per key, probe
modules put in place of submodules, row counts per expert, the shape watcher (split from
test_checks_core.py)."""

from __future__ import annotations

import pytest
import torch

from tfcourse.checks import Call, run_call
from tfcourse.checks.outcome import FORBIDDEN_SHAPE
from tfcourse.checks.wire import call_from_json, call_to_json


# -- steps, instances and row counts (notebooks 05-07: caches, probe models, MoE experts) -------
class _Cache:
    """A tiny correct cache (the learner's KVCache in the real cases)."""

    def __init__(self):
        self.k = None

    def update(self, k):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=1)
        return self.k

    @property
    def seq_len(self):
        return 0 if self.k is None else self.k.shape[1]


class _Summer(torch.nn.Module):
    """Adds every input it has seen (through the cache) to the new one."""

    def forward(self, x, cache=None):
        if cache is None:
            return x.cumsum(dim=1)
        return x + cache.update(x).sum(dim=1, keepdim=True) - x.sum(dim=1, keepdim=True) + \
            torch.zeros_like(x)


def _steps_call() -> Call:
    from tfcourse.checks import Instance, Step
    cache = Instance("_Cache", key="c")
    x1, x2 = torch.ones(1, 2, 3), torch.full((1, 1, 3), 2.0)
    return Call("_Summer", (), steps=(Step("__call__", (x1,), {"cache": cache}),
                                      Step("seq_len", on="c", attribute=True),
                                      Step("__call__", (x2,), {"cache": cache}),
                                      Step("k", on="c", attribute=True),
                                      Step("seq_len", on="c", attribute=True)))


def test_steps_share_one_instance_per_key_and_their_results_are_flattened_in_order():
    call = _steps_call()
    tensors: dict = {}
    back = call_from_json(call_to_json(call, tensors, "s"), tensors)
    assert [(s.method, s.on, s.attribute) for s in back.steps] == [(s.method, s.on, s.attribute) for s in call.steps]
    assert back.steps[0].kwargs["cache"] == call.steps[0].kwargs["cache"]
    for c in (call, back):
        # the cache is looked up in the namespace, else in the globals of the code under test
        for namespace in ({"_Summer": _Summer, "_Cache": _Cache}, {"_Summer": _Summer}):
            outcome = run_call(c, namespace)
            assert outcome.kind == "tuple", outcome
            out1, len1, out2, k, len2 = outcome.tensors
            assert len1.dtype == torch.int64 and int(len1) == 2 and int(len2) == 3
            assert k.shape == (1, 3, 3) and torch.equal(out2, torch.full((1, 1, 3), 4.0))
    assert "then <c>.k" not in call.describe() and "read <c>.k" in call.describe()


def test_a_missing_instance_class_or_a_probe_outside_the_checks_is_an_error():
    from tfcourse.checks import Instance, Step
    call = _steps_call()
    no_cache = run_call(call, {"_Summer": lambda: _Summer()})  # a lambda's globals are this module's
    assert no_cache.ok
    missing = run_call(Call("f", (Instance("Nowhere"),)), {"f": lambda c: c})
    assert missing.error_type == "NameError" and "Nowhere" in missing.error_message
    outside = run_call(Call("f", (Instance("os:getcwd"),)), {"f": lambda c: torch.zeros(1)})
    assert outside.error_type == "ValueError" and "tfcourse.checks." in outside.error_message
    in_place = run_call(Call("_Summer", (), steps=(Step("__call__", (torch.ones(1, 2, 3),),
                                                        {"cache": Instance("_Cache")}),)),
                        {"_Summer": _InPlaceSummer, "_Cache": _Cache})
    assert in_place.ok and "`x`" in in_place.note  # a step that writes its input: a note, no failure


class _InPlaceSummer(torch.nn.Module):
    def forward(self, x, cache=None):
        return x.add_(1)


class _Router(torch.nn.Module):
    """Two experts; token i goes to expert i % 2 (the second called through .forward, which
    skips module hooks), or to both when ``dense``."""

    def __init__(self, dense: bool):
        super().__init__()
        self.experts = torch.nn.ModuleList([torch.nn.Identity(), torch.nn.Identity()])
        self.dense = dense

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        if self.dense:
            return self.experts[0](flat) + self.experts[1](flat)
        return self.experts[0](flat[0::2]).sum() + self.experts[1].forward(flat[1::2]).sum()


def test_count_rows_of_counts_the_rows_each_child_receives():
    call = Call("_Router", (False,), forward_args=(torch.ones(1, 5, 4),), count_rows_of="experts")
    tensors: dict = {}
    back = call_from_json(call_to_json(call, tensors, "r"), tensors)
    assert back.count_rows_of == "experts"
    sparse = run_call(back, {"_Router": _Router})
    assert sparse.tensors[-1].tolist() == [3, 2]
    dense = run_call(Call("_Router", (True,), forward_args=(torch.ones(1, 5, 4),), count_rows_of="experts"),
                     {"_Router": _Router})
    assert dense.tensors[-1].tolist() == [5, 5]
    leaf = run_call(Call("_Router", (True,), forward_args=(torch.ones(1, 5, 4),), count_rows_of="experts.1"),
                    {"_Router": _Router})
    assert leaf.tensors[-1].tolist() == [5]
    nothing = run_call(Call("_Router", (True,), forward_args=(torch.ones(1, 5, 4),), count_rows_of="gate"),
                       {"_Router": _Router})
    assert nothing.error_type == "AttributeError" and "`gate`" in nothing.error_message


def test_replace_puts_probes_in_place_of_submodules_after_the_weights_are_loaded():
    from tfcourse.checks import Instance
    probe = Instance("tfcourse.checks.nb05_feed_forward.probes:RoutedExpert",
                     (torch.tensor([[1.0, 0.0], [0.0, 1.0]]), 1, 1, torch.eye(2), torch.eye(2), torch.eye(2),
                      torch.zeros(2)))
    x = torch.tensor([[[0.0, 3.0], [3.0, 0.0]]])  # token 0 routes to expert 1, token 1 to expert 0
    call = Call("_Router", (False,), forward_args=(x,), replace=(("experts.1", probe),))
    tensors: dict = {}
    back = call_from_json(call_to_json(call, tensors, "p"), tensors)
    assert back.replace[0][0] == "experts.1" and "replaced by the check's probes" in back.describe()
    sparse = run_call(back, {"_Router": _Router})  # expert 1 gets token 1 (flat[1::2]), not routed to it
    assert sparse.ok and bool(sparse.tensors[0].isnan())
    routed = run_call(Call("_Router", (False,), forward_args=(x.flip(1),), replace=(("experts.1", probe),)),
                      {"_Router": _Router})
    assert routed.ok and not bool(routed.tensors[0].isnan())
    missing = run_call(Call("_Router", (False,), forward_args=(x,), replace=(("experts.7", probe),)),
                       {"_Router": _Router})
    assert missing.error_type == "AttributeError" and "`experts.7`" in missing.error_message
    spec = call_to_json(call, tensors, "p")
    with pytest.raises(ValueError, match="must be an Instance"):  # a replacement is built by the checks only
        call_from_json({**spec, "replace": [["experts.1", "os:system"]]}, tensors)


class _Projector(torch.nn.Module):
    """(B, S, 3) -> (B, S, 2); ``wide`` computes a (B, S, 6) intermediate on the way."""

    def __init__(self, wide: bool):
        super().__init__()
        self.proj = torch.nn.Linear(3, 6, bias=False)
        self.wide = wide

    def forward(self, x):
        if self.wide:
            return self.proj(x)[..., :2]
        w = self.proj.weight.T  # (3, 6): ends with 6, but not with (S, 6)
        return torch.einsum("bsc,ck->bsk", x, w[:, :2])


def test_forbid_shapes_refuses_an_intermediate_that_ends_with_a_forbidden_shape():
    from tfcourse.checks import Step

    x = torch.ones(2, 5, 3)
    call = Call("_Projector", (True,), steps=(Step("__call__", (x,)),), forbid_shapes=((5, 6), (-1, 4, 6)))
    tensors: dict = {}
    back = call_from_json(call_to_json(call, tensors, "f"), tensors)
    assert back.forbid_shapes == ((5, 6), (-1, 4, 6))
    wide = run_call(back, {"_Projector": _Projector})
    assert wide.error_type == FORBIDDEN_SHAPE and "(2, 5, 6)" in wide.error_message and "linear" in wide.error_message
    narrow = run_call(back, {"_Projector": lambda wide: _Projector(False)})
    assert narrow.ok and tuple(narrow.tensors[0].shape) == (2, 5, 2)
    # without the option the same call passes, and the forward call (not only steps) is watched
    assert run_call(Call("_Projector", (True,), steps=(Step("__call__", (x,)),)), {"_Projector": _Projector}).ok
    forward = run_call(Call("_Projector", (True,), forward_args=(x,), forbid_shapes=((5, 6),)),
                       {"_Projector": _Projector})
    assert forward.error_type == FORBIDDEN_SHAPE
    # building the module (its (6, 3) weight) is not watched; a pattern must match every trailing size
    assert run_call(Call("_Projector", (True,), forward_args=(x,), forbid_shapes=((6, 3), (4, 6))),
                    {"_Projector": _Projector}).ok


class _HiddenProjector(_Projector):
    """The wide projection inside torch._C.DisableTorchFunction(), where no function mode runs."""

    def forward(self, x):
        with torch._C.DisableTorchFunction():
            return torch.nn.functional.linear(x, self.proj.weight)[..., :2]


def test_the_shape_watcher_survives_disabled_function_modes_and_patched_modules(monkeypatch):
    """issue 25's forgeries of MLA's absorb point: the watcher runs as a dispatch mode too, and
    is bound at import, so replacing its pieces in the checks' modules changes nothing."""
    from tfcourse.checks import Step, evidence
    from tfcourse.checks import call as call_module

    x = torch.ones(2, 5, 3)
    call = Call("_Projector", (True,), steps=(Step("__call__", (x,)),), forbid_shapes=((5, 6),))
    hidden = run_call(call, {"_Projector": _HiddenProjector})
    assert hidden.error_type == FORBIDDEN_SHAPE and "aten" in hidden.error_message, hidden
    def nothing(patterns):
        return (lambda: None), (lambda *exc: None), (lambda: None)

    for module in (evidence, call_module):
        monkeypatch.setattr(module, "watch_shapes", nothing, raising=False)
    monkeypatch.setattr(evidence, "shape_matches", lambda shape, pattern: False)
    monkeypatch.setattr(evidence, "tensor_leaves", lambda value, path: [])
    for cls in (_Projector, _HiddenProjector):
        outcome = run_call(call, {"_Projector": cls})
        assert outcome.error_type == FORBIDDEN_SHAPE, outcome
