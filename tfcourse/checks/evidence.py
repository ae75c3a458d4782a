"""What a check measures while the code under test runs, besides what it returns: whether it
wrote into its inputs, whether gradients reach its parameters, the shapes of the tensors it
computes (:attr:`Call.forbid_shapes`) and the rows a submodule receives (:attr:`Call.count_rows_of`,
MLA's ``kv_b_proj``).

These run in the same process as the code under test (in the grader, its sandboxed child), so
learner code can reach them; docs/grading.md lists the points that rest on them.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .outcome import FORBIDDEN_SHAPE, MODIFIED_INPUT, NO_GRADIENT, Outcome, is_plain_tensor

# A forbidden shape that starts with ANY_ORDER matches a tensor holding all the sizes after it
# among its dimensions, in any order and place (as a multiset): per-head keys whatever their layout.
ANY_ORDER = -2

__all__ = ["ANY_ORDER", "RowCounter", "ShapeWatch", "call_and_gradients", "forward_and_gradients", "grad_output_for",
           "modified_input", "tensor_leaves", "watch_inputs"]


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


class ShapeMode(torch.overrides.TorchFunctionMode):
    """Records the first torch op whose output (or one of its outputs) ends with a forbidden shape."""

    def __init__(self, patterns: tuple[tuple[int, ...], ...]) -> None:
        super().__init__()
        self.patterns = patterns
        self.found = ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.found:
            for _, t in tensor_leaves(out, ""):
                shape = tuple(t.shape)
                if any(shape_matches(shape, p) for p in self.patterns):
                    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
                    self.found = f"`{name}` computed a tensor of shape {shape}"
                    break
        return out


class ShapeWatch:
    """``with watch:`` runs code under a :class:`ShapeMode` when ``patterns`` is not empty;
    ``outcome()`` is then the FORBIDDEN_SHAPE error outcome, or None."""

    def __init__(self, patterns: tuple[tuple[int, ...], ...]) -> None:
        self.mode = ShapeMode(patterns) if patterns else None

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
                "after the call): compute a new tensor (x = x * s), don't write into the input "
                "(x *= s, x.mul_(s), x[...] = ...)"))
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
