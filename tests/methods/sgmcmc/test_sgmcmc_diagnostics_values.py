"""``prediction_diagnostics`` and ``chain_diagnostics`` against references written here:
split R̂ by its formula (Gelman et al. 2013, in numpy), the rank-normal scores of Vehtari et al.
(2021) from ``scipy.stats.rankdata`` and ``scipy.special.ndtri``, and the ESS from Pyro's own
``effective_sample_size`` on those reference arrays; ``chain_diagnostics`` against the
predictions of a linear net worked by hand from each chain's kept samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pyro.ops.stats import effective_sample_size
from scipy.special import ndtri
from scipy.stats import rankdata

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.diagnostics import (
    ChainDiagnostics,
    chain_diagnostics,
    prediction_diagnostics,
)


def _split_rhat(x: np.ndarray) -> float:
    """Split R̂ of ``(C, S)`` draws: each chain's first and last ``S // 2`` draws as chains,
    ``sqrt(((n - 1) / n W + B / n) / W)``, ``B / n`` the variance of the half-chain means."""
    half = x.shape[1] // 2
    halves = np.concatenate([x[:, :half], x[:, x.shape[1] - half :]])
    within = halves.var(axis=1, ddof=1).mean()
    between = halves.mean(axis=1).var(ddof=1)
    return float(np.sqrt(((half - 1) / half * within + between) / within))


def _scores(x: np.ndarray) -> np.ndarray:
    """Rank-normal scores of ``(C, S)`` draws pooled over chains (ranks 1..CS, tied draws given
    their average rank)."""
    ranks = rankdata(x.reshape(-1), method="average").reshape(x.shape)
    return ndtri((ranks - 0.375) / (x.size + 0.25))


def _draws(chains: int, steps: int) -> torch.Tensor:
    """``(C, S, 2, 2)`` float32 draws, each ``(n, o)`` a different case: AR(1) chains with
    shifted means; one chain twice as wide as the others (same centre: only the folded R̂
    sees it); a heavy-tailed (cubed) output with a trend; independent draws."""
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(chains, steps, 4, generator=g, dtype=torch.float64)
    z = torch.zeros(chains, steps, 4, dtype=torch.float64)
    for t in range(steps):
        z[:, t] = (0.7 * z[:, t - 1] if t else 0.0) + noise[:, t]
    offsets = torch.arange(chains, dtype=torch.float64)
    z[..., 0] += 0.4 * offsets[:, None]
    z[..., 1] = noise[..., 1] * (1.0 + (offsets[:, None] == 0))
    z[..., 2] = (z[..., 2] + torch.linspace(0.0, 1.0, steps, dtype=torch.float64)) ** 3
    z[..., 3] = noise[..., 3] + 5.0
    return z.reshape(chains, steps, 2, 2).float()


@pytest.mark.parametrize("chains,steps", [(3, 41), (2, 40)])
def test_plain_rhat_and_ess_match_the_formula(chains, steps):
    """Plain split R̂ equals the numpy formula (to 1e-10: the same float64 arithmetic up to
    summation order) and the ESS equals Pyro's estimator on the (C, S) draws of each (n, o); an
    odd S (41) drops the middle draw from the split. Both are computed in float64 from float32
    predictions."""
    z = _draws(chains, steps)
    d = prediction_diagnostics(z)
    assert d.rhat.shape == d.ess.shape == (2, 2)
    assert d.rhat.dtype == d.ess.dtype == torch.float64
    x = z.double().numpy()
    for n in range(2):
        for o in range(2):
            assert abs(float(d.rhat[n, o]) - _split_rhat(x[:, :, n, o])) < 1e-10
            ess = effective_sample_size(torch.from_numpy(x[:, :, n, o]), 0, 1)
            assert abs(float(d.ess[n, o]) - float(ess)) < 1e-9 * float(ess)
    assert float(d.rhat[0, 0]) > 1.05  # the shifted means show


@pytest.mark.parametrize("chains,steps", [(3, 41), (2, 40)])
def test_rank_normalized_rhat_and_bulk_ess_match_the_formula(chains, steps):
    """Rank-normalised R̂ is the larger of the split R̂ of the scores and of the scores of
    ``|value - median|`` (median over all C·S draws), and the bulk-ESS is Pyro's ESS of the
    scores over the 2C half-chains (each chain's first and last ``S // 2``), all from the
    references above; 1e-10 and 1e-9 relative as in the plain test. The wide chain of output
    (0, 1) is seen by the folded scores only (its plain-score R̂ is the smaller)."""
    z = _draws(chains, steps)
    d = prediction_diagnostics(z, rank_normalized=True)
    assert d.rhat.dtype == d.ess.dtype == torch.float64
    x = z.double().numpy()
    half = steps // 2
    for n in range(2):
        for o in range(2):
            draws = x[:, :, n, o]
            scores = _scores(draws)
            folded = _scores(np.abs(draws - np.median(draws)))
            plain, wide = _split_rhat(scores), _split_rhat(folded)
            assert abs(float(d.rhat[n, o]) - max(plain, wide)) < 1e-10
            halves = np.concatenate([scores[:, :half], scores[:, steps - half :]])
            ess = float(effective_sample_size(torch.from_numpy(halves), 0, 1))
            assert abs(float(d.ess[n, o]) - ess) < 1e-9 * ess
    draws = x[:, :, 0, 1]
    scores, folded = _scores(draws), _scores(np.abs(draws - np.median(draws)))
    assert _split_rhat(folded) > _split_rhat(scores)


def test_rank_normalized_invariances():
    """The bulk-ESS is that of ``exp(z)`` and of ``z`` (the same ranks); R̂ and ESS are those of
    ``3 z + 1`` (the folded draws scale too, keeping their ranks): to 1e-12, the same scores up
    to rounding. The plain R̂ changes under ``exp`` (a check that the data make the difference)."""
    z = _draws(3, 41).double()
    a = prediction_diagnostics(z, rank_normalized=True)
    b = prediction_diagnostics(z.exp(), rank_normalized=True)
    c = prediction_diagnostics(3.0 * z + 1.0, rank_normalized=True)
    assert torch.allclose(a.ess, b.ess, rtol=1e-12)
    assert torch.allclose(a.rhat, c.rhat, rtol=0, atol=1e-12)
    assert torch.allclose(a.ess, c.ess, rtol=1e-12)
    assert not torch.allclose(prediction_diagnostics(z).rhat, prediction_diagnostics(z.exp()).rhat)


def test_tied_predictions_share_their_average_rank():
    """A binary prediction (0 or 1, as a saturated class probability gives), i.i.d. in all four
    chains: ranks broken by order would make the chains that hold the later 1s look shifted (R̂
    1.09, bulk-ESS 44 of 400 draws, on these draws); average ranks give the plain split R̂ of the
    0/1 draws, as for any increasing transform (0.996 here, to 1e-12). Constant predictions
    give NaN, as the plain diagnostics do, not a large R̂."""
    g = torch.Generator().manual_seed(0)
    z = (torch.rand(4, 100, 1, 1, generator=g) < 0.3).double()
    d = prediction_diagnostics(z, rank_normalized=True)
    assert abs(float(d.rhat[0, 0]) - _split_rhat(z[:, :, 0, 0].numpy())) < 1e-12
    assert float(d.rhat[0, 0]) < 1.0 and float(d.ess[0, 0]) > 300
    flat = prediction_diagnostics(torch.ones(4, 100, 1, 1), rank_normalized=True)
    assert bool(flat.rhat.isnan().all()) and bool(
        prediction_diagnostics(torch.ones(4, 100, 1, 1)).rhat.isnan().all()
    )


def test_rank_normalized_rhat_is_arviz_for_an_even_split():
    """With an even ``S`` both split the same draws, so R̂ is ArviZ's ``rhat(method="rank")``
    (the reference implementation) to 1e-12: the same scores (average ranks of ties, the median
    of an even count the mean of its two middle draws) and formula."""
    az = pytest.importorskip("arviz")
    for chains, steps in [(2, 40), (4, 50)]:
        z = _draws(chains, steps).double()
        d = prediction_diagnostics(z, rank_normalized=True)
        for n in range(2):
            for o in range(2):
                reference = float(az.rhat(z[:, :, n, o].numpy(), method="rank"))
                assert abs(float(d.rhat[n, o]) - reference) < 1e-12, (chains, n, o)


def test_the_smallest_accepted_shape_and_the_refused_ones():
    """Two chains of four draws is the least accepted (finite values); one chain, three draws,
    a 3-D or a 5-D array are refused with the shape in the message; a non-bool flag (even 1) is
    refused."""
    z = torch.arange(8.0).reshape(2, 4, 1, 1) ** 1.5
    d = prediction_diagnostics(z)
    assert d.rhat.shape == (1, 1) and bool(torch.isfinite(d.rhat).all())
    assert abs(float(d.rhat[0, 0]) - _split_rhat(z[:, :, 0, 0].double().numpy())) < 1e-10
    assert bool(torch.isfinite(prediction_diagnostics(z, rank_normalized=True).rhat).all())
    message = (
        r"^predictions must have shape \(C, S, N, O\) with C >= 2 chains of S >= 4 samples, got "
    )
    for shape in [(1, 10, 2, 1), (2, 3, 2, 1), (2, 10, 2), (2, 10, 2, 1, 1), (3, 3, 1, 1)]:
        shown = str(shape).replace(" ", r"\ ").replace("(", r"\(").replace(")", r"\)")
        with pytest.raises(ValueError, match=message + shown + "$"):
            prediction_diagnostics(torch.randn(shape))
    with pytest.raises(TypeError, match="^rank_normalized must be a bool, got int$"):
        prediction_diagnostics(torch.randn(2, 10, 2, 1), rank_normalized=1)
    with pytest.raises(TypeError, match="^predictions must be a torch.Tensor, got list"):
        prediction_diagnostics(torch.randn(2, 10, 2, 1).tolist())


def test_worst_and_least_of_chain_diagnostics():
    """``worst_rhat`` is the largest R̂ and ``least_ess`` the smallest ESS, as floats."""
    d = ChainDiagnostics(
        torch.tensor([[1.0, 1.3], [1.1, 1.0]]), torch.tensor([[9.0, 4.0], [7.0, 8.0]])
    )
    assert d.worst_rhat == pytest.approx(1.3) and d.least_ess == 4.0


def _fit(max_samples: int, seed: int) -> bp.SGMCMC:
    X = torch.randn(16, 2, generator=torch.Generator().manual_seed(0))
    m = bp.make("sgld", bp.nn.mlp(2, [], 1), bp.Gaussian(scale=0.5), max_samples=max_samples)
    m.fit(X, X[:, 0] - X[:, 1], epochs=30, batch_size=16, progress=False, seed=seed)
    return m


def test_chain_diagnostics_are_those_of_the_hand_worked_predictions():
    """Three SGLD chains of a linear net keeping 6, 9 and 7 samples: the predictions at x are
    ``x W_kᵀ + b_k`` for each kept sample ``k`` (worked here from ``samples()``); each chain is
    cut to its last 6, in chain order, and the diagnostics are ``prediction_diagnostics`` of those
    (equal to 1e-12: the same float64 values up to the order of the matrix product)."""
    torch.manual_seed(0)
    fits = [_fit(6, 0), _fit(9, 1), _fit(7, 2)]
    x = torch.tensor([[0.5, -1.0], [2.0, 0.3], [-1.2, 0.7]])
    per_chain = []
    for m in fits:
        s = m.samples()
        w, b = s["net.0.weight"], s["net.0.bias"]
        per_chain.append(torch.einsum("nd,kod->kno", x.double(), w.double()) + b.double()[:, None])
    assert [len(p) for p in per_chain] == [6, 9, 7]
    expected = prediction_diagnostics(torch.stack([p[-6:] for p in per_chain]))
    d = chain_diagnostics(fits, x)
    assert d.rhat.shape == (3, 1)
    assert torch.allclose(d.rhat, expected.rhat, rtol=0, atol=1e-6)
    assert torch.allclose(d.ess, expected.ess, rtol=1e-5)
    wrong_cut = prediction_diagnostics(torch.stack([p[:6] for p in per_chain]))
    assert not torch.allclose(d.rhat, wrong_cut.rhat, rtol=0, atol=1e-3)


class _Chain:
    def __init__(self, samples=None, bnn=None):
        if samples is not None:
            self.samples = samples
        if bnn is not None:
            self.bnn = bnn


def test_chain_diagnostics_refuse_too_few_or_unfitted_chains():
    """One chain is refused (two are needed); so is any chain without a callable ``samples`` or
    without a ``bnn``, named by its index and type."""
    fit = _fit(5, 0)
    with pytest.raises(ValueError, match="chains must hold at least 2 fitted chains, got 1"):
        chain_diagnostics([fit], torch.zeros(2, 2))
    for bad in (
        object(),
        _Chain(samples=lambda: {}),
        _Chain(bnn=fit.bnn),
        _Chain(torch.ones(1), fit.bnn),
    ):
        with pytest.raises(TypeError, match=r"chains\[1\] must be a fitted SGMCMC, got "):
            chain_diagnostics([fit, bad], torch.zeros(2, 2))
    with pytest.raises(TypeError, match=r"chains\[0\] must be a fitted SGMCMC, got object"):
        chain_diagnostics([object(), fit], torch.zeros(2, 2))
