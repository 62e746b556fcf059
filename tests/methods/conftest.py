"""Fixtures for the method tests: seed 0 and a 1-D toy regression with a gap (one thread per
test comes from tests/conftest.py)."""

from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from seed 0 (order-independent); the caller's RNG state is restored."""
    state = torch.get_rng_state()
    torch.manual_seed(0)
    yield
    torch.set_rng_state(state)


@pytest.fixture(scope="session")
def gap_data() -> SimpleNamespace:
    """y = sin(x) + N(0, 0.1²) on x in [-3, -1] U [1, 3] (80 points).

    ``x_gap`` lies in the gap [-0.5, 0.5]; ``x_far`` in [-7, -5] U [5, 7], far outside.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(40, generator=g) * 2 - 3, torch.rand(40, generator=g) * 2 + 1])
    x = x.unsqueeze(-1)
    y = torch.sin(x) + 0.1 * torch.randn(x.shape, generator=g)
    return SimpleNamespace(
        x=x,
        y=y,
        x_gap=torch.linspace(-0.5, 0.5, 21).unsqueeze(-1),
        x_far=torch.cat([torch.linspace(-7, -5, 11), torch.linspace(5, 7, 11)]).unsqueeze(-1),
        noise=0.1,
    )
