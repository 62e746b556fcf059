"""SG-MCMC at its defaults against the exact posterior of Bayesian linear regression, on a family
of problems, only ``epochs`` chosen.

For ``y = X w + b + N(0, s²)`` with known ``s``, the prior ``N(0, I)`` on ``(w, b)`` (the
library's default prior on ``mlp(d, [], 1)``: one ``nn.Linear(d, 1)``) and ``Φ = [X, 1]``, the
posterior is ``N(μ, Σ)`` with ``Σ⁻¹ = I + ΦᵀΦ / s²`` and ``μ = Σ Φᵀ y / s²``; at a test input
``φ`` the predictive mean is ``φᵀμ`` and its variance (the epistemic part that ``predict``
returns) ``φᵀ Σ φ``.

The family: well- and ill-conditioned inputs (correlated columns; the inputs' covariance has
condition number 1 to 100), noise 0.1, 0.3 and 1.0, ``N`` = 100 to 1,000 rows and ``d`` = 2 to
5 inputs, two seeds each. Each sampler (``sghmc``, ``sgld``, ``csghmc``) is fitted with
``bp.make(name, mlp(d, [], 1), Gaussian(scale=s)).fit(X, y, epochs=E)`` and nothing else,
under a seed of its own per problem (:attr:`Problem.fit_seed`).

The judge (:func:`judge`). Four errors of the kept samples: the means (largest error over the
coordinates, in posterior sd), the covariance (relative Frobenius error), and, read through
``predict`` with every kept sample at 20 test inputs, the predictive mean (largest error, in
predictive sd) and variance (largest relative error). The same four errors of ``n``
*independent exact* draws, over 2,000 repetitions, give their distribution; ``n`` is the
chain's effective sample size (ESS: the smallest over the posterior's principal directions of
the ESS of the coordinate and of its square, Geyer's initial monotone sequence; at most the
number of kept samples). A run passes when each of its errors lies within its band: each
error's quantile at the level where the exact draws hold all four bands in 95% of their
repetitions (so an exact sampler passes 95% of the rows; the ``exact`` rows below are such a
control, 1,000 exact draws judged the same way). A run whose ESS is below 100 is reported as
such, not passed: its bands are too wide to tell a right sampler from a wrong one.

Run: ``python benchmarks/sgmcmc_defaults.py [--quick] [--epochs E] [--batch-size B]
[--samplers sghmc,sgld] [--output PATH]``; it prints one table per sampler, and a full run (the
three samplers at the default epochs) writes ``benchmarks/results/sgmcmc_defaults.md``. No time
is asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyro
import torch

import bnn_pyro as bp

SAMPLERS = ("sghmc", "sgld", "csghmc")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "sgmcmc_defaults.md")
TEST_POINTS = 20
REPEATS = 2000
LEVEL = 0.95
#: Below this ESS the bands are too wide to say much: such a run is reported, not passed.
MIN_ESS = 100
METRICS = ("mean", "cov", "pred_mean", "pred_var")


@dataclass(frozen=True)
class Problem:
    """A Bayesian linear regression: ``n`` rows of ``d`` inputs whose covariance has condition
    number ``cond`` (correlated columns), noise sd ``noise``, drawn under ``seed``."""

    n: int
    d: int
    cond: float
    noise: float
    seed: int

    @property
    def fit_seed(self) -> int:
        """The seed of the chain fitted to this problem: one per problem, so that the rows are
        independent trials (with SGLD's dense preconditioner, chains run from one seed on
        problems with as many inputs draw the same noise: they are one chain in each posterior's
        whitened coordinates)."""
        return 10_000 + 1000 * self.seed + 7 * self.d + self.n

    @property
    def name(self) -> str:
        return f"N={self.n} d={self.d} cond={self.cond:g} s={self.noise:g} seed={self.seed}"


FAMILY = [
    Problem(n, d, cond, noise, seed)
    for n, d, cond, noise in [
        (100, 2, 1, 1.0),
        (200, 3, 10, 0.3),
        (400, 3, 100, 0.3),
        (300, 4, 30, 0.1),
        (1000, 5, 100, 0.1),
        (1000, 2, 10, 1.0),
        (500, 5, 3, 0.3),
        (150, 4, 100, 1.0),
    ]
    for seed in (0, 1)
]
QUICK = [Problem(100, 2, 1, 1.0, 0), Problem(300, 3, 20, 0.1, 0)]


def data(problem: Problem) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``X (n, d)``, ``y (n,)`` and 20 test inputs ``(20, d)`` (float32), drawn under the seed.

    Example:
        >>> X, y, X_test = data(Problem(50, 3, 10, 0.3, 0))
        >>> X.shape, y.shape, X_test.shape
        (torch.Size([50, 3]), torch.Size([50]), torch.Size([20, 3]))
    """
    g = torch.Generator().manual_seed(1000 * problem.seed + 7 * problem.d + problem.n)
    d = problem.d
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    spectrum = torch.logspace(0, -math.log10(problem.cond), d, dtype=torch.float64)
    root = q @ torch.diag(spectrum.sqrt())  # the inputs' covariance is q diag(spectrum) qᵀ
    X = torch.randn(problem.n, d, generator=g, dtype=torch.float64) @ root.T
    w = torch.randn(d, generator=g, dtype=torch.float64)
    y = X @ w + 0.5 + problem.noise * torch.randn(problem.n, generator=g, dtype=torch.float64)
    X_test = 1.5 * torch.randn(TEST_POINTS, d, generator=g, dtype=torch.float64) @ root.T
    return X.float(), y.float(), X_test.float()


def exact_posterior(
    X: torch.Tensor, y: torch.Tensor, noise: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The posterior mean ``(d + 1,)`` and covariance ``(d + 1, d + 1)`` of ``(w, b)``, in
    float64, the weights first and the bias last (as :func:`flat_samples` orders them)."""
    phi = design(X)
    precision = torch.eye(phi.shape[1], dtype=torch.float64) + phi.T @ phi / noise**2
    covariance = torch.linalg.inv(precision)
    covariance = (covariance + covariance.T) / 2
    return covariance @ phi.T @ y.double() / noise**2, covariance


def design(X: torch.Tensor) -> torch.Tensor:
    """``Φ = [X, 1]`` in float64."""
    return torch.cat([X.double(), torch.ones(len(X), 1, dtype=torch.float64)], 1)


def flat_samples(method: bp.BaseBayesianMethod) -> torch.Tensor:
    """The kept samples of ``mlp(d, [], 1)`` as ``(K, d + 1)`` float64, in chain order."""
    s = method.samples()
    return torch.cat([s["net.0.weight"].flatten(1), s["net.0.bias"]], 1).double()


def effective_sample_size(draws: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor) -> float:
    """The ESS of a chain's draws ``(S, P)`` (in chain order) for the posterior ``N(mean,
    cov)``: the smallest, over the principal directions ``u_j`` of ``cov``, of the ESS of
    ``z_j = u_jᵀ(θ - mean) / sqrt(λ_j)`` and of ``z_j²``, each by Geyer's initial monotone
    sequence; at most ``S``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> iid = torch.randn(2000, 2, generator=g, dtype=torch.float64)
        >>> ess = effective_sample_size(iid, torch.zeros(2, dtype=torch.float64),
        ...                             torch.eye(2, dtype=torch.float64))
        >>> 1500 < ess <= 2000
        True
    """
    values, vectors = torch.linalg.eigh(cov)
    z = (draws - mean) @ vectors / values.sqrt()
    series = torch.cat([z, z.square()], 1)
    return min(min(_ess(series[:, j]) for j in range(series.shape[1])), float(len(draws)))


def _ess(x: torch.Tensor) -> float:
    """Geyer's initial monotone sequence estimate of one series' ESS."""
    n = len(x)
    x = x - x.mean()
    f = torch.fft.rfft(x, n=2 * n)
    acf = torch.fft.irfft(f * f.conj(), n=2 * n)[:n]
    if float(acf[0]) <= 0:
        return float(n)
    acf = acf / acf[0]
    tau, previous = -1.0, math.inf
    for k in range(0, n - 1, 2):
        pair = float(acf[k] + acf[k + 1])
        if pair <= 0:
            break
        pair = min(pair, previous)  # the initial monotone sequence
        tau += 2 * pair
        previous = pair
    return n / max(tau, 1e-12)


def errors(
    samples: torch.Tensor,
    pred_mean: torch.Tensor,
    pred_var: torch.Tensor,
    mean: torch.Tensor,
    cov: torch.Tensor,
    phi_test: torch.Tensor,
) -> torch.Tensor:
    """The four errors ``(..., 4)`` of samples ``(..., S, P)`` and of the predictive mean and
    variance ``(..., T)`` they give at ``phi_test (T, P)``: the means (largest over the
    coordinates, in posterior sd), the covariance (relative Frobenius, population covariance as
    ``predict``'s), the predictive mean (largest over the test inputs, in predictive sd) and its
    variance (largest relative error)."""
    sd = cov.diagonal().sqrt()
    centred = samples - samples.mean(-2, keepdim=True)
    sample_cov = centred.transpose(-1, -2) @ centred / samples.shape[-2]
    exact_mean = phi_test @ mean
    exact_var = ((phi_test @ cov) * phi_test).sum(-1)
    return torch.stack(
        [
            ((samples.mean(-2) - mean).abs() / sd).amax(-1),
            (sample_cov - cov).flatten(-2).norm(dim=-1) / cov.norm(),
            ((pred_mean - exact_mean).abs() / exact_var.sqrt()).amax(-1),
            ((pred_var / exact_var - 1).abs()).amax(-1),
        ],
        -1,
    )


def exact_errors(
    mean: torch.Tensor, cov: torch.Tensor, phi_test: torch.Tensor, n: int, repeats: int, seed: int
) -> torch.Tensor:
    """The four errors of ``n`` independent exact draws, ``repeats`` times: ``(repeats, 4)``."""
    g = torch.Generator().manual_seed(seed)
    root = torch.linalg.cholesky(cov)
    rows = []
    for start in range(0, repeats, 200):  # blocks, to bound the memory
        r = min(200, repeats - start)
        draws = mean + torch.randn(r, n, len(mean), generator=g, dtype=torch.float64) @ root.T
        f = draws @ phi_test.T  # (r, n, T): each draw's predictive mean
        pred_mean, pred_var = f.mean(1), f.var(1, correction=0)
        rows.append(errors(draws, pred_mean, pred_var, mean, cov, phi_test))
    return torch.cat(rows)


@dataclass
class Verdict:
    """A run's four errors, the bands they are judged against and the ESS the bands are for."""

    errors: torch.Tensor  # (4,)
    bands: torch.Tensor  # (4,)
    ess: float

    @property
    def within(self) -> bool:
        """Every error within its band."""
        return bool((self.errors <= self.bands).all())

    @property
    def passed(self) -> bool:
        """Within the bands, at an ESS of at least :data:`MIN_ESS`."""
        return self.within and self.ess >= MIN_ESS


def judge(
    samples: torch.Tensor,
    pred_mean: torch.Tensor,
    pred_var: torch.Tensor,
    mean: torch.Tensor,
    cov: torch.Tensor,
    phi_test: torch.Tensor,
    *,
    level: float = LEVEL,
    repeats: int = REPEATS,
    seed: int = 0,
    ess: float | None = None,
) -> Verdict:
    """Judge a chain's samples ``(S, P)`` and its predictive ``(T,)`` at ``phi_test (T, P)``
    against ``n = ESS`` exact draws (module docstring): each error within its band, the bands
    being the errors' quantiles at the common level where ``n`` exact draws keep all four
    within them in a ``level`` share of ``repeats`` repetitions.

    Example:
        >>> mean, cov = torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)
        >>> phi = torch.eye(2, dtype=torch.float64)
        >>> g = torch.Generator().manual_seed(1)
        >>> draws = torch.randn(500, 2, generator=g, dtype=torch.float64)
        >>> f = draws @ phi.T
        >>> v = judge(draws, f.mean(0), f.var(0, correction=0), mean, cov, phi, repeats=400)
        >>> v.passed, v.ess > 300
        (True, True)
        >>> judge(1.3 * draws, 1.3 * f.mean(0), 1.69 * f.var(0, correction=0), mean, cov, phi,
        ...       repeats=400).passed  # a variance 69% too large
        False
    """
    ess = effective_sample_size(samples, mean, cov) if ess is None else ess
    n = max(2, min(len(samples), int(ess)))
    reference = exact_errors(mean, cov, phi_test, n, repeats, seed)
    ranks = reference.argsort(0).argsort(0).double() / (repeats - 1)  # each error's quantile
    common = torch.quantile(ranks.amax(1), level)
    bands = torch.quantile(reference, common, dim=0)
    own = errors(samples, pred_mean, pred_var, mean, cov, phi_test)
    return Verdict(own, bands, ess)


@dataclass
class Row:
    problem: Problem
    sampler: str
    cond_precision: float
    step: float | None
    kept: int
    verdict: Verdict | None
    seconds: float
    failure: str = ""


def judge_fit(
    method: bp.BaseBayesianMethod,
    X_test: torch.Tensor,
    mean: torch.Tensor,
    cov: torch.Tensor,
    **options: Any,
) -> tuple[Verdict, torch.Tensor]:
    """:func:`judge` on a fitted sampler: its kept samples ``(K, d + 1)`` and, through
    ``predict`` with every one of them, its predictive at ``X_test (T, d)``, against the exact
    ``mean (d + 1,)`` and ``cov``; ``options`` go to :func:`judge`. Returns the verdict and the
    samples."""
    samples = flat_samples(method)
    pred_mean, pred_var = method.predict(X_test, num_samples=len(samples), seed=0)
    verdict = judge(
        samples,
        pred_mean.squeeze(-1).double(),
        pred_var.squeeze(-1).double(),
        mean,
        cov,
        design(X_test),
        **options,
    )
    return verdict, samples


def run(
    problem: Problem,
    sampler: str,
    epochs: int,
    batch_size: int | None = None,
    *,
    repeats: int = REPEATS,
) -> Row:
    """Fit ``sampler`` at its defaults (``epochs``, and ``batch_size`` if given) on
    ``problem`` and judge it."""
    X, y, X_test = data(problem)
    mean, cov = exact_posterior(X, y, problem.noise)
    cond = float(torch.linalg.cond(torch.linalg.inv(cov)))
    torch.manual_seed(problem.fit_seed)
    method = bp.make(sampler, bp.nn.mlp(problem.d, [], 1), bp.Gaussian(scale=problem.noise))
    options = {} if batch_size is None else {"batch_size": batch_size}
    start = time.perf_counter()
    try:
        method.fit(X, y, epochs=epochs, progress=False, seed=problem.fit_seed, **options)
    except Exception as e:  # a diverged chain is a failed row, not a failed benchmark
        seconds = time.perf_counter() - start
        return Row(problem, sampler, cond, None, 0, None, seconds, f"{type(e).__name__}")
    seconds = time.perf_counter() - start
    verdict, samples = judge_fit(method, X_test, mean, cov, repeats=repeats, seed=problem.seed)
    step = getattr(method, "step_size", None)
    return Row(problem, sampler, cond, step, len(samples), verdict, seconds)


def exact_row(problem: Problem, draws: int = 1000, *, repeats: int = REPEATS) -> Row:
    """The control: ``draws`` independent exact draws judged as a chain's samples are."""
    X, _, X_test = data(problem)
    mean, cov = exact_posterior(X, data(problem)[1], problem.noise)
    g = torch.Generator().manual_seed(10_000 + problem.seed)
    samples = mean + torch.randn(draws, len(mean), generator=g, dtype=torch.float64) @ (
        torch.linalg.cholesky(cov).T
    )
    f = samples @ design(X_test).T
    verdict = judge(samples, f.mean(0), f.var(0, correction=0), mean, cov, design(X_test),
                    repeats=repeats, seed=problem.seed)  # fmt: skip
    cond = float(torch.linalg.cond(torch.linalg.inv(cov)))
    return Row(problem, "exact", cond, None, draws, verdict, 0.0)


def table(rows: list[Row]) -> str:
    """One markdown table: each error and its band (``error / band``)."""
    head = (
        "| problem | cond(Σ⁻¹) | lr | kept | ESS | mean err (sd) | cov err | pred mean err (sd) "
        "| pred var err | pass | s |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        step = "" if r.step is None else f"{r.step:.3g}"
        if r.verdict is None:
            cells = ["", "", "", "", "", f"**{r.failure}**"]
        else:
            v = r.verdict
            cells = [f"{v.ess:.0f}"]
            cells += [
                f"{float(e):.3f} / {float(b):.3f}" for e, b in zip(v.errors, v.bands, strict=True)
            ]
            cells += ["yes" if v.passed else "**no**" if not v.within else f"ESS < {MIN_ESS}"]
        lines.append(
            f"| {r.problem.name} | {r.cond_precision:.0f} | {step} | {r.kept} | "
            + " | ".join(cells)
            + f" | {r.seconds:.1f} |"
        )
    judged = [r.verdict for r in rows if r.verdict is not None]
    passed = sum(v.passed for v in judged)
    low = sum(v.within and not v.passed for v in judged)
    lines.append(f"\n{passed} of {len(rows)} pass, {low} within the bands at ESS < {MIN_ESS}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two problems, few epochs")
    parser.add_argument("--epochs", type=int, default=None, help="default 10000 (quick: 1500)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the sampler's")
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--repeats", type=int, default=None, help="exact-draw repetitions")
    parser.add_argument("--output", default=None, help=f"default for a full run: {RESULTS}")
    args = parser.parse_args(argv)
    problems = QUICK if args.quick else FAMILY
    epochs = args.epochs or (1500 if args.quick else 10_000)
    repeats = args.repeats or (500 if args.quick else REPEATS)
    samplers = [s for s in args.samplers.split(",") if s]
    full = not args.quick and epochs == 10_000 and args.batch_size is None
    output = args.output or (RESULTS if full and tuple(samplers) == SAMPLERS else None)
    torch.set_num_threads(1)
    lines = [
        f"# SG-MCMC at its defaults: epochs={epochs}, batch_size={args.batch_size or 'default'}",
        "",
        f"torch {torch.__version__}, pyro {pyro.__version__}; 1 thread, one run each; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: python "
        f"benchmarks/sgmcmc_defaults.py{''.join(' ' + a for a in argv)}",
        "",
        "Each error / its band (the exact-draw quantile at the run's ESS, at the common level "
        f"where exact draws pass all four in {LEVEL:.0%} of repetitions).",
        "",
    ]
    print("\n".join(lines), flush=True)
    for sampler in samplers:
        rows = [run(p, sampler, epochs, args.batch_size, repeats=repeats) for p in problems]
        lines.append(f"## {sampler}\n\n{table(rows)}\n")
        print(lines[-1], flush=True)
    rows = [exact_row(p, repeats=repeats) for p in problems]
    lines.append(f"## exact (control: 1,000 independent exact draws)\n\n{table(rows)}\n")
    print(lines[-1], flush=True)
    if output is not None:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines))


if __name__ == "__main__":
    main()
