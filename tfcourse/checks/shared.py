"""Helpers that several notebooks' checks use: error hints that wrap a case's judge, the hint
for a float32 fill constant on half-precision input, and the contract of an append-only cache of
two tensors (:class:`TwoTensorCache`: notebook 06's KVCache, 07's LatentCache). No notebook's
checks import another's."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from .call import Call, Step
from .case import Judge, fmt_dtype

__all__ = ["HALF_FILL_ERROR", "TwoTensorCache", "expect_value_errors", "half_precision_errors",
           "with_error_hints", "with_load_hints"]

# An exception that filling with a float32 constant raises on float16 scores (the reference works).
HALF_FILL_ERROR = (r"cannot be converted to type .*without overflow",
                   "fill blocked scores with float(\"-inf\") (or torch.finfo(scores.dtype).min), not a "
                   "float32 constant such as -1e9: float16 holds at most 65504")


def half_precision_errors(j: Judge) -> None:
    """Fail with a hint when a call raised what a float32 constant (a -1e9 fill) raises on
    float16 input, where the reference works."""
    for o in j.outcomes:
        if o.kind == "error" and re.search(HALF_FILL_ERROR[0], o.error_message):
            j.fail(f"raised {o.error_line()[:100]}", "on half-precision input, where the reference works",
                   hint=HALF_FILL_ERROR[1])


def expect_value_errors(j: Judge, whats: Sequence[str], hint: str, *, show_call: bool = False) -> None:
    """Fail with ``hint`` at the first call (``whats[i]`` describes call i) that did not raise a
    ValueError: "<what>: raised <error>; expected ValueError" or "<what>: raised nothing; ...".
    ``show_call``: the ``inputs:`` line shows that call's inputs (by default the first call's)."""
    for i, what in enumerate(whats):
        o = j.outcomes[i]
        if not (o.kind == "error" and o.error_type == "ValueError"):
            did = f"raised {o.error_line()}" if o.kind == "error" else "raised nothing"
            j.fail(f"{what}: {did}; expected ValueError", hint=hint, call=i if show_call else None)


def with_load_hints(judge: Callable[[Judge], None], what: str, width: int,
                    hint_for: Callable[[list[str]], str | None]) -> Callable[[Judge], None]:
    """Wrap a module exercise's judge: when the weights could not be loaded by name (torch's
    "Error(s) in loading state_dict"), fail with "<what> could not be loaded by name: <the first
    line naming keys or a size mismatch, cut to width>" and ``hint_for(the message's lines)``."""

    def wrapped(j: Judge) -> None:
        for o in j.outcomes:
            if o.kind == "error" and "loading state_dict" in o.error_message:
                lines = [ln.strip() for ln in o.error_message.splitlines()[1:] if ln.strip()]
                detail = next((ln for ln in lines if "key(s)" in ln or "size mismatch" in ln),
                              lines[0] if lines else "")
                j.fail(f"{what} could not be loaded by name: {detail[:width]}", hint=hint_for(lines))
        judge(j)

    return wrapped


def with_error_hints(judge: Callable[[Judge], None], known: Sequence[tuple], *,
                     calls: Sequence[int] | None = None,
                     load_hints: tuple[str, str] | None = None) -> Callable[[Judge], None]:
    """Wrap ``judge``: when one of ``calls`` (default: all) raised an error with a known cause,
    fail with its hint. ``known``: ``(regex, hint)`` or ``(regex, hint, when(call) -> bool)``
    entries matched against the exception's message; ``load_hints``: (hint for missing or
    unexpected parameter names, hint for wrong sizes) when the weights could not be loaded by name
    (a module exercise)."""

    def wrapped(j: Judge) -> None:
        for i, o in enumerate(j.outcomes):
            if o.kind != "error" or (calls is not None and i not in calls):
                continue
            message = o.error_message
            if load_hints is not None and "loading state_dict" in message:
                lines = [ln.strip() for ln in message.splitlines()[1:] if ln.strip()]
                detail = next((ln for ln in lines if "key(s)" in ln), lines[0] if lines else "")
                hint = load_hints[1] if "size mismatch" in detail else load_hints[0]
                j.fail(f"the weights could not be loaded: {detail[:100]}", hint=hint)
            for pattern, hint, *when in known:
                if re.search(pattern, message) and (not when or when[0](j.case.calls[i])):
                    j.fail(f"raised {o.error_line()[:110]}", hint=hint)
        judge(j)

    return wrapped


@dataclass(frozen=True)
class TwoTensorCache:
    """An exercise's cache that holds two tensors (attributes ``names``, None while empty), appends
    each ``update(a, b)`` chunk along axis ``dim``, returns both whole tensors, and counts the
    cached positions in ``seq_len``. ``layout``: the shape update returns, as the task writes it;
    ``holds``: what the two tensors hold, in the oracle lines; ``dtype_note``: added to the dtype
    failure; ``shape_only``: a shape failure takes the catalogue's shape-only hint."""

    exercise: str
    names: tuple[str, str]
    dim: int
    layout: str
    holds: tuple[str, str]
    dtype_note: str = ""
    shape_only: bool = False

    def call(self, chunks: Iterable[tuple], *, read_empty: bool = False) -> Call:
        """A new cache that reads seq_len (with ``read_empty``, the two attributes before it), then
        per chunk ``update(*chunk)`` and seq_len, then the two attributes."""
        steps = [Step(name, attribute=True) for name in self.names] if read_empty else []
        steps.append(Step("seq_len", attribute=True))
        for chunk in chunks:
            steps += [Step("update", chunk), Step("seq_len", attribute=True)]
        return Call(self.exercise, (), steps=tuple(steps + [Step(name, attribute=True) for name in self.names]))

    def updates(self, *chunks: tuple) -> Call:
        """A new cache given ``update(*chunk)`` for each chunk in turn, nothing read: a case that
        expects the last chunk to raise."""
        return Call(self.exercise, (), steps=tuple(Step("update", chunk) for chunk in chunks))

    def judge(self, firsts: Sequence[torch.Tensor], seconds: Sequence[torch.Tensor], dtype: torch.dtype,
              read: Callable[[Judge, int, int, str], list[torch.Tensor]]) -> Callable[[Judge], None]:
        """The judge of ``call(zip(firsts, seconds), read_empty=True)``: both None
        and seq_len 0 while empty; each update returns the torch.cat of every chunk so far, in
        ``dtype``, and seq_len counts them; the attributes hold them all at the end. ``read``: the
        notebook's reading of a call's step tensors (``read(j, call, count, what)``)."""
        chunks = [first.size(self.dim) for first in firsts]

        def judge(j: Judge) -> None:
            got = read(j, 0, 3 + 3 * len(chunks) + 2, "the cache's attributes and update results")
            for i, name in enumerate(self.names):
                j.require(got[i].numel() == 0, f"cache.{name} before the first update is a tensor of shape "
                          f"{tuple(got[i].shape)}; expected None")
            j.require(got[2].dim() == 0 and int(got[2]) == 0, f"seq_len of an empty cache is {got[2].tolist()}; "
                      "expected 0")
            total = 0
            for i, t in enumerate(chunks):
                total += t
                which = f"update {i + 1} (a chunk of {t}, {total - t} cached)"
                wants = (torch.cat(list(firsts[: i + 1]), dim=self.dim),
                         torch.cat(list(seconds[: i + 1]), dim=self.dim))
                for name, have, want in zip(self.names, got[3 + 3 * i: 5 + 3 * i], wants, strict=True):
                    j.require(tuple(have.shape) == tuple(want.shape), f"{which} returned {name} of shape "
                              f"{tuple(have.shape)}; expected {self.layout} = {tuple(want.shape)}",
                              hint=(lambda: j.mistake_hint(check_shape_only=True)) if self.shape_only else None)
                    j.require(have.dtype == dtype, f"{which} returned {name} as {fmt_dtype(have.dtype)}; expected "
                              f"{fmt_dtype(dtype)}{self.dtype_note}")
                    j.close(have, want, name=f"{which}: returned {name}", oracle="torch.cat of every chunk so far")
                n = got[5 + 3 * i]
                j.require(n.dim() == 0 and int(n) == total, f"seq_len after {which} is {n.tolist()}; expected "
                          f"{total}, the number of cached positions")
            for name, have, parts, holds in zip(self.names, got[-2:], (firsts, seconds), self.holds, strict=True):
                j.close(have, torch.cat(list(parts), dim=self.dim), name=f"cache.{name} after the updates",
                        oracle=f"torch.cat of the {holds}")

        return judge
