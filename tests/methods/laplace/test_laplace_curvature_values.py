"""``curvature`` called directly against brute-force references built here with ``torch.func``:
the empirical Fisher ``Σ_n g_n g_nᵀ`` from per-example ``grad``, the GGN ``Σ_n J_nᵀ Λ_n J_n``
with ``J_n`` from ``jacrev`` and ``Λ_n`` the ``hessian`` of the negative log-likelihood in the
outputs, the log-likelihood from ``torch.distributions``; the per-layer path's conditions
(:func:`layer_rows`), its row count, and the maximum-likelihood noise (:func:`residual_sigma`).
Everything in float64: 1e-10 is round-off."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.distributions import Categorical, Normal
from torch.func import functional_call, grad, hessian, jacrev

import bnn_pyro as bp
from bnn_pyro.methods.laplace import curvature as cv
from bnn_pyro.methods.laplace.kron import KroneckerHessian
from bnn_pyro.methods.laplace.structures import DiagonalHessian, FullHessian

F64 = torch.float64
CPU = torch.device("cpu")
SIGMA = torch.tensor([0.5, 2.0], dtype=F64)  # two outputs, two different noise scales


def _net(d_out: int = 2) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, d_out)).double().eval()


def _data(n: int, likelihood: str, d_out: int = 2):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g, dtype=F64)
    if likelihood == "classification":
        return x, torch.randint(0, d_out, (n,), generator=g)
    return x, torch.randn(n, d_out, generator=g, dtype=F64)


def _log_lik(out, y, likelihood, sigma):
    """``log p(y | out)`` of one row, by ``torch.distributions``."""
    if likelihood == "classification":
        return Categorical(logits=out).log_prob(y)
    return Normal(out, sigma).log_prob(y).sum()


def _reference(net, x, y, likelihood, sigma, kind):
    """``(H (P, P), Σ_n log p(y_n | f(x_n)))`` one row at a time, by ``torch.func``."""
    params = {k: v.detach() for k, v in net.named_parameters()}

    def out_of(p, xi):
        return functional_call(net, p, (xi.unsqueeze(0),)).squeeze(0)

    total, loglik = 0.0, 0.0
    for xi, yi in zip(x, y, strict=True):
        out = out_of(params, xi)
        loglik += float(_log_lik(out, yi, likelihood, sigma))
        if kind == "fisher":
            g = grad(lambda p, xi=xi, yi=yi: -_log_lik(out_of(p, xi), yi, likelihood, sigma))(
                params
            )
            v = torch.cat([t.reshape(-1) for t in g.values()])
            total = total + torch.outer(v, v)
        else:
            jac = jacrev(out_of)(params, xi)  # {name: (O, *shape)}
            j = torch.cat([t.reshape(out.shape[0], -1) for t in jac.values()], dim=1)
            lam = hessian(lambda o, yi=yi: -_log_lik(o, yi, likelihood, sigma))(out)
            total = total + j.T @ lam @ j
    return total, loglik


def _run(net, x, y, likelihood, kind, structure, sigma, batch=4):
    params = {k: v.detach() for k, v in net.named_parameters()}
    batches = list(zip(x.split(batch), y.split(batch), strict=True))
    return cv.curvature(net, params, batches, likelihood=LIKELIHOODS[likelihood], kind=kind,
                        structure=structure, sigma=sigma, device=CPU)  # fmt: skip


CASES = [("classification", None), ("regression", SIGMA)]
#: the observation model of each case (the regression's noise is ``sigma``, given separately)
LIKELIHOODS = {"classification": bp.Categorical(), "regression": bp.Gaussian()}


@pytest.mark.parametrize("likelihood, sigma", CASES)
@pytest.mark.parametrize("kind", ["fisher", "ggn"])
@pytest.mark.parametrize("per_layer", [True, False])
def test_the_curvature_and_log_likelihood_are_the_brute_force_ones(
    monkeypatch, likelihood, sigma, kind, per_layer
):
    """Full and diagonal ``H``, the per-layer or the full-Jacobian path, and the summed
    log-likelihood ``Σ_n log p(y_n | f(x_n))`` (with the Gaussian's ``log σ_o`` and
    ``log 2π / 2`` terms, per output's own σ), and the count of examples (10, in batches of 4)."""
    monkeypatch.setattr(cv, "PER_LAYER", per_layer)
    net = _net()
    x, y = _data(10, likelihood)
    ref, loglik = _reference(net, x, y, likelihood, sigma, kind)
    h, got_loglik, count = _run(net, x, y, likelihood, kind, FullHessian(), sigma)
    torch.testing.assert_close(h, ref, rtol=1e-10, atol=1e-10)
    assert count == 10
    assert got_loglik == pytest.approx(loglik, rel=1e-10)
    d, d_loglik, _ = _run(net, x, y, likelihood, kind, DiagonalHessian(), sigma)
    torch.testing.assert_close(d, ref.diagonal(), rtol=1e-10, atol=1e-10)
    assert d_loglik == pytest.approx(loglik, rel=1e-10)


def test_a_single_output_regression_takes_one_dimensional_targets(monkeypatch):
    """``y (N,)`` for one output is ``y (N, 1)`` (not broadcast against ``f (N, 1)`` to an
    ``(N, N)`` residual): the same log-likelihood and GGN, on both paths."""
    net, sigma = _net(1), torch.tensor([0.7], dtype=F64)
    x, y = _data(6, "regression", 1)
    ref, loglik = _reference(net, x, y, "regression", sigma, "ggn")
    for per_layer in (True, False):
        monkeypatch.setattr(cv, "PER_LAYER", per_layer)
        h, got, _ = _run(net, x, y[:, 0], "regression", "ggn", DiagonalHessian(), sigma)
        assert got == pytest.approx(loglik, rel=1e-10)
        torch.testing.assert_close(h, ref.diagonal(), rtol=1e-10, atol=1e-10)


def test_kfac_of_one_linear_layer_on_one_row_is_the_exact_ggn():
    """One row through one linear layer: ``G ⊗ A`` with ``G = Λ``, ``A = a aᵀ`` is ``J ᵀΛ J``
    exactly (``N = 1``), and the log-likelihood is the row's."""
    torch.manual_seed(0)
    net = nn.Linear(3, 2).double().eval()
    x, y = _data(1, "classification")
    ref, loglik = _reference(net, x, y, "classification", None, "ggn")
    h, got, count = _run(net, x, y, "classification", "ggn", KroneckerHessian(), None)
    assert count == 1 and got == pytest.approx(loglik, rel=1e-10)
    weight = torch.kron(h["weight|G"], h["weight|A"]) / h["n"]
    torch.testing.assert_close(weight, ref[:6, :6], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h["bias|G"], ref[6:, 6:], rtol=1e-10, atol=1e-10)


def test_the_sum_over_ranks_is_skipped_outside_a_process_group():
    """``reduce=True`` with no ``torch.distributed`` group running: the same sums."""
    net = _net()
    x, y = _data(5, "classification")
    params = {k: v.detach() for k, v in net.named_parameters()}
    plain = _run(net, x, y, "classification", "ggn", FullHessian(), None)
    kw = {"likelihood": bp.Categorical(), "kind": "ggn", "sigma": None, "device": CPU}
    reduced = cv.curvature(net, params, [(x, y)], structure=FullHessian(), reduce=True, **kw)
    torch.testing.assert_close(reduced[0], plain[0], rtol=1e-12, atol=1e-12)
    assert reduced[1:] == pytest.approx(plain[1:], rel=1e-12)


def test_the_ggn_in_blocks_of_one_row_and_one_output_is_the_same(monkeypatch):
    """The full-Jacobian path with blocks of one row and one output (the categorical's
    ``- j jᵀ`` summed over the output blocks first): the brute-force GGN."""
    monkeypatch.setattr(cv, "JACOBIAN_BLOCK_BYTES", 1)
    net = _net(3)
    x, y = _data(5, "classification", 3)
    ref, _ = _reference(net, x, y, "classification", None, "ggn")
    h, _, _ = _run(net, x, y, "classification", "ggn", FullHessian(), None)
    torch.testing.assert_close(h, ref, rtol=1e-10, atol=1e-10)


def test_the_per_layer_rows_fill_the_block_bound():
    """``2**28 // (O · Σ out · itemsize)``: two outputs, layers of 4 and 2 outputs, float64
    (8 bytes): ``2**28 // 96``; KFAC takes the same count."""
    net, x = _net(), torch.ones(5, 3, dtype=F64)
    params = dict(net.named_parameters())
    expected = 2**28 // (2 * 6 * 8)
    assert cv.layer_rows(DiagonalHessian(), net, params, x) == expected
    assert cv.layer_rows(KroneckerHessian(), net, params, x) == expected


def test_the_per_layer_rows_are_at_least_one(monkeypatch):
    monkeypatch.setattr(cv, "JACOBIAN_BLOCK_BYTES", 1)
    net = _net()
    assert (
        cv.layer_rows(
            DiagonalHessian(), net, dict(net.named_parameters()), torch.ones(2, 3, dtype=F64)
        )
        == 1
    )


class _Twice(nn.Module):
    """A linear layer run twice in one forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(self.lin(x))


class _OwnForward(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


def _tied() -> nn.Module:
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    net[1].weight = net[0].weight
    return net


def _hooked() -> nn.Module:
    net = nn.Sequential(nn.Linear(2, 2))
    net[0].register_forward_hook(lambda m, a, o: o + 1)
    return net


def _normed() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))


@pytest.mark.parametrize(
    "make, x",
    [
        (_Twice, torch.ones(3, 2)),  # a layer called twice
        (lambda: nn.Sequential(_OwnForward(2, 2)), torch.ones(3, 2)),  # its own forward
        (_tied, torch.ones(3, 2)),  # a weight shared by two layers
        (_hooked, torch.ones(3, 2)),  # a hook of the net's own
        (_normed, torch.ones(3, 2)),  # a parameter that is not a linear layer's
        (lambda: nn.Sequential(nn.Linear(2, 2)), torch.ones(3, 4, 2)),  # a sequence
    ],
)
def test_the_diagonal_takes_the_full_jacobians_where_the_layers_are_not_them(make, x):
    net = make()
    params = dict(net.named_parameters())
    assert cv.layer_rows(DiagonalHessian(), net, params, x) is None


def test_the_diagonal_takes_the_full_jacobians_with_the_switch_off(monkeypatch):
    monkeypatch.setattr(cv, "PER_LAYER", False)
    net = _net()
    assert (
        cv.layer_rows(DiagonalHessian(), net, dict(net.named_parameters()), torch.ones(2, 3))
        is None
    )


def test_kfac_on_a_sequence_is_refused_by_its_whole_message():
    net = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"^hessian_structure='kron' needs \(B, in\) inputs at "
                       r"each linear layer; layer '0' got \(1, 4, 2\)$"):  # fmt: skip
        cv.layer_jacobians(net, dict(net.named_parameters()), torch.ones(3, 4, 2))


def test_the_layers_are_those_holding_a_given_parameter():
    net = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    params = {"1.weight": net[1].weight, "2.bias": net[2].bias}
    assert cv.linear_layers(net, params) == {"2": net[2]}


@pytest.mark.parametrize(
    "rows, outputs, size, expected",
    [
        (10, 2, 2**23, (4, 2)),  # 2**26 bytes a row: 4 rows
        (3, 2, 2**23, (3, 2)),  # fewer rows than fit
        (10, 4, 2**24, (1, 4)),  # exactly the bound a row: one row, every output
        (10, 8, 2**24, (1, 4)),  # twice the bound a row: half the outputs
        (10, 8, 2**27, (1, 1)),  # half an output over the bound: one at least
    ],
)
def test_the_jacobian_blocks_are_the_documented_sizes(rows, outputs, size, expected):
    """4-byte numbers against the 2**28-byte bound; whole numbers (they step ``range``)."""
    got = cv.jacobian_blocks(rows, outputs, size, 4)
    assert got == expected and all(type(v) is int for v in got)


def test_the_residual_sigma_is_the_root_mean_square_residual_per_output():
    """``sqrt(mean_n (y_n - f(x_n))²)``: the net ``f = 0`` with targets 3 and 4 in one output
    (rms 3.5355...) and 0 in the other (the floor, 1e-6); a float for one output."""
    net = nn.Linear(1, 2)
    nn.init.zeros_(net.weight), nn.init.zeros_(net.bias)
    x = torch.zeros(2, 1)
    y = torch.tensor([[3.0, 0.0], [4.0, 0.0]])
    got = cv.residual_sigma(net, [(x[:1], y[:1]), (x[1:], y[1:])], CPU)
    torch.testing.assert_close(got, torch.tensor([12.5**0.5, 1e-6]), rtol=1e-6, atol=0)
    one = nn.Linear(1, 1)
    nn.init.zeros_(one.weight), nn.init.zeros_(one.bias)
    single = cv.residual_sigma(one, [(x, y[:, 0])], CPU, reduce=True)
    assert isinstance(single, float) and single == pytest.approx(12.5**0.5)


def test_the_sums_over_ranks_are_taken_in_a_process_group(monkeypatch):
    """A stand-in group of two ranks holding the same rows (``all_sum`` doubles): ``H``, the
    log-likelihood (float64: no float32 rounding of it) and the count double with
    ``reduce=True``, and nothing is summed without it."""
    monkeypatch.setattr(cv.distributed, "active", lambda: True)
    monkeypatch.setattr(cv.distributed, "all_sum", lambda t: 2 * t)
    net = _net()
    x, y = _data(5, "regression")
    params = {k: v.detach() for k, v in net.named_parameters()}
    ref, loglik = _reference(net, x, y, "regression", SIGMA, "ggn")
    kw = {"likelihood": bp.Gaussian(), "kind": "ggn", "sigma": SIGMA, "device": CPU}
    h, got, count = cv.curvature(net, params, [(x, y)], structure=FullHessian(), reduce=True, **kw)
    torch.testing.assert_close(h, 2 * ref, rtol=1e-10, atol=1e-10)
    assert got == pytest.approx(2 * loglik, rel=1e-12) and count == 10
    assert isinstance(got, float) and isinstance(count, int)
    h, got, count = cv.curvature(net, params, [(x, y)], structure=FullHessian(), **kw)
    torch.testing.assert_close(h, ref, rtol=1e-10, atol=1e-10)
    assert got == pytest.approx(loglik, rel=1e-12) and count == 5


def test_the_residual_sigma_sums_the_squares_and_the_count_over_ranks(monkeypatch):
    """Two stand-in ranks with the rows ``(3, 4)`` and ``(1, 2)`` (``all_sum`` adds the
    other rank's, given here): ``sqrt((9 + 16 + 1 + 4) / 4)``; without ``reduce`` the first
    rank's own ``sqrt(25 / 2)``."""
    monkeypatch.setattr(cv.distributed, "active", lambda: True)
    other = {(): torch.tensor(2.0, dtype=F64), (1,): torch.tensor([5.0], dtype=F64)}
    monkeypatch.setattr(cv.distributed, "all_sum", lambda t: t + other[tuple(t.shape)])
    net = nn.Linear(1, 1)
    nn.init.zeros_(net.weight), nn.init.zeros_(net.bias)
    batches = [(torch.zeros(2, 1), torch.tensor([3.0, 4.0]))]
    assert cv.residual_sigma(net, batches, CPU, reduce=True) == pytest.approx(7.5**0.5, rel=1e-7)
    assert cv.residual_sigma(net, batches, CPU) == pytest.approx(12.5**0.5, rel=1e-7)


def test_the_per_layer_path_reaches_layers_inside_containers():
    """``block.0.weight`` is the weight of the linear layer ``block.0``: per layer."""
    net = nn.Sequential(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), nn.Linear(4, 2)).double()
    x = torch.ones(2, 3, dtype=F64)
    assert cv.layer_rows(DiagonalHessian(), net, dict(net.named_parameters()), x) == 2**28 // 96


def test_a_batch_with_fewer_targets_than_inputs_is_refused_on_the_per_layer_path(monkeypatch):
    """Blocks of one row: five inputs and four targets do not pair up."""
    monkeypatch.setattr(cv, "JACOBIAN_BLOCK_BYTES", 1)
    net = _net()
    x, y = _data(5, "regression")
    with pytest.raises(ValueError, match="zip"):
        _run(net, x, y[:4], "regression", "ggn", DiagonalHessian(), SIGMA, batch=5)


@pytest.mark.parametrize("per_layer", [True, False])
def test_the_noise_weights_take_the_outputs_dtype(monkeypatch, per_layer):
    """A float32 net with a float64 σ: ``H`` in float32, the float64 reference's to float32
    round-off (1e-5 relative)."""
    monkeypatch.setattr(cv, "PER_LAYER", per_layer)
    net = _net()
    x, y = _data(6, "regression")
    ref, _ = _reference(net, x, y, "regression", SIGMA, "ggn")
    h, _, _ = _run(net.float(), x.float(), y.float(), "regression", "ggn", DiagonalHessian(), SIGMA)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, ref.diagonal().float(), rtol=1e-5, atol=1e-6)
