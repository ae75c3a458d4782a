"""Device and seed helpers."""

from __future__ import annotations

import pytest
import torch

from tfcourse.device import get_device, make_generator, seed_everything


def test_get_device_names_and_errors():
    assert get_device("cpu") == torch.device("cpu")
    assert get_device("auto").type in ("cpu", "cuda")
    with pytest.raises(ValueError, match="'auto', 'cpu' or 'cuda'"):
        get_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            get_device("cuda")


def test_generators_and_seeding_are_reproducible():
    a = torch.randn(3, generator=make_generator(5))
    assert torch.equal(a, torch.randn(3, generator=make_generator(5)))
    assert not torch.equal(a, torch.randn(3, generator=make_generator(6)))
    seed_everything(1)
    b = torch.rand(2)
    seed_everything(1)
    assert torch.equal(b, torch.rand(2))
