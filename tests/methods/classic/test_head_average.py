"""``fit(average=a)`` of the methods with a head of their own (VBLL, SNGP, DKL) averages the
head's iterates with the net's: the head's parameters end at the mean of the iterates in the
window, not at the last one (before, only the net was averaged, and ``q`` / ``β`` / the GP's
kernel ended at their last step beside an averaged body)."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp

CASES = {
    "vbll": (bp.VBLL, "regression", {}),
    "sngp": (bp.SNGP, "classification", {"num_features": 32}),  # β is not re-solved after a fit
    "dkl": (bp.DKL, "regression", {}),
}


def _data(task: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(24, 2, generator=gen)
    if task == "classification":
        return x, (x.sum(-1) > 0).long()
    return x, x.sum(-1, keepdim=True) + 0.1 * torch.randn(24, 1, generator=gen)


def _own(method: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The method's trainable parameters outside its net: the head's (and a learned noise)."""
    return {
        name: p.detach().clone()
        for name, p in method.named_parameters()
        if p.requires_grad and not name.startswith("model.")
    }


@pytest.mark.parametrize("name", list(CASES))
def test_the_average_covers_the_head(name: str) -> None:
    cls, task, options = CASES[name]
    x, y = _data(task)
    outputs = 2 if task == "classification" else 1

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return cls(bp.nn.mlp(2, [8], outputs), task, **options)

    iterates: list[dict[str, torch.Tensor]] = []
    plain = build()
    # one step per epoch (batch = N), so the per-step average is the mean of the epochs' ends
    plain.fit(x, y, epochs=3, batch_size=len(x), lr=0.05, seed=0, progress=False,
              callbacks=[lambda m, epoch, history: iterates.append(_own(m))])  # fmt: skip
    averaged = build()
    averaged.fit(x, y, epochs=3, batch_size=len(x), lr=0.05, seed=0, progress=False,
                 average=1.0)  # fmt: skip
    got = _own(averaged)
    assert got and set(got) == set(iterates[0])
    moved = 0
    for key, value in got.items():
        mean = torch.stack([it[key] for it in iterates]).mean(0)
        # the same float32 steps, then a mean of 3: a few ulps of the values
        torch.testing.assert_close(value, mean, rtol=1e-5, atol=1e-6)
        moved += int(not torch.allclose(iterates[-1][key], mean, rtol=1e-4, atol=1e-5))
    assert moved > 0  # the mean is not the last iterate, so the check could fail
