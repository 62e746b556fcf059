"""DeepEnsemble: vmap prediction equals the loop; Gaussian-NLL members; the seed API."""

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro.methods import DeepEnsemble
from tests.methods.methods_helpers import relu_mlp


def _bn_member():
    return nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def test_vmap_prediction_equals_the_loop():
    torch.manual_seed(0)
    ens = DeepEnsemble(_bn_member, 4)
    x = torch.randn(64, 4)
    ens.fit(x, torch.randint(0, 3, (64,)), epochs=2, progress=False, seed=0)  # BN stats move
    ref = torch.stack([m.eval()(x) for m in ens.models]).detach()  # independent reference
    for m in ens.models:
        m.train()
    _, _, vm = ens.predict(x, return_samples=True, normalize_output=False)
    _, _, loop = ens.predict(x, return_samples=True, normalize_output=False, vectorize=False)
    torch.testing.assert_close(vm, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loop, ref, rtol=1e-6, atol=1e-6)
    assert all(m.training for m in ens.models)  # modes restored
    ens.eval()
    torch.testing.assert_close(ens(x), ref.mean(0), rtol=1e-6, atol=1e-6)


def test_members_of_different_shapes_fall_back_to_the_loop():
    sizes = iter([4, 8])
    ens = DeepEnsemble(lambda: relu_mlp(2, 1, next(sizes)), 2)
    x = torch.randn(5, 2)
    with pytest.warns(RuntimeWarning, match="loop"):
        _, _, samples = ens.predict(x, return_samples=True)
    expected = torch.stack([m(x) for m in ens.models]).detach()
    torch.testing.assert_close(samples, expected)


def test_members_are_independent_and_seeded():
    x, y = torch.randn(40, 2), torch.randn(40, 1)
    torch.manual_seed(0)
    a = DeepEnsemble(lambda: relu_mlp(2, 1, 8), 3, likelihood="regression")
    torch.manual_seed(0)
    b = DeepEnsemble(lambda: relu_mlp(2, 1, 8), 3, likelihood="regression")
    a.fit(x, y, epochs=3, progress=False, seed=1)
    b.fit(x, y, epochs=3, progress=False, seed=1)
    torch.testing.assert_close(a.predict(x)[0], b.predict(x)[0])
    assert a.diversity(x).shape == (40,) and (a.diversity(x) > 0).all()
    assert a.models[0] is not a.models[1]
    assert not torch.equal(a.models[0][0].weight, a.models[1][0].weight)


def test_gaussian_nll_members_give_a_mixture():
    # y = x + N(0, s(x)²) with s = 0.05 for x < 0 and 0.5 for x > 0: the variance heads must
    # learn the difference (a factor 10 in std; we ask for 3).
    g = torch.Generator().manual_seed(0)
    x = torch.rand(400, 1, generator=g) * 4 - 2
    y = x + torch.where(x < 0, 0.05, 0.5) * torch.randn(400, 1, generator=g)
    torch.manual_seed(0)
    ens = DeepEnsemble(lambda: relu_mlp(1, 2, 32), 3, likelihood="regression", gaussian_nll=True)
    ens.fit(x, y, epochs=60, batch_size=64, lr=1e-2, progress=False, seed=0)
    x_test = torch.tensor([[-1.0], [1.0]])
    loc, scale = ens.predictive_gaussian(x_test)
    assert loc.shape == scale.shape == (3, 2, 1)
    assert (scale > 0).all()
    assert scale[:, 1].mean() > 3 * scale[:, 0].mean()
    mean, var, samples = ens.predict(x_test, return_samples=True)
    torch.testing.assert_close(samples, loc)
    assert ens.noise_scale is None


def test_train_member_seed_api():
    torch.manual_seed(0)
    ens = DeepEnsemble(lambda: relu_mlp(2, 2, 8), 2)
    x = torch.randn(64, 2)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    opt = torch.optim.Adam(ens.models[1].parameters(), lr=1e-2)
    before = ens.models[0][0].weight.clone()
    history = ens.train_member(1, loader, opt, nn.CrossEntropyLoss(), num_epochs=15)
    assert len(history) == 15 and history[-1] < history[0]
    assert torch.equal(before, ens.models[0][0].weight)  # other members untouched
    with pytest.raises(ValueError, match="model_idx"):
        ens.train_member(2, loader, opt, nn.CrossEntropyLoss())


def test_return_all_is_a_deprecated_alias():
    ens = DeepEnsemble(lambda: relu_mlp(2, 2, 4), 2)
    with pytest.warns(DeprecationWarning, match="return_samples"):
        out = ens.predict(torch.randn(3, 2), return_all=True)
    assert len(out) == 3


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (("net",), {}, TypeError, "model_fn"),
        ((lambda: relu_mlp(),), dict(num_models=0), ValueError, "num_models"),
        ((lambda: "net",), {}, TypeError, "model_fn must return"),
        ((lambda: relu_mlp(),), dict(gaussian_nll=True), ValueError, "gaussian_nll"),
        ((lambda: relu_mlp(),), dict(gaussian_nll=1), TypeError, "gaussian_nll"),
    ],
)
def test_constructor_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DeepEnsemble(*args, **kwargs)


def test_gaussian_nll_output_width_is_checked():
    ens = DeepEnsemble(lambda: relu_mlp(1, 1, 4), 2, likelihood="regression", gaussian_nll=True)
    with pytest.raises(ValueError, match=r"needs an even number of net outputs .* got 1$"):
        ens.fit(torch.randn(8, 1), torch.randn(8), epochs=1, progress=False)
    # two heads per target: four outputs are two targets, and y has one column
    ens = DeepEnsemble(lambda: relu_mlp(1, 4, 4), 2, likelihood="regression", gaussian_nll=True)
    with pytest.raises(ValueError, match=r"y must have shape \(N, 2\) .* got \(8,\)$"):
        ens.fit(torch.randn(8, 1), torch.randn(8), epochs=1, progress=False)
