"""What a check keeps of an answer: an :class:`Outcome`, plain tensors or the exception raised.

This module, :mod:`~tfcourse.checks.call`, :mod:`~tfcourse.checks.evidence` and
:mod:`~tfcourse.checks.wire` also run inside the grader's sandboxed child process, so they depend
on the standard library and torch only. Only exact ``torch.Tensor`` objects are kept (never a
subclass or an object that claims to be equal to something), as new tensors that own their memory.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["FORBIDDEN_SHAPE", "MODIFIED_INPUT", "NO_GRADIENT", "Outcome", "is_plain_tensor", "out_of_memory",
           "outcome_of", "outcome_of_exception", "plain"]

# What running out of memory raises, in the messages of Python (MemoryError), the C library
# (ENOMEM: "Cannot allocate memory"), PyTorch's CPU allocator ("DefaultCPUAllocator: can't allocate
# memory", "not enough memory") and CUDA ("CUDA out of memory")
_OUT_OF_MEMORY = ("can't allocate memory", "cannot allocate memory", "out of memory", "not enough memory")


def out_of_memory(error_type: str, message: str) -> bool:
    """Whether an exception (its type name and message) means the code ran out of memory: the one
    test the child, its runner and the judge all use."""
    text = message.lower()
    return error_type == "MemoryError" or any(marker in text for marker in _OUT_OF_MEMORY)


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
    # a finding that costs nothing (the answer wrote into an input it was given, where no test cell
    # scores that): shown next to the verdict, never a failure
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.kind in ("tensor", "tuple")

    def error_line(self) -> str:
        msg = self.error_message.strip().splitlines()
        if not msg:
            return self.error_type
        last = msg[-1] if len(msg[-1]) <= 300 else msg[-1][:300] + " …"
        return f"{self.error_type}: {last}"


def is_plain_tensor(x: Any) -> bool:
    return type(x) is torch.Tensor or type(x) is torch.nn.Parameter


def plain(x: torch.Tensor) -> torch.Tensor:
    # A new plain tensor that owns its memory: nothing of the returned object survives.
    return x.detach().cpu().clone().contiguous()


def outcome_of(result: Any) -> Outcome:
    """Keep plain tensors only; anything else is reported by its type name."""
    if is_plain_tensor(result):
        return Outcome("tensor", [plain(result)], [str(result.device)])
    if type(result) in (tuple, list) and result and all(is_plain_tensor(r) for r in result):
        return Outcome("tuple", [plain(r) for r in result], [str(r.device) for r in result])
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


# The error type of an answer that changed a tensor it was given (a unit of evidence.modified_input:
# run_call turns it into an Outcome.note, which costs nothing; Call.twice scores the rule).
MODIFIED_INPUT = "ModifiedInput"
# The error type of a module whose parameter got no gradient from a backward pass (Call.grad_of).
NO_GRADIENT = "NoGradient"
# The error type of an answer that computed a tensor of a shape the call forbids (Call.forbid_shapes).
FORBIDDEN_SHAPE = "ForbiddenShape"
