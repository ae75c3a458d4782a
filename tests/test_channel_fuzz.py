"""Fuzzing the result channel and the judge with what a hostile child can send.

The grading process reads a child's frames (grader/isolation/runner.py: ``_Channel``) and rebuilds
its results (``_collect``) before judging them (tfcourse/checks/case.py: ``judge_case``). Learner
code runs in the child and can write anything on that pipe. Whatever it sends, the reading must
end with a verdict for every exercise (a result, or an error that says why), never an exception in
the grading process and never unbounded memory; odd tensors and strings must be judged, not crash
the judge. The inputs are drawn from a fixed seed, so a failure reproduces.
"""

from __future__ import annotations

import json
import os
import random
import threading

import pytest
import torch
from safetensors.torch import save

from grader.isolation import runner
from tfcourse.checks.call import Call
from tfcourse.checks.case import Case, Judge, judge_case
from tfcourse.checks.outcome import Outcome
from tfcourse.checks.wire import outcome_from_json, safe_text

SEED = 2026
ODD_STRINGS = ["\ud800", "\udfff\ud800", "\x00", "\x1b[2J", "a" * 100_000, "é✓😀", "\r\n\t", "\ud83d\ude00"]


def _read(frames: bytes) -> runner._Channel:
    """Feed ``frames`` to a channel reader through a real pipe, as a child would."""
    read_end, write_end = os.pipe()
    channel = runner._Channel(read_end)
    channel.start()

    def write() -> None:
        try:
            view = memoryview(frames)
            while view:
                view = view[os.write(write_end, view[:1 << 20]):]
        except OSError:
            pass
        finally:
            os.close(write_end)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    channel.join(timeout=60)
    writer.join(timeout=60)
    assert not channel.is_alive(), "the reader did not finish"
    return channel


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + b"%08x" % len(payload) + payload


def _result(name: str, record: bytes, data: bytes = b"") -> bytes:
    return _frame(b"R", name.encode() + b"\n" + b"%08x" % len(record) + record + data)


def _honest(name: str) -> bytes:
    tensors = {"t0": torch.ones(2, 3)}
    record = json.dumps({"cases": [[{"kind": "tensor", "tensors": ["t0"], "devices": ["cpu"]}]]}).encode()
    return _frame(b"P", f"exercise {name}".encode()) + _result(name, record, save(tensors)) + _frame(b"P", b"done")


def _random_frames(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randint(1, 6)):
        choice = rng.random()
        if choice < 0.2:  # random bytes
            parts.append(rng.randbytes(rng.randint(0, 64)))
        elif choice < 0.4:  # a frame whose length lies
            parts.append(rng.choice([b"R", b"P"]) + b"%08x" % rng.randint(0, 2**32 - 1) + rng.randbytes(rng.randint(0, 32)))
        elif choice < 0.6:  # a progress line with odd text
            parts.append(_frame(b"P", ("exercise " + rng.choice(ODD_STRINGS)).encode("utf-8", "surrogatepass")))
        elif choice < 0.8:  # a result with a malformed record
            odd = [json.dumps({"cases": [[{"kind": "error", "error_type": s, "error_message": s}]]}).encode()
                   for s in ODD_STRINGS[:3]]
            record = rng.choice([b"{", b"[]", b'{"cases": 3}', b'{"cases": [[{"kind": "tensor"}]]}', *odd])
            parts.append(_frame(b"P", b"exercise softmax") + _result("softmax", record, rng.randbytes(rng.randint(0, 40))))
        else:  # an honest result
            parts.append(_honest("softmax"))
    return b"".join(parts)


def _cases() -> dict[str, list[Case]]:
    return {"softmax": [Case("softmax", "a case", [Call("softmax", (torch.zeros(2),))], lambda j: None)]}


@pytest.mark.parametrize("trial", range(60))
def test_random_and_malformed_frames_end_in_a_verdict(trial):
    rng = random.Random(SEED + trial)
    channel = _read(_random_frames(rng))
    runs: dict = {}
    with channel.lock:
        results = dict(channel.results)
    runner._collect(results, _cases(), runs)  # must not raise
    for run in runs.values():
        assert run.status in ("ran", "crashed"), run
        if run.status == "crashed":
            assert run.message and safe_text(run.message) == run.message


@pytest.mark.parametrize(("kind", "length"), [(b"R", runner.MAX_FRAME_BYTES + 1), (b"P", runner.MAX_PROGRESS_BYTES + 1),
                                              (b"R", 2**32 - 1)])
def test_a_frame_over_its_limit_is_refused_before_it_is_read(kind, length):
    header = kind + b"%08x" % length
    channel = _read(header + b"x" * min(length, 3 * 2**20))  # the rest never arrives whole
    assert "over the limit" in channel.broken, channel.broken
    assert not channel.results


def test_a_record_or_tensor_header_over_its_limit_is_that_exercises_error():
    big_record = b'{"cases": [' + b"{}, " * (runner.MAX_RECORD_BYTES // 4) + b"{}]}"
    header = (runner.MAX_HEADER_BYTES + 1).to_bytes(8, "little")
    for record, data, why in ((big_record, b"", "result record"), (b'{"cases": []}', header + b"{}", "tensor header")):
        runs: dict = {}
        runner._collect({"softmax": (record, data)}, _cases(), runs)
        assert runs["softmax"].status == "crashed" and why in runs["softmax"].message, runs["softmax"].message


def test_many_results_stay_within_the_channels_budget():
    """A child that announces exercise after exercise and sends a large result for each: the reader
    stops at MAX_RESULT_BYTES in all."""
    chunk = 8 * 2**20
    frames = b"".join(_frame(b"P", f"exercise e{i}".encode()) + _result(f"e{i}", b"{}", b"\0" * chunk)
                      for i in range(runner.MAX_RESULT_BYTES // chunk + 2))
    channel = _read(frames)
    assert "larger than" in channel.broken
    assert sum(len(m) + len(d) for m, d in channel.results.values()) <= runner.MAX_RESULT_BYTES


class _Sub(torch.Tensor):
    pass


ODD_TENSORS = {
    "non-contiguous": torch.arange(12.0).reshape(3, 4).t(),
    "zero-size": torch.zeros(0, 4),
    "NaN payload": torch.full((2, 3), float("nan")),
    "inf payload": torch.full((2, 3), float("inf")),
    "int": torch.arange(6).reshape(2, 3),
    "bool": torch.ones(2, 3, dtype=torch.bool),
    "0-dim": torch.tensor(1.0),
    "wrong shape": torch.ones(7),
}


@pytest.mark.parametrize("name", list(ODD_TENSORS))
def test_odd_tensors_are_judged(name):
    expected = torch.ones(2, 3)

    def judge(j: Judge) -> None:
        j.close(j.tensor(shape=(2, 3), dtype=torch.float32), expected, oracle="ones")

    case = Case("softmax", "an odd tensor", [Call("softmax", (torch.zeros(2),))], judge)
    t = ODD_TENSORS[name]
    result = judge_case(case, [Outcome("tensor", [t.contiguous()], ["cpu"])])
    assert result.status == "failed" and result.message.startswith("✗ softmax"), result


def test_odd_values_from_the_wire_are_rejected_or_made_safe():
    data = save({"t": torch.ones(2)})
    from safetensors.torch import load

    tensors = load(data)
    assert isinstance(outcome_from_json({"kind": "tensor", "tensors": ["t"], "devices": ["cpu"]}, tensors), Outcome)
    for spec in ({"kind": "tensor", "tensors": ["missing"], "devices": ["cpu"]}, {"kind": "tensor", "tensors": []},
                 {"kind": "weird"}, [], {"kind": "error", "error_type": 3}):
        with pytest.raises(ValueError):
            outcome_from_json(spec, tensors)
    for text in ODD_STRINGS:
        o = outcome_from_json({"kind": "error", "error_type": text, "error_message": text}, {})
        (o.error_type + o.error_message).encode("utf-8")  # writable
        assert "\x00" not in o.error_message and "\x1b" not in o.error_message
    sub = _Sub(torch.ones(2))
    from tfcourse.checks.outcome import outcome_of

    assert outcome_of(sub).kind == "bad_type"  # a subclass never comes back as a tensor
