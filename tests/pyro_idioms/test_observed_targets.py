"""The model reads ``y`` as ``fit`` does: a ``(B,)`` vector for a one-output net is one target
per row, in the user's own ``SVI``, ``Predictive``, ``Trace_ELBO().loss`` and NUTS as in ``fit``.

The independent reference is the Normal log-density written out by hand from the net's output
(``poutine.condition`` fixes the weights, so the only thing measured is how ``y`` is read).
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO
from pyro.poutine.util import site_is_subsample

import bnn_pyro as bp


def _data(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 3, generator=g)
    return X, X @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(n, generator=g)


def _weights(bnn: bp.VariationalBNN) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    trace = poutine.trace(bnn.model).get_trace(torch.zeros(2, 3))
    return {
        n: s["value"]
        for n, s in trace.nodes.items()
        if s["type"] == "sample" and n != "obs" and not site_is_subsample(s)
    }


def _hand_log_lik(bnn: bp.VariationalBNN, weights: dict, X: torch.Tensor, y: torch.Tensor):
    f = poutine.condition(bnn.model, data=weights)(X).squeeze(-1)  # (B,)
    return dist.Normal(f, 0.1).log_prob(y).sum()


@pytest.mark.parametrize("validation", [True, False])
def test_a_vector_y_is_one_target_per_row(validation: bool) -> None:
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(0.1))
    w = _weights(bnn)
    with pyro.validation_enabled(validation):
        trace = poutine.trace(poutine.condition(bnn.model, data=w)).get_trace(X, y)
        column = poutine.trace(poutine.condition(bnn.model, data=w)).get_trace(X, y[:, None])
    expected = _hand_log_lik(bnn, w, X, y)
    # float32 sums of 64 terms of size ~1e3: a relative tolerance of 1e-5
    torch.testing.assert_close(
        trace.nodes["obs"]["fn"].log_prob(trace.nodes["obs"]["value"]).sum(),
        expected,
        rtol=1e-5,
        atol=1e-3,
    )
    assert trace.nodes["obs"]["value"].shape == (64, 1)
    torch.testing.assert_close(trace.log_prob_sum(), column.log_prob_sum())


def test_trace_elbo_loss_is_the_same_for_a_vector_and_a_column() -> None:
    X, y = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(0.1))
    bnn.setup_guide(X[:2], y[:2, None])
    losses = []
    for target in (y, y[:, None]):
        pyro.set_rng_seed(3)
        losses.append(Trace_ELBO().loss(bnn.model, bnn.guide, X, target))
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_the_users_own_svi_loop_on_a_vector_y_fits_y_not_its_mean() -> None:
    # with the (B, B) broadcast the loop ended at the marginal mean of y (R^2 ~ 0); read one
    # target per row, a linear net recovers a linear truth with noise 0.1 (R^2 ~ 0.99)
    X, y = _data(128)
    pyro.set_rng_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(0.1))
    svi = SVI(bnn.model, bnn.guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(300):
        svi.step(X, y)
    mean, _ = bnn.predict(X, num_samples=50, seed=0)
    r2 = 1 - ((mean.squeeze(-1) - y) ** 2).mean() / y.var()
    assert r2 > 0.95


@pytest.mark.parametrize(
    ("likelihood", "out", "bad"),
    [
        (bp.Gaussian(0.1), 1, torch.zeros(63)),  # one row short
        (bp.Gaussian(0.1), 2, torch.zeros(64)),  # two outputs need (B, 2)
        (bp.Gaussian(0.1), 1, torch.zeros(64, 64)),
        (bp.Categorical(), 3, torch.zeros(64, 2, dtype=torch.long)),
    ],
)
def test_a_shape_the_model_cannot_read_is_refused_with_the_expected_one(
    likelihood, out: int, bad: torch.Tensor
) -> None:
    X, _ = _data()
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [4], out), likelihood)
    with pytest.raises(ValueError, match=r"y has shape .*, not \(B"):
        bnn.model(X, bad)


def test_class_labels_as_a_column_are_read_as_a_vector() -> None:
    X, _ = _data()
    labels = (X[:, 0] > 0).long()
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [4], 2), bp.Categorical())
    w = _weights(bnn)
    vec = poutine.trace(poutine.condition(bnn.model, data=w)).get_trace(X, labels)
    col = poutine.trace(poutine.condition(bnn.model, data=w)).get_trace(X, labels[:, None])
    torch.testing.assert_close(vec.log_prob_sum(), col.log_prob_sum())
    logits = poutine.condition(bnn.model, data=w)(X)
    hand = torch.log_softmax(logits, -1).gather(-1, labels[:, None]).sum()
    torch.testing.assert_close(vec.nodes["obs"]["fn"].log_prob(labels).sum(), hand)


def test_hidden_layer_bnn_reads_a_vector_y_as_fit_does() -> None:
    X, y = _data()
    bnn = bp.HiddenLayerBNN(3, [8], 1, bp.Gaussian(0.1))
    pyro.set_rng_seed(0)
    vec = poutine.trace(bnn.model).get_trace(X, y)
    assert vec.nodes["obs"]["value"].shape == (64, 1)
    col = poutine.trace(poutine.replay(bnn.model, trace=vec)).get_trace(X, y[:, None])
    torch.testing.assert_close(vec.log_prob_sum(), col.log_prob_sum())
