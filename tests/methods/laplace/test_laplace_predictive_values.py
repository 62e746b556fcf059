"""The Laplace predictive's values against references computed here: the samples of
``predictive="nn"`` (the net on the draws) and ``"glm"`` (its linearisation, by ``torch.func``)
on draws fixed by the test; every prediction in eval mode (a net with batch norm and dropout);
the joint covariance when the Jacobians come one output at a time; ``Σ`` factorised once per
``predict``; and the refusals' whole messages."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.func import functional_call, jacrev, jvp

import bnn_pyro as bp
from bnn_pyro.methods.laplace import curvature
from bnn_pyro.methods.laplace.probit import probit_moments
from bnn_pyro.methods.laplace.structures import FullHessian


def _draws(la, num_samples, scale=0.5):
    """Fixed ``{name: (S, *shape)}`` draws around θ*: the mean plus a seeded normal offset."""
    g = torch.Generator().manual_seed(3)
    return {
        k: v.detach() + scale * torch.randn(num_samples, *v.shape, generator=g, dtype=v.dtype)
        for k, v in la.mean.items()
    }


def _tanh_regression(predictive):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20, 2, generator=g, dtype=torch.float64)
    y = torch.randn(20, 2, generator=g, dtype=torch.float64)
    la = bp.LaplaceApproximation(net, "regression", noise_scale=0.5, predictive=predictive)
    la.fit(x, y, epochs=0, progress=False)
    return la, net, x[:6]


@pytest.mark.parametrize("predictive", ["nn", "glm"])
def test_the_samples_are_the_net_or_its_linearisation_on_the_draws(predictive):
    """With the posterior's draws fixed (``sample_parameters`` replaced), ``predictive="nn"``
    samples ``f(x, θ_s)`` and ``"glm"`` ``f(x, θ*) + J(x)(θ_s - θ*)`` (a Jacobian-vector product
    by ``torch.func``). The two differ on a tanh net at offsets of 0.5 (checked, so that the
    test tells them apart); float64, 1e-10 is round-off."""
    la, net, x = _tanh_regression(predictive)
    draws = _draws(la, 3)
    la.sample_parameters = lambda num_samples: draws
    samples = la.predict(x, return_samples=True, num_samples=3, seed=0)[2]
    mean = {k: v.detach() for k, v in la.mean.items()}
    by_net, by_glm = [], []
    for s in range(3):
        theta = {k: v[s] for k, v in draws.items()}
        by_net.append(functional_call(net, theta, (x,)))
        tangent = {k: theta[k] - mean[k] for k in mean}
        out, lin = jvp(lambda p: functional_call(net, p, (x,)), (mean,), (tangent,))
        by_glm.append(out + lin)
    by_net, by_glm = torch.stack(by_net), torch.stack(by_glm)
    assert (by_net - by_glm).abs().max() > 1e-3
    expected = by_net if predictive == "nn" else by_glm
    torch.testing.assert_close(samples, expected, rtol=1e-10, atol=1e-10)


class _Normed(nn.Module):
    """Linear, batch norm (running statistics set away from their defaults), dropout, tanh, and
    a last linear layer: the only Bayesian one (``subset="last_layer"``)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(2, 5), nn.BatchNorm1d(5), nn.Dropout(0.5), nn.Tanh())
        self.head = nn.Linear(5, 3)
        with torch.no_grad():
            self.body[1].running_mean.copy_(torch.linspace(-1.0, 1.0, 5))
            self.body[1].running_var.copy_(torch.linspace(0.5, 2.0, 5))

    def forward(self, x):
        return self.head(self.body(x))


@pytest.mark.parametrize("structure", ["diag", "kron", "full"])
def test_every_prediction_runs_the_net_in_eval_mode(structure):
    """A classifier with batch norm and dropout, left in train mode: the logits' GLM mean is the
    net's eval-mode output, their variance ``diag(J Σ Jᵀ)`` with ``J`` the eval-mode Jacobian
    in the last layer (``torch.func.jacrev``) and ``Σ`` the structure's covariance, the joint
    covariance ``J Σ Jᵀ``, the probabilities the probit approximation of those, and the samples
    (draws fixed) the eval-mode features through each drawn last layer, as logits where
    ``normalize_output=False``. In train mode the batch statistics and the dropout masks would
    change every number (and a single row through batch norm is refused). The running
    statistics and the train flags are left as they were. float32: 1e-5 is round-off."""
    net = _Normed()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(24, 2, generator=g), torch.randint(0, 3, (24,), generator=g)
    la = bp.LaplaceApproximation(net, "classification", hessian_structure=structure,
                                 subset="last_layer")  # fmt: skip
    la.fit(x, y, epochs=0, progress=False)
    net.train()
    stats = [t.clone() for t in net.body[1].buffers()]
    x_new = x[:7]
    net.eval()
    with torch.no_grad():
        features, logits = net.body(x_new), net(x_new)
    head = {k: v.detach() for k, v in net.head.named_parameters()}
    jac = jacrev(lambda p: functional_call(net.head, p, (features,)))(head)
    jac = torch.cat([jac["weight"].flatten(2), jac["bias"]], dim=2)  # (N, O, P), θ's order
    h, lam = la._require_fit()[1], la._lam()
    joint = torch.einsum("nop,pq,mrq->nomr", jac, la.structure.covariance(h, lam), jac)
    var = joint.flatten(2).flatten(0, 1).diagonal().reshape(7, 3)
    draws = _draws(la, 4)
    la.sample_parameters = lambda num_samples: draws
    net.train()

    mean, variance, samples = la.predict(x_new, True, normalize_output=False, num_samples=4)
    torch.testing.assert_close(mean, logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(variance, var, rtol=1e-5, atol=1e-6)
    weight, bias = draws["head.weight"], draws["head.bias"]
    expected = torch.einsum("ni,soi->sno", features, weight) + bias[:, None]
    torch.testing.assert_close(samples, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(la.glm_variance(x_new), var, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(la.glm_covariance(x_new), joint.flatten(2).flatten(0, 1),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    probs, probs_var = la.predict(x_new)
    expected_probs, expected_var = probit_moments(logits, var)
    torch.testing.assert_close(probs, expected_probs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(probs_var, expected_var, rtol=1e-4, atol=1e-6)
    for before, after in zip(stats, net.body[1].buffers(), strict=True):
        assert torch.equal(before, after)
    assert all(m.training for m in net.modules())


def test_the_joint_covariance_is_the_same_when_the_outputs_come_one_at_a_time(monkeypatch):
    """``glm_covariance`` of a three-output net with the Jacobian blocks cut to one output (and
    one row) each, as a net too large for the block bound would be: the same ``(N O, N O)``
    matrix as in one block (float64, 1e-12: the same products, summed in another order)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(15, 2, generator=g, dtype=torch.float64), torch.randint(0, 3, (15,))
    la = bp.LaplaceApproximation(net, "classification", hessian_structure="full")
    la.fit(x, y, epochs=0, progress=False)
    whole = la.glm_covariance(x[:4])
    monkeypatch.setattr(curvature, "JACOBIAN_BLOCK_BYTES", 1)
    blocked = la.glm_covariance(x[:4])
    assert blocked.shape == (12, 12)
    torch.testing.assert_close(blocked, whole, rtol=1e-12, atol=1e-12)


def test_predict_factorises_the_posterior_once_for_all_its_blocks(monkeypatch):
    """300 rows go through the closed form in two blocks (256 and 44 rows), and ``H + λ I`` is
    factorised once for both, not once per block (the documented cost of one ``predict``)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    x, y = torch.randn(300, 2), torch.randn(300, 1)
    la = bp.LaplaceApproximation(net, "regression", hessian_structure="full", noise_scale=0.5)
    la.fit(x, y, epochs=0, progress=False)
    calls = []
    real = FullHessian.variance_fn

    def spy(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(FullHessian, "variance_fn", spy)
    mean, var = la.predict(x)
    assert len(calls) == 1
    torch.testing.assert_close(var[250:260], la.glm_variance(x[250:260]))


def test_bad_counts_are_refused_by_name():
    """The whole messages of :func:`~bnn_pyro._checks.check_int`, naming the argument."""
    la, _, x = _tanh_regression("glm")
    with pytest.raises(ValueError, match=r"^chunk_size must be an int >= 1, got 0$"):
        la.glm_variance(x, chunk_size=0)
    with pytest.raises(ValueError, match=r"^chunk_size must be an int >= 1, got 0$"):
        la.glm_covariance(x, chunk_size=0)
    with pytest.raises(ValueError, match=r"^num_samples must be an int >= 1, got 0$"):
        la.sample_parameters(0)
