"""``fit`` and ``predict`` run on the thread count of ``bnn_pyro.threads`` (one by default)
and give torch's own setting back."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp


class _Recording(nn.Module):
    """A linear net that records torch's thread count at each forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 1)
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(torch.get_num_threads())
        return self.linear(x)


@pytest.fixture
def two_threads():
    """torch on 2 threads (the user's setting); the library's default put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
    bp.set_threads(1)


@pytest.mark.parametrize("method", ["dropout", "swag", "vbnn"])
def test_fit_and_predict_run_on_one_thread_and_restore(two_threads, method):
    X, y = torch.randn(32, 2), torch.randn(32)
    seen = []
    m = bp.make(method, bp.nn.mlp(2, [4], 1, dropout=0.1), bp.Gaussian(0.5))
    m.fit(
        X, y, epochs=2, progress=False, callbacks=[lambda *a: seen.append(torch.get_num_threads())]
    )
    m.predict(X[:3], num_samples=2)
    assert seen == [1, 1]  # inside fit, once per epoch
    assert torch.get_num_threads() == 2  # the user's setting, back


def test_forward_passes_of_fit_and_predict_see_the_setting(two_threads):
    net = _Recording()
    la = bp.LaplaceApproximation(net, "regression", noise_scale=0.5)
    la.fit(torch.randn(16, 2), torch.randn(16), epochs=2, progress=False)
    fitted = len(net.seen)
    la.predict(torch.randn(3, 2), num_samples=2)
    assert fitted > 0 and len(net.seen) > fitted  # predict ran the net too
    assert set(net.seen) == {1}
    bp.set_threads(None)  # leave torch's own setting: 2
    bnn = bp.VariationalBNN(_Recording(), bp.Gaussian(0.5))
    bnn.fit(torch.randn(16, 2), torch.randn(16), epochs=1, progress=False)
    assert bnn.net.seen and set(bnn.net.seen) == {2}


def test_fit_stacked_and_a_chosen_count(two_threads):
    bp.set_threads(2)
    bnns = [bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5)) for _ in range(2)]
    seen = []
    torch.set_num_threads(1)  # now the library's 2 differs from torch's 1
    bp.fit_stacked(
        bnns, torch.randn(16, 2), torch.randn(16), seeds=[0, 1], epochs=2, progress=False,
        callbacks=[lambda *a: seen.append(torch.get_num_threads())],
    )  # fmt: skip
    assert seen == [2, 2] and torch.get_num_threads() == 1


def test_the_context_manager_nests_and_restores(two_threads):
    with bp.threads(1):
        with bp.threads(None):
            assert torch.get_num_threads() == 1  # None: unchanged
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_bad_count_is_refused_by_name(bad):
    with pytest.raises((TypeError, ValueError), match="threads"):
        bp.set_threads(bad)
    assert bp.get_threads() == 1  # nothing changed


@pytest.mark.parametrize("call", ["predictive_gaussian", "log_predictive_density"])
def test_every_way_of_reading_the_predictive_runs_on_the_setting(two_threads, call):
    """Not only ``predict``: a figure computed from ``predictive_gaussian`` or
    ``log_predictive_density`` must not depend on torch's thread count elsewhere (a notebook
    that dropped its own ``torch.set_num_threads(1)`` saw a Laplace row's figures move)."""
    net = _Recording()
    la = bp.LaplaceApproximation(net, "regression", noise_scale=0.5)
    X, y = torch.randn(16, 2), torch.randn(16)
    la.fit(X, y, epochs=1, progress=False)
    net.seen.clear()
    if call == "predictive_gaussian":
        la.predictive_gaussian(X[:3], num_samples=2)
    else:  # VI evaluates its twin of the net, not the net: record where it evaluates
        bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5))
        bnn.fit(X, y, epochs=1, progress=False)
        outputs = bnn._outputs

        def recording(*args, **kwargs):
            net.seen.append(torch.get_num_threads())
            return outputs(*args, **kwargs)

        bnn._outputs = recording
        bnn.log_predictive_density(X[:3], y[:3], num_samples=2)
    assert net.seen and set(net.seen) == {1}
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize(
    "call", ["log_marginal_likelihood", "optimize_prior_precision", "validation_log_likelihood"]
)
def test_laplace_evidence_runs_on_the_setting(two_threads, monkeypatch, call):
    """Laplace's evidence calls are made by a user after ``fit`` (notebook 01 calls
    ``optimize_prior_precision``): they run on the library's count too, or the prior precision
    they choose moves with torch's thread count (measured: in its 12th digit). Recorded where
    each evaluates: the net (``validation_log_likelihood``) or the posterior's structure."""
    net = _Recording()
    la = bp.LaplaceApproximation(net, "regression", noise_scale=0.5)
    X, y = torch.randn(16, 2), torch.randn(16)
    la.fit(X, y, epochs=1, progress=False)
    net.seen.clear()
    structure = type(la.structure)  # a property: patch the class
    eigenvalues = structure.eigenvalues

    def recording(*args, **kwargs):
        net.seen.append(torch.get_num_threads())
        return eigenvalues(*args, **kwargs)

    monkeypatch.setattr(structure, "eigenvalues", recording)
    if call == "validation_log_likelihood":
        la.validation_log_likelihood(X, y)
    else:
        getattr(la, call)()
    assert net.seen and set(net.seen) == {1}
    assert torch.get_num_threads() == 2
