"""How a check calls the code under test, and what it keeps of the answer.

This module is the one piece of the checks that also runs inside the grader's sandboxed child
process, so it depends on the standard library and torch only. A :class:`Call` is plain data
(a target name, arguments, optional weights to load, an optional forward call), so the grader can
send it to the child as JSON plus a safetensors file, and a notebook can run it in-process. Both
return an :class:`Outcome`: the returned tensors (exact ``torch.Tensor`` only, never a subclass or
an object that claims to be equal to something) or the exception that was raised.
"""

from __future__ import annotations

import importlib
import inspect
import re
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Call", "DEVICE", "FORBIDDEN_SHAPE", "INT_STEP", "Instance", "MODIFIED_INPUT", "NO_GRADIENT", "grad_output_for", "Step", "TorchModule",
           "Outcome", "load_parameters", "run_call", "safe_text", "TORCH_MODULES"]

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
# ``_core.not_a_python_int`` for naming what came back instead.
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
        if self.count_rows_of:
            text += f", counting the rows each of `{self.count_rows_of}` receives"
        if self.forbid_shapes:
            text += ", watching the shape of every intermediate tensor"
        if self.grad_of:
            text += ", then backward: the gradients of " + ", ".join(f"`{n}`" for n in self.grad_of)
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
        inner = [_describe(a) for a in value.args] + [f"{k}={_describe(v)}" for k, v in value.kwargs.items()]
        name = value.target.rpartition(":")[2]
        return f"{name}({', '.join(inner)})" + (f" <{value.key}>" if value.key else "")
    if isinstance(value, tuple | list):
        inner = ", ".join(_describe(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return repr(value)


@dataclass
class Outcome:
    """What came back from one call.

    kind: "tensor" (one tensor), "tuple" (a tuple/list of tensors), "error" (an exception was
    raised) or "bad_type" (something that is not a plain tensor came back). ``devices`` keeps
    where each tensor was before it was moved to the CPU for judging.
    """

    kind: str
    tensors: list[torch.Tensor] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    error_type: str = ""
    error_message: str = ""
    error_cell: str = ""  # the file/cell name of the innermost frame that raised
    error_function: str = ""  # the qualified name of the function that raised, e.g. "MHA.__init__"
    type_name: str = ""

    @property
    def ok(self) -> bool:
        return self.kind in ("tensor", "tuple")

    def error_line(self) -> str:
        msg = self.error_message.strip().splitlines()
        if not msg:
            return self.error_type
        last = msg[-1] if len(msg[-1]) <= 300 else msg[-1][:300] + " …"
        return f"{self.error_type}: {last}"


class _Instances:
    """Builds the :class:`Instance` arguments of one call, one object per key."""

    def __init__(self, namespace: dict[str, Any], target: Any) -> None:
        self.namespace = namespace
        self.scope = _globals_of(target)
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


def _globals_of(obj: Any) -> dict[str, Any]:
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


def _is_plain_tensor(x: Any) -> bool:
    return type(x) is torch.Tensor or type(x) is torch.nn.Parameter


def _plain(x: torch.Tensor) -> torch.Tensor:
    # A new plain tensor that owns its memory: nothing of the returned object survives.
    return x.detach().cpu().clone().contiguous()


def outcome_of(result: Any) -> Outcome:
    """Keep plain tensors only; anything else is reported by its type name."""
    if _is_plain_tensor(result):
        return Outcome("tensor", [_plain(result)], [str(result.device)])
    if type(result) in (tuple, list) and result and all(_is_plain_tensor(r) for r in result):
        return Outcome("tuple", [_plain(r) for r in result], [str(r.device) for r in result])
    if type(result) in (tuple, list):
        inner = ", ".join(type(r).__name__ for r in result)
        return Outcome("bad_type", type_name=f"{type(result).__name__} of ({inner})")
    return Outcome("bad_type", type_name=f"{type(result).__module__}.{type(result).__qualname__}")


def outcome_of_exception(exc: BaseException) -> Outcome:
    frames = traceback.extract_tb(exc.__traceback__)
    cell = frames[-1].filename if frames else ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    function = tb.tb_frame.f_code.co_qualname if tb is not None else ""
    try:
        message = str(exc)
    except BaseException:  # an exception whose __str__ raises
        message = "<unprintable message>"
    return Outcome(
        "error",
        error_type=type(exc).__name__,
        error_message=message[:2000],
        error_cell=cell,
        error_function=function,
    )


# The error type of an answer that changed a tensor it was given (see run_call).
MODIFIED_INPUT = "ModifiedInput"
# The error type of a module whose parameter got no gradient from a backward pass (Call.grad_of).
NO_GRADIENT = "NoGradient"
# The error type of an answer that computed a tensor of a shape the call forbids (Call.forbid_shapes).
FORBIDDEN_SHAPE = "ForbiddenShape"


class _ShapeMode(torch.overrides.TorchFunctionMode):
    """Records the first torch op whose output (or one of its outputs) ends with a forbidden shape."""

    def __init__(self, patterns: tuple[tuple[int, ...], ...]) -> None:
        super().__init__()
        self.patterns = patterns
        self.found = ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.found:
            for _, t in _tensor_leaves(out, ""):
                shape = tuple(t.shape)
                if any(len(shape) >= len(p) and all(w in (-1, n) for w, n in zip(p, shape[len(shape) - len(p):],
                                                                                   strict=True))
                       for p in self.patterns):
                    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
                    self.found = f"`{name}` computed a tensor of shape {shape}"
                    break
        return out


class _ShapeWatch:
    """``with watch:`` runs code under a :class:`_ShapeMode` when ``patterns`` is not empty;
    ``outcome()`` is then the FORBIDDEN_SHAPE error outcome, or None."""

    def __init__(self, patterns: tuple[tuple[int, ...], ...]) -> None:
        self.mode = _ShapeMode(patterns) if patterns else None

    def __enter__(self) -> None:
        if self.mode is not None:
            self.mode.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.mode is not None:
            self.mode.__exit__(*exc)

    def outcome(self) -> Outcome | None:
        if self.mode is None or not self.mode.found:
            return None
        return Outcome("error", error_type=FORBIDDEN_SHAPE, error_message=self.mode.found)


def grad_output_for(output: torch.Tensor) -> torch.Tensor:
    """The upstream gradient a ``Call.grad_of`` backward pass uses: fixed values from -1 to 1 in
    ``output``'s shape, dtype and device (not all ones, so every position weighs differently)."""
    values = torch.linspace(-1.0, 1.0, output.numel(), dtype=torch.float64)
    return values.reshape(output.shape).to(dtype=output.dtype, device=output.device)


def _forward_and_gradients(module: torch.nn.Module, names: tuple[str, ...], args: tuple,
                           kwargs: dict) -> Any:
    """(output, the gradients of ``names``), or an error outcome when one is missing."""
    for p in module.parameters():
        p.grad = None
    with torch.enable_grad():
        returned = module(*args, **kwargs)
        # a tuple (MoE's (y, router_logits)): its first tensor, the module's output, is back-propagated
        many = type(returned) in (tuple, list) and bool(returned) and all(_is_plain_tensor(r) for r in returned)
        output = returned[0] if many else returned
        if not _is_plain_tensor(output):
            return returned  # outcome_of reports the type
        if not output.requires_grad:
            return Outcome("error", error_type=NO_GRADIENT, error_message=(
                "the output does not depend on any parameter through autograd (torch.no_grad(), "
                ".detach() or .data cut the graph): the module cannot be trained"))
        output.backward(grad_output_for(output))
    params = dict(module.named_parameters())
    grads = []
    for name in names:
        grad = params[name].grad if name in params else None
        if grad is None:
            return Outcome("error", error_type=NO_GRADIENT, error_message=(
                f"no gradient reached the parameter `{name}` (.detach(), .data, torch.no_grad() or a "
                "tensor copied out of it cut the graph): training would never change it"))
        grads.append(grad)
    outputs = [r.detach() for r in returned] if many else [output.detach()]
    return (*outputs, *grads)


def _call_and_gradients(fn: Any, names: tuple[str, ...], args: tuple, kwargs: dict) -> Any:
    """(fn's output, the gradients of its tensor arguments ``names``), or an error outcome when
    the output does not reach one of them through autograd (a plain function's ``grad_of``)."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    leaves = []
    for name in names:
        leaf = bound.arguments.get(name)
        if not isinstance(leaf, torch.Tensor) or not leaf.is_floating_point():
            raise ValueError(f"grad_of names `{name}`, which is not a floating tensor argument")
        leaves.append(leaf.requires_grad_(True))
    with torch.enable_grad():
        output = fn(*args, **kwargs)
        if not _is_plain_tensor(output):
            return output  # outcome_of reports the type
        if not output.requires_grad:
            return Outcome("error", error_type=NO_GRADIENT, error_message=(
                "the result does not depend on " + ", ".join(f"`{n}`" for n in names) + " through autograd "
                "(.item(), .detach(), torch.no_grad() or a tensor rebuilt from Python numbers cut the graph): "
                "training could not use it"))
        output.backward(grad_output_for(output))
    grads = []
    for name, leaf in zip(names, leaves, strict=True):
        if leaf.grad is None:
            return Outcome("error", error_type=NO_GRADIENT, error_message=(
                f"no gradient reached the argument `{name}` (.detach(), .item() or torch.no_grad() cut the graph)"))
        grads.append(leaf.grad)
    return (output.detach(), *grads)


def _tensor_leaves(value: Any, path: str) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, tuple | list):
        return [leaf for i, v in enumerate(value) for leaf in _tensor_leaves(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _tensor_leaves(v, f"{path}[{k!r}]")]
    return []


def _watch(fn: Any, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, tensor handed to ``fn``, a copy) for every tensor among the arguments."""
    try:
        named = dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):  # a signature that does not take these: the call will say so
        named = {**{f"argument {i + 1}": a for i, a in enumerate(args)}, **kwargs}
    return [(name, t, t.clone()) for key, value in named.items() for name, t in _tensor_leaves(value, f"`{key}`")]


def _unchanged(t: torch.Tensor, copy: torch.Tensor) -> bool:
    if t.shape != copy.shape or t.dtype != copy.dtype:
        return False
    same = t == copy
    if t.is_floating_point() or t.is_complex():
        same = same | (t.isnan() & copy.isnan())
    return bool(same.all())


def _modified(watched: list[tuple[str, torch.Tensor, torch.Tensor]]) -> Outcome | None:
    """An error outcome naming the first argument that changed in place, or None."""
    for name, t, copy in watched:
        if not _unchanged(t, copy):
            return Outcome("error", error_type=MODIFIED_INPUT, error_message=(
                f"the tensor passed as {name} was changed in place (the caller's tensor is different "
                "after the call): compute a new tensor (x = x * s), don't write into the input "
                "(x *= s, x.mul_(s), x[...] = ...)"))
    return None


def run_call(call: Call, namespace: dict[str, Any], device: torch.device | str | None = None) -> Outcome:
    """Run ``call`` against the objects in ``namespace``; never raises (except KeyboardInterrupt
    in a notebook, so that the stop button still works).

    An answer that changes a tensor it was given (an argument or a forward input) gets an error
    outcome of type ``MODIFIED_INPUT`` instead of its result: the course's functions and modules
    leave their inputs as they were (docs/conventions.md), as a caller that keeps using the
    tensor (a residual stream, a KV cache) relies on.

    With ``call.steps``, the outcome is the results of every step (after the forward call's, if
    any) flattened in order: a tensor counts one, a tuple or list of tensors one per tensor, a
    Python bool/int/float one 0-dim tensor (bool, int64, float64), None an empty float64 tensor
    of shape (0,). With ``call.count_rows_of``, the rows counted are one more int64 tensor at
    the end."""
    target = namespace.get(call.target)
    if target is None:
        return Outcome("error", error_type="NameError", error_message=f"`{call.target}` is not defined")
    try:
        instances = _Instances(namespace, target)
        args = _materialize(call.args, device, instances)
        kwargs = _materialize(call.kwargs, device, instances)
        watched = _watch(target, args, kwargs)
        if call.grad_of and call.forward_args is None and call.state is None:
            result = _call_and_gradients(target, call.grad_of, args, kwargs)
            if (modified := _modified(watched)) is not None:
                return modified
            return result if isinstance(result, Outcome) else outcome_of(result)
        result = target(*args, **kwargs)
        if (modified := _modified(watched)) is not None:
            return modified
        if call.state is not None:
            if not isinstance(result, torch.nn.Module):
                return Outcome("bad_type", type_name=f"{type(result).__name__} (expected an nn.Module)")
            dtype = state_dtype(call.state)
            if device is not None or dtype is not None:
                result = result.to(device=device, dtype=dtype)
            load_parameters(result, _materialize(call.state, device))
        rows = _RowCounter(result, call.count_rows_of) if call.count_rows_of else None
        if isinstance(rows, Outcome):
            return rows
        results: list[Any] = []
        built = result
        shapes = _ShapeWatch(call.forbid_shapes)
        if call.forward_args is not None:
            if not isinstance(result, torch.nn.Module):
                return Outcome("bad_type", type_name=f"{type(result).__name__} (expected an nn.Module)")
            result.eval()
            forward_args = _materialize(call.forward_args, device, instances)
            forward_kwargs = _materialize(call.forward_kwargs, device, instances)
            watched = _watch(result.forward, forward_args, forward_kwargs)
            if call.grad_of:
                result = _forward_and_gradients(result, call.grad_of, forward_args, forward_kwargs)
                if isinstance(result, Outcome):
                    return result
            else:
                with torch.no_grad(), shapes:
                    result = result(*forward_args, **forward_kwargs)
            if (modified := _modified(watched)) is not None:
                return modified
            if (forbidden := shapes.outcome()) is not None:
                return forbidden
            results.append(result)
        for step in call.steps:
            owner = built if not step.on else instances.by_key.get(step.on)
            if owner is None and (step.on or step.method):  # reading a returned None itself is fine
                raise ValueError(f"no Instance with key {step.on!r} in this call")
            if step.attribute:  # an empty name reads the object itself (e.g. a function's int or None)
                results.append(getattr(owner, step.method) if step.method else owner)
                continue
            if step.method == "__call__":
                fn = owner  # a module's __call__, so that hooks run; its forward names the arguments
                if isinstance(owner, torch.nn.Module):
                    owner.eval()
                signature_of = owner.forward if isinstance(owner, torch.nn.Module) else owner
            else:
                fn = signature_of = getattr(owner, step.method)
            step_args = _materialize(step.args, device, instances)
            step_kwargs = _materialize(step.kwargs, device, instances)
            watched = _watch(signature_of, step_args, step_kwargs)
            with torch.no_grad(), shapes:
                value = fn(*step_args, **step_kwargs)
            if (modified := _modified(watched)) is not None:
                return modified
            if (forbidden := shapes.outcome()) is not None:
                return forbidden
            results.append(value)
        if rows is not None:
            results.append(rows.counts())
            rows.remove()
        if not call.steps and rows is None:
            return outcome_of(result)
        return _flattened(results)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: learner code must not end the check
        return outcome_of_exception(exc)


class _RowCounter:
    """Counts the rows each child of one submodule receives: each child's ``forward`` is wrapped
    (an instance attribute), so ``expert(h)`` and ``expert.forward(h)`` are both counted."""

    def __new__(cls, module: Any, name: str) -> Any:
        if not isinstance(module, torch.nn.Module):
            return Outcome("bad_type", type_name=f"{type(module).__name__} (expected an nn.Module)")
        try:
            counted = module.get_submodule(name)
            children = list(counted.children()) or [counted]  # a leaf (nn.Linear) counts itself
        except AttributeError:
            return Outcome("error", error_type="AttributeError",
                           error_message=f"the module has no submodule `{name}`")
        self = super().__new__(cls)
        self.rows = [0] * len(children)
        self.children = children
        for i, child in enumerate(children):
            child.forward = self._counting(i, child.forward)
        return self

    def _counting(self, index: int, forward: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else next(iter(kwargs.values()), None)
            if isinstance(first, torch.Tensor) and first.dim() > 0:
                self.rows[index] += first.numel() // max(first.shape[-1], 1)
            return forward(*args, **kwargs)
        return counted

    def counts(self) -> torch.Tensor:
        return torch.tensor(self.rows, dtype=torch.int64)

    def remove(self) -> None:
        for child in self.children:
            child.__dict__.pop("forward", None)


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


# ---------------------------------------------------------------------------------------------
# Plain-data encoding: calls go to the grader's child as JSON + a safetensors file, outcomes
# come back the same way. Nothing here can execute code when it is read.
# ---------------------------------------------------------------------------------------------
def call_to_json(call: Call, tensors: dict[str, torch.Tensor], prefix: str) -> dict:
    """Encode ``call``; its tensors are added to ``tensors`` under keys starting with ``prefix``."""
    counter = [0]

    def enc(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            key = f"{prefix}_{counter[0]}"
            counter[0] += 1
            tensors[key] = value.detach().cpu().contiguous().clone()
            return {"$t": key}
        if isinstance(value, TorchModule):
            return {"$m": value.cls, "kwargs": enc(value.kwargs), "state": enc(value.state)}
        if isinstance(value, Instance):
            return {"$i": value.target, "args": enc(value.args), "kwargs": enc(value.kwargs), "key": value.key}
        if isinstance(value, tuple):
            return {"$tuple": [enc(v) for v in value]}
        if isinstance(value, list):
            return [enc(v) for v in value]
        if isinstance(value, dict):
            return {"$dict": {str(k): enc(v) for k, v in value.items()}}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        raise TypeError(f"cannot send {type(value).__name__} to the grader's child")

    return {
        "target": call.target,
        "args": enc(call.args),
        "kwargs": enc(call.kwargs),
        "state": enc(call.state) if call.state is not None else None,
        "forward_args": enc(call.forward_args) if call.forward_args is not None else None,
        "forward_kwargs": enc(call.forward_kwargs),
        "grad_of": [str(n) for n in call.grad_of],
        "steps": [{"method": st.method, "args": enc(st.args), "kwargs": enc(st.kwargs), "on": st.on,
                   "attribute": bool(st.attribute)} for st in call.steps],
        "count_rows_of": call.count_rows_of,
        "forbid_shapes": [[int(n) for n in p] for p in call.forbid_shapes],
    }


def call_from_json(spec: dict, tensors: dict[str, torch.Tensor]) -> Call:
    def dec(value: Any) -> Any:
        if isinstance(value, dict):
            if "$t" in value:
                return tensors[value["$t"]]
            if "$m" in value:
                return TorchModule(value["$m"], dec(value["kwargs"]), dec(value["state"]))
            if "$i" in value:
                return Instance(str(value["$i"]), dec(value["args"]), dec(value["kwargs"]), str(value["key"]))
            if "$tuple" in value:
                return tuple(dec(v) for v in value["$tuple"])
            if "$dict" in value:
                return {k: dec(v) for k, v in value["$dict"].items()}
            raise ValueError(f"unknown encoded value {sorted(value)}")
        if isinstance(value, list):
            return [dec(v) for v in value]
        return value

    return Call(
        target=spec["target"],
        args=dec(spec["args"]),
        kwargs=dec(spec["kwargs"]),
        state=dec(spec["state"]) if spec["state"] is not None else None,
        forward_args=dec(spec["forward_args"]) if spec["forward_args"] is not None else None,
        forward_kwargs=dec(spec["forward_kwargs"]),
        grad_of=tuple(str(n) for n in spec.get("grad_of", [])),
        steps=tuple(Step(str(st["method"]), dec(st["args"]), dec(st["kwargs"]), str(st["on"]),
                         bool(st["attribute"])) for st in spec.get("steps", [])),
        count_rows_of=str(spec.get("count_rows_of", "")),
        forbid_shapes=tuple(tuple(int(n) for n in p) for p in spec.get("forbid_shapes", [])),
    )


OUTCOME_KINDS = ("tensor", "tuple", "error", "bad_type")


def outcome_to_json(outcome: Outcome, tensors: dict[str, torch.Tensor], prefix: str) -> dict:
    keys = []
    for i, t in enumerate(outcome.tensors):
        keys.append(f"{prefix}_{i}")
        tensors[keys[-1]] = t
    return {"kind": outcome.kind, "tensors": keys, "devices": outcome.devices,
            "error_type": outcome.error_type, "error_message": outcome.error_message,
            "error_cell": outcome.error_cell, "error_function": outcome.error_function,
            "type_name": outcome.type_name}


# C0 and C1 control characters other than tab and newline (NUL, ESC sequences that would drive a
# terminal, carriage returns that overwrite a line), and lone surrogates, which no UTF-8 writer
# accepts
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` with every character a report cannot hold or a terminal would obey replaced by
    U+FFFD: lone surrogates (``"\\ud800"`` in a child's JSON; a file name that is not UTF-8),
    NUL and the other control characters except tab and newline. Valid surrogate pairs become
    the character they encode. Strings from a child (exception text, output) pass through here
    where they enter the grading process."""
    if text.isascii() and text.isprintable():
        return text
    if any("\ud800" <= c <= "\udfff" for c in text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return _UNSAFE.sub("\ufffd", text)


def outcome_from_json(spec: Any, tensors: dict[str, torch.Tensor]) -> Outcome:
    """Rebuild an Outcome from what a child wrote, validating every field's type.

    Raises ValueError for anything malformed (the grader then reports a failed case)."""
    if not isinstance(spec, dict) or spec.get("kind") not in OUTCOME_KINDS:
        raise ValueError("malformed outcome")
    keys, devices = spec.get("tensors", []), spec.get("devices", [])
    if not (isinstance(keys, list) and isinstance(devices, list) and len(keys) == len(devices)):
        raise ValueError("malformed outcome tensors")
    found = []
    for key in keys:
        t = tensors.get(key) if isinstance(key, str) else None
        if type(t) is not torch.Tensor:
            raise ValueError(f"outcome tensor {key!r} is missing")
        found.append(t)
    text = {f: spec.get(f, "") for f in ("error_type", "error_message", "error_cell", "error_function", "type_name")}
    if not all(isinstance(v, str) for v in text.values()) or not all(isinstance(d, str) for d in devices):
        raise ValueError("malformed outcome text")
    if spec["kind"] in ("tensor", "tuple") and not found:
        raise ValueError("an outcome with no tensors")
    text = {f: safe_text(v[:2000 if f == "error_message" else 200]) for f, v in text.items()}
    return Outcome(spec["kind"], found, [safe_text(d[:32]) for d in devices], **text)
