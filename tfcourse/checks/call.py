"""How a check calls the code under test.

A :class:`Call` is plain data (a target name, arguments, optional weights to load, an optional
forward call and steps), so the grader can send it to its sandboxed child as JSON plus a
safetensors file (:mod:`~tfcourse.checks.wire`), and a notebook can run it in-process. Both get an
:class:`~tfcourse.checks.outcome.Outcome` back from :func:`run_call`: the returned tensors or the
exception that was raised. Like :mod:`~tfcourse.checks.outcome`, this module runs in the child and
depends on the standard library and torch only.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import torch

from .evidence import (
    RowCounter,
    call_and_gradients,
    forward_and_gradients,
    modified_input,
    watch_inputs,
    watch_shapes,
)
from .outcome import Outcome, outcome_of, outcome_of_exception

__all__ = ["CHECKS_PREFIX", "Call", "DEVICE", "INT_STEP", "Instance", "Step", "TORCH_MODULES", "TorchModule",
           "globals_of", "load_parameters", "run_call", "state_dtype"]

# An argument that stands for "the device the check runs on" (cpu in a notebook, the grader's
# --device in the grader): ``Call("causal_mask", (4,), {"device": DEVICE})``.
DEVICE = "$device"

# torch.nn classes a case may build and hand to the code under test (e.g. mha_from_torch).
TORCH_MODULES = ("MultiheadAttention", "Linear", "LayerNorm", "Embedding", "RMSNorm")


def state_dtype(state: dict[str, torch.Tensor]) -> torch.dtype | None:
    """The one floating dtype of a state dict's tensors, or None (mixed, or no float tensors).

    Modules get this dtype before weights are loaded: ``load_state_dict`` alone would copy
    float64 weights into float32 parameters, and float64 cases could not run.
    """
    dtypes = {t.dtype for t in state.values() if isinstance(t, torch.Tensor) and t.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


def load_parameters(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load ``state`` into ``module`` by name: the graded contract is its named parameters.

    Every key of ``state`` must name a parameter or buffer of ``module`` with the same shape, and
    every parameter of ``module`` must be in ``state`` (a parameter the grader cannot set would
    hold random values). Buffers and plain attributes the module keeps besides (a registered
    causal mask, a cached table) are allowed and left as they are.

    Raises RuntimeError with torch's "Error(s) in loading state_dict" wording otherwise.
    """
    result = module.load_state_dict(state, strict=False)
    parameters = {name for name, _ in module.named_parameters()}
    missing = [k for k in result.missing_keys if k in parameters]
    problems = []
    if missing:
        problems.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
    if result.unexpected_keys:
        problems.append("Unexpected key(s) in state_dict: "
                        + ", ".join(f'"{k}"' for k in result.unexpected_keys) + ".")
    if problems:
        raise RuntimeError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t"
                           + "\n\t".join(problems))


@dataclass(frozen=True)
class TorchModule:
    """An argument built as ``torch.nn.<cls>(**kwargs)`` with ``state`` loaded (strict)."""

    cls: str
    kwargs: dict[str, Any]
    state: dict[str, torch.Tensor]

    def build(self, device: torch.device | str | None = None) -> torch.nn.Module:
        if self.cls not in TORCH_MODULES:
            raise ValueError(f"torch.nn.{self.cls} is not one of {TORCH_MODULES}")
        module = getattr(torch.nn, self.cls)(**self.kwargs)
        dtype = state_dtype(self.state)
        if dtype is not None:
            module = module.to(dtype)
        module.load_state_dict(self.state, strict=True)
        return module.to(device).eval() if device is not None else module.eval()


# Probe classes a case may build by path: only from the course's checks (visible, trusted code).
CHECKS_PREFIX = "tfcourse.checks."


@dataclass(frozen=True)
class Instance:
    """An argument built where the call runs, as ``cls(*args, **kwargs)``.

    ``target`` names the class: an exercise or setup name (the learner's ``KVCache``, looked up in
    the namespace the call runs in, else in the globals of the code under test, so a course
    solution standing in is used the same way), or ``"tfcourse.checks.<module>:<Name>"`` for a
    probe class of the checks (e.g. a tiny model that records how it is called). Instances with
    the same non-empty ``key`` in one :class:`Call` are one object (a cache shared by two forward
    calls); a :class:`Step` can address it by that key.
    """

    target: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    key: str = ""


@dataclass(frozen=True)
class Step:
    """One more call on an object after :class:`Call` built it: ``obj.method(*args, **kwargs)``
    (``method="__call__"`` is the module's forward, in eval mode and under ``torch.no_grad()``),
    or, with ``attribute=True``, reading ``obj.method`` (``method=""``: the object itself, e.g. what a
    function returned, an int or None). ``on``: "" for the object the Call built,
    else the key of an :class:`Instance` of the same Call (e.g. read ``cache.k`` afterwards)."""

    method: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    on: str = ""
    attribute: bool = False


# A step that reads an answer that must be a Python int: an int's ``.numerator`` is the int itself;
# a float or a tensor has none (AttributeError), a numpy integer returns a numpy integer (which
# comes back as a bad type). ``__index__`` would accept numpy and tensor ints. See
# ``case.not_a_python_int`` for naming what came back instead.
INT_STEP = Step("numerator", attribute=True)


@dataclass(frozen=True)
class Call:
    """``result = target(*args, **kwargs)``; then optionally load ``state`` into the result
    (an ``nn.Module``, by name: :func:`load_parameters`) and call it with
    ``forward_args``/``forward_kwargs``."""

    target: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    state: dict[str, torch.Tensor] | None = None
    forward_args: tuple | None = None
    forward_kwargs: dict[str, Any] = field(default_factory=dict)
    # parameter names of the module: with them the forward runs with autograd on, the output is
    # back-propagated with ``grad_output_for(output)``, and the outcome is (output, their .grad ...).
    # A forward returning a tuple of tensors: its first is back-propagated, the outcome is (*tuple, grads).
    # For a plain function call (no state, no forward): names of its tensor arguments instead.
    grad_of: tuple[str, ...] = ()
    # calls made on the built object (and on Instances) in order; the outcome is every step's
    # result flattened (see run_call). Used instead of, or after, forward_args.
    steps: tuple[Step, ...] = ()
    # the name of a submodule (an nn.ModuleList such as MoE's ``experts``): every child's forward
    # is wrapped to count the rows it receives (inputs as (-1, last axis)); the outcome gets
    # one more tensor at the end, int64 (number of children,). A submodule without children
    # (an nn.Linear such as MLA's ``kv_b_proj``) is counted itself: (1,)
    count_rows_of: str = ""
    # shapes no tensor computed while the forward call and the steps run may end with: each a tuple
    # of sizes matched against an op's output's trailing dimensions (-1 matches any size), e.g.
    # ((5, 33),) refuses (B, 5, 33) and (5, 33). The outcome is then an error of type
    # FORBIDDEN_SHAPE naming the op (a rule the task states: a tensor the answer must not build).
    forbid_shapes: tuple[tuple[int, ...], ...] = ()
    # a plain function call run twice on the very same argument objects (one generator, one logits
    # tensor): the outcome is the first call's result, the second's, then every tensor argument as
    # it is after both calls. The grading process judges all three against what the arguments were
    # (an answer that writes into its input, ``logits /= temperature``, computes the second result
    # from the written values, and the arguments come back changed): "the inputs are left
    # unwritten", derived from values, not from a comparison made in the child.
    twice: bool = False
    # submodules of the built module replaced, after ``state`` is loaded and before the forward
    # call, by the objects the Instances build: ((dotted name, Instance), ...), e.g. MoE's experts
    # by probe experts whose output shows which rows they received ("experts.0", ...).
    replace: tuple[tuple[str, Instance], ...] = ()

    def on_device(self) -> bool:
        """Whether the answer should live on the run's device: a tensor argument or DEVICE
        was passed. Otherwise (only Python numbers) new tensors belong on the CPU."""
        values = list(self.args) + list(self.kwargs.values())
        return any(isinstance(v, torch.Tensor | TorchModule | Instance) or v == DEVICE for v in values) or \
            self.state is not None or bool(self.steps)

    def describe(self) -> str:
        """A short, reproducible description of the inputs: shapes and dtypes, not values."""
        parts = [_describe(a) for a in self.args]
        parts += [f"{k}={_describe(v)}" for k, v in self.kwargs.items()]
        text = f"{self.target}({', '.join(parts)})"
        if self.state is not None:
            text += " with weights loaded by name"
        if self.forward_args is not None:
            fparts = [_describe(a) for a in self.forward_args]
            fparts += [f"{k}={_describe(v)}" for k, v in self.forward_kwargs.items()]
            text += f", called on ({', '.join(fparts)})"
        for step in self.steps:
            owner = f"<{step.on}>" if step.on else "it"
            if (step.method == "__index__" or step == INT_STEP) and not step.on:
                text += ", which must be a Python int"
                continue
            if step.attribute:
                text += f", then read {owner}.{step.method}" if step.method else ""
                continue
            sparts = [_describe(a) for a in step.args] + [f"{k}={_describe(v)}" for k, v in step.kwargs.items()]
            name = "" if step.method == "__call__" else f".{step.method}"
            text += f", then {owner}{name}({', '.join(sparts)})"
        if self.replace:
            text += f", with `{self.replace[0][0].rpartition('.')[0] or self.replace[0][0]}` replaced by the check's probes"
        if self.count_rows_of:
            text += f", counting the rows each of `{self.count_rows_of}` receives"
        if self.forbid_shapes:
            text += ", watching the shape of every intermediate tensor"
        if self.grad_of:
            text += ", then backward: the gradients of " + ", ".join(f"`{n}`" for n in self.grad_of)
        if self.twice:
            text += ", called twice on the same tensors"
        return text


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"<{tuple(value.shape)} {dtype}>"
    if isinstance(value, str) and value == DEVICE:
        return "<device>"
    if isinstance(value, TorchModule):
        kw = ", ".join(f"{k}={v!r}" for k, v in value.kwargs.items())
        return f"nn.{value.cls}({kw})"
    if isinstance(value, Instance):
        parts = [_describe(a) for a in value.args] + [f"{k}={_describe(v)}" for k, v in value.kwargs.items()]
        name = value.target.rpartition(":")[2]
        return f"{name}({', '.join(parts)})" + (f" <{value.key}>" if value.key else "")
    if isinstance(value, tuple | list):
        inner = ", ".join(_describe(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return repr(value)


class _Instances:
    """Builds the :class:`Instance` arguments of one call, one object per key."""

    def __init__(self, namespace: dict[str, Any], target: Any) -> None:
        self.namespace = namespace
        self.scope = globals_of(target)
        self.by_key: dict[str, Any] = {}

    def cls(self, name: str) -> Any:
        if ":" in name:
            module, _, attr = name.partition(":")
            if not module.startswith(CHECKS_PREFIX):
                raise ValueError(f"a probe class must come from {CHECKS_PREFIX}*, not {module}")
            return getattr(importlib.import_module(module), attr)
        if name in self.namespace:
            return self.namespace[name]
        if name in self.scope:
            return self.scope[name]
        raise NameError(f"`{name}` is not defined")

    def build(self, value: Instance, device: torch.device | str | None) -> Any:
        if value.key and value.key in self.by_key:
            return self.by_key[value.key]
        obj = self.cls(value.target)(*_materialize(value.args, device, self),
                                     **_materialize(value.kwargs, device, self))
        if isinstance(obj, torch.nn.Module) and device is not None:
            obj = obj.to(device)
        if value.key:
            self.by_key[value.key] = obj
        return obj


def globals_of(obj: Any) -> dict[str, Any]:
    """The namespace ``obj``'s code looks names up in (a function's, or a class's methods')."""
    found = getattr(obj, "__globals__", None)
    if isinstance(found, dict):
        return found
    if isinstance(obj, type):
        for value in vars(obj).values():
            found = getattr(value, "__globals__", None)
            if isinstance(found, dict):
                return found
    return {}


def _materialize(value: Any, device: torch.device | str | None, instances: _Instances | None = None) -> Any:
    if isinstance(value, str) and value == DEVICE:
        return torch.device(device if device is not None else "cpu")
    if isinstance(value, torch.Tensor):
        return value.to(device).clone() if device is not None else value.clone()
    if isinstance(value, TorchModule):
        return value.build(device)
    if isinstance(value, Instance):
        if instances is None:
            raise ValueError("an Instance argument outside a call")
        return instances.build(value, device)
    if isinstance(value, tuple):
        return tuple(_materialize(v, device, instances) for v in value)
    if isinstance(value, list):
        return [_materialize(v, device, instances) for v in value]
    if isinstance(value, dict):
        return {k: _materialize(v, device, instances) for k, v in value.items()}
    return value


def run_call(call: Call, namespace: dict[str, Any], device: torch.device | str | None = None) -> Outcome:
    """Run ``call`` against the objects in ``namespace``; never raises (except KeyboardInterrupt
    in a notebook, so that the stop button still works).

    An answer that changes a tensor it was given (an argument or a forward input) keeps its
    result; the outcome's ``note`` says which tensor changed (a warning that costs nothing: the
    comparison is made here, where learner code can reach it). Where a task states that the inputs
    are left unwritten, a test cell of its own scores it from values (``Call.twice``).

    With ``call.steps``, the outcome is the results of every step (after the forward call's, if
    any) flattened in order: a tensor counts one, a tuple or list of tensors one per tensor, a
    Python bool/int/float one 0-dim tensor (bool, int64, float64), None an empty float64 tensor
    of shape (0,). With ``call.count_rows_of``, the rows counted are one more int64 tensor at
    the end."""
    target = namespace.get(call.target)
    if target is None:
        return Outcome("error", error_type="NameError", error_message=f"`{call.target}` is not defined")
    try:
        run = _CallRun(call, namespace, target, device)
        outcome = run.outcome()
        if run.note and not outcome.note:
            outcome.note = run.note
        return outcome
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: learner code must not end the check
        return outcome_of_exception(exc)


def _not_a_module(value: Any) -> Outcome:
    return Outcome("bad_type", type_name=f"{type(value).__name__} (expected an nn.Module)")


class _CallRun:
    """One run of a :class:`Call` (see :func:`run_call`, which catches what it raises): the objects
    it builds and the results it keeps. Each phase returns the outcome that ends the run early (a
    modified input, a forbidden shape, not a module), or None to go on."""

    def __init__(self, call: Call, namespace: dict[str, Any], target: Any, device: torch.device | str | None,
                 *, _watch_shapes: Any = watch_shapes) -> None:
        # the shape watcher is bound here when this module is imported (a default argument), before
        # learner code runs: replacing `watch_shapes` in this module or in evidence has no effect
        self.call, self.target, self.device = call, target, device
        self.watch = _watch_shapes
        self.instances = _Instances(namespace, target)
        self.result: Any = None  # what the call returned; after a forward call, what that returned
        self.results: list[Any] = []  # the forward call's and the steps' results, in order
        self.note = ""  # the first argument the answer wrote into (evidence.modified_input), if any

    def _watch(self, watched: list[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
        if not self.note and (modified := modified_input(watched)) is not None:
            self.note = modified.error_message

    def _materialize(self, value: Any) -> Any:
        return _materialize(value, self.device, self.instances)

    def outcome(self) -> Outcome:
        call = self.call
        args = self._materialize(call.args)
        kwargs = self._materialize(call.kwargs)
        watched = watch_inputs(self.target, args, kwargs)
        if call.twice:
            return self._twice(args, kwargs, watched)
        if call.grad_of and call.forward_args is None and call.state is None:
            result = call_and_gradients(self.target, call.grad_of, args, kwargs)
            self._watch(watched)
            return result if isinstance(result, Outcome) else outcome_of(result)
        self.result = self.target(*args, **kwargs)
        self._watch(watched)
        if call.state is not None and (stop := self._load_state(call.state)) is not None:
            return stop
        if call.replace and (stop := self._replace(call.replace)) is not None:
            return stop
        rows = RowCounter(self.result, call.count_rows_of) if call.count_rows_of else None
        if isinstance(rows, Outcome):
            return rows
        built = self.result
        shapes = self.watch(call.forbid_shapes)  # (start, stop, verdict)
        if call.forward_args is not None and (stop := self._forward(call.forward_args, shapes)) is not None:
            return stop
        for step in call.steps:
            if (stop := self._step(step, built, shapes)) is not None:
                return stop
        if rows is not None:
            self.results.append(rows.counts())
            rows.remove()
        if not call.steps and rows is None:
            return outcome_of(self.result)
        return _flattened(self.results)

    def _twice(self, args: tuple, kwargs: dict, watched: list) -> Outcome:
        """``Call.twice``: the two results and the tensor arguments as they are after both calls."""
        call = self.call
        if call.state is not None or call.forward_args is not None or call.steps or call.grad_of or \
                call.count_rows_of or call.forbid_shapes or call.replace:
            raise ValueError("Call.twice is for a plain function call (no state, forward, steps or evidence)")
        first = _flattened([self.target(*args, **kwargs)])  # kept now: an answer may return its input
        if not first.ok:
            return first
        second = _flattened([self.target(*args, **kwargs)])
        if not second.ok:
            return second
        self._watch(watched)
        after = _flattened([t for _, t, _ in watched])
        return Outcome("tuple", first.tensors + second.tensors + after.tensors,
                       first.devices + second.devices + after.devices)

    def _load_state(self, state: dict[str, torch.Tensor]) -> Outcome | None:
        """The weights loaded by name into the module the call returned (in their dtype)."""
        if not isinstance(self.result, torch.nn.Module):
            return _not_a_module(self.result)
        dtype = state_dtype(state)
        if self.device is not None or dtype is not None:
            self.result = self.result.to(device=self.device, dtype=dtype)
        load_parameters(self.result, _materialize(state, self.device))
        return None

    def _replace(self, replace: tuple[tuple[str, Instance], ...]) -> Outcome | None:
        """Each named submodule of the built module replaced by the probe its Instance builds."""
        if not isinstance(self.result, torch.nn.Module):
            return _not_a_module(self.result)
        for name, value in replace:
            parent_name, _, child = name.rpartition(".")
            try:
                parent = self.result.get_submodule(parent_name)
                parent.get_submodule(child)
            except AttributeError:
                return Outcome("error", error_type="AttributeError",
                               error_message=f"the module has no submodule `{name}`")
            setattr(parent, child, self._materialize(value))
        return None

    def _forward(self, args: tuple, shapes: tuple) -> Outcome | None:
        """The built module called on the forward inputs, in eval mode (with ``grad_of``, the
        backward pass too); its result is kept."""
        module = self.result
        if not isinstance(module, torch.nn.Module):
            return _not_a_module(module)
        module.eval()
        forward_args = self._materialize(args)
        forward_kwargs = self._materialize(self.call.forward_kwargs)
        watched = watch_inputs(module.forward, forward_args, forward_kwargs)
        if self.call.grad_of:
            self.result = forward_and_gradients(module, self.call.grad_of, forward_args, forward_kwargs)
            if isinstance(self.result, Outcome):
                return self.result
        else:
            with torch.no_grad():
                self.result = _watched(shapes, module, forward_args, forward_kwargs)
        self._watch(watched)
        if (forbidden := shapes[2]()) is not None:
            return forbidden
        self.results.append(self.result)
        return None

    def _step(self, step: Step, built: Any, shapes: tuple) -> Outcome | None:
        """One step on the object the call built or on an Instance of the call; its result is kept."""
        owner = built if not step.on else self.instances.by_key.get(step.on)
        if owner is None and (step.on or step.method):  # reading a returned None itself is fine
            raise ValueError(f"no Instance with key {step.on!r} in this call")
        if step.attribute:  # an empty name reads the object itself (e.g. a function's int or None)
            self.results.append(getattr(owner, step.method) if step.method else owner)
            return None
        if step.method == "__call__":
            fn: Any = owner  # a module's __call__, so that hooks run; its forward names the arguments
            if isinstance(owner, torch.nn.Module):
                owner.eval()
            signature_of = owner.forward if isinstance(owner, torch.nn.Module) else owner
        else:
            fn = signature_of = getattr(owner, step.method)
        step_args = self._materialize(step.args)
        step_kwargs = self._materialize(step.kwargs)
        watched = watch_inputs(signature_of, step_args, step_kwargs)
        with torch.no_grad():
            value = _watched(shapes, fn, step_args, step_kwargs)
        self._watch(watched)
        if (forbidden := shapes[2]()) is not None:
            return forbidden
        self.results.append(value)
        return None


def _watched(shapes: tuple, fn: Any, args: tuple, kwargs: dict) -> Any:
    """fn(*args, **kwargs) between the shape watcher's start and stop."""
    start, stop, _ = shapes
    start()
    try:
        return fn(*args, **kwargs)
    finally:
        stop(None, None, None)


def _flattened(results: list[Any]) -> Outcome:
    """The results of a call's steps as one outcome (see run_call)."""
    tensors: list[Any] = []
    for value in results:
        if type(value) in (tuple, list):
            tensors.extend(value)
        elif type(value) is bool:
            tensors.append(torch.tensor(value))
        elif type(value) is int:
            tensors.append(torch.tensor(value, dtype=torch.int64))
        elif type(value) is float:
            tensors.append(torch.tensor(value, dtype=torch.float64))
        elif value is None:
            tensors.append(torch.zeros(0, dtype=torch.float64))
        else:
            tensors.append(value)
    return outcome_of(tuple(tensors))
