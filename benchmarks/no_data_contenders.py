"""The contenders of ``benchmarks/no_data.py``: each builds a predictor of ``f`` from a
problem's standardised rows.

A contender is ``build(data, scale, seed) -> predictor``: it trains on ``data`` (a
:class:`benchmarks.no_data_judge.Standardized`) for ``scale`` times its epochs (``0.01`` in the
tests' quick runs) from ``seed``, and returns a function from standardised inputs ``(G, 1)`` to
``S`` draws of ``f`` ``(S, G)`` in standardised units. The methods train the judge's net
(1-50-1 tanh) with the known noise, so the bands differ only in their epistemic part; one
row, the Gaussian process, has no network.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pyro.infer.autoguide import AutoIAFNormal, AutoMultivariateNormal

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import bnn_pyro as bp  # noqa: E402
from benchmarks import no_data_judge as judge  # noqa: E402

S = 200  #: predictive samples per method (an ensemble has its members)
Predictor = Callable[[torch.Tensor], torch.Tensor]  # standardised x (G, 1) -> f draws (S, G)


def _locs(out: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return out[0][..., 0].detach()


def _vi(
    local: bool,
    fan_in_prior: bool,
    steps: int,
    guide: Any = "meanfield",
    elbo: str = "meanfield",
    particles: int = 1,
    activation: str | type[torch.nn.Module] = "tanh",
) -> Callable[[judge.Standardized, float, int], Predictor]:
    """VI trained full batch with the exact KL for ``steps`` steps at 1e-2: with the judge's
    prior as notebook 01 trains it (3,000 steps), or as the demo trains it, with the default
    prior (i.i.d. ``N(0, 1)``, 5,000 steps). (``fit``'s own defaults, 100 epochs of 128 rows,
    are 100 steps here: undertrained, and ``fit`` says so with a ``PosteriorCollapseWarning``.)
    ``guide``, ``elbo`` and ``particles``: another guide or objective (a full covariance or a
    normalising flow with ``"trace"``; the black-box alpha energy with ``"alpha"``). ``activation``:
    the judge's 1-50-1 net with another activation (``benchmarks/no_data_activations.py``)."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        torch.manual_seed(seed)
        vi = bp.VariationalBNN(
            bp.nn.mlp(1, [judge.HIDDEN], 1, activation=activation),  # tanh: judge.make_net()
            bp.Gaussian(scale=data.noise),
            prior=judge.PRIOR if fan_in_prior else None,
            local_reparameterization=local,
            guide=guide,
        )
        vi.fit(data.x, data.y, epochs=max(1, int(steps * scale)), batch_size=None, lr=1e-2,
               elbo=elbo, num_particles=particles, progress=False, seed=seed)  # fmt: skip
        return lambda x: _locs(vi.predictive_gaussian(x, num_samples=S, seed=seed))

    return build


def _classic(
    name: str, structure: str = "full", layerwise: bool = False
) -> Callable[[judge.Standardized, float, int], Predictor]:
    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        """Notebook 01's settings: Adam at 1e-2, 2,000 full-batch epochs (SWAG: 1,000 epochs of
        minibatches of 10), the known noise; Laplace: the GLM predictive, ``structure``, the
        prior precision by the evidence (one per parameter tensor with ``layerwise``)."""
        torch.manual_seed(seed)
        common = dict(likelihood="regression", noise_scale=data.noise)
        if name == "dropout":
            net = bp.nn.mlp(1, [judge.HIDDEN], 1, activation="tanh", dropout=0.05)
            method = bp.MCDropout(net, num_samples=S, dropout_rate=0.05, **common)
        elif name == "ensemble":
            method = bp.DeepEnsemble(judge.make_net, num_models=5, **common)
        elif name == "swag":
            method = bp.SWAG(judge.make_net(), num_samples=S, **common)
        else:
            method = bp.LaplaceApproximation(
                judge.make_net(), num_samples=S, hessian_structure=structure, **common
            )
        epochs, batch = (1000, 10) if name == "swag" else (2000, len(data.x))
        method.fit(data.x, data.y, epochs=max(1, int(epochs * scale)), batch_size=batch,
                   lr=1e-2, progress=False, seed=seed)  # fmt: skip
        if name == "laplace":
            method.optimize_prior_precision(layerwise=layerwise)
        g = torch.Generator().manual_seed(seed)
        if name == "ensemble":
            return lambda x: _locs(method.predictive_gaussian(x))
        if name == "laplace":  # draws of f from the GLM (its predictive_gaussian: one Gaussian)
            return lambda x: _locs(method.predict(x, return_samples=True, generator=g)[2:])
        return lambda x: _locs(method.predictive_gaussian(x, generator=g))

    return build


def _sghmc(
    fan_in_prior: bool, epochs: int
) -> Callable[[judge.Standardized, float, int], Predictor]:
    """SGHMC at its defaults (full batch, the step measured on the posterior) for ``epochs``
    steps: with the judge's prior as notebook 01 runs it (6,000), or with the default prior
    (i.i.d. ``N(0, 1)``, the prior of the demo's VI) for longer (24,000: the steps its earlier
    runs on minibatches of 32 took, 6,000 epochs of 4, where at a quarter of them its chain had
    not yet reached the band it settles in beyond the data)."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        torch.manual_seed(seed)
        prior = {"prior": judge.PRIOR} if fan_in_prior else {}
        chain = bp.make("sghmc", judge.make_net(), bp.Gaussian(scale=data.noise), **prior)
        chain.fit(data.x, data.y, epochs=max(1, int(epochs * scale)), progress=False, seed=seed)
        return lambda x: _locs(chain.predictive_gaussian(x, num_samples=S, seed=seed))

    return build


def _se_kernel(
    a: torch.Tensor,
    b: torch.Tensor,
    amplitude: float | torch.Tensor,
    lengthscale: float | torch.Tensor,
) -> torch.Tensor:
    """The squared-exponential kernel ``amplitude² exp(-|a - b|² / (2 lengthscale²))`` between
    the rows of ``a`` ``(n, 1)`` and ``b`` ``(m, 1)``: ``(n, m)``."""
    return amplitude**2 * torch.exp(-0.5 * (torch.cdist(a, b) ** 2 / lengthscale**2))


def gp_posterior(
    x: torch.Tensor, y: torch.Tensor, noise: float, amplitude: float, lengthscale: float,
    xs: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The posterior of ``f`` at ``xs`` ``(G, 1)`` under a zero-mean Gaussian process with the
    squared-exponential kernel ``amplitude² exp(-|a - b|² / (2 lengthscale²))``, given rows
    ``x`` ``(n, 1)``, ``y`` ``(n,)`` with Gaussian noise of sd ``noise``: its mean and sd
    ``(G,)``, in float64.

    Example:
        >>> x = torch.tensor([[0.0], [1.0]]); y = torch.tensor([1.0, -1.0])
        >>> mean, sd = gp_posterior(x, y, 1e-3, 1.0, 1.0, torch.tensor([[0.0], [50.0]]))
        >>> [round(v, 3) for v in mean.tolist()], [round(v, 3) for v in sd.tolist()]
        ([1.0, 0.0], [0.001, 1.0])
        >>> gp_posterior(x, y, 0.0, 1.0, 1.0, x)
        Traceback (most recent call last):
        ...
        ValueError: noise, amplitude and lengthscale must be > 0, got 0.0, 1.0, 1.0
    """
    if min(noise, amplitude, lengthscale) <= 0:
        raise ValueError(
            f"noise, amplitude and lengthscale must be > 0, got {noise}, {amplitude}, {lengthscale}"
        )
    if x.dim() != 2 or x.shape[1] != 1 or xs.dim() != 2 or xs.shape[1] != 1:
        raise ValueError(
            f"x and xs must be (n, 1) and (G, 1), got {tuple(x.shape)}, {tuple(xs.shape)}"
        )
    if y.shape != (len(x),):
        raise ValueError(f"y must be (n,) = ({len(x)},), got {tuple(y.shape)}")
    x, y, xs = x.double(), y.double(), xs.double()
    gram = _se_kernel(x, x, amplitude, lengthscale)
    chol = torch.linalg.cholesky(gram + noise**2 * torch.eye(len(x), dtype=x.dtype))
    cross = _se_kernel(xs, x, amplitude, lengthscale)  # (G, n)
    mean = cross @ torch.cholesky_solve(y[:, None], chol)[:, 0]
    explained = (cross * torch.cholesky_solve(cross.T, chol).T).sum(1)
    return mean, (amplitude**2 - explained).clamp_min(0.0).sqrt()


def _gp(steps: int = 500) -> Callable[[judge.Standardized, float, int], Predictor]:
    """No network: an exact Gaussian process on the input (:func:`gp_posterior`) whose
    amplitude and lengthscale maximise the marginal likelihood (Adam, ``steps`` steps at
    0.05), with the known noise. A stationary prior's variance comes back wherever the data
    are far, which is what a distance-aware head (SNGP's random-feature GP on a
    distance-preserving net) approximates: this row is the limit such a head can reach on a
    1-D input."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        x, y = data.x.double(), data.y[:, 0].double()
        logs = torch.zeros(2, dtype=torch.float64, requires_grad=True)  # log amplitude, scale
        opt = torch.optim.Adam([logs], lr=0.05)
        for _ in range(max(1, int(steps * scale))):
            opt.zero_grad()
            cov = _se_kernel(x, x, *logs.exp()) + data.noise**2 * torch.eye(len(x))
            evidence = torch.distributions.MultivariateNormal(torch.zeros_like(y), cov)
            (-evidence.log_prob(y)).backward()
            opt.step()
        amplitude, lengthscale = logs.detach().exp().tolist()

        def predict(xs: torch.Tensor) -> torch.Tensor:
            mean, sd = gp_posterior(x, y, data.noise, amplitude, lengthscale, xs)
            g = torch.Generator().manual_seed(seed)
            eps = torch.randn(S, len(xs), generator=g, dtype=torch.float64)
            return (mean + sd * eps).float()

        return predict

    return build


def _vbll() -> Callable[[judge.Standardized, float, int], Predictor]:
    """VBLL on the judge's net (1-50-1 tanh) with the known noise: the body and the last
    layer's Gaussian trained together, full batch, 2,000 epochs at 1e-2 (notebook 01's
    classic settings); its draws are the last layer's."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        torch.manual_seed(seed)
        method = bp.VBLL(judge.make_net(), bp.Gaussian(scale=data.noise))
        method.fit(data.x, data.y, epochs=max(1, int(2000 * scale)), batch_size=len(data.x),
                   lr=1e-2, progress=False, seed=seed)  # fmt: skip
        return lambda x: method.predict(x, return_samples=True, num_samples=S, seed=seed)[2][..., 0]

    return build


#: SNGP's kernel settings tried on each problem: lengthscale x prior scale (amplitude)
SNGP_GRID = [(ls, s) for ls in (0.1, 0.2, 0.5, 1.0) for s in (1.0, 2.0)]


def sngp_evidence(method: bp.SNGP, x: torch.Tensor, y: torch.Tensor, noise: float) -> float:
    """The log marginal likelihood of ``y (N,)`` under SNGP's last layer on the trained net's
    frozen features: ``log N(y; b, s² φφᵀ + σ² I)``, the evidence of its random-feature GP.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> m = bp.SNGP(bp.nn.mlp(1, [8], 1), bp.Gaussian(scale=0.5), num_features=16)
        >>> x = torch.randn(5, 1)
        >>> phi = m.features(x).double().detach()
        >>> cov = phi @ phi.T + 0.25 * torch.eye(5, dtype=torch.float64)
        >>> want = torch.distributions.MultivariateNormal(torch.zeros(5, dtype=cov.dtype), cov)
        >>> y = torch.zeros(5) + float(m.head.bias.detach())
        >>> abs(sngp_evidence(m, x, y, 0.5) - float(want.log_prob(torch.zeros(5)))) < 1e-9
        True
    """
    method.model.eval()
    with torch.no_grad():
        phi = method.features(x).double()
    centred = y.double() - float(method.head.bias.detach())
    eye = torch.eye(len(x), dtype=torch.float64)
    cov = method.prior_scale**2 * phi @ phi.T + noise**2 * eye
    return float(
        torch.distributions.MultivariateNormal(torch.zeros_like(centred), cov).log_prob(centred)
    )


def _sngp(activation: str = "relu") -> Callable[[judge.Standardized, float, int], Predictor]:
    """SNGP on a 1-50-1 net of ``activation`` (the judge's width) under a spectral bound of
    0.95, 1,024 random features, the known noise, trained full batch for 2,000 epochs at 1e-2;
    its lengthscale and prior scale those of :data:`SNGP_GRID` whose fit has the largest
    evidence on the training rows (:func:`sngp_evidence`), as the GP row picks its own by the
    marginal likelihood. Its regression predictive is the exact GP on the net's features."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        best, best_evidence = None, -float("inf")
        for lengthscale, prior_scale in SNGP_GRID:
            torch.manual_seed(seed)
            net = bp.nn.mlp(1, [judge.HIDDEN], 1, activation=activation)
            method = bp.SNGP(net, bp.Gaussian(scale=data.noise), lengthscale=lengthscale,
                             prior_scale=prior_scale)  # fmt: skip
            method.fit(data.x, data.y, epochs=max(1, int(2000 * scale)), batch_size=len(data.x),
                       lr=1e-2, progress=False, seed=seed)  # fmt: skip
            evidence = sngp_evidence(method, data.x, data.y[:, 0], data.noise)
            if evidence > best_evidence:
                best, best_evidence = method, evidence
        return lambda x: best.predict(x, return_samples=True, num_samples=S, seed=seed)[2][..., 0]

    return build


def _dkl(activation: str = "relu") -> Callable[[judge.Standardized, float, int], Predictor]:
    """DKL on a 1-50-1 net of ``activation`` (the judge's width): an exact GP with an RBF kernel
    on the net's features, the known noise, the net and the kernel's amplitude and lengthscale
    trained together on the marginal likelihood for 2,000 full-batch steps at 1e-2. Its
    predictive is the exact GP on the trained net's features (its draws, each row's marginal)."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        torch.manual_seed(seed)
        net = bp.nn.mlp(1, [judge.HIDDEN], 1, activation=activation)
        method = bp.DKL(net, bp.Gaussian(scale=data.noise))
        method.fit(data.x, data.y, epochs=max(1, int(2000 * scale)), lr=1e-2, progress=False,
                   seed=seed)  # fmt: skip
        return lambda x: method.predict(x, return_samples=True, num_samples=S, seed=seed)[2][..., 0]

    return build


def _pooled(
    build_one: Callable[[judge.Standardized, float, int], Predictor], runs: int
) -> Callable[[judge.Standardized, float, int], Predictor]:
    """``runs`` fits of ``build_one`` from different seeds, their draws pooled (``S / runs``
    each): a mixture of the fits' posteriors, as a deep ensemble pools its members."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        fits = [build_one(data, scale, seed * runs + i) for i in range(runs)]
        return lambda x: torch.cat([fit(x)[: S // runs] for fit in fits])

    return build


#: A non-Gaussian guide: Pyro's inverse autoregressive flow (two flows of 200 hidden units)
IAF = functools.partial(AutoIAFNormal, hidden_dim=[200], num_transforms=2)
#: SGHMC on the demo VI's own prior: the posterior that VI approximates, sampled by four
#: chains pooled (one chain's coverage beyond the demo's data varies from seed to seed)
DEFAULT_PRIOR_SGHMC = "sghmc (the demo's prior, 24,000 steps, 4 chains)"
#: The contenders: name -> (standardised data, epoch scale, seed) -> predictor of f.
CONTENDERS: dict[str, Callable[[judge.Standardized, float, int], Predictor]] = {
    "vi (the demo's)": _vi(local=False, fan_in_prior=False, steps=5000),
    "vi (the demo's), full covariance": _vi(
        local=False, fan_in_prior=False, steps=5000, guide=AutoMultivariateNormal, elbo="trace"
    ),
    "bb_alpha (the demo's prior)": _vi(
        local=False, fan_in_prior=False, steps=5000, elbo="alpha", particles=10
    ),
    "vi (the demo's), IAF flow": _vi(
        local=False, fan_in_prior=False, steps=5000, guide=IAF, elbo="trace"
    ),
    "vi (the demo's), 5 fits pooled": _pooled(_vi(local=False, fan_in_prior=False, steps=5000), 5),
    "vi": _vi(local=False, fan_in_prior=True, steps=3000),
    "lrt": _vi(local=True, fan_in_prior=True, steps=3000),
    "dropout": _classic("dropout"),
    "ensemble": _classic("ensemble"),
    "swag": _classic("swag"),
    "laplace": _classic("laplace"),
    "laplace, KFAC": _classic("laplace", structure="kron"),
    "laplace, KFAC, layerwise λ": _classic("laplace", structure="kron", layerwise=True),
    "sghmc": _sghmc(fan_in_prior=True, epochs=6000),
    "GP on the input (no network; a distance-aware head's limit)": _gp(),
    DEFAULT_PRIOR_SGHMC: _pooled(_sghmc(fan_in_prior=False, epochs=24000), 4),
    "vbll": _vbll(),
    "sngp": _sngp(),
    "dkl": _dkl(),
}
