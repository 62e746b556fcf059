"""A user's own prior with latent variables, written on the documented extension point
(``Prior.distribution`` calling ``pyro.sample``, told the weight site's name): trained by
``fit``, saved and loaded; its model is the hand-written Pyro model it stands for."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

import bnn_pyro as bp


class LayerScalePrior(bp.priors.Prior):
    """``s_l ~ HalfNormal(top_l)``, ``w ~ Normal(0, s_l)``: the output layer's ``top`` is 0.1."""

    cached = False

    def distribution(self, module, param_name, device, dtype, *, name=None):
        top = 0.1 if name.startswith("net.2.") else 1.0
        s = pyro.sample(f"{name}_scale", dist.HalfNormal(torch.tensor(top, device=device)))
        return dist.Normal(torch.zeros((), device=device, dtype=dtype), s)


class WithSettings(LayerScalePrior):
    def __init__(self, top: float) -> None:
        super().__init__()
        self.top = top


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(128, 2, generator=g)
    return X, X.sum(-1) + 0.1 * torch.randn(128, generator=g)


def test_its_model_is_the_hand_written_one() -> None:
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=LayerScalePrior())
    assert bnn.prior_sites == [f"net.{i}.{p}_scale" for i in (0, 2) for p in ("weight", "bias")]
    X, y = _data()
    pyro.set_rng_seed(0)
    trace = poutine.trace(bnn.model).get_trace(X, y)
    # by hand: each scale's HalfNormal, each weight's Normal(0, its scale)
    hand = torch.tensor(0.0)
    for site in ("net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"):
        s = trace.nodes[f"{site}_scale"]["value"]
        top = 0.1 if site.startswith("net.2.") else 1.0
        hand = hand + dist.HalfNormal(top).log_prob(s)
        hand = hand + dist.Normal(0.0, s).log_prob(trace.nodes[site]["value"]).sum()
    latent = sum(
        n["fn"].log_prob(n["value"]).sum()
        for name, n in trace.nodes.items()
        if n["type"] == "sample" and name.startswith("net.")
    )
    torch.testing.assert_close(latent, hand)


def test_fit_predict_save_and_load(tmp_path) -> None:
    X, y = _data()
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=LayerScalePrior())
    bnn.fit(X, y, epochs=30, progress=False, seed=0)
    bnn.save(tmp_path / "m.pt")
    again = bp.load(tmp_path / "m.pt", net=bp.nn.mlp(2, [3], 1))
    m1, v1 = bnn.predict(X[:8], num_samples=16, seed=1)
    m2, v2 = again.predict(X[:8], num_samples=16, seed=1)
    assert torch.equal(m1, m2) and torch.equal(v1, v2)
    with pytest.raises(NotImplementedError, match="Monte Carlo KL"):
        bnn.kl_divergence()  # no closed form for a half-normal scale: said, not a bare error


def test_a_prior_with_settings_and_no_config_is_refused_at_save(tmp_path) -> None:
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=WithSettings(0.5))
    assert "WithSettings(...)" in repr(bnn)
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    with pytest.raises(NotImplementedError, match="define _own_config"):
        bnn.save(tmp_path / "m.pt")
