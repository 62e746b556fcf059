"""VariationalBayesNN values that test_bayes_nn.py leaves open.

Pins: the defaults of the constructor (``prior_std=1.0``, ``num_samples=20``), of
``variational_loss`` (``num_samples=10``) and of ``fit`` (``train_samples=1``,
``kl_weight=1.0``), each by its signature and by a behaviour that depends on it; the whole text
of every refusal (the argument names in it); ``kl_weight=0`` accepted, a negative one refused;
the stored ``prior_std``/``dataset_size`` and ``dataset_size`` as the loss's default; the
Gaussian loss in float64 against ``torch.distributions``; ``forward``'s ``sample`` and
``num_samples``; ``fit``'s validation loss, progress bar label, global RNG, learned noise (its
start at ``std(y)``, a float for one output and an ``(O,)`` tensor for several, saved for
``resume``) and its loss's data set size; ``from_net``'s likelihood and options.
"""

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Normal

import bnn_pyro as bp
from bnn_pyro.checkpoint import read_checkpoint
from bnn_pyro.likelihoods import HeteroscedasticGaussian
from bnn_pyro.methods import VariationalBayesNN
from tests.methods.methods_helpers import deterministic


def _mean_net(vb, x):
    """The ReLU net on the posterior means, written out by hand."""
    for i, layer in enumerate(vb.layers):
        x = x @ layer.weight_mu.T + layer.bias_mu
        if i < len(vb.layers) - 1:
            x = torch.relu(x)
    return x


def _kl_to_prior(vb, prior_std):
    """KL(q || N(0, prior_std²)) summed over all weights and biases, by torch.distributions."""
    total = torch.zeros(())
    for layer in vb.layers:
        for mu, rho in [(layer.weight_mu, layer.weight_rho), (layer.bias_mu, layer.bias_rho)]:
            q = Normal(mu, F.softplus(rho))
            total = total + torch.distributions.kl_divergence(q, Normal(0.0, prior_std)).sum()
    return total


# ---------------------------------------------------------------- constructor


def test_constructor_defaults_and_stored_attributes():
    params = inspect.signature(VariationalBayesNN.__init__).parameters
    assert params["prior_std"].default == 1.0 and params["num_samples"].default == 20
    vb = VariationalBayesNN(3, [5], 2)
    assert vb.prior_std == 1.0 and vb.num_samples == 20 and vb.dataset_size is None
    # the default prior is N(0, 1): the KL of the fresh model is the KL to it
    torch.testing.assert_close(vb.kl_divergence(), _kl_to_prior(vb, 1.0))
    # predict draws num_samples=20 weight sets by default
    _, _, samples = vb.predict(torch.randn(4, 3), return_samples=True)
    assert samples.shape == (20, 4, 2)
    given = VariationalBayesNN(3, [5], 2, prior_std=2, dataset_size=37)
    assert given.prior_std == 2.0 and type(given.prior_std) is float
    assert given.dataset_size == 37


def test_constructor_dataset_size_is_the_loss_default():
    vb = deterministic(VariationalBayesNN(3, [8], 4, dataset_size=37))
    x, y = torch.randn(10, 3), torch.randint(0, 4, (10,))
    expected = F.cross_entropy(_mean_net(vb, x), y) + vb.kl_divergence() / 37
    torch.testing.assert_close(vb.variational_loss(x, y, num_samples=2), expected)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_samples=0), "num_samples must be an int >= 1, got 0"),
        (dict(prior_std=0.0), r"prior_std must be a finite float > 0\.0, got 0\.0"),
        (dict(dataset_size=0), "dataset_size must be an int >= 1, got 0"),
    ],
)
def test_constructor_refusals_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        VariationalBayesNN(2, [4], 1, **kwargs)


# ---------------------------------------------------------------- forward


def test_forward_samples_by_default_and_sample_false_is_the_mean_net():
    vb = VariationalBayesNN(3, [6], 2)
    x = torch.randn(5, 3)
    assert not torch.allclose(vb(x), vb(x))  # sample=True is the default: two draws differ
    mean = vb(x, sample=False)
    torch.testing.assert_close(mean, _mean_net(vb, x))
    assert torch.equal(mean, vb(x, sample=False))
    many = vb(x, num_samples=3)
    assert many.shape == (3, 5, 2) and not torch.allclose(many[0], many[1])
    # batched vs plain matmul: equal up to float32 rounding (assert_close's default)
    torch.testing.assert_close(vb(x, sample=False, num_samples=3), mean.expand(3, 5, 2))


# ---------------------------------------------------------------- variational_loss


def test_loss_draws_ten_samples_by_default():
    params = inspect.signature(VariationalBayesNN.variational_loss).parameters
    assert params["num_samples"].default == 10 and params["kl_weight"].default == 1.0
    vb = VariationalBayesNN(3, [8], 4, dataset_size=50)
    x, y = torch.randn(10, 3), torch.randint(0, 4, (10,))

    def loss(**kwargs):
        torch.manual_seed(1)  # the same weight draws for every call
        return vb.variational_loss(x, y, **kwargs)

    assert torch.equal(loss(), loss(num_samples=10))
    assert not torch.allclose(loss(), loss(num_samples=11))  # the draws matter


def test_loss_with_kl_weight_zero_is_the_nll():
    vb = deterministic(VariationalBayesNN(3, [8], 4))
    x, y = torch.randn(10, 3), torch.randint(0, 4, (10,))
    loss = vb.variational_loss(x, y, num_samples=2, kl_weight=0.0, dataset_size=10)
    torch.testing.assert_close(loss, F.cross_entropy(_mean_net(vb, x), y))


def test_float64_gaussian_loss_keeps_the_noise_in_float64():
    vb = deterministic(VariationalBayesNN(3, [8], 2, likelihood="regression")).double()
    x, y = torch.randn(10, 3, dtype=torch.float64), torch.randn(10, 2, dtype=torch.float64)
    sigma = torch.tensor(0.1, dtype=torch.float64)
    lp = Normal(_mean_net(vb, x), sigma).log_prob(y).sum(-1).mean()
    loss = vb.variational_loss(x, y, num_samples=2, noise_scale=0.1, dataset_size=40)
    assert loss.dtype == torch.float64
    # the same float64 formula on both sides agrees to ~1e-15; 0.1 rounded to float32 is off
    # by 1.5e-8 relative, which moves the loss by ~1e-7 relative: rtol 1e-12 separates them
    torch.testing.assert_close(loss, -lp + vb.kl_divergence() / 40, rtol=1e-12, atol=0.0)


def _classifier_call(**kwargs):
    vb = VariationalBayesNN(2, [4], 3)
    return lambda: vb.variational_loss(torch.randn(5, 2), torch.randint(0, 3, (5,)), **kwargs)


def _regression_call(**kwargs):
    vb = VariationalBayesNN(2, [4], 1, likelihood="regression")
    return lambda: vb.variational_loss(torch.randn(5, 2), torch.randn(5), **kwargs)


@pytest.mark.parametrize(
    "call, message",
    [
        (_classifier_call(num_samples=0), "num_samples must be an int >= 1, got 0"),
        (
            _classifier_call(kl_weight=-0.5),
            r"kl_weight must be a finite float >= 0\.0, got -0\.5",
        ),
        (_classifier_call(dataset_size=0), "dataset_size must be an int >= 1, got 0"),
        (
            _classifier_call(likelihood=HeteroscedasticGaussian()),
            r"VariationalBayesNN supports a Gaussian or Categorical likelihood, "
            r"got HeteroscedasticGaussian\(min_scale=0\.001\)",
        ),
        (
            _regression_call(noise_scale=-1.0),
            r"noise_scale must be a finite float > 0\.0, got -1\.0",
        ),
        (
            _regression_call(noise_scale=torch.tensor([-1.0])),
            r"noise_scale must be finite and > 0, got tensor\(\[-1\.\]\)",
        ),
        (
            _regression_call(),
            r"noise_scale is None: pass noise_scale, set model\.noise_scale, or use fit\(\)",
        ),
    ],
)
def test_loss_refusals_name_the_argument(call, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        call()


# ---------------------------------------------------------------- fit


def _fit(likelihood="classification", out=3, n=20, **kwargs):
    """A fresh seeded model fitted on fixed data; returns ``(model, history)``."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 2, generator=g)
    if likelihood == "classification":
        y = torch.randint(0, out, (n,), generator=g)
    else:
        y = torch.randn(n, out, generator=g)
    torch.manual_seed(0)
    vb = VariationalBayesNN(2, [4], out, likelihood=likelihood)
    options = dict(epochs=1, batch_size=n, progress=False, seed=0) | kwargs
    return vb, vb.fit(x, y, **options)


def test_fit_defaults_one_draw_and_the_full_kl():
    params = inspect.signature(VariationalBayesNN._fit).parameters
    assert params["train_samples"].default == 1 and params["kl_weight"].default == 1.0
    # lr 1e-8, one full batch: the first loss is the loss at the initial weights
    _, default = _fit(lr=1e-8)
    _, one = _fit(lr=1e-8, train_samples=1, kl_weight=1.0)
    _, two = _fit(lr=1e-8, train_samples=2)
    _, no_kl = _fit(lr=1e-8, kl_weight=0.0)  # kl_weight=0 is accepted
    assert default["loss"] == one["loss"] and default["loss"] != two["loss"]
    torch.manual_seed(0)
    kl = VariationalBayesNN(2, [4], 3).kl_divergence().item()  # the initial model's KL
    # the same seed draws the same weights, so only β·KL/N differs; float32 losses of size ~5
    # agree to ~1e-6, KL/N here is ~3: atol 1e-5
    assert default["loss"][0] - no_kl["loss"][0] == pytest.approx(kl / 20, abs=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(train_samples=0), "train_samples must be an int >= 1, got 0"),
        (dict(kl_weight=-1.0), r"kl_weight must be a finite float >= 0\.0, got -1\.0"),
    ],
)
def test_fit_refusals_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        _fit(**kwargs)


def test_fit_checks_its_options_before_the_data():
    # kl_weight is refused by fit itself, before the targets (out of range here) are read
    vb = VariationalBayesNN(2, [4], 3)
    with pytest.raises(ValueError, match=r"^kl_weight must be a finite float >= 0\.0, got -1\.0$"):
        vb.fit(torch.randn(5, 2), torch.full((5,), 7), kl_weight=-1.0, progress=False)


def test_fit_reports_the_validation_loss():
    g = torch.Generator().manual_seed(4)
    x_val, y_val = torch.randn(6, 2, generator=g), torch.randint(0, 3, (6,), generator=g)
    _, history = _fit(epochs=3, validation_data=(x_val, y_val))
    assert len(history["val_loss"]) == 3


def test_fit_with_a_seed_leaves_the_global_rng_untouched():
    # the shape probe runs the mean net: no weight draw outside the seeded run
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(12, 2, generator=g), torch.randint(0, 3, (12,), generator=g)
    vb = VariationalBayesNN(2, [4], 3)
    state = torch.get_rng_state()
    vb.fit(x, y, epochs=2, progress=False, seed=1)
    assert torch.equal(torch.get_rng_state(), state)


def test_fit_progress_bar_is_labelled_with_the_class_name(capsys):
    _fit(epochs=2, progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\rVariationalBayesNN: ")


def test_fit_loss_uses_the_data_set_size_not_the_attribute():
    # a callback that changes model.dataset_size mid-run does not change the training loss
    def shrink(method, epoch, history):
        method.dataset_size = 1

    _, plain = _fit(epochs=3, lr=1e-2, batch_size=5)
    _, shrunk = _fit(epochs=3, lr=1e-2, batch_size=5, callbacks=[shrink])
    assert plain["loss"] == shrunk["loss"]


@pytest.mark.parametrize("n", [1, 2, 16])
def test_learned_noise_starts_at_the_std_of_each_column(n):
    g = torch.Generator().manual_seed(6)
    y = torch.randn(n, 2, generator=g) * torch.tensor([3.0, 0.2])  # one std > 1, one < 1
    torch.manual_seed(0)
    vb = VariationalBayesNN(2, [4], 2, likelihood="regression")
    # one epoch, one batch, lr 1e-8: Adam's first step moves log σ by at most lr, so σ stays
    # at its start to ~1e-8 relative; rtol 1e-5 leaves room for float32 log/exp rounding
    vb.fit(torch.randn(n, 2, generator=g), y, epochs=1, lr=1e-8, progress=False, seed=0)
    start = y.std(dim=0) if n > 1 else torch.ones(2)  # one row has no std: start at 1
    assert isinstance(vb.noise_scale, torch.Tensor) and vb.noise_scale.shape == (2,)
    torch.testing.assert_close(vb.noise_scale, start, rtol=1e-5, atol=0.0)


def test_learned_noise_is_a_float_for_one_output():
    vb, _ = _fit("regression", out=1, lr=1e-8)
    assert type(vb.noise_scale) is float
    g = torch.Generator().manual_seed(3)
    torch.randn(20, 2, generator=g)
    y = torch.randn(20, 1, generator=g)  # _fit's targets
    assert vb.noise_scale == pytest.approx(y.std().item(), rel=1e-5)  # tolerance as above


def test_resume_saves_and_restores_the_learned_noise(tmp_path):
    path = tmp_path / "run.pt"
    first, _ = _fit("regression", out=2, epochs=2, lr=1e-2, resume=path)
    saved = read_checkpoint(path)["extra"]
    assert set(saved) == {"log_sigma"}
    torch.testing.assert_close(saved["log_sigma"].exp(), first.noise_scale)
    # going on to 4 epochs from the file gives the noise of an uninterrupted 4-epoch run, bit
    # for bit (resume restores every state and RNG stream): compared exactly
    resumed, _ = _fit("regression", out=2, epochs=4, lr=1e-2, resume=path)
    straight, _ = _fit("regression", out=2, epochs=4, lr=1e-2)
    torch.testing.assert_close(resumed.noise_scale, straight.noise_scale, rtol=0.0, atol=0.0)
    assert not torch.equal(resumed.noise_scale, first.noise_scale)


# ---------------------------------------------------------------- from_net


def test_from_net_keeps_the_likelihood_and_the_options():
    net = bp.nn.mlp(3, [16], 2, activation="tanh")
    vb = VariationalBayesNN.from_net(net, "regression", num_samples=7, prior_std=0.5)
    assert vb.likelihood.homoscedastic and not vb.likelihood.classifies
    assert (vb.num_samples, vb.prior_std) == (7, 0.5)
    assert vb.checkpoint_config()["activation"] == "tanh"  # read off the net
    other = VariationalBayesNN.from_net(net, bp.Categorical(), activation="relu")
    assert other.likelihood.classifies and other.checkpoint_config()["activation"] == "relu"


def test_the_checkpoint_names_every_setting_and_refuses_an_unnamed_activation():
    vb = VariationalBayesNN(3, [5, 4], 2, prior_std=0.7, num_samples=9, likelihood="regression")
    assert vb.checkpoint_config() == {
        "in_features": 3,
        "hidden_sizes": [5, 4],
        "out_features": 2,
        "prior_std": 0.7,
        "num_samples": 9,
        "likelihood": vb.likelihood.config(),
        "activation": "relu",
    }
    assert vb.likelihood.config()["type"] == "Gaussian" and vb.likelihood.learned
    assert vb.fitted_state() == {"dataset_size": None}
    vb.dataset_size = 12
    assert vb.fitted_state() == {"dataset_size": 12}
    again = VariationalBayesNN.from_checkpoint_config(None, vb.checkpoint_config())
    assert again.checkpoint_config() == vb.checkpoint_config()
    again.restore_fitted_state(vb.fitted_state())
    assert again.dataset_size == 12
    custom = VariationalBayesNN(3, [5], 1, activation=torch.tanh)
    with pytest.raises(
        ValueError,
        match=r"^only a model built with a named activation \(e.g. 'relu'\) can be saved$",
    ):
        custom.checkpoint_config()


def test_a_float_noise_is_made_on_the_inputs_device():
    """Under a ``meta`` default device (a stand-in for a second device), the loss of CPU
    inputs with a float ``noise_scale`` is the same CPU number as outside it: the noise tensor
    is made where ``x`` lives, not on the default device."""
    torch.manual_seed(0)
    vb = deterministic(VariationalBayesNN(2, [4], 1, likelihood="regression"))
    x, y = torch.randn(6, 2), torch.randn(6, 1)
    want = vb.variational_loss(x, y, num_samples=1, noise_scale=0.3, dataset_size=6)
    with torch.device("meta"):
        got = vb.variational_loss(x, y, num_samples=1, noise_scale=0.3, dataset_size=6)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want)
