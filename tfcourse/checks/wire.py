"""Plain-data encoding: calls go to the grader's child as JSON plus a safetensors file, outcomes
come back the same way. Nothing here can execute code when it is read. Runs in the child too
(standard library and torch only).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from .call import Call, Instance, Step, TorchModule
from .outcome import Outcome

__all__ = ["OUTCOME_KINDS", "call_from_json", "call_to_json", "outcome_from_json", "outcome_to_json", "safe_text"]


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
        "twice": bool(call.twice),
        "replace": [[str(name), enc(value)] for name, value in call.replace],
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
        twice=bool(spec.get("twice", False)),
        replace=tuple(_replacement(str(name), dec(value)) for name, value in spec.get("replace", [])),
    )


def _replacement(name: str, value: Any) -> tuple[str, Instance]:
    if not isinstance(value, Instance):
        raise ValueError(f"a replacement of `{name}` must be an Instance")
    return name, value


OUTCOME_KINDS = ("tensor", "tuple", "error", "bad_type")


def outcome_to_json(outcome: Outcome, tensors: dict[str, torch.Tensor], prefix: str) -> dict:
    keys = []
    for i, t in enumerate(outcome.tensors):
        keys.append(f"{prefix}_{i}")
        tensors[keys[-1]] = t
    return {"kind": outcome.kind, "tensors": keys, "devices": outcome.devices,
            "error_type": outcome.error_type, "error_message": outcome.error_message,
            "error_cell": outcome.error_cell, "error_function": outcome.error_function,
            "type_name": outcome.type_name, "note": outcome.note}


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
    text = {f: spec.get(f, "") for f in ("error_type", "error_message", "error_cell", "error_function", "type_name",
                                            "note")}
    if not all(isinstance(v, str) for v in text.values()) or not all(isinstance(d, str) for d in devices):
        raise ValueError("malformed outcome text")
    if spec["kind"] in ("tensor", "tuple") and not found:
        raise ValueError("an outcome with no tensors")
    text = {f: safe_text(v[:2000 if f in ("error_message", "note") else 200]) for f, v in text.items()}
    return Outcome(spec["kind"], found, [safe_text(d[:32]) for d in devices], **text)
