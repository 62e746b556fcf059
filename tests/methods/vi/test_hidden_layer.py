"""HiddenLayerBNN: the ELBO it optimises, training, prediction and input checks."""

import warnings

import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
import torch.nn.functional as F
from pyro.infer import Predictive, Trace_ELBO

import bnn_pyro as bp
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.methods.vi.hidden_layer import HiddenLayerBNN


def _data(n=64):
    g = torch.Generator().manual_seed(5)
    X = torch.randn(n, 3, generator=g)
    return X, X @ torch.tensor([1.0, -1.0, 0.5]) + 0.2 + 0.5 * torch.randn(n, generator=g)


@pytest.mark.parametrize("kl_weight", [1.0, 0.25])
def test_loss_is_the_negative_elbo_with_kl_factor_from_batch_and_data_size(kl_weight):
    """Bayesian linear regression (no hidden layer): E_q log N(y; [x, 1] A, σ²) is
    log N(y; [x, 1] m, σ²) - [x, 1]² s² / (2 σ²); the minibatch loss must average to
    -(N / B * sum_batch of that - kl_weight * KL), and the layer site alone (plate scale N / B
    included) must hold exactly -kl_weight * KL."""
    X, y = _data()
    bnn = HiddenLayerBNN(3, [], 1, bp.Gaussian(scale=0.5), prior_scale=0.2, init_scale=0.1)
    xb, yb, n, b = X[:16], y[:16], X.shape[0], 16
    with torch.no_grad():
        X1 = F.pad(X, (0, 1), value=1.0)
        bnn.locs[0].copy_(torch.linalg.lstsq(X1, y.unsqueeze(-1)).solution)  # a small, quiet NLL
        m, s = bnn.locs[0], F.softplus(bnn.rhos[0])
        mean, var = (X1[:b] @ m).squeeze(-1), (X1[:b].square() @ s.square()).squeeze(-1)
        expected = dist.Normal(mean, 0.5).log_prob(yb) - var / (2 * 0.25)
        kl = float(bnn.kl_divergence())  # ~ 40: the weights sit far out in the prior's tail
        neg_elbo = -(n / b * float(expected.sum()) - kl_weight * kl)
        args = (xb, yb.unsqueeze(-1))
        kwargs = dict(dataset_size=n, kl_weight=kl_weight)
        trace = poutine.trace(bnn.model).get_trace(*args, **kwargs)
        trace.compute_log_prob()
        assert float(trace.nodes["layer0"]["log_prob_sum"]) == pytest.approx(-kl_weight * kl)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # no guide site for the layers
            elbo = Trace_ELBO()
            losses = torch.tensor(
                [elbo.loss(bnn.model, bnn.guide, *args, **kwargs) for _ in range(200)]
            )
    # 5 standard errors of a mean of 200 independent losses (about 2, against a KL of ~40)
    assert abs(float(losses.mean()) - neg_elbo) < 5 * float(losses.std()) / 200**0.5


def test_fit_learns_and_keeps_the_scales_away_from_zero():
    X, y = _data(128)
    bnn = HiddenLayerBNN(3, [16], 1, bp.Gaussian(scale=0.5), init_scale=0.05)
    history = bnn.fit(X, y, epochs=60, batch_size=32, lr=0.02, progress=False, seed=0)
    assert history["nll"][-1] < 0.5 * history["nll"][0]
    # the right KL sign: the unused hidden units' weights go back toward the prior (scale 1)
    assert float(F.softplus(bnn.rhos[0]).max()) > 0.1
    mean, var, samples = bnn.predict(X[:8], return_samples=True, num_samples=50, seed=0)
    assert mean.shape == var.shape == (8, 1) and samples.shape == (50, 8, 1)
    assert float(((mean.squeeze(-1) - y[:8]) ** 2).mean()) < 1.0
    again = bnn.predict(X[:8], num_samples=50, seed=0)[0]
    torch.testing.assert_close(mean, again)


def test_predict_draws_whole_weight_matrices():
    X, y = _data()
    bnn = HiddenLayerBNN(3, [], 1, bp.Gaussian(scale=0.5), init_scale=0.3)
    bnn.fit(X, y, epochs=1, progress=False, seed=0)
    draws = bnn.sample_posterior(5, seed=1)
    assert draws["layer0"].shape == (5, 4, 1)
    _, _, samples = bnn.predict(X[:6], return_samples=True, num_samples=5, seed=1)
    torch.testing.assert_close(samples, F.pad(X[:6], (0, 1), value=1.0) @ draws["layer0"])


def test_classification_learned_noise_and_predictive():
    split = bp.datasets.load_digits_split(seed=0)
    X, y = split.X_train[:300], split.y_train[:300]
    clf = HiddenLayerBNN(64, [32], 10, bp.Categorical())
    # a constant rate, as when this bound was set: the default cosine decay halves the mean
    # rate of so short a run (the NLL then falls to 0.52 of its start in 10 epochs, not < 0.5)
    history = clf.fit(
        X,
        y,
        epochs=10,
        batch_size=100,
        progress=False,
        seed=0,
        num_particles=2,
        lr_schedule="constant",
    )
    assert history["nll"][-1] < 0.5 * history["nll"][0]
    probs, _ = clf.predict(X[:4], num_samples=8, seed=0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(4))
    assert clf.log_predictive_density(X[:50], y[:50], num_samples=8, seed=0) > -1.5

    Xr, yr = _data()
    reg = HiddenLayerBNN(3, [8], 1, bp.Gaussian(scale="learned"))
    reg.fit(Xr, yr, epochs=30, batch_size=32, progress=False, seed=0)
    assert "likelihood.scale" in reg.guide.site_names()
    _, var_noise = reg.predict(Xr[:4], include_noise=True, num_samples=20, seed=0)
    _, var_epistemic = reg.predict(Xr[:4], num_samples=20, seed=0)
    assert bool((var_noise > var_epistemic).all())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = Predictive(reg.model, guide=reg.guide, num_samples=7, parallel=True)(Xr[:5])
    assert out["layer0"].shape == (7, 5, 9) and out["obs"].shape == (7, 5, 1)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((0, [4], 1), {}, ValueError, "in_features must be an int >= 1"),
        ((3, "4", 1), {}, TypeError, "hidden_sizes must be a sequence"),
        ((3, [4.0], 1), {}, TypeError, r"hidden_sizes\[0\] must be an int"),
        ((3, [4], 1), dict(likelihood="gaussian"), TypeError, "likelihood must be"),
        ((3, [4], 1), dict(activation="swish"), ValueError, "activation must be one of"),
        ((3, [4], 1), dict(activation=3), TypeError, "activation must be a name or a callable"),
        ((3, [4], 1), dict(prior_scale=0.0), ValueError, "prior_scale must be a finite float >"),
        ((3, [4], 1), dict(init_scale=-1.0), ValueError, "init_scale must be a finite float >"),
    ],
)
def test_bad_constructor_arguments(args, kwargs, error, match):
    kwargs.setdefault("likelihood", bp.Gaussian(0.5))
    with pytest.raises(error, match=match):
        HiddenLayerBNN(*args, **kwargs)


@pytest.mark.parametrize(
    "X, y, kwargs, error, match",
    [
        (torch.randn(8, 4), torch.randn(8), {}, ValueError, r"X must have 3 feature\(s\)"),
        (torch.randn(8), torch.randn(8), {}, ValueError, "X must have at least 2"),
        (torch.randn(8, 3), torch.randn(7), {}, ValueError, "same number of rows"),
        (
            torch.randn(8, 3),
            torch.randn(8),
            dict(epochs=-1),
            ValueError,
            "epochs must be an int >= 0",
        ),
        (torch.randn(8, 3), torch.randn(8), dict(batch_size=0), ValueError, "batch_size must be"),
        (torch.randn(8, 3), torch.randn(8), dict(lr=0.0), ValueError, "lr must be a finite float"),
        (torch.randn(8, 3), torch.randn(8), dict(seed=-1), ValueError, "seed must be an int >= 0"),
        (
            torch.randn(8, 3),
            torch.randn(8),
            dict(validation_data=torch.randn(4, 3)),
            ValueError,
            "validation_data must be a pair",
        ),
    ],
)
def test_bad_fit_arguments_raise_before_training(X, y, kwargs, error, match):
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(0.5))
    before = [p.detach().clone() for p in bnn.parameters()]
    with pytest.raises(error, match=match):
        bnn.fit(X, y, progress=False, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(before, bnn.parameters(), strict=True))


def test_predict_needs_a_fit_and_valid_arguments():
    bnn = HiddenLayerBNN(3, [4], 1, bp.Gaussian(0.5))
    with pytest.raises(NotFittedError):
        bnn.predict(torch.randn(2, 3))
    bnn.fit(torch.randn(8, 3), torch.randn(8), epochs=1, progress=False, seed=0)
    with pytest.raises(ValueError, match="num_samples must be an int >= 1"):
        bnn.predict(torch.randn(2, 3), num_samples=0)
    with pytest.raises(ValueError, match="include_noise=True needs a Gaussian"):
        clf = HiddenLayerBNN(3, [4], 2, bp.Categorical())
        clf.fit(torch.randn(8, 3), torch.arange(8) % 2, epochs=1, progress=False, seed=0)
        clf.predict(torch.randn(2, 3), include_noise=True)
    with pytest.raises(ValueError, match="dataset_size must be >= the number of rows"):
        bnn.model(torch.randn(4, 3), dataset_size=2)


@pytest.mark.parametrize(
    "likelihood, target",
    [
        (lambda: bp.Gaussian(scale="learned"), "regression"),  # the guide holds the noise
        (lambda: bp.Categorical(), "classes"),  # no guide parameters at all
    ],
)
def test_save_load_round_trip(tmp_path, likelihood, target):
    X, y = _data()
    out = 1
    if target == "classes":
        y, out = (y > y.median()).long(), 2
    bnn = HiddenLayerBNN(3, [6, 5], out, likelihood(), activation="tanh", prior_scale=0.5)
    bnn.fit(X, y, epochs=3, batch_size=32, progress=False, seed=0)
    bnn.save(tmp_path / "hl.pt")
    same = HiddenLayerBNN.load(tmp_path / "hl.pt")
    assert same.dataset_size == 64 and same.hidden_sizes == [6, 5]
    assert same.activation_name == "tanh" and same.prior_scale == 0.5
    for key, value in bnn.state_dict().items():
        assert torch.equal(same.state_dict()[key], value), key
    assert torch.allclose(same.kl_divergence(), bnn.kl_divergence())
    for a, b in zip(same.predict(X, seed=3), bnn.predict(X, seed=3), strict=True):
        assert torch.equal(a, b)


def test_save_load_errors(tmp_path):
    X, y = _data()
    unfitted = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=0.5))
    with pytest.raises(ValueError, match="fit the model"):
        unfitted.save(tmp_path / "a.pt")
    custom = HiddenLayerBNN(3, [4], 1, bp.Gaussian(scale=0.5), activation=torch.sin)
    custom.fit(X, y, epochs=1, progress=False)
    with pytest.raises(ValueError, match="named activation"):
        custom.save(tmp_path / "a.pt")
    vbnn = bp.VariationalBNN(bp.nn.mlp(3, [4], 1), bp.Gaussian(scale=0.5))
    vbnn.fit(X, y, epochs=1, progress=False)
    vbnn.save(tmp_path / "v.pt")
    with pytest.raises(ValueError, match="holds a VariationalBNN, not a HiddenLayerBNN"):
        HiddenLayerBNN.load(tmp_path / "v.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a bnn_pyro checkpoint"):
        HiddenLayerBNN.load(tmp_path / "other.pt")
