"""``VBLL``'s options and hooks: its defaults are the ``vbll`` package's, every argument is
checked by name before any work, the fit trains what it should on the loss it names, and the
Gaussian predictive is exactly the closed form's."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.vbll import VBLL


def _data(n: int = 32, out: int = 1):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return x, x[:, :out] * torch.tensor([1.0, -1.0][:out], dtype=x.dtype) + 0.1 * torch.randn(
        n, out, generator=g, dtype=x.dtype
    )


def _net(out: int = 1, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return bp.nn.mlp(3, [6], out, dropout=dropout).double()


@pytest.mark.parametrize(("peer_name", "likelihood", "out"), [
    ("Regression", "regression", 1), ("DiscClassification", "classification", 3),
])  # fmt: skip
def test_the_defaults_are_the_vbll_package_s(peer_name, likelihood, out):
    vbll = pytest.importorskip("vbll")
    m = VBLL(_net(out), likelihood)
    peer = getattr(vbll, peer_name)(7, out, 1.0)  # 6 hidden units and the bias
    assert m.head.prior_variance == pytest.approx(peer.prior_scale)
    assert (m.head.wishart_scale, m.head.dof) == (peer.wishart_scale, peer.dof)
    assert m.head.covariance == "dense" and m.num_samples == bp.BaseBayesianMethod.num_samples


@pytest.mark.parametrize(("options", "message"), [
    ({"wishart_scale": 0.0}, "wishart_scale must be a finite float > 0.0, got 0.0"),
    ({"wishart_scale": -1.0}, "wishart_scale must be a finite float > 0.0, got -1.0"),
    ({"dof": -0.5}, "dof must be a finite float >= 0.0, got -0.5"),
    ({"kl_weight": -0.5}, "kl_weight must be a finite float >= 0.0, got -0.5"),
    ({"num_samples": 0}, "num_samples must be"),
])  # fmt: skip
def test_each_option_is_checked_by_name(options, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        VBLL(_net(), "regression", **options)


def test_the_checks_take_what_they_should():
    m = VBLL(_net(), "regression", dof=0.5, kl_weight=0.5, wishart_scale=0.5)
    assert (m.dof, m.kl_weight, m.wishart_scale) == (0.5, 0.5, 0.5)
    with pytest.raises(TypeError, match="^model must be"):
        VBLL("net", "regression")


def test_the_head_follows_the_net_and_the_constructor():
    """Made in the net's dtype (no ``.double()`` of the method), with its covariance, the
    noise given beside the likelihood fixed from the start; a diagonal model reloads as one."""
    m = VBLL(_net(), "regression", covariance="diagonal", noise_scale=0.3)
    assert {p.dtype for p in m.head.parameters()} == {torch.float64}
    assert m.head.covariance == "diagonal" and not m.head.learned_noise
    torch.testing.assert_close(m.head.noise_variance(), torch.tensor([0.09], dtype=torch.float64))
    assert m.noise_scale == 0.3


def test_a_diagonal_model_reloads_as_one(tmp_path):
    m = VBLL(_net(), "regression", covariance="diagonal")
    m.fit(*_data(), epochs=2, progress=False, seed=0)
    m.save(tmp_path / "m.pt")
    again = bp.load(tmp_path / "m.pt", net=_net())
    assert again.head.covariance == "diagonal"
    assert torch.equal(again.predict(_data()[0])[1], m.predict(_data()[0])[1])


def test_the_optimizer_holds_the_body_and_q_not_the_replaced_layer():
    groups = []

    def adam(params):
        groups.extend(params)
        return torch.optim.Adam(params, lr=1e-3)

    for net in (_net(), nn.Linear(3, 1).double()):  # a body, and a net that is its last layer
        groups.clear()
        m = VBLL(net, "regression")
        m.fit(*_data(), epochs=1, optimizer=adam, progress=False, seed=0)
        held = {id(p) for group in groups for p in group["params"]}
        last = m.model[-1] if isinstance(m.model, nn.Sequential) else m.model
        assert not held & {id(p) for p in last.parameters()}
        body = {id(p) for p in m.model.parameters()} - {id(p) for p in last.parameters()}
        q = {id(p) for p in m.head.parameters() if p.requires_grad}
        assert held == body | q


def test_the_fit_s_loss_is_the_head_s_with_the_kl_weight():
    """One full-batch step: the loss recorded is the loss before it, at the start, so two
    fits that differ only in ``kl_weight`` differ by ``(KL − log p(σ)) / N`` times the change."""
    x, y = _data()
    losses, penalty = [], None
    for weight in (0.0, 1.0):
        m = VBLL(_net(), "regression", kl_weight=weight)
        if penalty is None:
            penalty = float((m.head.kl() - m.head.noise_log_prior()).detach()) / len(x)
        losses.append(m.fit(x, y, epochs=1, batch_size=len(x), progress=False, seed=0)["loss"][0])
    assert losses[1] - losses[0] == pytest.approx(penalty, rel=1e-9)


def test_validation_is_scored_with_the_training_loss_in_eval_mode():
    x, y = _data()
    m = VBLL(_net(dropout=0.3), "regression")
    history = m.fit(x, y, epochs=3, validation_data=(x[:8], y[:8]), progress=False, seed=0)
    m.model.eval()
    with torch.no_grad():
        expected = m.head.loss(m.features(x[:8]), y[:8], len(x))
    assert history["val_loss"][-1] == pytest.approx(float(expected), rel=1e-12)


def test_a_diverged_fit_names_the_method():
    def poison(method, epoch, history):
        with torch.no_grad():
            method.head.mean.fill_(float("nan"))

    with pytest.raises(bp.TrainingDivergedError, match=r"VBLL \(lr="):
        VBLL(_net(), "regression").fit(*_data(), epochs=3, callbacks=[poison], progress=False)


def test_predict_runs_the_net_in_eval_mode_and_under_its_seed():
    m = VBLL(_net(dropout=0.5), "regression")
    x = _data()[0][:5]
    mean, _ = m.predict(x)
    m.model.eval()
    torch.testing.assert_close(mean, m(x))
    m.model.train()
    draws = [m.predict(x, return_samples=True, seed=s)[2] for s in (0, 0, 1)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    assert m.model.training  # the caller's mode is given back
    for layer in m.model.modules():  # the draws are the same without dropout: it was off
        if isinstance(layer, nn.Dropout):
            layer.p = 0.0
    assert torch.equal(m.predict(x, return_samples=True, seed=0)[2], draws[0])


@pytest.mark.parametrize("out", [1, 2])
def test_a_learned_noise_is_a_float_for_one_output_and_a_tensor_for_more(out):
    m = VBLL(_net(out), "regression")
    m.fit(*_data(out=out), epochs=2, progress=False, seed=0)
    sigma = m.head.noise_log_scale.detach().exp()
    if out == 1:
        assert isinstance(m.noise_scale, float) and m.noise_scale == float(sigma)
    else:
        assert torch.equal(m.noise_scale, sigma)


@pytest.mark.parametrize("out", [1, 2])  # the noise a float, and a tensor
def test_the_gaussian_predictive_is_the_closed_form_and_checks_its_options(out):
    m = VBLL(_net(out), "regression")
    x, y = _data(out=out)
    m.fit(x, y, epochs=2, progress=False, seed=0)
    locs, scales = m.predictive_gaussian(x[:4])
    mean, var = m.predict(x[:4])
    assert locs.shape == scales.shape == (1, 4, out)
    torch.testing.assert_close(locs[0], mean, rtol=0, atol=0)
    torch.testing.assert_close(scales[0] ** 2, var + m.noise_scale**2, rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="num_samples"):
        m.predictive_gaussian(x[:4], num_samples=0)
    with pytest.raises(ValueError, match="^seed must"):  # the closed form checks the draws'
        m.predict(x[:4], seed=-1)  # arguments as the sampled predictive does
    with pytest.raises(ValueError, match="^pass seed or generator, not both$"):
        m.predict(x[:4], seed=0, generator=torch.Generator())
    with pytest.raises(NotImplementedError, match="this VBLL classifies: use predict"):
        VBLL(_net(3), "classification").predictive_gaussian(x[:4])


def test_a_net_whose_last_layer_reads_more_than_rows_is_refused_by_name():
    net = nn.Sequential(nn.Unflatten(1, (1, 3)), nn.Linear(3, 1)).double()
    with pytest.raises(ValueError, match=r"^VBLL needs a net whose output \(N, O\) is its (.|\n)*"
                       r"end the net with that layer$"):  # fmt: skip
        VBLL(net, "regression").features(torch.randn(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^VBLL makes the net's last nn.Linear its last layer, "
                       r"and this net has none: end the net with an nn.Linear$"):  # fmt: skip
        VBLL(nn.Sequential(nn.Tanh()), "regression")
