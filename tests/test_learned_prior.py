"""``LearnedNormalPrior``: empirical Bayes by the ELBO, checked against its closed form.

For Bayesian linear regression ``y = [X, 1] w + eps`` with known noise ``tau`` and the prior
``w_j ~ N(0, s^2)`` (one layer: one scale), the mean-field ELBO is closed-form in the guide's
means ``mu``, variances ``v`` and ``s``; its joint maximum satisfies (coordinate-wise):

* ``mu = (A^T A / tau^2 + I / s^2)^{-1} A^T y / tau^2`` (the mean-field means are the exact
  posterior means of a Gaussian model),
* ``v_j = 1 / (||A_j||^2 / tau^2 + 1 / s^2)`` (the inverse diagonal of the precision),
* ``s^2 = mean_j (mu_j^2 + v_j)`` (the only term of the ELBO in ``s`` is ``-KL(q || N(0, s^2))``).

Iterating the three to their fixed point in float64 gives the answer without Pyro; SVI with a
``LearnedNormalPrior`` must land there.
"""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro as bp

TAU = 0.5


def _data(n: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 3, generator=g)
    y = X @ torch.tensor([0.8, -0.5, 0.3]) + 0.2 + TAU * torch.randn(n, generator=g)
    return X, y


def _fixed_point(X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    A = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    s2 = 1.0
    for _ in range(1000):  # a contraction here: 1000 rounds reach float64 precision
        precision = A.T @ A / TAU**2 + torch.eye(A.shape[1], dtype=A.dtype) / s2
        mu = torch.linalg.solve(precision, A.T @ y.double() / TAU**2)
        var = 1 / (A.pow(2).sum(0) / TAU**2 + 1 / s2)
        s2 = float((mu**2 + var).mean())
    return mu, var, math.sqrt(s2)


@pytest.mark.parametrize("elbo", ["meanfield", "trace"])
def test_the_learned_scale_is_the_empirical_bayes_optimum(elbo):
    X, y = _data()
    _, _, scale = _fixed_point(X, y)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(
        bp.nn.mlp(3, [], 1), bp.Gaussian(TAU), prior=bp.LearnedNormalPrior(), init_scale=0.05
    )
    bnn.fit(X, y, epochs=1000, lr=0.02, batch_size=None, elbo=elbo, progress=False, seed=0)
    learned = bnn.prior.scales()["0"]
    # Tolerance: the scale starts at 1 and the optimum is 0.61. Measured within 0.8% of it (3
    # seeds, both ELBOs, 1000 full-batch steps); s^2 is the mean second moment of the layer's
    # four weights, so the 0.06-0.15 posterior std by which 1000 steps leave the means off
    # (std 0.09 against means of 0.1-0.9) moves s by at most ~1.5%: 2% holds, while a prior
    # that the gradient does not reach stays at 1 and a KL counted twice ends elsewhere.
    assert learned == pytest.approx(scale, rel=0.02)
    assert abs(learned - 1.0) > 0.3


def test_each_model_binds_its_own_scales_and_checkpoints_carry_them(tmp_path):
    prior = bp.LearnedNormalPrior(init_scale=0.5, exclude="2.*")
    net = bp.nn.mlp(3, [4], 1)
    a, b = (bp.VariationalBNN(net, bp.Gaussian(0.1), prior=prior) for _ in range(2))
    assert a.prior is not prior and a.prior is not b.prior
    assert list(prior.log_scales) == []  # the recipe stays unbound
    assert sorted(a.prior.scales()) == ["0"]  # layer 2 is excluded: no scale for it
    assert a.prior.scales()["0"] == pytest.approx(0.5)
    X, y = _data(16)
    a.fit(X, y, epochs=30, lr=0.05, progress=False, seed=0)
    assert a.prior.scales()["0"] != pytest.approx(0.5)  # the ELBO's gradient reached it
    assert b.prior.scales()["0"] == pytest.approx(0.5)  # b was not trained through a
    path = tmp_path / "bnn.pt"
    a.save(path)
    loaded = bp.load(path, net=net)
    assert loaded.prior.scales() == a.prior.scales()
    assert repr(loaded.prior) == "LearnedNormalPrior(init_scale=0.5)"
    assert torch.equal(loaded.predict(X, seed=1)[0], a.predict(X, seed=1)[0])


def test_bad_arguments_and_an_unbound_prior_are_refused():
    with pytest.raises(ValueError, match="init_scale"):
        bp.LearnedNormalPrior(init_scale=0.0)
    with pytest.raises(TypeError, match="init_scale"):
        bp.LearnedNormalPrior(init_scale="1")
    prior = bp.LearnedNormalPrior()
    with pytest.raises(RuntimeError, match="not bound"):
        prior.distribution(torch.nn.Linear(2, 1), "weight", torch.device("cpu"), torch.float32)


# ------------------------------------------------------------------ binding and its names
def test_the_default_start_is_the_librarys_normal_0_1_prior():
    prior = bp.LearnedNormalPrior()
    assert prior.init_scale == 1.0 and repr(prior) == "LearnedNormalPrior(init_scale=1.0)"
    assert bp.LearnedNormalPrior().bound_to(bp.nn.mlp(2, [3], 1)).scales() == {"0": 1.0, "2": 1.0}


def test_the_refusal_of_a_bad_start_names_it():
    with pytest.raises(ValueError) as caught:
        bp.LearnedNormalPrior(init_scale=0.0)
    assert str(caught.value) == "init_scale must be a finite float > 0.0, got 0.0"


def test_layers_are_keyed_by_their_path_and_the_net_itself_as_root():
    """A nested layer's key is its dotted path with ``__`` for ``.``, read back with dots; a net
    that is one layer is ``"root"``, read back as ``""``."""
    nested = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 3)), torch.nn.Linear(3, 1))
    bound = bp.LearnedNormalPrior(0.5).bound_to(nested)
    assert list(bound.log_scales) == ["0__0", "1"]
    assert bound.scales() == pytest.approx({"0.0": 0.5, "1": 0.5})
    root = bp.LearnedNormalPrior(2.0).bound_to(torch.nn.Linear(2, 1))
    assert list(root.log_scales) == ["root"] and root.scales() == pytest.approx({"": 2.0})


def test_a_layer_gets_a_scale_when_any_parameter_the_selection_names_is_bayesian():
    """With ``include=["*.weight"]`` every layer still gets its scale (its weight is
    Bayesian); with ``include=["2.*"]`` only the last layer does."""
    net = bp.nn.mlp(2, [3], 1)
    assert list(bp.LearnedNormalPrior(include=["*.weight"]).bound_to(net).log_scales) == ["0", "2"]
    assert list(bp.LearnedNormalPrior(include=["2.*"]).bound_to(net).log_scales) == ["2"]


def test_each_scale_is_made_in_its_layers_dtype_and_on_its_device():
    """float64 layers get a float64 scale; layers on the meta device (standing in for a GPU:
    the default device is the CPU) get theirs there."""
    double = bp.LearnedNormalPrior().bound_to(bp.nn.mlp(2, [], 1).double())
    assert double.log_scales["0"].dtype == torch.float64
    on_meta = bp.LearnedNormalPrior().bound_to(torch.nn.Linear(2, 1, device="meta"))
    assert on_meta.log_scales["root"].device.type == "meta"


def test_the_distribution_is_made_where_asked_and_reads_no_values():
    """The prior of a weight is built on the asked device and dtype, without validating its
    arguments (a check reads values: it would fail on the meta device, as it would break a
    compiled graph)."""
    net = bp.nn.mlp(2, [], 1)
    bound = bp.LearnedNormalPrior(0.5).bound_to(net)
    prior = bound.distribution(net[0], "weight", torch.device("meta"), torch.float64)
    assert prior.scale.device.type == "meta" and prior.scale.dtype == torch.float64
    on_cpu = bound.distribution(net[0], "weight", torch.device("cpu"), torch.float64)
    assert on_cpu.scale.dtype == torch.float64
    assert float(on_cpu.scale.detach()) == pytest.approx(0.5)


def test_a_layer_bound_by_another_prior_is_refused_by_name():
    net, other = bp.nn.mlp(2, [3], 1), bp.nn.mlp(2, [], 1)
    bp.LearnedNormalPrior().bound_to(net)  # marks net's layers "0" and "2"
    bound = bp.LearnedNormalPrior().bound_to(other)  # knows only "0"
    with pytest.raises(RuntimeError) as caught:
        bound.distribution(net[2], "weight", torch.device("cpu"), torch.float32)
    assert str(caught.value) == (
        "LearnedNormalPrior is not bound to this net: pass it to VariationalBNN (which binds a "
        "copy with Prior.bound_to) rather than calling make_bayesian_ directly"
    )


def test_each_scale_is_a_pyro_param_site_named_by_its_layer():
    """In a user's own Pyro code the scales are the param sites ``prior.log_scales.<key>``
    (what ``pyro.optim`` trains), holding the prior's own tensors."""
    import pyro.poutine as poutine

    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), prior=bp.LearnedNormalPrior())
    trace = poutine.trace(bnn.model).get_trace(torch.randn(4, 2))
    params = {n: s["value"] for n, s in trace.nodes.items() if s["type"] == "param"}
    assert set(params) == {"prior.log_scales.0", "prior.log_scales.2"}
    assert params["prior.log_scales.2"] is bnn.prior.log_scales["2"]
