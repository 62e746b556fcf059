"""The judge of uncertainty where there is no data: NUTS on the same model and prior, cached.

For each of the four problems of :data:`bnn_pyro.datasets.FUNCTION_PROBLEMS` this runs Pyro's
``MCMC(NUTS)`` on the very model :class:`bnn_pyro.VariationalBNN` trains (a 1-50-1 tanh net,
Neal's fan-in prior ``LayerwiseNormalPrior("radford")``: ``N(0, 1)`` on the first layer,
``N(0, 1/50)`` on the second; the problem's known noise; inputs and targets standardised by the
training rows' mean and sd), with several chains from independent starts, and keeps the
predicted ``f`` on the problem's grid. Convergence is judged on ``f`` at every grid point, not
on the non-identifiable weights: the rank-normalised split R̂ and the bulk-ESS of Vehtari et al.
(2021) (:func:`bnn_pyro.methods.sgmcmc.prediction_diagnostics`).

The sampler's potential is the model's negative log joint written out in plain torch (Pyro's
trace of the model costs 1.7x as much per leapfrog step); ``tests/benchmarks/test_no_data_judge.py``
checks it equal to Pyro's ``log_prob_sum`` of the model's trace.

What is cached, per problem (``benchmarks/results/no_data/<problem>.pt``): the grid, the
posterior's quantiles of ``f`` at :data:`LEVELS` levels per grid point (a stand-in for its
draws: the 1-D Wasserstein distance and any interval are read from them), its mean and sd, R̂
and ESS per point, the settings and CPU seconds, and a fingerprint of everything the result
depends on (the problem's data, grid and truth, the model, the settings). A test fails when the
fingerprint no longer matches, naming the command that re-makes the file::

    python benchmarks/no_data_judge.py --problem demo    # or: all (the default)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bnn_pyro.datasets import FUNCTION_PROBLEMS, FunctionProblem  # noqa: E402
from bnn_pyro.methods.sgmcmc import prediction_diagnostics  # noqa: E402
from bnn_pyro.metrics import empirical_quantiles  # noqa: E402
from bnn_pyro.priors import LayerwiseNormalPrior  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "no_data"
HIDDEN = 50  #: the net's hidden width (1-HIDDEN-1, tanh)
#: The prior: sd 1/sqrt(fan in) per layer. With i.i.d. N(0, 1) weights the prior sd of f is
#: about sqrt(50) standardised units; NUTS then needs steps of 0.002 and mixed to a bulk-ESS of
#: 90 in 2,400 draws on the demo problem.
PRIOR = LayerwiseNormalPrior("radford")
GRID_POINTS = 201
LEVELS = 200  #: quantile levels (i + 1/2) / LEVELS kept per grid point
#: how the kept quantiles are taken (in the fingerprint: a cache made another way is stale)
QUANTILES = "bnn_pyro.metrics.empirical_quantiles"


@dataclass(frozen=True)
class Settings:
    """The sampler's settings (part of the fingerprint)."""

    chains: int = 4
    warmup: int = 300
    samples: int = 600
    max_tree_depth: int = 8
    seed: int = 0


@dataclass(frozen=True)
class Standardized:
    """A problem's training rows standardised, with the scales to map back."""

    x: torch.Tensor  # (n, 1)
    y: torch.Tensor  # (n, 1)
    x_mean: float
    x_std: float
    y_mean: float
    y_std: float
    noise: float  # the known noise sd, in standardised units

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Raw inputs ``(N, 1)`` → the standardised inputs the net sees."""
        return (x - self.x_mean) / self.x_std


def standardize(problem: FunctionProblem, seed: int = 0) -> Standardized:
    """The problem's ``seed`` data, inputs and targets standardised by their own mean and sd.

    Example:
        >>> data = standardize(FUNCTION_PROBLEMS["cubic_gap"])
        >>> round(float(data.y.std()), 4), round(data.noise * data.y_std, 4)
        (1.0, 3.0)
    """
    X, y = problem.sample(seed)
    x_mean, x_std = float(X.mean()), float(X.std())
    y_mean, y_std = float(y.mean()), float(y.std())
    return Standardized(
        (X - x_mean) / x_std,
        (y - y_mean) / y_std,
        x_mean,
        x_std,
        y_mean,
        y_std,
        problem.noise_std / y_std,
    )


def num_weights(hidden: int = HIDDEN) -> int:
    """The 1-hidden-1 net's weight count: ``W1 (H, 1)``, ``b1 (H,)``, ``W2 (1, H)``, ``b2 (1,)``."""
    return 3 * hidden + 1


def make_net(hidden: int = HIDDEN) -> torch.nn.Module:
    """The judged net: ``bnn_pyro.nn.mlp(1, [hidden], 1, activation="tanh")``."""
    from bnn_pyro.nn import mlp

    return mlp(1, [hidden], 1, activation="tanh")


def prior_sds(hidden: int = HIDDEN) -> torch.Tensor:
    """:data:`PRIOR`'s sd of each flat weight ``(P,)``, in :func:`net_outputs`' order."""
    first, second = (m for m in make_net(hidden).modules() if isinstance(m, torch.nn.Linear))
    s1, s2 = PRIOR.std(first), PRIOR.std(second)
    return torch.cat([torch.full((2 * hidden,), s1), torch.full((hidden + 1,), s2)]).double()


def net_outputs(theta: torch.Tensor, x: torch.Tensor, hidden: int = HIDDEN) -> torch.Tensor:
    """``f(x; θ)`` of the 1-``hidden``-1 tanh net: ``theta`` ``(..., P)`` flat weights in the
    order ``W1, b1, W2, b2``; ``x`` ``(N, 1)``; returns ``(..., N)``."""
    w1 = theta[..., :hidden].unsqueeze(-2)  # (..., 1, H): x @ W1.T
    b1 = theta[..., hidden : 2 * hidden].unsqueeze(-2)
    w2 = theta[..., 2 * hidden : 3 * hidden].unsqueeze(-1)  # (..., H, 1)
    b2 = theta[..., 3 * hidden :]
    return (torch.tanh(x @ w1 + b1) @ w2).squeeze(-1) + b2


def potential(data: Standardized, hidden: int = HIDDEN):
    """The model's negative log joint of flat weights ``{"theta": (P,)}``, constants included."""
    x, y = data.x, data.y.squeeze(-1)
    n, sds = len(y), prior_sds(hidden).to(x.dtype)
    const = 0.5 * (n + len(sds)) * torch.log(torch.tensor(2 * torch.pi)) + sds.log().sum()
    const = const + n * torch.log(torch.tensor(data.noise))

    def energy(params: dict[str, torch.Tensor]) -> torch.Tensor:
        theta = params["theta"]
        r = (y - net_outputs(theta, x, hidden)) / data.noise
        return 0.5 * (theta / sds).pow(2).sum() + 0.5 * r.pow(2).sum() + const

    return energy


def fingerprint(problem: FunctionProblem, settings: Settings) -> str:
    """A digest of everything a cached reference depends on: the data's bytes, the grid and the
    truth on it, the model and the settings (a change to any of them changes it)."""
    data = standardize(problem)
    grid = problem.grid(GRID_POINTS)
    h = hashlib.sha256()
    for t in (data.x, data.y, grid, problem.noise_free(grid)):
        h.update(t.contiguous().numpy().tobytes())
    model = (problem.noise_std, HIDDEN, PRIOR.config(), LEVELS, QUANTILES, asdict(settings))
    h.update(repr(model).encode())
    return h.hexdigest()[:16]


def run_reference(problem: FunctionProblem, settings: Settings, progress: bool = True) -> dict:
    """NUTS on ``problem``: ``settings.chains`` chains run one after another (a CPU-seconds
    figure that a second core does not blur), ``f`` on the grid kept, diagnosed, summarised."""
    import pyro
    from pyro.infer import MCMC, NUTS

    data = standardize(problem)
    grid = problem.grid(GRID_POINTS)
    xs = data.inputs(grid)
    draws, steps = [], []
    start = time.process_time()
    for chain in range(settings.chains):
        pyro.set_rng_seed(settings.seed + chain)
        init = {"theta": prior_sds().float() * torch.randn(num_weights())}  # a prior draw
        kernel = NUTS(
            potential_fn=potential(data),
            max_tree_depth=settings.max_tree_depth,
            jit_compile=True,
            ignore_jit_warnings=True,
        )
        mcmc = MCMC(
            kernel,
            num_samples=settings.samples,
            warmup_steps=settings.warmup,
            initial_params=init,
            disable_progbar=not progress,
        )
        mcmc.run()
        theta = mcmc.get_samples()["theta"]
        with torch.no_grad():
            draws.append(net_outputs(theta, xs) * data.y_std + data.y_mean)  # (S, G), raw units
        steps.append(float(kernel.step_size))
    seconds = time.process_time() - start
    f = torch.stack(draws)  # (C, S, G)
    diagnostics = prediction_diagnostics(f.unsqueeze(-1), rank_normalized=True)
    return {
        "problem": problem.name,
        "fingerprint": fingerprint(problem, settings),
        "settings": asdict(settings),
        "grid": grid,
        "quantiles": empirical_quantiles(f.flatten(0, 1), LEVELS).float(),  # (LEVELS, G)
        "mean": f.flatten(0, 1).mean(0).float(),
        "sd": f.flatten(0, 1).std(0).float(),
        "rhat": diagnostics.rhat[:, 0].float(),
        "ess": diagnostics.ess[:, 0].float(),
        "step_sizes": steps,
        "cpu_seconds": seconds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="all", choices=["all", *FUNCTION_PROBLEMS])
    parser.add_argument("--chains", type=int, default=Settings.chains)
    parser.add_argument("--warmup", type=int, default=Settings.warmup)
    parser.add_argument("--samples", type=int, default=Settings.samples)
    parser.add_argument("--max-tree-depth", type=int, default=Settings.max_tree_depth)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    settings = Settings(args.chains, args.warmup, args.samples, args.max_tree_depth)
    names = list(FUNCTION_PROBLEMS) if args.problem == "all" else [args.problem]
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        result = run_reference(FUNCTION_PROBLEMS[name], settings, progress=sys.stderr.isatty())
        torch.save(result, args.out / f"{name}.pt")
        print(
            f"{name}: worst R̂ {float(result['rhat'].max()):.4f}, least bulk-ESS "
            f"{float(result['ess'].min()):.0f}, {result['cpu_seconds']:.0f} CPU-s, "
            f"step sizes {[round(s, 4) for s in result['step_sizes']]}",
            flush=True,
        )


if __name__ == "__main__":
    main()
