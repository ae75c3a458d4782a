"""The cases a command grades with and the reference solution's outcomes on them.

A batch grades every submission on the same cases: they and the reference's outcomes (trusted
code, run in the grading process) are computed once per process, and the outcomes are also
kept in the on-disk cache (tfcourse/cache.py) for the next command, keyed by the case's place
(notebook, exercise, seed, index) and everything they are derived from: the tfcourse library,
the hidden cases' code, the libraries' versions and the weight files. Nothing learner code
returns is kept here or there.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from pathlib import Path
from typing import Any

from tfcourse import cache
from tfcourse.checks.case import Case
from tfcourse.checks.outcome import Outcome

from .cases import reference_outcomes
from .course import Notebook

_CASES: dict[tuple[str, str, int], list[Case]] = {}
_EXPECTED: dict[int, tuple[Case, Any]] = {}
_CACHE_LOCK = threading.Lock()


def cases_of(nb: Notebook, exercise: str, seed: int) -> list[Case]:
    """The cases of ``exercise`` drawn with ``seed``, once per process."""
    key = (nb.name, exercise, seed)
    with _CACHE_LOCK:
        found = _CASES.get(key)
    if found is None:
        found = nb.cases_module().cases(exercise, seed)
        with _CACHE_LOCK:
            found = _CASES.setdefault(key, found)
    return found


@functools.cache
def _code_digest() -> str:
    """What the reference outcomes are derived from: the tfcourse library (references, checks,
    pretrained models), the hidden cases, the libraries' versions and the weight files."""
    import tfcourse
    from tfcourse.pretrained import minilm_dir, smollm2_gguf_path

    stamps = []
    for where in (lambda: smollm2_gguf_path(), lambda: minilm_dir() / "model.safetensors"):
        try:
            stamps.append(cache.file_stamp(where()))
        except (FileNotFoundError, OSError):
            stamps.append("missing")
    return cache.key(cache.source_digest(Path(tfcourse.__file__).parent, Path(__file__).parent / "cases"),
                     cache.versions("torch", "numpy", "transformers", "gguf", "safetensors"), *stamps)


def _case_place(notebook: str, case: Case) -> str | None:
    """Where ``case`` sits among the cases ``_cases`` drew (exercise, seed, index), or None."""
    with _CACHE_LOCK:
        for (name, exercise, seed), found in _CASES.items():
            if name == notebook:
                for index, c in enumerate(found):
                    if c is case:
                        return f"{exercise}\n{seed}\n{index}\n{len(found)}\n{case.title}\n{case.part}"
    return None


def _outcomes_on_disk(notebook: str, case: Case) -> list[Outcome]:
    """The reference's outcomes on ``case``, kept in the on-disk cache (tfcourse/cache.py) under
    the case's place and everything it is derived from; computed here when absent."""
    place = _case_place(notebook, case)
    if place is None:
        return reference_outcomes(notebook, case)
    names = [f.name for f in dataclasses.fields(Outcome)]

    def compute() -> list[dict[str, Any]]:
        return [{n: getattr(o, n) for n in names} for o in reference_outcomes(notebook, case)]

    kept = cache.tensors("reference", cache.key(_code_digest(), notebook, place), compute)
    return [Outcome(**entry) for entry in kept]


def reference_outcomes_of(notebook: str, case: Case) -> list[Outcome]:
    """The reference solution's outcomes on ``case``: once per process, and on disk."""
    with _CACHE_LOCK:
        hit = _EXPECTED.get(id(case))
    if hit is not None and hit[0] is case:
        return hit[1]
    outcomes = _outcomes_on_disk(notebook, case)
    with _CACHE_LOCK:
        _EXPECTED[id(case)] = (case, outcomes)  # keeps the case alive: its id stays its own
    return outcomes
