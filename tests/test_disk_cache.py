"""The on-disk cache (tfcourse/cache.py) only saves time: the grader's verdicts are the same with
it cold or warm, with damaged entries, and an entry is read back as it was stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from grader.build import NOTEBOOKS, ROOT, SOLUTIONS
from tfcourse import cache

pytestmark = pytest.mark.slow


def test_tensors_are_kept_read_back_and_recomputed_when_damaged(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return [{"kind": "tensor", "tensors": [torch.arange(6.0).reshape(2, 3)], "error_type": ""}]

    digest = cache.key("a", "b")
    first = cache.tensors("t", digest, compute)
    again = cache.tensors("t", digest, compute)
    assert len(calls) == 1 and torch.equal(again[0]["tensors"][0], first[0]["tensors"][0])
    assert again[0]["kind"] == "tensor"
    (tmp_path / "t" / digest).write_bytes(b"not a torch file")
    assert torch.equal(cache.tensors("t", digest, compute)[0]["tensors"][0], first[0]["tensors"][0])
    assert len(calls) == 2
    assert cache.key("a", "b") != cache.key("ab") and cache.key("a", "b") != cache.key("b", "a")
    monkeypatch.setenv(cache.ENV_VAR, "off")
    cache.tensors("t", digest, compute)
    assert len(calls) == 3


def _grade(cache_dir, report):
    env = {**os.environ, cache.ENV_VAR: str(cache_dir)}
    proc = subprocess.run([sys.executable, "-m", "grader", str(SOLUTIONS), str(NOTEBOOKS), "--notebooks",
                           "01_attention,08_real_weights", "--quiet", "--json", str(report)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text(encoding="utf-8"))


def test_verdicts_are_the_same_with_the_cache_cold_and_warm_with_damaged_entries(tmp_path):
    folder = tmp_path / "cache"
    cold = _grade(folder, tmp_path / "cold.json")  # computes and keeps every reference outcome
    kept = sorted((folder / "reference").iterdir())
    assert kept and len(list((folder / "oracles").iterdir())) >= 2  # SmolLM2's and MiniLM's at least
    for entry in kept[::2]:
        entry.write_bytes(entry.read_bytes()[:100])  # truncated: recomputed, the rest read back
    warm = _grade(folder, tmp_path / "warm.json")
    assert cold == warm
    scores = [row["score"] for row in cold["submissions"]]
    assert scores[0] > 0 and scores[1] == 0  # the solutions pass, the untouched notebooks do not
