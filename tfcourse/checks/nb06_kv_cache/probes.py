"""Probe objects that notebook 06's checks hand to the code under test (plain torch only).

The grader's sandboxed child builds these by name (``Instance("tfcourse.checks.nb06_kv_cache.
probes:ProbeLM", ...)``), so this module imports nothing from ``tfcourse.reference``.

``ProbeLM`` stands in for a language model when ``generate`` is checked: it has ``blocks`` (one
KV cache each) and ``forward(input_ids, caches=None) -> logits (B, T, V)``, and its next-token
logits depend on the whole history it sees. With caches it stores each new token through
``cache.update`` on every cache (as float64 (B, 1, T, 1) encodings: the token id as the key, its
absolute position ``cache.seq_len + t`` as the value) and reads the history back from what
``update`` returns; without caches the history is ``input_ids`` itself. So a generate loop that
feeds the whole sequence into a filled cache, feeds the prompt again, drops or shares the caches,
or reads the logits of the wrong row produces other tokens. The greedy choice wins by a wide
margin (``peak`` against a wobble of ``±wobble``): no near-ties.

With ``calls_matter=True`` its logits also depend on how it is called: the length T of the
input it gets, whether it gets caches or None, and whether autograd is on (``call_key``). Then
only the calls the task states (use_cache=True: the prompt once, then one token per call with
the same caches; use_cache=False: the whole sequence with caches=None; autograd off) give the
tokens ``probe_calls_greedy`` computes: recomputing the whole sequence at each step, new caches
per step or autograd left on give other tokens. How generate called the model is so read off the
tokens it returns, which the grading process compares; nothing is recorded in the probe. The
oracles, ``probe_greedy`` and ``probe_calls_greedy``, are functions of this module, never
methods of the probe.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ProbeLM", "call_key", "probe_calls_greedy", "probe_greedy", "probe_next_logits", "seeded_generator"]


def call_key(t: int, cached: bool, grad: bool) -> int:
    """How a ``calls_matter`` probe was called, as a small integer that shifts its target token:
    the input's length T, caches (a list) or None, autograd on or off."""
    return 3 * int(t) + (2 if cached else 1) + 5 * int(grad)


def probe_next_logits(tokens: torch.Tensor, positions: torch.Tensor, layers: int, vocab_size: int,
                      peak: float, wobble: float, key: int = 0) -> torch.Tensor:
    """Logits (B, S, V) float64 of every prefix of a history: row s sees tokens[:, :s + 1].

    tokens, positions: (B, S) float64 (token ids; absolute positions). The score of a prefix is
    h = sum over it of (token + 1) * (((5 * position + 3) mod 17) + 1), an exact integer in
    float64; its target token, ((h² + 7h + 3·length + 11·key) mod 101) mod V, gets ``peak``, every
    token a wobble of at most ``wobble``. key: ``call_key`` of the call (0: calls do not matter).
    """
    weight = torch.remainder(5 * positions + 3, 17) + 1  # (B, S), 1 .. 17
    h = torch.cumsum((tokens + 1) * weight, dim=-1) * sum(range(1, layers + 1))  # (B, S)
    length = torch.arange(1, tokens.size(-1) + 1, dtype=torch.float64, device=tokens.device)
    target = torch.remainder(torch.remainder(h * h + 7 * h + 3 * length + 11 * key, 101), vocab_size)  # (B, S)
    ids = torch.arange(vocab_size, dtype=torch.float64, device=tokens.device)  # (V,)
    logits = wobble * torch.cos(1.3 * ids + 0.7 * torch.remainder(h, 13)[..., None])  # (B, S, V)
    return logits + peak * (ids == target[..., None]).to(torch.float64)


class ProbeLM(nn.Module):
    """A tiny deterministic model for checking ``generate`` (see the module docstring).

    vocab_size: V; num_layers: how many caches it expects (``len(blocks)``); peak: the target
    token's extra logit (8: greedy-like sampling; 1: sampling at temperature 1 is far from greedy);
    calls_matter: the logits depend on how it is called too (``call_key``).
    """

    def __init__(self, vocab_size: int = 11, num_layers: int = 2, peak: float = 8.0, wobble: float = 0.3,
                 calls_matter: bool = False):
        super().__init__()
        self.vocab_size, self.peak, self.wobble = vocab_size, peak, wobble
        self.calls_matter = bool(calls_matter)
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(num_layers))

    def forward(self, input_ids: torch.Tensor, caches=None) -> torch.Tensor:
        b, t = input_ids.shape
        key = call_key(t, caches is not None, torch.is_grad_enabled()) if self.calls_matter else 0
        tokens = input_ids.to(torch.float64)  # (B, T)
        layers = len(self.blocks)
        if caches is None:
            positions = torch.arange(t, dtype=torch.float64, device=input_ids.device).expand(b, t)
            logits = probe_next_logits(tokens, positions, layers, self.vocab_size, self.peak, self.wobble, key)
            return logits  # (B, T, V)
        if len(caches) != layers:
            raise ValueError(f"{len(caches)} caches for {layers} blocks: one per block")
        total = None
        for i, cache in enumerate(caches):
            past = int(cache.seq_len)
            positions = torch.arange(past, past + t, dtype=torch.float64, device=input_ids.device)
            k = tokens[:, None, :, None].clone()  # (B, 1, T, 1): the token ids (copies, as v: a cache
            # that writes into its inputs gets a note in its own check and must not change the next layer's)
            v = positions.expand(b, t)[:, None, :, None].clone()  # (B, 1, T, 1): their positions
            k_all, v_all = cache.update(k, v)  # (B, 1, S, 1) each: the whole history
            x, p = k_all.reshape(b, -1), v_all.reshape(b, -1)  # (B, S)
            weight = torch.remainder(5 * p + 3, 17) + 1
            h = torch.cumsum((x + 1) * weight, dim=-1)[:, -t:] * (i + 1)  # (B, T): this layer's share
            total = h if total is None else total + h
            s = x.size(-1)
        length = torch.arange(s - t + 1, s + 1, dtype=torch.float64, device=input_ids.device)  # (T,)
        target = torch.remainder(torch.remainder(total * total + 7 * total + 3 * length + 11 * key, 101),
                                 self.vocab_size)
        ids = torch.arange(self.vocab_size, dtype=torch.float64, device=input_ids.device)
        logits = self.wobble * torch.cos(1.3 * ids + 0.7 * torch.remainder(total, 13)[..., None])
        return logits + self.peak * (ids == target[..., None]).to(torch.float64)  # (B, T, V)


def probe_greedy(input_ids: torch.Tensor, max_new_tokens: int, vocab_size: int = 11, num_layers: int = 2,
                 peak: float = 8.0, wobble: float = 0.3) -> torch.Tensor:
    """The greedy continuation (B, T + N) of a ProbeLM built with these arguments, computed from
    the whole history at each step (the checks' oracle; no cache, no sampling). A module-level
    function of the judging process, not a method: the probe handed to the code under test must
    not carry its own answer."""
    ids = input_ids
    for _ in range(max_new_tokens):
        b, t = ids.shape
        positions = torch.arange(t, dtype=torch.float64).expand(b, t)
        logits = probe_next_logits(ids.to(torch.float64), positions, num_layers, vocab_size, peak, wobble)
        ids = torch.cat((ids, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    return ids


def probe_calls_greedy(input_ids: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
                       vocab_size: int = 11, num_layers: int = 2, peak: float = 8.0,
                       wobble: float = 0.3) -> torch.Tensor:
    """The greedy continuation (B, T + N) that a ``calls_matter=True`` ProbeLM gives a generate loop
    that calls it as the task states, without autograd: use_cache=True, the prompt once (with
    caches), then one token per call; use_cache=False, the whole sequence with caches=None. The
    checks' oracle of how the model is called (a module-level function, as ``probe_greedy``)."""
    ids = input_ids
    for step in range(max_new_tokens):
        b, t = ids.shape
        length = (t if step == 0 else 1) if use_cache else t
        positions = torch.arange(t, dtype=torch.float64).expand(b, t)
        logits = probe_next_logits(ids.to(torch.float64), positions, num_layers, vocab_size, peak, wobble,
                                   call_key(length, use_cache, False))
        ids = torch.cat((ids, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    return ids


def seeded_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (built where the call runs)."""
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(int(seed))
    return gen
