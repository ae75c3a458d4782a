"""What a check measures while the code under test runs, besides what it returns: whether it
wrote into its inputs, whether gradients reach its parameters, the shapes of the tensors it
computes (:attr:`Call.forbid_shapes`, :func:`watch_shapes`) and the rows a submodule receives (:attr:`Call.count_rows_of`,
MLA's ``kv_b_proj``).

These run in the same process as the code under test (in the grader, its sandboxed child), so
learner code can reach them; docs/grading.md lists the points that rest on them.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .outcome import FORBIDDEN_SHAPE, MODIFIED_INPUT, NO_GRADIENT, Outcome, is_plain_tensor

# A forbidden shape that starts with ANY_ORDER matches a tensor holding all the sizes after it
# among its dimensions, in any order and place (as a multiset): per-head keys whatever their layout.
ANY_ORDER = -2

__all__ = ["ANY_ORDER", "RowCounter", "call_and_gradients", "forward_and_gradients", "grad_output_for",
           "modified_input", "tensor_leaves", "watch_inputs", "watch_shapes"]


def shape_matches(shape: tuple[int, ...], pattern: tuple[int, ...]) -> bool:
    """Whether ``shape`` is ruled out by ``pattern``: its trailing dimensions (-1 matches any
    size), or, for ``(ANY_ORDER, *sizes)``, all of ``sizes`` among its dimensions."""
    if pattern and pattern[0] == ANY_ORDER:
        left = list(shape)
        for size in pattern[1:]:
            if size not in left:
                return False
            left.remove(size)
        return True
    return len(shape) >= len(pattern) and all(w in (-1, n) for w, n in zip(pattern, shape[len(shape) - len(pattern):],
                                                                          strict=True))


def _sealed_shape_watch() -> Any:
    """The shape watcher, built once when this module is imported, before any learner code runs.

    It watches every torch function (``TorchFunctionMode``: its message names the function the code
    called) and every aten operation (``TorchDispatchMode``, below the functions: what
    ``torch._C.DisableTorchFunction()`` does not switch off, and what ``F.linear``, ``einsum`` and
    ``@`` all come down to). Everything it uses (the matching helpers, the mode classes, their
    ``__enter__``/``__exit__``, what it has found) is bound here, in closures, not looked up in a
    module at run time: replacing ``ShapeWatch``, ``shape_matches`` or ``tensor_leaves`` in
    ``sys.modules["tfcourse.checks.evidence"]`` or ``sys.modules["tfcourse.checks.call"]`` changes
    nothing (call.py binds ``watch_shapes`` the same way). What it does not stop: docs/grading.md.
    """
    matches, leaves, outcome_cls, error_type = shape_matches, tensor_leaves, Outcome, FORBIDDEN_SHAPE
    function_base, dispatch_base = torch.overrides.TorchFunctionMode, TorchDispatchMode
    enter_function, exit_function = function_base.__enter__, function_base.__exit__
    enter_dispatch, exit_dispatch = dispatch_base.__enter__, dispatch_base.__exit__

    def forbidden(out: Any, patterns: tuple) -> tuple[int, ...] | None:
        for _, t in leaves(out, ""):
            shape = tuple(t.shape)
            if any(matches(shape, p) for p in patterns):
                return shape
        return None

    def watch_shapes(patterns: tuple[tuple[int, ...], ...]) -> tuple[Any, Any, Any]:
        """(start, stop, verdict) for one call: ``start()``/``stop(*exc_info)`` around the code,
        ``verdict()`` the FORBIDDEN_SHAPE error outcome, or None. No patterns: no watching."""
        found: list[str] = []  # by the function mode: it names what the code called
        found_below: list[str] = []  # by the dispatch mode

        class _Functions(function_base):  # type: ignore[valid-type, misc]
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if not found and (shape := forbidden(out, patterns)) is not None:
                    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
                    found.append(f"`{name}` computed a tensor of shape {shape}")
                return out

        class _Operations(dispatch_base):  # type: ignore[valid-type, misc]
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo
                # unless this says False; the wrapper imports torch._dynamo (800 modules, 3 s) on
                # the first call (only code under the watch that calls torch.compile would notice).
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if not found_below and (shape := forbidden(out, patterns)) is not None:
                    found_below.append(f"the operation `{func}` computed a tensor of shape {shape}")
                return out

        modes = (_Functions(), _Operations()) if patterns else ()

        def start() -> None:
            if modes:
                enter_dispatch(modes[1])
                enter_function(modes[0])

        def stop(*exc: Any) -> None:
            if modes:
                exit_function(modes[0], *exc)
                exit_dispatch(modes[1], *exc)

        def verdict() -> Outcome | None:
            message = found[0] if found else (found_below[0] if found_below else None)
            return None if message is None else outcome_cls("error", error_type=error_type, error_message=message)

        return start, stop, verdict

    return watch_shapes



def grad_output_for(output: torch.Tensor) -> torch.Tensor:
    """The upstream gradient a ``Call.grad_of`` backward pass uses: fixed values from -1 to 1 in
    ``output``'s shape, dtype and device (not all ones, so every position weighs differently)."""
    values = torch.linspace(-1.0, 1.0, output.numel(), dtype=torch.float64)
    return values.reshape(output.shape).to(dtype=output.dtype, device=output.device)


def forward_and_gradients(module: torch.nn.Module, names: tuple[str, ...], args: tuple,
                           kwargs: dict) -> Any:
    """(output, the gradients of ``names``), or an error outcome when one is missing."""
    for p in module.parameters():
        p.grad = None
    with torch.enable_grad():
        returned = module(*args, **kwargs)
        # a tuple (MoE's (y, router_logits)): its first tensor, the module's output, is back-propagated
        many = type(returned) in (tuple, list) and bool(returned) and all(is_plain_tensor(r) for r in returned)
        output = returned[0] if many else returned
        if not is_plain_tensor(output):
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


def call_and_gradients(fn: Any, names: tuple[str, ...], args: tuple, kwargs: dict) -> Any:
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
        if not is_plain_tensor(output):
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


def tensor_leaves(value: Any, path: str) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, tuple | list):
        return [leaf for i, v in enumerate(value) for leaf in tensor_leaves(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in tensor_leaves(v, f"{path}[{k!r}]")]
    return []


def watch_inputs(fn: Any, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, tensor handed to ``fn``, a copy) for every tensor among the arguments."""
    try:
        named = dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):  # a signature that does not take these: the call will say so
        named = {**{f"argument {i + 1}": a for i, a in enumerate(args)}, **kwargs}
    return [(name, t, t.clone()) for key, value in named.items() for name, t in tensor_leaves(value, f"`{key}`")]


def unchanged(t: torch.Tensor, copy: torch.Tensor) -> bool:
    if t.shape != copy.shape or t.dtype != copy.dtype:
        return False
    same = t == copy
    if t.is_floating_point() or t.is_complex():
        same = same | (t.isnan() & copy.isnan())
    return bool(same.all())


def modified_input(watched: list[tuple[str, torch.Tensor, torch.Tensor]]) -> Outcome | None:
    """An error outcome naming the first argument that changed in place, or None."""
    for name, t, copy in watched:
        if not unchanged(t, copy):
            return Outcome("error", error_type=MODIFIED_INPUT, error_message=(
                f"the tensor passed as {name} was changed in place (the caller's tensor is different "
                "after the call): compute a new tensor (x = x * s), or clone it first (x = x.clone()), "
                "don't write into the input (x *= s, x.mul_(s), x[...] = ...)"))
    return None


class RowCounter:
    """Counts the rows each child of one submodule receives: each child's ``forward`` is wrapped
    (an instance attribute), so ``expert(h)`` and ``expert.forward(h)`` are both counted."""

    rows: list[int]
    children: list[torch.nn.Module]

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


# built last, from the helpers above, when this module is imported (see _sealed_shape_watch)
watch_shapes = _sealed_shape_watch()
