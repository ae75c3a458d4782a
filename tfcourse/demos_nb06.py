"""Notebook 06's toy language: a corpus made by code, a character tokenizer, and a tiny model
trained on it for a few seconds, so that the generation demos show something readable.

They live here, not in a notebook cell, so that every demo cell can build what it shows on its
own (cells run in any order after the setup cells): ``tiny_lm()`` trains once per Python process
and returns the same model afterwards. The model is the course's reference ``DecoderLM``
(``tfcourse.reference.nb06_kv_cache``), never the learner's.

Notation (docs/conventions.md): B batch, T tokens, V vocabulary, D model width, L layers, H heads.
"""

from __future__ import annotations

import functools
import random

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.device import single_thread

__all__ = ["CORPUS", "TINY_CONFIG", "VOCAB", "decode", "encode", "make_corpus", "next_token_loss",
           "tiny_lm"]

_SUBJECTS = ["the cat", "the dog", "a bird", "my sister", "the old man", "a small child", "the king"]
_VERBS = ["sees", "likes", "follows", "finds", "paints", "wants", "hears"]
_OBJECTS = ["the red ball", "a green apple", "the quiet garden", "the moon", "a tall tree",
            "the river", "a yellow boat"]


def make_corpus(num_sentences: int = 3000, seed: int = 0) -> str:
    """``num_sentences`` sentences "subject verb object." drawn at random, one per line.

    7 subjects × 7 verbs × 7 objects: 343 possible sentences over 27 characters. The grammar is
    fixed, so a model that learned it continues any prefix with real words in the right order.
    """
    rng = random.Random(seed)
    return "".join(f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}.\n"
                   for _ in range(num_sentences))


CORPUS = make_corpus()
VOCAB = sorted(set(CORPUS))  # the characters: "\n", " ", ".", "a" ... (V = len(VOCAB))
_INDEX = {ch: i for i, ch in enumerate(VOCAB)}


def encode(text: str) -> torch.Tensor:
    """Characters -> token ids, (T,) int64. Raises KeyError for a character not in VOCAB."""
    return torch.tensor([_INDEX[ch] for ch in text], dtype=torch.int64)


def decode(ids) -> str:
    """Token ids (a (T,) tensor or a list of ints) -> text."""
    return "".join(VOCAB[int(i)] for i in ids)


def next_token_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Teacher forcing: the mean cross-entropy of predicting ids[:, t + 1] from ids[:, :t + 1].

    ids: (B, T) int64. One forward pass over all T tokens gives T predictions at once (the causal
    mask keeps position t from seeing t + 1 ...); the last position has no target. Returns a
    0-dim tensor, the mean of -log p(x_{t+1} | x_{<=t}) over B · (T - 1) predictions.
    """
    logits = model(ids)  # (B, T, V)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


#: The tiny model's shape: 100,800 parameters (the embedding and the head tied).
TINY_CONFIG = {"vocab_size": len(VOCAB), "d_model": 64, "num_layers": 2, "num_heads": 4,
               "d_ff": 172, "tie_embeddings": True}


@functools.cache
def tiny_lm(steps: int = 150, seed: int = 0) -> tuple[nn.Module, tuple[float, ...]]:
    """The reference DecoderLM of TINY_CONFIG trained on CORPUS; returns (model in eval mode,
    the training loss of every step). Trained once per process (cached): do not modify the model.

    Random windows of 64 characters, batches of 16, AdamW (lr 3e-3), a few seconds on one thread.
    """
    from tfcourse.reference.nb06_kv_cache import DecoderLM

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = DecoderLM(**TINY_CONFIG)
    for module in model.modules():  # GPT-2-style small init: N(0, 0.02) for every matrix
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
    data = encode(CORPUS)  # (N,)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    with single_thread():  # many small ops: one thread is faster (tfcourse/device.py says why)
        for _ in range(steps):
            start = torch.randint(0, data.numel() - 64, (16,), generator=gen)  # (B,)
            batch = torch.stack([data[s:s + 64] for s in start.tolist()])  # (B, T)
            loss = next_token_loss(model, batch)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
    return model.eval(), tuple(losses)
