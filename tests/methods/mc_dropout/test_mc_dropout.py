"""MC dropout: batched sampling has the dropout variance; BatchNorm stays frozen; F.dropout nets."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from bnn_pyro.methods import MCDropout
from tests.methods.methods_helpers import relu_mlp


class _Probe(nn.Module):
    """y = w · dropout(x): Var[y] = p / (1 - p) Σ w_i² x_i² exactly (inverted dropout)."""

    def __init__(self, w):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.w = nn.Parameter(w)

    def forward(self, x):
        return self.drop(x) @ self.w.unsqueeze(-1)


@pytest.mark.parametrize("samples_per_pass", [None, 1, 7])
def test_samples_have_the_dropout_variance(samples_per_pass):
    # S = 8000 draws of a variable with bounded kurtosis: the sample variance has relative std
    # below sqrt((κ - 1) / S) ~ 0.03 here (κ <= 8 for 4 Bernoulli terms); allow 0.1.
    w = torch.tensor([1.0, -2.0, 0.5, 3.0])
    mc = MCDropout(_Probe(w), 8000, 0.2, samples_per_pass=samples_per_pass)
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 2.0, 0.0, 0.0]])
    mean, var = mc.predict(x, normalize_output=False, generator=torch.Generator().manual_seed(0))
    expected_var = 0.2 / 0.8 * ((w * x) ** 2).sum(-1, keepdim=True)
    torch.testing.assert_close(var, expected_var, rtol=0.1, atol=0)
    torch.testing.assert_close(mean, x @ w.unsqueeze(-1), rtol=0.05, atol=0.1)


def test_only_dropout_modules_are_in_train_mode_and_modes_are_restored():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 2)
    )
    net[1].running_mean.fill_(0.5)
    stats = net[1].running_mean.clone()
    net.eval()
    mc = MCDropout(net, 10, 0.3)
    x = torch.randn(20, 3)
    _, var = mc.predict(x, normalize_output=False)
    assert (var > 0).any()  # dropout fired
    assert torch.equal(net[1].running_mean, stats)  # BatchNorm in eval: stats not updated
    assert not any(m.training for m in net.modules())  # modes restored
    net.train()
    mc.predict(x)
    assert all(m.training for m in net.modules())


class _FunctionalDropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.bn, self.fc2 = nn.Linear(3, 16), nn.BatchNorm1d(16), nn.Linear(16, 1)

    def forward(self, x):
        h = F.relu(self.bn(self.fc1(x)))
        return self.fc2(F.dropout(h, p=0.3, training=self.training))


def test_functional_dropout_flag():
    torch.manual_seed(0)
    net = _FunctionalDropoutNet().eval()
    stats = net.bn.running_mean.clone()
    x = torch.randn(10, 3)
    with pytest.warns(UserWarning, match="no dropout module"):
        plain = MCDropout(net, 5, None)
    # no dropout: the 5 passes compute the same function, so the variance is round-off only.
    # The batched GEMM may take another kernel path for the tail rows (seen: 3.6e-17 on rows
    # 8-9 of 10 in one run), so outputs O(1) agree to float32 eps ~1e-7 and their variance is
    # at most ~1e-14; real MC-dropout variance below is > 1e-4.
    assert torch.allclose(plain.predict(x)[1], torch.zeros(10, 1), rtol=0.0, atol=1e-12)
    mc = MCDropout(net, 5, None, functional_dropout=True)
    _, var = mc.predict(x)
    assert (var > 0).all()
    assert torch.equal(net.bn.running_mean, stats) and not net.training


def test_dropout_rate_overrides_modules():
    net = relu_mlp(2, 1, 4, dropout=0.5)
    MCDropout(net, 3, 0.05)
    assert all(m.p == 0.05 for m in net.modules() if isinstance(m, nn.Dropout))
    MCDropout(net, 3, None)
    assert all(m.p == 0.05 for m in net.modules() if isinstance(m, nn.Dropout))


def test_predict_entropy():
    torch.manual_seed(0)
    mc = MCDropout(relu_mlp(2, 4, 8, dropout=0.2), 10, 0.2)
    h = mc.predict_entropy(torch.randn(6, 2), generator=torch.Generator().manual_seed(0))
    assert h.shape == (6,) and (h >= 0).all() and (h <= math.log(4) + 1e-6).all()
    uniform = MCDropout(nn.Sequential(nn.Linear(2, 4, bias=False), nn.Dropout(0.1)), 4, 0.1)
    nn.init.zeros_(uniform.model[0].weight)
    torch.testing.assert_close(
        uniform.predict_entropy(torch.randn(3, 2)), torch.full((3,), math.log(4))
    )
    with pytest.raises(ValueError, match="C > 1"):
        MCDropout(relu_mlp(2, 1, 4, dropout=0.1), 3).predict_entropy(torch.randn(2, 2))


def test_fit_classification_learns():
    torch.manual_seed(0)
    x = torch.randn(100, 2)
    y = (x[:, 0] + x[:, 1] > 0).long()
    mc = MCDropout(relu_mlp(2, 2, 16, dropout=0.1), 20, 0.1)
    mc.fit(x, y, epochs=40, lr=1e-2, progress=False, seed=0)
    mean, _ = mc.predict(x)
    assert (mean.argmax(-1) == y).float().mean() > 0.9
    assert mc.noise_scale is None


def test_user_noise_scale_is_kept_by_fit():
    x, y = torch.randn(30, 1), torch.randn(30, 1)
    mc = MCDropout(relu_mlp(dropout=0.1), 5, 0.1, likelihood="regression", noise_scale=0.3)
    mc.fit(x, y, epochs=2, progress=False)
    assert mc.noise_scale == 0.3
    mc.noise_scale = None
    mc.fit(x, y, epochs=2, progress=False)
    assert mc.noise_scale != 0.3 and mc.noise_scale > 0


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(dropout_rate=1.0), ValueError, "dropout_rate"),
        (dict(dropout_rate=-0.1), ValueError, "dropout_rate"),
        (dict(dropout_rate="0.1"), TypeError, "dropout_rate"),
        (dict(num_samples=0), ValueError, "num_samples"),
        (dict(functional_dropout="yes"), TypeError, "functional_dropout"),
        (dict(samples_per_pass=0), ValueError, "samples_per_pass"),
    ],
)
def test_constructor_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        MCDropout(relu_mlp(dropout=0.1), **kwargs)
