"""Pyro's textbook BNN, a ``PyroModule`` whose layers carry ``PyroSample`` priors (Pyro's
Bayesian regression tutorial), is refused in one line that names ``PyroSample`` and every site,
before any work; the fix it gives (the plain net and ``prior=``) is the same model: Pyro's own
trace of the tutorial's net is the reference for the prior's log-density and the net's output.
"""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch
import torch.nn as nn
from pyro import poutine
from pyro.nn import PyroModule, PyroSample

import bnn_pyro as bp


class TutorialBNN(PyroModule):
    def __init__(self, in_dim: int = 1, hid_dim: int = 5, prior_scale: float = 10.0) -> None:
        super().__init__()
        self.activation = nn.Tanh()
        self.layer1 = PyroModule[nn.Linear](in_dim, hid_dim)
        self.layer2 = PyroModule[nn.Linear](hid_dim, 1)
        normal = dist.Normal(0.0, prior_scale)
        self.layer1.weight = PyroSample(normal.expand([hid_dim, in_dim]).to_event(2))
        self.layer1.bias = PyroSample(normal.expand([hid_dim]).to_event(1))
        self.layer2.weight = PyroSample(normal.expand([1, hid_dim]).to_event(2))
        self.layer2.bias = PyroSample(normal.expand([1]).to_event(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(self.activation(self.layer1(x)))


def test_a_net_with_pyro_sample_priors_is_refused_naming_every_site() -> None:
    with pytest.raises(TypeError) as err:
        bp.VariationalBNN(TutorialBNN(), bp.Gaussian(0.1))
    message = str(err.value)
    assert "PyroSample" in message and "prior=" in message and "\n" not in message
    for site in ("layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"):
        assert f"net.{site}" in message


def test_the_advised_plain_net_and_prior_is_the_tutorials_model() -> None:
    torch.manual_seed(0)
    tutorial = TutorialBNN()
    x = torch.linspace(-2, 2, 7)[:, None]
    reference = poutine.trace(tutorial).get_trace(x)
    weights = {n: s["value"] for n, s in reference.nodes.items() if s["type"] == "sample"}
    plain = nn.Sequential(nn.Linear(1, 5), nn.Tanh(), nn.Linear(5, 1))
    bnn = bp.VariationalBNN(plain, bp.Gaussian(0.1), prior=bp.IIDPrior(dist.Normal(0.0, 10.0)))
    ours = {  # the same draws under the library's site names
        "net.0.weight": weights["layer1.weight"],
        "net.0.bias": weights["layer1.bias"],
        "net.2.weight": weights["layer2.weight"],
        "net.2.bias": weights["layer2.bias"],
    }
    trace = poutine.trace(poutine.condition(bnn.model, data=ours)).get_trace(x)
    torch.testing.assert_close(trace.nodes["_RETURN"]["value"], reference.nodes["_RETURN"]["value"])
    prior_ours = sum(trace.nodes[n]["fn"].log_prob(v).sum() for n, v in ours.items())
    prior_ref = sum(reference.nodes[n]["fn"].log_prob(v).sum() for n, v in weights.items())
    torch.testing.assert_close(prior_ours, prior_ref)
