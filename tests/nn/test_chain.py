"""LinearChain: the S-sample outputs of an MLP in blocks of samples equal a loop over samples."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bnn_pyro as bp
from bnn_pyro.nn import chain as chain_module
from bnn_pyro.nn.chain import LinearChain


def _stacked(net: nn.Module, num: int, shared: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    out = {}
    for name, p in net.named_parameters():
        if name in shared:
            out[name] = p.detach()
        else:
            out[name] = p.detach() + 0.3 * torch.randn(num, *p.shape, generator=g, dtype=p.dtype)
    return out


def _loop(net: nn.Module, tensors: dict[str, torch.Tensor], x: torch.Tensor, num: int):
    """The reference: the net itself, once per sample, with that sample's tensors."""
    outs = []
    for s in range(num):
        params = {k: (v[s] if v.dim() > dict(net.named_parameters())[k].dim() else v)
                  for k, v in tensors.items()}  # fmt: skip
        outs.append(torch.func.functional_call(net, params, (x,)))
    return torch.stack(outs)


NETS = {
    "relu, one hidden": lambda: nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)),
    "tanh, two hidden": lambda: nn.Sequential(
        nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1)
    ),
    "leaky, elu, silu, gelu": lambda: nn.Sequential(
        nn.Linear(4, 8),
        nn.LeakyReLU(0.2),
        nn.Linear(8, 8),
        nn.ELU(0.7),
        nn.Linear(8, 8),
        nn.SiLU(),
        nn.Linear(8, 6),
        nn.GELU(),
        nn.Linear(6, 3),
    ),  # fmt: skip
    "no bias, sigmoid last": lambda: nn.Sequential(
        nn.Linear(4, 8, bias=False), nn.Softplus(), nn.Linear(8, 2, bias=False), nn.Sigmoid()
    ),
    "one layer": lambda: nn.Linear(4, 3),
}


@pytest.mark.parametrize("name", [k for k in NETS if k != "one layer"])
@pytest.mark.parametrize("budget", [1 << 20, 64, 1], ids=["one block", "sample blocks", "rows"])
def test_chain_equals_a_loop_over_samples(name, budget, monkeypatch):
    monkeypatch.setattr(chain_module, "CHAIN_BUDGET", budget)
    torch.manual_seed(0)
    net = NETS[name]()
    tensors = _stacked(net, 7)
    x = torch.randn(11, 4)
    got = LinearChain.of(net).run(tensors, x)
    # the same products summed in another order (wide GEMM, batched GEMM): float32 round-off
    torch.testing.assert_close(got, _loop(net, tensors, x, 7), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shared",
    [("0.weight", "2.bias"), ("0.weight", "0.bias"), ("0.bias", "4.weight")],
    ids=["first weight", "first layer", "first bias, last weight"],
)
def test_shared_tensors_and_float64_and_row_limit(shared):
    torch.manual_seed(0)
    net = NETS["tanh, two hidden"]().double()
    tensors = _stacked(net, 5, shared=shared)
    x = torch.randn(9, 4, dtype=torch.float64)
    got = LinearChain.of(net).run(tensors, x, max_rows=2)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, _loop(net, tensors, x, 5), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "net",
    [
        NETS["one layer"](),
        nn.Sequential(nn.ReLU(), nn.Linear(3, 1)),
        nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Linear(4, 1)),
        nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(2, 1)),
        nn.Sequential(nn.Linear(3, 4), nn.Softmax(-1)),
    ],
    ids=["not a Sequential", "activation first", "dropout", "conv", "softmax (not elementwise)"],
)
def test_other_nets_have_no_chain(net):
    assert LinearChain.of(net) is None


class _Doubled(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(x)


def test_predict_runs_through_the_chain_and_equals_the_twin():
    torch.manual_seed(0)
    X = torch.randn(64, 3)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [8, 8], 1), bp.Gaussian(0.1))
    bnn.fit(X, X[:, :1], epochs=2, progress=False, seed=0)
    mean, var = bnn.predict(X, num_samples=30, seed=1)
    assert bnn.evaluator._chain is not None
    bnn.evaluator._chain = None  # the generic twin, row chunks
    twin_mean, twin_var = bnn.predict(X, num_samples=30, seed=1)
    torch.testing.assert_close(mean, twin_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(var, twin_var, rtol=1e-4, atol=1e-7)


def test_a_linear_subclass_with_its_own_forward_fails_the_probe():
    torch.manual_seed(0)
    X = torch.randn(32, 3)
    net = nn.Sequential(_Doubled(3, 8), nn.ReLU(), nn.Linear(8, 1))
    bnn = bp.VariationalBNN(net, bp.Gaussian(0.1))
    bnn.fit(X, X[:, :1], epochs=1, progress=False, seed=0)
    draws = bnn.sample_posterior(4, seed=0)
    got = bnn.evaluator(draws, X[:5])
    assert bnn.evaluator._chain is None  # the chain would have dropped the doubling
    w1, b1, w2, b2 = (draws[f"net.{k}"] for k in ("0.weight", "0.bias", "2.weight", "2.bias"))
    expected = torch.stack(
        [F.linear(torch.relu(2 * F.linear(X[:5], w1[s], b1[s])), w2[s], b2[s]) for s in range(4)]
    )
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
