"""Helpers that several notebooks' checks use: error hints that wrap a case's judge, and the hint
for a float32 fill constant on half-precision input. No notebook's checks import another's."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from .case import Judge

__all__ = ["HALF_FILL_ERROR", "expect_value_errors", "half_precision_errors", "with_error_hints",
           "with_load_hints"]

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
