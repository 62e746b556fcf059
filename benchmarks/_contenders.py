"""Shared by the benchmark scripts: the plain-Pyro BNN that Pyro's documentation builds, the
contender that bnn_pyro's step is measured against (``step_time.py`` on a CPU, ``gpu.py`` on a
device)."""

from __future__ import annotations

from collections.abc import Callable

import pyro
import pyro.distributions as dist
import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.infer import ELBO, SVI, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroSample


def plain_pyro_svi(
    sizes: list[int],
    n: int,
    classification: bool,
    device: torch.device | None = None,
    guide: Callable[[Callable], Callable] | None = None,
    elbo: ELBO | None = None,
) -> SVI:
    """``SVI`` over an MLP of ``PyroModule[nn.Linear]`` layers with ``PyroSample`` N(0, 1)
    weights and biases (ReLU between them), ``AutoNormal(init_scale=0.01)``, ``Trace_ELBO`` and
    ``pyro.optim.Adam(lr=1e-3)``; the data plate stands for ``n`` rows. Its step takes ``x (B,
    sizes[0])`` and ``y``: ``(B,)`` labels (``classification``) or ``(B, sizes[-1])`` targets
    under a unit-scale Normal. The param store is cleared first. ``guide`` (a factory ``model ->
    guide``; the layers' sites are ``layers.<i>.weight``/``bias``) and ``elbo`` replace the
    defaults."""
    device = torch.device("cpu") if device is None else device
    zero = torch.tensor(0.0, device=device)
    pyro.clear_param_store()

    class Net(PyroModule):
        def __init__(self) -> None:
            super().__init__()
            layers = []
            for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
                layer = PyroModule[nn.Linear](d_in, d_out)
                layer.weight = PyroSample(dist.Normal(zero, 1.0).expand([d_out, d_in]).to_event(2))
                layer.bias = PyroSample(dist.Normal(zero, 1.0).expand([d_out]).to_event(1))
                layers.append(layer)
            self.layers = PyroModule[nn.ModuleList](layers)

        def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> None:
            h = x
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i < len(self.layers) - 1:
                    h = F.relu(h)
            with pyro.plate("data", n, subsample=torch.arange(x.shape[0], device=device)):
                if classification:
                    pyro.sample("obs", dist.Categorical(logits=h), obs=y)
                else:
                    pyro.sample("obs", dist.Normal(h, 1.0).to_event(1), obs=y)

    model = Net().to(device)
    made = AutoNormal(model, init_scale=0.01) if guide is None else guide(model)
    return SVI(model, made, pyro.optim.Adam({"lr": 1e-3}), elbo or Trace_ELBO())
