"""Measure the decode speed-up of the KV cache on this machine (notebook 06's reference).

    python tests/benchmarks/kv_cache_speed.py                  # 5 repeats, 1 thread
    python tests/benchmarks/kv_cache_speed.py --repeats 9 --threads 2

A random-init ``DecoderLM`` of notebook 06 (tfcourse.reference.nb06_kv_cache; V = 512, D = 256,
L = 4, H = 8, d_ff = 688, float32, CPU) generates greedily from a 16-token prompt, N new tokens
for several N, once with the cache (prefill, then one token per forward) and once without
(the whole sequence at every step). Each repeat times both, alternating which goes first (drift
in the machine's load hits both alike), after one untimed warm-up. Both must return the same
tokens, or the benchmark stops. Printed: a markdown table of wall-clock medians (min-max),
generated tokens per second and the speed-up, the KV cache's size (``kv_cache_bytes``) at the
longest length, and the machine. Without the cache, step t re-runs attention over all t tokens
(O(t²·D) per step); with it, the step's one query attends to t cached keys (O(t·D)), and the
projections and FFN run on one token instead of t, so the speed-up grows with N.
This is a script, not a test: it asserts no timings.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tfcourse.reference.nb06_kv_cache import DecoderLM, generate, kv_cache_bytes  # noqa: E402

V, D, L, H, DFF, PROMPT = 512, 256, 4, 8, 688, 16


def _time(model: DecoderLM, ids: torch.Tensor, n: int, use_cache: bool) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    out = generate(model, ids, n, use_cache=use_cache)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[32, 128, 384])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = DecoderLM(V, D, L, H, DFF).eval()
    ids = torch.randint(0, V, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    rows = []
    for n in args.new_tokens:
        times: dict[bool, list[float]] = {True: [], False: []}
        outs = {flag: _time(model, ids, n, flag)[1] for flag in (True, False)}  # warm-up, untimed
        if not torch.equal(outs[True], outs[False]):
            raise SystemExit(f"N = {n}: cached and uncached generation gave different tokens")
        for r in range(args.repeats):
            for flag in ((True, False) if r % 2 == 0 else (False, True)):
                seconds, out = _time(model, ids, n, flag)
                if not torch.equal(out, outs[True]):
                    raise SystemExit(f"N = {n}: a timed run gave other tokens")
                times[flag].append(seconds)
        med = {flag: statistics.median(t) for flag, t in times.items()}
        rows.append((n, med, times))
    print(f"DecoderLM V={V} D={D} L={L} H={H} d_ff={DFF}, float32, prompt {PROMPT} tokens, greedy, "
          f"{args.repeats} repeats, {args.threads} thread(s), medians (min-max)\n")
    print("| new tokens | with cache s | without cache s | tokens/s cached | tokens/s uncached | speed-up |")
    print("|---|---|---|---|---|---|")
    for n, med, times in rows:
        span = {f: f"{min(t):.3f}-{max(t):.3f}" for f, t in times.items()}
        print(f"| {n} | {med[True]:.3f} ({span[True]}) | {med[False]:.3f} ({span[False]}) | "
              f"{n / med[True]:.0f} | {n / med[False]:.0f} | {med[False] / med[True]:.1f}x |")
    longest = PROMPT + max(args.new_tokens)
    size = kv_cache_bytes(L, H, D // H, longest, 1, 4)
    print(f"\nKV cache at {longest} tokens (float32): {size} bytes = {size / 2**20:.2f} MiB "
          f"(2·L·G·Dh·S·B·4)")
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
          f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
