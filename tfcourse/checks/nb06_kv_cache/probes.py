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
margin (``peak`` against a wobble of ``±wobble``): no near-ties. ``record`` (read-only) says how it
was called; the oracle, ``probe_greedy``, is a function of this module, never a method of the probe.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

__all__ = ["ProbeLM", "probe_greedy", "probe_next_logits", "seeded_generator"]

# ProbeLM -> its calls (T, number of caches or -1, autograd on): outside the object, so code
# under test cannot overwrite it with an attribute assignment (only by tampering with this module).
_RECORDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def probe_next_logits(tokens: torch.Tensor, positions: torch.Tensor, layers: int, vocab_size: int,
                      peak: float, wobble: float) -> torch.Tensor:
    """Logits (B, S, V) float64 of every prefix of a history: row s sees tokens[:, :s + 1].

    tokens, positions: (B, S) float64 (token ids; absolute positions). The score of a prefix is
    h = sum over it of (token + 1) * (((5 * position + 3) mod 17) + 1), an exact integer in
    float64; its target token, ((h² + 7h + 3·length) mod 101) mod V, gets ``peak``, every token a
    wobble of at most ``wobble``.
    """
    weight = torch.remainder(5 * positions + 3, 17) + 1  # (B, S), 1 .. 17
    h = torch.cumsum((tokens + 1) * weight, dim=-1) * sum(range(1, layers + 1))  # (B, S)
    length = torch.arange(1, tokens.size(-1) + 1, dtype=torch.float64, device=tokens.device)
    target = torch.remainder(torch.remainder(h * h + 7 * h + 3 * length, 101), vocab_size)  # (B, S)
    ids = torch.arange(vocab_size, dtype=torch.float64, device=tokens.device)  # (V,)
    logits = wobble * torch.cos(1.3 * ids + 0.7 * torch.remainder(h, 13)[..., None])  # (B, S, V)
    return logits + peak * (ids == target[..., None]).to(torch.float64)


class ProbeLM(nn.Module):
    """A tiny deterministic model for checking ``generate`` (see the module docstring).

    vocab_size: V; num_layers: how many caches it expects (``len(blocks)``); peak: the target
    token's extra logit (8: greedy-like sampling; 1: sampling at temperature 1 is far from greedy).
    """

    def __init__(self, vocab_size: int = 11, num_layers: int = 2, peak: float = 8.0, wobble: float = 0.3):
        super().__init__()
        self.vocab_size, self.peak, self.wobble = vocab_size, peak, wobble
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(num_layers))
        _RECORDS[self] = []

    @property
    def record(self) -> torch.Tensor:
        """(number of forward calls, 3) int64: per call, the T it got, how many caches (-1 = None)
        and whether autograd was on (1) or off (0). Read-only (no setter), kept in this module's
        ``_RECORDS``, not on the object: code under test cannot rewrite it by an assignment."""
        return torch.tensor(_RECORDS[self], dtype=torch.int64).reshape(-1, 3)

    def forward(self, input_ids: torch.Tensor, caches=None) -> torch.Tensor:
        b, t = input_ids.shape
        _RECORDS[self].append((t, -1 if caches is None else len(caches), int(torch.is_grad_enabled())))
        tokens = input_ids.to(torch.float64)  # (B, T)
        layers = len(self.blocks)
        if caches is None:
            positions = torch.arange(t, dtype=torch.float64, device=input_ids.device).expand(b, t)
            logits = probe_next_logits(tokens, positions, layers, self.vocab_size, self.peak, self.wobble)
            return logits  # (B, T, V)
        if len(caches) != layers:
            raise ValueError(f"{len(caches)} caches for {layers} blocks: one per block")
        total = None
        for i, cache in enumerate(caches):
            past = int(cache.seq_len)
            positions = torch.arange(past, past + t, dtype=torch.float64, device=input_ids.device)
            k = tokens[:, None, :, None]  # (B, 1, T, 1): the token ids
            v = positions.expand(b, t)[:, None, :, None].clone()  # (B, 1, T, 1): their positions
            k_all, v_all = cache.update(k, v)  # (B, 1, S, 1) each: the whole history
            x, p = k_all.reshape(b, -1), v_all.reshape(b, -1)  # (B, S)
            weight = torch.remainder(5 * p + 3, 17) + 1
            h = torch.cumsum((x + 1) * weight, dim=-1)[:, -t:] * (i + 1)  # (B, T): this layer's share
            total = h if total is None else total + h
            s = x.size(-1)
        length = torch.arange(s - t + 1, s + 1, dtype=torch.float64, device=input_ids.device)  # (T,)
        target = torch.remainder(torch.remainder(total * total + 7 * total + 3 * length, 101), self.vocab_size)
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


def seeded_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (built where the call runs)."""
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(int(seed))
    return gen
