"""``LaplaceApproximation``'s settings, errors and state (``bnn_pyro/methods/laplace/laplace.py``):
the defaults, each error's full message (naming the argument, so the check that raised it is
the one meant), what ``state_dict`` carries and ``load_state_dict`` restores, how ``_apply``
passes torch's ``recurse`` on, and the ``"nn"`` predictive against the net run on its own
weight draws."""

import pytest
import torch
import torch.nn as nn
from torch.func import functional_call
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.methods import LaplaceApproximation


def _net(d_out: int = 1) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, d_out)).double()


def _data(n: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return x, torch.randn(n, 1, generator=g, dtype=torch.float64)


def _fitted(**kw) -> LaplaceApproximation:
    x, y = _data()
    la = LaplaceApproximation(_net(), "regression", **kw)
    la.fit(x, y, epochs=0, progress=False)
    return la


def test_the_defaults_are_the_signatures():
    """``prior_precision=1.0``, ``num_samples=20`` (and ggn / diag / all / glm / probit)."""
    la = LaplaceApproximation(_net(), "regression")
    settings = (la.hessian, la.hessian_structure, la.subset, la.predictive, la.link_approx)
    assert (la.prior_precision, la.num_samples) == (1.0, 20)
    assert settings == ("ggn", "diag", "all", "glm", "probit")


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        (dict(model="net"), TypeError, "model must be a torch.nn.Module, got str"),
        (dict(num_samples=0), ValueError, "num_samples must be an int >= 1, got 0"),
        (dict(hessian="kfac"), ValueError, "hessian must be one of ('fisher', 'ggn'), got 'kfac'"),
        (
            dict(hessian_structure="kfac"),
            ValueError,
            "hessian_structure must be one of ('diag', 'full', 'kron'), got 'kfac'",
        ),
        (
            dict(subset="first"),
            ValueError,
            "subset must be one of ('all', 'last_layer'), got 'first'",
        ),
        (dict(predictive="x"), ValueError, "predictive must be one of ('nn', 'glm'), got 'x'"),
        (dict(link_approx="x"), ValueError, "link_approx must be one of ('probit', 'mc'), got 'x'"),
        (
            dict(model=nn.ReLU()),
            ValueError,
            "model must have parameters for the Laplace approximation, got none",
        ),
    ],
)
def test_constructor_errors_word_for_word(kwargs, exc, message):
    """Each rejected argument raises with its own name and choices, the whole message."""
    args = {"model": _net(), **kwargs}
    with pytest.raises(exc) as info:
        LaplaceApproximation(args.pop("model"), "regression", **args)
    assert str(info.value) == message


def test_the_nn_predictive_is_the_net_on_its_weight_draws():
    """``predictive="nn"``: ``predict(..., seed=0)``'s samples are the net run on
    ``sample_parameters(S)`` drawn after ``torch.manual_seed(0)`` (the seeded draw of
    ``predict``), exactly; the ``"glm"`` predictive of the same posterior differs (a tanh net
    is not its linearisation)."""
    x, _ = _data()
    la = _fitted(predictive="nn", noise_scale=0.5)
    samples = la.predict(x[:5], True, seed=0)[2]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        draws = la.sample_parameters(la.num_samples)
    params = dict(la.model.named_parameters())
    expected = torch.stack(
        [
            functional_call(la.model, {**params, **{k: v[s] for k, v in draws.items()}}, x[:5])
            for s in range(la.num_samples)
        ]
    )
    torch.testing.assert_close(samples, expected, rtol=0, atol=1e-12)  # the same ops: rounding
    glm = _fitted(predictive="glm", noise_scale=0.5).predict(x[:5], True, seed=0)[2]
    assert not torch.allclose(glm, samples)


def test_fit_errors_word_for_word():
    """``fit``'s own checks: the device (positional or keyword), a ``y`` beside a loader, data
    that is neither a loader nor a tensor, and options that a loader fit does not take."""
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    la = LaplaceApproximation(_net(), "regression")
    bad_device = "device must be a torch device such as 'cpu' or 'cuda', got 'gpu'"
    cases = [
        (lambda: la.fit(loader, "gpu"), ValueError, bad_device),
        (lambda: la.fit(loader, device="gpu"), ValueError, bad_device),
        (lambda: la.fit(x, y, epochs=0, progress=False, device="gpu"), ValueError, bad_device),
        (
            lambda: la.fit(loader, y),
            TypeError,
            "y must be None when data is a DataLoader (it yields (x, y))",
        ),
        (lambda: la.fit(5), TypeError, "data must be a DataLoader or a tensor, got int"),
        (
            lambda: la.fit(loader, epochs=3),
            TypeError,
            "fit(data_loader) takes only device=, got ['epochs']",
        ),
    ]
    for call, exc, message in cases:
        with pytest.raises(exc) as info:
            call()
        assert str(info.value) == message
    assert la._mean is None  # nothing was fitted by any of them


def test_an_unfitted_state_saves_zero_loglik_and_count_and_loads():
    """Before ``fit`` the saved log-likelihood is ``0.0`` and the count ``0``, and that state
    loads (as floats and ints) into a fresh approximation, which stays unfitted."""
    state = LaplaceApproximation(_net(), "regression").state_dict()
    extra = state["_extra_state"]
    assert (extra["loglik"], extra["n_data"]) == (0.0, 0)
    assert type(extra["loglik"]) is float and type(extra["n_data"]) is int
    other = LaplaceApproximation(_net(), "regression")
    other.load_state_dict(state)
    assert (other._loglik, other._n_data, other.mean) == (0.0, 0, None)


def test_the_settings_come_back_from_the_state():
    """``hessian``, ``num_samples``, ``predictive`` and ``link_approx`` are loaded from the
    state over the loading approximation's own (which here are all the defaults)."""
    la = _fitted(hessian="fisher", num_samples=7, predictive="nn", link_approx="mc")
    other = LaplaceApproximation(_net(), "regression")
    other.load_state_dict(la.state_dict())
    loaded = (other.hessian, other.num_samples, other.predictive, other.link_approx)
    assert loaded == ("fisher", 7, "nn", "mc")
    assert type(other.num_samples) is int and type(other.predictive) is str
    assert torch.equal(other._hessian, la._hessian) and torch.equal(other._mean, la._mean)


def test_a_state_without_link_approx_keeps_the_constructors():
    """A file from before ``link_approx`` was saved loads with the loading approximation's."""
    state = _fitted().state_dict()
    del state["_extra_state"]["link_approx"]
    other = LaplaceApproximation(_net(), "regression", link_approx="mc")
    other.load_state_dict(state)
    assert other.link_approx == "mc"


def test_a_state_with_a_mean_but_no_curvature_is_not_fitted():
    """A (hand-made) state holding θ* but no ``H`` counts as unfitted: ``NotFittedError``."""
    state = _fitted().state_dict()
    state["_extra_state"]["hessian_matrix"] = None
    other = LaplaceApproximation(_net(), "regression")
    other.load_state_dict(state)
    with pytest.raises(NotFittedError, match="not fitted"):
        other.posterior_covariance()


def test_a_state_claiming_a_user_noise_of_none_is_refused_at_fit():
    """A (hand-made) state saying the user set the noise, to None: ``fit`` can neither keep nor
    estimate it and says so."""
    state = LaplaceApproximation(_net(), "regression").state_dict()
    state["_extra_state"].update(noise_scale=None, noise_from_user=True)
    la = LaplaceApproximation(_net(), "regression")
    la.load_state_dict(state)
    x, y = _data()
    with pytest.raises(ValueError) as info:
        la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    assert str(info.value) == "noise_scale is None: set it or fit on regression data"


@pytest.mark.parametrize("positional", [False, True])
def test_apply_passes_recurse_on(positional):
    """``_apply(fn, recurse=False)`` (``to_empty(recurse=False)`` passes it by keyword, a
    subclass's ``super()._apply(fn, recurse)`` positionally, as torch's RNN does) leaves the
    child net alone (the same storage) while the posterior is mapped."""
    la = _fitted()
    ptrs = [p.data_ptr() for p in la.model.parameters()]
    mean = la._mean.clone()
    if positional:
        la._apply(lambda t: t * 2, False)
    else:
        la.to_empty(device="cpu", recurse=False)
    assert [p.data_ptr() for p in la.model.parameters()] == ptrs
    if positional:
        assert torch.equal(la._mean, 2 * mean)


def test_a_state_of_another_likelihood_kind_is_refused_and_the_noise_loads():
    """The saved posterior names its likelihood's class: a classifier's state does not load
    into a regression model; a fixed-noise Gaussian's loads into a learned one (the noise comes
    back with the state)."""
    state = _fitted(noise_scale=0.7).state_dict()
    assert state["_extra_state"]["likelihood"] == "Gaussian"
    other = LaplaceApproximation(_net(), "regression")
    other.load_state_dict(state)
    assert other.noise_scale == 0.7
    classifier = LaplaceApproximation(_net(), "classification")
    message = (
        "the saved posterior has likelihood='Gaussian'; construct the LaplaceApproximation "
        "with likelihood='Gaussian' to load it, got 'Categorical'"
    )
    with pytest.raises(ValueError) as info:
        classifier.load_state_dict(state)
    assert str(info.value) == message


def test_a_loader_fit_checks_every_batch_against_the_nets_width_first():
    x, y = _data()
    la = LaplaceApproximation(_net(), "regression")
    wide = DataLoader(TensorDataset(x, torch.cat([y, y], 1)), batch_size=10)
    with pytest.raises(
        ValueError, match=r"^batch 0 of the data: y must have shape \(N,\) or \(N, 1"
    ):
        la.fit(wide)
    bad = y.clone()
    bad[15] = float("nan")
    with pytest.raises(ValueError, match=r"^batch 1 of the data: y must be finite"):
        la.fit(DataLoader(TensorDataset(x, bad), batch_size=10))
    assert la._mean is None and la.noise_scale is None  # nothing was fitted
    labels = LaplaceApproximation(_net(3), "classification")
    loader = DataLoader(TensorDataset(x, torch.arange(20) % 4), batch_size=10)
    with pytest.raises(ValueError, match=r"^batch 0 of the data: y labels must be in \[0, 2\]"):
        labels.fit(loader)
