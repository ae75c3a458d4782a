"""Notebook 06's visible cases of decoding: ``sample_next_token``, ``generate``, ``kv_cache_bytes``
and the optional ``apply_repetition_penalty`` (exercises 5-8), which register after cases.py's
exercises (this module imports it), as in the notebook.

Sampling is judged statistically: every case draws ``N_DRAWS`` = 20 000 tokens per logits row in
one call (the row repeated), with a ``torch.Generator`` of fixed seed, and compares the frequencies
with the softmax of the filtered logits computed here: |freq − p| ≤ 5·sqrt(p(1 − p)/n) + 1e-3 for
every token, and the support exactly (a token outside the kept set never appears; every kept token
with p ≥ 0.01 appears). The logits have no ties at the top-k boundary and no cumulative mass
within 0.02 of p. ``generate`` is judged on ``probes.ProbeLM``, a deterministic model whose next
token depends on the whole history it sees through the caches (greedy margins ≥ 7 logits); its
``cache_use`` part on one whose next token also depends on how it is called, so the tokens show
whether the cache was used as stated.
"""

from __future__ import annotations

import torch

from ...device import make_generator
from ..call import DEVICE, INT_STEP, Call, Instance
from ..case import Case, Judge, not_a_python_int
from ..shared import expect_value_errors
from .cases import NOTEBOOK, error_hints, make_case, randn, step_tensors
from .hint_texts import HINTS
from .mistakes import MISTAKES, SAMPLING, filtered_probs

__all__ = ["GENERATOR", "N_DRAWS", "PROBE", "ROW_A", "ROW_B", "calls_case", "penalty_oracle", "probe", "require_ints",
           "sampling_case", "tokens_of", "unwritten_case"]

PROBE = "tfcourse.checks.nb06_kv_cache.probes:ProbeLM"
GENERATOR = "tfcourse.checks.nb06_kv_cache.probes:seeded_generator"
N_DRAWS = 20_000


# ---------------------------------------------------------------------------------------------
# sample_next_token: greedy exactly, sampling statistically
# ---------------------------------------------------------------------------------------------
def _tolerance(p: torch.Tensor, n: int) -> torch.Tensor:
    return 5 * (p * (1 - p) / n).sqrt() + 1e-3


def _fits(counts: torch.Tensor, p: torch.Tensor, n: int) -> bool:
    freq = counts / n
    kept_seen = bool(((p >= 0.01) <= (counts > 0)).all())
    outside = bool(((p == 0) & (counts > 0)).any())
    return kept_seen and not outside and bool(((freq - p).abs() <= _tolerance(p, n)).all())


def sampling_case(title: str, rows: torch.Tensor, seed: int, *, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None, part: str = "core", n: int = N_DRAWS, hidden: bool = False) -> Case:
    """``rows`` (R, V) logits, each repeated n times in one call: the frequencies of every row's
    draws must fit the softmax of its filtered logits (module docstring); a misfit names the one
    catalogued mistake whose distribution fits, if exactly one does."""
    r, vocab = rows.shape
    logits = rows.repeat_interleave(n, dim=0)  # (R·n, V)
    kwargs: dict = {"temperature": temperature}
    if top_k is not None:
        kwargs["top_k"] = top_k
    if top_p is not None:
        kwargs["top_p"] = top_p
    kwargs["generator"] = Instance(GENERATOR, (seed, DEVICE))
    call = Call("sample_next_token", (logits,), kwargs)
    expected = filtered_probs(rows, temperature, top_k, top_p)  # (R, V)

    def judge(j: Judge) -> None:
        got = tokens_of(j, r * n)
        bad = (got < 0) | (got >= vocab)
        if bad.any():
            j.fail(f"drew token {int(got[bad][0])}, outside 0..{vocab - 1}")
        counts = torch.stack([torch.bincount(got[i * n: (i + 1) * n], minlength=vocab) for i in range(r)]).double()
        if all(_fits(counts[i], expected[i], n) for i in range(r)):
            return
        fitting = [key for key, opts in SAMPLING.items()
                   if all(_fits(counts[i], p, n) for i, p in enumerate(filtered_probs(rows, temperature, top_k, top_p,
                                                                                    **opts)))]
        hint = HINTS[fitting[0]] if len(fitting) == 1 else None
        for i in range(r):
            p, c = expected[i], counts[i]
            freq = c / n
            row = f"row {i}: " if r > 1 else ""
            outside = ((p == 0) & (c > 0)).nonzero().flatten().tolist()
            if outside:
                j.fail(f"{row}token {outside[0]} was drawn {int(c[outside[0]])} times in {n}, but top-k/top-p "
                       f"leave it probability 0 (kept: {(p > 0).nonzero().flatten().tolist()})", hint=hint)
            missing = ((p >= 0.01) & (c == 0)).nonzero().flatten().tolist()
            if missing:
                j.fail(f"{row}token {missing[0]} (probability {float(p[missing[0]]):.3f}) never drawn in {n} draws "
                       f"(kept: {(p > 0).nonzero().flatten().tolist()})", hint=hint)
            err = (freq - p).abs() - _tolerance(p, n)
            if (err > 0).any():
                v = int(err.argmax())
                j.fail(f"{row}token {v} drawn with frequency {float(freq[v]):.4f} in {n} draws; its probability is "
                       f"{float(p[v]):.4f}", f"tolerance: |freq - p| <= 5·sqrt(p(1-p)/n) + 1e-3 = "
                       f"{float(_tolerance(p[v], n)):.4f} (fixed generator, seed {seed})", hint=hint)

    case = make_case("sample_next_token", title, [call], error_hints(judge), seed=seed, part=part)
    case.hidden = hidden
    return case


def unwritten_case(title: str, rows: torch.Tensor, seed: int, *, temperature: float, top_k: int | None = None,
                   top_p: float | None = None, n: int = N_DRAWS, exercise: str = "sample_next_token") -> Case:
    """"The logits are left unwritten", judged from values in the grading process: one call
    (``Call.twice``) runs the answer twice on the very same logits tensor and generator, and returns
    both draws and the logits as they are afterwards. The logits must come back as given, and both
    draws must follow the distribution of the logits as given: an answer that writes into them
    (``logits /= temperature`` divides twice, ``masked_fill_`` leaves -inf behind) fails here, and
    only here (its single calls elsewhere compute from logits it has not written yet)."""
    r, vocab = rows.shape
    logits = rows.repeat_interleave(n, dim=0)  # (R·n, V)
    kwargs: dict = {"temperature": temperature, "top_k": top_k, "top_p": top_p,
                    "generator": Instance(GENERATOR, (seed, DEVICE))}
    call = Call(exercise, (logits,), {k: v for k, v in kwargs.items() if v is not None}, twice=True)
    expected = filtered_probs(rows, temperature, top_k, top_p)  # (R, V)

    def judge(j: Judge) -> None:
        tensors = j.values(0, n=3, names=("the first call's tokens", "the second call's tokens",
                                          "logits after both calls"))
        first, second, after = tensors
        for name, got in (("first", first), ("second", second)):
            j.require(tuple(got.shape) == (r * n,) and got.dtype == torch.int64,
                      f"the {name} call returned shape {tuple(got.shape)} {got.dtype}; expected ({r * n},) int64")
        if tuple(after.shape) != tuple(logits.shape) or not torch.equal(after, logits):
            changed = (after != logits) if after.shape == logits.shape else None
            where = ""
            if changed is not None and changed.any():
                idx = tuple(int(i) for i in changed.nonzero()[0])
                where = f"; first at {list(idx)}: given {float(logits[idx]):.6g}, now {float(after[idx]):.6g}"
            j.fail(f"the logits you were given are different after the calls{where}",
                   hint="compute new tensors (scores = logits / temperature, masked_fill without an underscore) "
                        "or clone first (scores = logits.clone()); don't write into logits (/=, masked_fill_, "
                        "scores[...] = ...)")
        for name, got in (("first", first), ("second", second)):
            counts = torch.stack([torch.bincount(got[i * n: (i + 1) * n], minlength=vocab)
                                  for i in range(r)]).double()
            bad = [i for i in range(r) if not _fits(counts[i], expected[i], n)]
            if bad:
                i = bad[0]
                err = (counts[i] / n - expected[i]).abs() - _tolerance(expected[i], n)
                v = int(err.argmax())
                j.fail(f"the {name} of two calls on the same logits and generator drew token {v} of row {i} with "
                       f"frequency {float(counts[i, v]) / n:.4f} in {n} draws; its probability is "
                       f"{float(expected[i, v]):.4f}",
                       "(the distribution of the logits as given; the core and filters checks judge one call)",
                       hint="the second call saw other logits: don't write into logits (/=, masked_fill_); "
                            "compute new tensors or clone first" if name == "second" else None)

    return make_case(exercise, title, [call], error_hints(judge), seed=seed, part="unwritten")


def tokens_of(j: Judge, count: int) -> torch.Tensor:
    """The (count,) int64 tokens a sample_next_token call returned; (count, 1) gets its own hint."""
    o = j.outcomes[0]
    if o.kind == "tensor" and len(o.tensors) == 1 and tuple(o.tensors[0].shape) == (count, 1):
        j.fail(f"returned shape ({count}, 1); expected ({count},): one token per row",
               hint=HINTS["tokens_shape"])
    return j.tensor(shape=(count,), dtype=torch.int64)


def _greedy_case(title: str, seed: int, dtype: torch.dtype, **options) -> Case:
    logits = randn(seed, 5, 9, scale=2.0, dtype=dtype)
    call = Call("sample_next_token", (logits,), {"temperature": 0.0, **options})

    def judge(j: Judge) -> None:
        got = tokens_of(j, 5)
        j.close(got, logits.argmax(-1), name="tokens", oracle="logits.argmax(-1)")

    return make_case("sample_next_token", title, [call], error_hints(judge), seed=seed)


def _generator_case(seed: int) -> Case:
    logits = torch.linspace(0.0, 1.0, 8, dtype=torch.float64).repeat(500, 1)  # (500, 8): nearly uniform
    calls = [Call("sample_next_token", (logits,), {"temperature": 1.0, "generator": Instance(GENERATOR, (s, DEVICE))})
             for s in (seed, seed, seed + 1)]

    def judge(j: Judge) -> None:
        a, b, c = (j.tensor(i, shape=(500,), dtype=torch.int64) for i in range(3))
        j.require(torch.equal(a, b), "two calls with generators of the same seed drew different tokens",
                  hint=HINTS["no_generator"])
        j.require(not torch.equal(a, c), "generators of two different seeds drew the same 500 tokens",
                  hint=HINTS["no_generator"])

    return make_case("sample_next_token", "the generator decides the draws: the same seed twice gives the same "
                     "tokens, another seed others", calls, judge, seed=seed)


def _sampling_errors() -> Case:
    logits = randn(6499, 2, 5)
    bad = {"temperature=-0.5": {"temperature": -0.5}, "top_k=0": {"top_k": 0}, "top_p=0.0": {"top_p": 0.0},
           "top_p=1.5": {"top_p": 1.5}}
    calls = [Call("sample_next_token", (logits,), kw) for kw in bad.values()]

    return make_case("sample_next_token", "ValueError for temperature < 0, top_k < 1, top_p outside (0, 1]", calls,
                     lambda j: expect_value_errors(j, list(bad), HINTS["sample_errors"]), part="validation")


# Logits chosen so that no two are tied at a top-k boundary and no cumulative mass lies within
# 0.02 of a top-p threshold used below (the sorted probabilities are printed in the tests).
ROW_A = torch.tensor([1.2, -0.3, 2.1, 0.4, -1.5, 1.7, 0.0, -0.8], dtype=torch.float64)
ROW_B = torch.tensor([0.1, 0.9, -0.4, 1.6, 0.6, -1.1, 1.3, -0.2], dtype=torch.float64)
# A row on which top-p taken before top-k (the nucleus of the whole distribution) keeps more tokens
# than top-p of what top-k = 4 kept, and no other catalogued mistake samples the same distribution
# (top_p = 0.7, temperature 1; same margins as above), so that mistake gets its hint.
ROW_ORDER = torch.tensor([-1.0, 0.8, 2.1, 0.7, 1.9, 1.0, 1.1, 0.3], dtype=torch.float64)


@NOTEBOOK.exercise("sample_next_token", parts=("core", "filters", "validation", "unwritten"))
def _sampling_cases() -> list[Case]:
    """Check ``sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None)``.

    part: "core" (greedy, temperature, the generator), "filters" (top-k, top-p), "validation"
    (the ValueErrors) or "unwritten" (two calls on the same logits: they come back unchanged and
    both draws follow them); None: all. Sampling is judged statistically (20 000 draws per row, tolerance in the message)."""
    both = torch.stack((ROW_A, ROW_B))
    return [
        _greedy_case("temperature 0 is greedy: argmax of every row (float32), never a division by zero", 6401,
                     torch.float32),
        _greedy_case("temperature 0 ignores top_k and top_p (float64)", 6411, torch.float64, top_k=3, top_p=0.5),
        sampling_case("temperature 1: the frequencies of 20 000 draws per row match softmax(logits)", both, 6421),
        sampling_case("temperature 0.5: the frequencies match softmax(logits / 0.5)", both, 6431, temperature=0.5),
        sampling_case("temperature 2 on float32 logits: softmax(logits / 2)", both.float(), 6441, temperature=2.0),
        _generator_case(6451),
        _sampling_errors(),
        sampling_case("top_k = 3: only the 3 largest logits are drawn, with renormalised probabilities", both, 6461,
                      top_k=3, part="filters"),
        sampling_case("top_k = 8 = V keeps every token; top_k = 20 > V too", both, 6471, top_k=20, part="filters"),
        sampling_case("top_p = 0.6: the smallest set of tokens whose probability reaches 0.6 (the token that "
                      "crosses 0.6 included)", both, 6481, top_p=0.6, part="filters"),
        sampling_case("top_p = 0.05 keeps the most likely token only (at least one token always)", both, 6491,
                      top_p=0.05, part="filters"),
        sampling_case("top_k = 4, then top_p = 0.7 of what top-k kept: fewer tokens than the nucleus of the whole "
                      "distribution", ROW_ORDER[None], 6496, top_k=4, top_p=0.7, part="filters"),
        sampling_case("temperature 0.7, top_k = 4, then top_p = 0.85 of what top-k kept (renormalised)", both,
                      6501, temperature=0.7, top_k=4, top_p=0.85, part="filters"),
        sampling_case("top_p = 1.0 keeps every token", both, 6511, top_p=1.0, part="filters"),
        sampling_case("temperature 1.5, then top_p = 0.5 on softmax(logits / 1.5): the temperature changes which "
                      "tokens the nucleus keeps", both, 6521, temperature=1.5, top_p=0.5, part="filters"),
        unwritten_case("logits left unwritten: two calls on the same logits and generator (temperature 0.7, "
                       "top_k = 4, top_p = 0.85) draw from the logits as given, which come back unchanged", both,
                       6531, temperature=0.7, top_k=4, top_p=0.85),
    ]


# ---------------------------------------------------------------------------------------------
# generate, on the probe model
# ---------------------------------------------------------------------------------------------
def probe(key: str = "", **kwargs) -> Instance:
    return Instance(PROBE, (), kwargs, key=key)


def _prompt(seed: int, b: int, t: int, vocab: int = 11) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=make_generator(seed))


def _greedy_tokens(ids: torch.Tensor, n: int, **probe_kwargs) -> torch.Tensor:
    from .probes import probe_greedy

    return probe_greedy(ids, n, **probe_kwargs)


def _generate_case(title: str, seed: int, b: int, t: int, n: int, part: str = "core", **kwargs) -> Case:
    ids = _prompt(seed, b, t)
    want = _greedy_tokens(ids, n)
    call = Call("generate", (probe(), ids, n), kwargs)

    def judge(j: Judge) -> None:
        got = j.tensor(shape=(b, t + n), dtype=torch.int64)
        j.require(torch.equal(got[:, :t], ids), "the output does not start with the prompt (input_ids)")
        wrong = (got != want).nonzero()
        if len(wrong):
            bb, at = (int(i) for i in wrong[0])
            j.fail(f"token {at} of sequence {bb} (new token {at - t + 1} of {n}) is {int(got[bb, at])}; greedy "
                   f"decoding gives {int(want[bb, at])}", "(the probe model's next token depends on the whole "
                   "history it sees through the caches; greedy margins >= 7 logits)", hint=lambda: j.mistake_hint())

    return make_case("generate", title, [call], error_hints(judge), seed=seed, part=part)


def calls_case(title: str, seed: int, use_cache: bool, b: int = 2, t: int = 4, n: int = 5, num_layers: int = 2,
               hidden: bool = False) -> Case:
    """How generate calls the model, read off its tokens: a ``calls_matter`` probe, whose logits
    depend on the input's length, on caches or None and on autograd, gives the expected tokens
    only when called as the task states. The expected tokens: ``probe_calls_greedy`` (visible),
    the reference's generate on the same probe (hidden)."""
    from .probes import probe_calls_greedy

    ids = _prompt(seed, b, t)
    call = Call("generate", (probe(calls_matter=True, num_layers=num_layers), ids, n), {"use_cache": use_cache})
    stated = ("the prompt once, then one token per call with the same caches" if use_cache else
              "the whole sequence with caches=None at every call")

    def judge(j: Judge) -> None:
        want = j.expected_tensor(0) if hidden else probe_calls_greedy(ids, n, use_cache, num_layers=num_layers)
        got = j.tensor(shape=(b, t + n), dtype=torch.int64)
        wrong = (got != want).nonzero()
        if len(wrong):
            bb, at = (int(i) for i in wrong[0])
            j.fail(f"token {at} of sequence {bb} (new token {at - t + 1} of {n}) is {int(got[bb, at])}; called as the "
                   f"task states ({stated}, no autograd), this probe gives {int(want[bb, at])}",
                   "(its logits depend on how it is called: the input's length, caches or None, autograd on or off)",
                   hint=lambda: j.mistake_hint() or (None if use_cache else HINTS["gen_uncached_caches"]))

    return Case("generate", title, [call], error_hints(judge), seed=seed, mistakes=MISTAKES["generate"],
                part="cache_use", reference=hidden, hidden=hidden)


def _options_case(seed: int) -> Case:
    b, t, n = 2, 3, 6
    ids = _prompt(seed, b, t)
    want = _greedy_tokens(ids, n, peak=1.0)
    calls = [Call("generate", (probe(peak=1.0), ids, n),
                  {"temperature": 1.0, **opt, "generator": Instance(GENERATOR, (seed + i, DEVICE))})
             for i, opt in enumerate(({"top_k": 1}, {"top_p": 0.05}))]
    # the learner's own greedy run (the defaults) only chooses the hint: when the filtered runs equal
    # it, the options do reach sample_next_token and the continuation itself is wrong (core's bug)
    calls.append(Call("generate", (probe(peak=1.0), ids, n)))

    def judge(j: Judge) -> None:
        own_greedy = j.tensor(2, shape=(b, t + n), dtype=torch.int64)
        for i, what in enumerate(("top_k=1", "top_p=0.05")):
            got = j.tensor(i, shape=(b, t + n), dtype=torch.int64)
            passed_on = torch.equal(got, own_greedy)
            j.require(torch.equal(got, want), f"temperature 1 with {what} gave {got[:, t:].tolist()}; these filters "
                      f"keep the most likely token only, so greedy's {want[:, t:].tolist()} was expected",
                      hint=HINTS["gen_wrong_greedy" if passed_on else "gen_options"])

    return make_case("generate", "the sampling options reach sample_next_token: temperature 1 with top_k=1 (or a tiny "
                     "top_p) reproduces greedy decoding", calls, judge, seed=seed, part="cache_use")


def _seeds_case(seed: int) -> Case:
    b, t, n = 2, 3, 8
    ids = _prompt(seed, b, t)
    want = _greedy_tokens(ids, n, peak=1.0)
    calls = [Call("generate", (probe(peak=1.0), ids, n), {"temperature": 1.0, "generator": Instance(GENERATOR, (s,
                                                                                                              DEVICE))})
             for s in (seed, seed, seed + 1)]

    def judge(j: Judge) -> None:
        a, b2, c = (j.tensor(i, shape=(b, t + n), dtype=torch.int64) for i in range(3))
        if torch.equal(a, want) and torch.equal(c, want):
            j.fail("temperature 1 gave the greedy tokens with two different generators", hint=HINTS["always_greedy"])
        j.require(torch.equal(a, b2), "two runs with generators of the same seed gave different tokens",
                  hint=HINTS["gen_options"])
        j.require(not torch.equal(a, c), "generators of two different seeds gave the same 16 sampled tokens",
                  hint=HINTS["gen_options"])

    return make_case("generate", "sampling at temperature 1 follows the generator: the same seed twice gives the same "
                     "tokens, another seed others", calls, judge, seed=seed, part="cache_use")


@NOTEBOOK.exercise("generate", parts=("core", "cache_use"))
def _generate_cases() -> list[Case]:
    """Check ``generate(model, input_ids, max_new_tokens, ...)`` on a probe model.

    part: "core" (greedy with and without the cache) or "cache_use" (how the model is called,
    the sampling options, the generator); None: both."""
    return [
        _generate_case("greedy with the cache (the defaults), (B, T) = (2, 5), 8 new tokens: the probe model's "
                       "greedy continuation", 6601, 2, 5, 8),
        _generate_case("greedy without the cache (use_cache=False)", 6611, 2, 5, 8, use_cache=False),
        _generate_case("a one-token prompt, B = 1, 6 new tokens, temperature=0.0", 6621, 1, 1, 6, temperature=0.0),
        _generate_case("max_new_tokens = 0 returns the prompt", 6631, 2, 4, 0),
        calls_case("use_cache=True: the prompt once, then one token per call with one cache per block, under "
                   "no_grad (a probe whose logits depend on how it is called)", 6641, True),
        calls_case("use_cache=False: the whole sequence each call, caches=None (the same probe)", 6651, False),
        _options_case(6661),
        _seeds_case(6671),
    ]


# ---------------------------------------------------------------------------------------------
# kv_cache_bytes and apply_repetition_penalty
# ---------------------------------------------------------------------------------------------
def _bytes_call(*args: int, **kwargs: int) -> Call:
    return Call("kv_cache_bytes", args, kwargs, steps=(INT_STEP,))  # the answer must be a Python int


def require_ints(j: Judge) -> None:
    """Fail, with the int hint, when a kv_cache_bytes call returned a float, a tensor or a numpy int."""
    for i, call in enumerate(j.case.calls):
        instead = not_a_python_int(j.outcomes[i])
        if instead is not None:
            instead = {"a Tensor": "a tensor"}.get(instead, instead)
            j.fail(f"kv_cache_bytes{call.args} returned {instead}; expected a Python int", hint=HINTS["int"],
                   call=i)


def _bytes_case(title: str, rows: list[tuple[tuple, dict, int]]) -> Case:
    calls = [_bytes_call(*args, **kwargs) for args, kwargs, _ in rows]

    def judge(j: Judge) -> None:
        require_ints(j)
        for i, (args, kwargs, want) in enumerate(rows):
            (got,) = step_tensors(j, i, 1, "the byte count")
            what = ", ".join([*map(str, args), *(f"{k}={v}" for k, v in kwargs.items())])
            j.require(int(got) == want, f"kv_cache_bytes({what}) = {int(got)}; expected {want} = 2·L·G·Dh·S·B·bytes",
                      hint=lambda i=i: j.mistake_hint(i), call=i)

    return make_case("kv_cache_bytes", title, calls, judge)


def _bytes_errors() -> Case:
    bad = [(-1, 8, 128, 10), (2, 8, 128, -5), (2, 8, 128, 10, 1, -2)]
    # no INT_STEP: these calls must raise, so there is no answer to read as an int
    calls = [Call("kv_cache_bytes", args) for args in bad]
    whats = [f"kv_cache_bytes{args}" for args in bad]
    return make_case("kv_cache_bytes", "ValueError for a negative argument", calls,
                     lambda j: expect_value_errors(j, whats, HINTS["kv_negative"], show_call=True),
                     part="validation")


@NOTEBOOK.exercise("kv_cache_bytes", parts=("core", "validation"))
def _bytes_cases() -> list[Case]:
    """Check ``kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1,
    bytes_per_element=2)`` = 2·L·G·Dh·S·B·bytes (a Python int)."""
    return [
        _bytes_case("Llama-2-7B (L = 32, G = 32, Dh = 128) at 4096 tokens in fp16: 2**31 bytes (2 GiB); at 131072 "
                    "tokens 2**36 (64 GiB)", [((32, 32, 128, 4096), {}, 2**31), ((32, 32, 128, 131072), {}, 2**36)]),
        _bytes_case("GQA (G = 8), batch 3, float32 (4 bytes), and zero tokens",
                    [((32, 8, 128, 1000), {"batch_size": 3, "bytes_per_element": 4}, 2 * 32 * 8 * 128 * 1000 * 3 * 4),
                     ((2, 4, 64, 0), {}, 0), ((3, 2, 16, 7, 5, 1), {}, 2 * 3 * 2 * 16 * 7 * 5)]),
        _bytes_errors(),
    ]


def penalty_oracle(logits: torch.Tensor, ids: torch.Tensor, penalty: float) -> torch.Tensor:
    """A loop over each row's distinct ids (the judge's oracle)."""
    out = logits.clone()
    for b in range(logits.size(0)):
        for i in set(ids[b].tolist()):
            x = out[b, i]
            out[b, i] = x * penalty if x < 0 else x / penalty
    return out


def _penalty_case(title: str, seed: int, b: int, vocab: int, t: int, penalty: float, dtype: torch.dtype) -> Case:
    logits = randn(seed, b, vocab, scale=2.0, dtype=dtype)
    ids = torch.randint(0, vocab // 2, (b, t), generator=make_generator(seed + 1))  # repeats, unseen ids too
    call = Call("apply_repetition_penalty", (logits, ids, penalty))
    want = penalty_oracle(logits, ids, penalty)

    def judge(j: Judge) -> None:
        got = j.tensor(shape=(b, vocab), dtype=dtype)
        j.close(got, want, oracle="each row's distinct ids penalised once")

    return make_case("apply_repetition_penalty", title, [call], judge, seed=seed)


def _penalty_errors() -> Case:
    calls = [Call("apply_repetition_penalty", (randn(6791, 1, 4), torch.tensor([[0, 1]]), p)) for p in (0.0, -1.2)]
    return make_case("apply_repetition_penalty", "ValueError for penalty <= 0", calls,
                     lambda j: expect_value_errors(j, [f"penalty={p}" for p in (0.0, -1.2)],
                                                   HINTS["rp_penalty_error"]))


def _penalty_unwritten(seed: int) -> Case:
    """The inputs left unwritten, from values: two calls on the same tensors (``Call.twice``)
    both give the penalised logits, and the logits and ids come back as given."""
    logits = randn(seed, 3, 12, scale=2.0, dtype=torch.float64)
    ids = torch.randint(0, 6, (3, 7), generator=make_generator(seed + 1))
    want = penalty_oracle(logits, ids, 1.3)
    call = Call("apply_repetition_penalty", (logits, ids, 1.3), twice=True)

    def judge(j: Judge) -> None:
        names = ("the first call's output", "the second call's output", "logits after both calls",
                 "input_ids after both calls")
        first, second, after, ids_after = j.values(0, n=4, names=names)
        for name, got, given in (("logits", after, logits), ("input_ids", ids_after, ids)):
            j.require(got.shape == given.shape and torch.equal(got, given),
                      f"the {name} you were given are different after the calls",
                      hint="compute a new tensor (logits.scatter without an underscore) or clone first "
                           "(out = logits.clone()); don't write into the input (scatter_, out[...] = ... on logits)")
        for name, got in (("first", first), ("second", second)):
            j.close(got, want, name=f"the {name} call's output", oracle="each row's distinct ids penalised once")

    return make_case("apply_repetition_penalty", "the inputs left unwritten: two calls on the same logits and ids "
                     "give the same penalised logits, and both come back unchanged", [call], judge, seed=seed,
                     part="unwritten")


@NOTEBOOK.exercise("apply_repetition_penalty", parts=("core", "unwritten"))
def _penalty_cases() -> list[Case]:
    """Check ``apply_repetition_penalty(logits, input_ids, penalty)`` (optional, 0 points).

    part: "core" (the penalty, the ValueError) or "unwritten" (two calls on the same tensors)."""
    return [
        _penalty_case("penalty 1.3 on (B, V) = (3, 12) logits of both signs, ids with repeats (float64)", 6701, 3, 12,
                      9, 1.3, torch.float64),
        _penalty_case("penalty 0.7 (< 1 favours repeats), float32", 6711, 2, 10, 6, 0.7, torch.float32),
        _penalty_errors(),
        _penalty_unwritten(6721),
    ]
