"""What the stacked-VI tests share (imported by name: tests/methods/vi is on sys.path): a
layer, a small regression set, K models that differ in their initial weights only, and the
round-off comparison of two sets of fitted models."""

import torch
import torch.nn as nn

import bnn_pyro as bp


class Gain(nn.Module):
    """Multiplies by one scalar parameter: under a prior that names its type, a Bayesian site
    of shape ``()`` in a layer the stacked net does not batch."""

    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.g * x


def small_data(n: int = 40, members: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n, 3)`` inputs (``(members, n, 3)``: each member's own rows), ``x0 - x1 + noise``."""
    g = torch.Generator().manual_seed(0)
    shape = (n, 3) if members is None else (members, n, 3)
    X = torch.randn(*shape, generator=g)
    return X, X[..., :1] - X[..., 1:2] + 0.1 * torch.randn(*shape[:-1], 1, generator=g)


def small_models(likelihood=lambda: bp.Gaussian(0.3), k: int = 2, **kw) -> list:
    """``k`` 3-6-1 ``VariationalBNN`` models, member ``i``'s initial weights from seed 100 + i."""
    out = []
    for i in range(k):
        torch.manual_seed(100 + i)
        out.append(bp.VariationalBNN(bp.nn.mlp(3, [6], 1), likelihood(), **kw))
    return out


def assert_same_fits(alone, together) -> None:
    """Round-off only: the same few steps of float32 arithmetic, batched differently."""
    for a, b in zip(alone, together, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
