"""Uncertainty where there is no data: every method against the NUTS judge on four 1-D problems.

Each method trains the judge's net (1-50-1 tanh) on a problem's standardised rows with the
known noise (so the bands differ only in their epistemic part), then predicts ``f`` on the
problem's grid. Per region of the grid (``data``, ``gap``, ``extrapolation``,
:meth:`bnn_pyro.datasets.FunctionProblem.regions`) the table reports:

* ``cover``: the share of grid points whose true ``f`` lies in the method's ``mean ± 1.96 sd``
  (:func:`bnn_pyro.metrics.function_coverage`);
* ``sd ok``: the share of grid points whose epistemic sd is within a factor of 2 of the NUTS
  reference's (:func:`bnn_pyro.metrics.sd_ratio` in ``[0.5, 2]``);
* ``W2``: the mean over the region of the 1-D Wasserstein-2 distance between the method's
  samples of ``f`` and the reference's (:func:`bnn_pyro.metrics.wasserstein2`), in the
  problem's units.

The reference rows are NUTS itself (``benchmarks/no_data_judge.py``, cached in
``benchmarks/results/no_data/``); its ``sd ok`` is 1 and its ``W2`` 0 by construction. The
row ``NUTS, sd widened 2x`` is no method: it is NUTS's band spread about its own mean to the
sd target's limit, the widest band that target still counts as close, and a line of the
targets reads from it what they ask of any band about the posterior's mean. Each method is
one seed (a pooled row: its fits or chains from consecutive seeds); a run of all of them
takes about half an hour on one core, most of it in the pooled SGHMC chains::

    python benchmarks/no_data.py [--quick]   # writes benchmarks/results/no_data.{md,json,png}
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
import time
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
from bnn_pyro.datasets import FUNCTION_PROBLEMS, REGIONS  # noqa: E402
from bnn_pyro.metrics import function_coverage, sd_ratio, wasserstein2  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
S = 200  #: predictive samples per method (an ensemble has its members)
#: The sd target's limit: a method's sd within this factor of NUTS's counts as close.
SD_LIMIT = 2.0 * (1.0 - 1e-6)  # (a hair under 2, so the widened row's own ratio rounds inside)
#: The row of NUTS's band at that limit (no method: what the sd target leaves a band)
WIDENED = "NUTS, sd widened 2x (the sd target's limit)"
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
    ``guide``, ``elbo`` and ``particles``: another Gaussian family or objective (a full
    covariance with ``"trace"``; the black-box alpha energy with ``"alpha"``). ``activation``:
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
        return lambda x: _locs(method.predictive_gaussian(x, generator=g))

    return build


def _sghmc(
    fan_in_prior: bool, epochs: int
) -> Callable[[judge.Standardized, float, int], Predictor]:
    """SGHMC on minibatches of 32 for ``epochs`` epochs: with the judge's prior as notebook 01
    runs it (1,500 epochs), or with the default prior (i.i.d. ``N(0, 1)``, the prior of the
    demo's VI) for longer (6,000 epochs: at 1,500 its chain had not yet reached the band it
    settles in beyond the data)."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        torch.manual_seed(seed)
        prior = {"prior": judge.PRIOR} if fan_in_prior else {}
        chain = bp.make("sghmc", judge.make_net(), bp.Gaussian(scale=data.noise), **prior)
        chain.fit(data.x, data.y, epochs=max(1, int(epochs * scale)), batch_size=32,
                  progress=False, seed=seed)  # fmt: skip
        return lambda x: _locs(chain.predictive_gaussian(x, num_samples=S, seed=seed))

    return build


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
    """
    x, y, xs = x.double(), y.double(), xs.double()

    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return amplitude**2 * torch.exp(-0.5 * torch.cdist(a, b) ** 2 / lengthscale**2)

    chol = torch.linalg.cholesky(kernel(x, x) + noise**2 * torch.eye(len(x), dtype=x.dtype))
    cross = kernel(xs, x)  # (G, n)
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
            amplitude, lengthscale = logs.exp()
            sq = torch.cdist(x, x) ** 2 / lengthscale**2
            cov = amplitude**2 * torch.exp(-0.5 * sq) + data.noise**2 * torch.eye(len(x))
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


def _pooled(
    build_one: Callable[[judge.Standardized, float, int], Predictor], runs: int
) -> Callable[[judge.Standardized, float, int], Predictor]:
    """``runs`` fits of ``build_one`` from different seeds, their draws pooled (``S / runs``
    each): a mixture of the fits' posteriors, as a deep ensemble pools its members."""

    def build(data: judge.Standardized, scale: float, seed: int) -> Predictor:
        fits = [build_one(data, scale, seed * runs + i) for i in range(runs)]
        return lambda x: torch.cat([fit(x)[: S // runs] for fit in fits])

    return build


def widened(reference: dict, factor: float = SD_LIMIT) -> torch.Tensor:
    """NUTS's draws (``reference["quantiles"]``, ``(L, G)``) spread about their mean so that
    their sd is ``factor`` times the reference's at every grid point: the widest band whose sd
    the sd target still counts as close to NUTS's, about the posterior's own mean.

    Example:
        >>> q = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
        >>> w = widened({"quantiles": q, "sd": q.std(0)}, factor=1.5)
        >>> torch.allclose(w.std(0), 1.5 * q.std(0)), torch.equal(w.mean(0), q.mean(0))
        (True, True)
    """
    q = reference["quantiles"]
    mean = q.mean(0)
    return mean + (q - mean) * (factor * reference["sd"] / q.std(0))


#: A non-Gaussian guide: Pyro's inverse autoregressive flow (two flows of 200 hidden units)
IAF = functools.partial(AutoIAFNormal, hidden_dim=[200], num_transforms=2)
IAF.__name__ = "AutoIAFNormal"  # type: ignore[attr-defined]
#: SGHMC on the demo VI's own prior: the posterior that VI approximates, sampled by four
#: chains pooled (one chain's coverage beyond the demo's data varies from seed to seed)
DEFAULT_PRIOR_SGHMC = "sghmc (the demo's prior, 6,000 epochs, 4 chains)"
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
    "sghmc": _sghmc(fan_in_prior=True, epochs=1500),
    "GP on the input (no network; a distance-aware head's limit)": _gp(),
    DEFAULT_PRIOR_SGHMC: _pooled(_sghmc(fan_in_prior=False, epochs=6000), 4),
}


def score(problem_name: str, draws: torch.Tensor, reference: dict) -> dict[str, dict[str, float]]:
    """Per region: coverage of the true ``f``, share of points with the sd within 2x the
    reference's, mean W2 to the reference. ``draws`` ``(S, G)`` in the problem's units."""
    problem = FUNCTION_PROBLEMS[problem_name]
    grid = reference["grid"]
    truth = problem.noise_free(grid)[:, 0]
    mean, sd = draws.mean(0), draws.std(0)
    ratio = sd_ratio(sd, reference["sd"])
    w2 = wasserstein2(draws, reference["quantiles"])
    out = {}
    for region, mask in problem.regions(grid).items():
        if not bool(mask.any()):  # the sinusoid has no gap
            continue
        out[region] = {
            "cover": function_coverage(mean[mask], sd[mask], truth[mask]),
            "sd_ok": float(((ratio[mask] >= 0.5) & (ratio[mask] <= 2.0)).double().mean()),
            "sd": float(sd[mask].mean()),
            "w2": float(w2[mask].mean()),
            "share": float(mask.double().mean()),
        }
    out["grid_sd_ok"] = float(((ratio >= 0.5) & (ratio <= 2.0)).double().mean())
    return out


def run(
    quick: bool = False,
    seed: int = 0,
    references: Path = judge.RESULTS,
    problems: tuple[str, ...] = tuple(FUNCTION_PROBLEMS),
    bands: dict | None = None,
) -> dict:
    """Every contender on every problem of ``problems`` with a reference in ``references``;
    ``quick`` trains 1% of the epochs (for the tests: its figures mean nothing). ``bands``, if
    given, receives ``bands[problem][method] = (mean, sd)`` on the grid, for :func:`plot`."""
    scale = 0.01 if quick else 1.0
    rows: dict[str, dict] = {}
    for name in problems:
        problem = FUNCTION_PROBLEMS[name]
        path = references / f"{name}.pt"
        if not path.exists():
            continue
        reference = torch.load(path, weights_only=True)
        data = judge.standardize(problem)
        xs = data.inputs(reference["grid"])
        rows[name] = {"NUTS (reference)": score(name, reference["quantiles"], reference)}
        if bands is not None:
            bands[name] = {"NUTS (reference)": (reference["mean"], reference["sd"])}
        rows[name]["NUTS (reference)"]["seconds"] = reference["cpu_seconds"]
        rows[name][WIDENED] = {**score(name, widened(reference), reference), "seconds": 0.0}
        for method, build in CONTENDERS.items():
            start = time.process_time()
            predictor = build(data, scale, seed)
            with torch.no_grad():
                draws = predictor(xs) * data.y_std + data.y_mean
            rows[name][method] = score(name, draws, reference)
            if bands is not None:
                bands[name][method] = (draws.mean(0), draws.std(0))
            rows[name][method]["seconds"] = time.process_time() - start
    return rows


COVER_GAP, COVER_BEYOND, SD_OK = 0.90, 0.80, 0.80  #: the targets of the best method
VI_BEYOND = 0.50  #: VI as the demo trains it, beyond the demo's data


def targets(rows: dict) -> list[str]:
    """The targets, each with its figures: the references converged; a method that covers the
    true ``f`` on >= 90% of every gap and >= 80% of every extrapolation range with its sd within
    2x NUTS's on >= 80% of every grid; the demo's VI covering >= 50% beyond the demo's data.

    Example:
        >>> cell = {"cover": 1.0, "sd_ok": 1.0, "sd": 1.0, "w2": 0.0}
        >>> m = {"gap": cell, "extrapolation": cell, "grid_sd_ok": 0.5, "seconds": 1.0}
        >>> line = targets({"demo": {"NUTS (reference)": m, "vi (the demo's)": m}})[1]
        >>> line.split(": ")[1:]
        ["vi (the demo's); and with its sd within 2x NUTS's on >= 80% of every grid", 'none']
    """
    methods = [m for m in next(iter(rows.values())) if m not in ("NUTS (reference)", WIDENED)]

    def covers(m: str) -> bool:
        return all(
            by[m].get("gap", {"cover": 1.0})["cover"] >= COVER_GAP
            and by[m]["extrapolation"]["cover"] >= COVER_BEYOND
            for by in rows.values()
        )

    covering = [m for m in methods if covers(m)]
    close = [m for m in covering if all(by[m]["grid_sd_ok"] >= SD_OK for by in rows.values())]
    lines = [
        "- NUTS converged: "
        + ", ".join(f"{p} {by['NUTS (reference)']['seconds']:.0f} CPU-s" for p, by in rows.items())
        + " (R̂ < 1.01 and bulk-ESS >= 400 at every grid point, checked by the tests)",
        "- covers the truth in every gap and beyond the data: "
        + (", ".join(covering) or "none")
        + f"; and with its sd within 2x NUTS's on >= {SD_OK:.0%} of every grid: "
        + (", ".join(close) or "none"),
    ]
    if all(WIDENED in by for by in rows.values()):
        lines.append(limit_line(rows))
    if "demo" in rows and "vi (the demo's)" in rows["demo"]:
        demo = rows["demo"]
        beyond = demo["vi (the demo's)"]["extrapolation"]["cover"]
        verdict = "met" if beyond >= VI_BEYOND else "missed"
        line = (
            f"- VI as the demo trains it covers {beyond:.2f} beyond the demo's data "
            f"(target {VI_BEYOND}: {verdict}); NUTS on the same net under the judge's prior "
            f"covers {demo['NUTS (reference)']['extrapolation']['cover']:.2f}"
        )
        if DEFAULT_PRIOR_SGHMC in demo:
            line += (
                f", SGHMC under the demo VI's own prior "
                f"{demo[DEFAULT_PRIOR_SGHMC]['extrapolation']['cover']:.2f}"
            )
        lines.append(line)
    return lines


def limit_line(rows: dict) -> str:
    """What the two targets ask of a band about the posterior's mean, from the widened row:
    its coverage beyond the data, and the most of the grid it can keep within 2x NUTS's sd
    while covering 80% beyond (the rest of that 80% needs a wider band).

    Example:
        >>> beyond = {"cover": 0.25, "share": 0.4}
        >>> limit_line({"p": {WIDENED: {"extrapolation": beyond}}}).split("; ")[1][:60]
        'most of the grid within 2x while covering 80% beyond: p 0.78'
    """
    covers, keeps = [], []
    for problem, by in rows.items():
        beyond = by[WIDENED]["extrapolation"]
        covers.append(f"{problem} {beyond['cover']:.2f}")
        out = max(0.0, COVER_BEYOND - beyond["cover"]) * beyond["share"]
        keeps.append(f"{problem} {1.0 - out:.2f}")
    return (
        "- the targets' limit: NUTS's own band widened to 2x its sd covers beyond the data "
        + ", ".join(covers)
        + f"; most of the grid within 2x while covering {COVER_BEYOND:.0%} beyond: "
        + ", ".join(keeps)
        + f" (target {SD_OK:.0%}, for a band about the posterior's mean)"
    )


def markdown(rows: dict) -> str:
    """The results as one table per problem."""
    lines = [
        "# Uncertainty where there is no data",
        "",
        f"torch {torch.__version__}, pyro {__import__('pyro').__version__}, "
        f"{platform.machine()}, 1 thread; seed 0; command: python benchmarks/no_data.py",
        "",
        "`cover`: share of the grid where the true f is inside mean ± 1.96 sd; `sd ok`: share "
        "where the sd is within 2x NUTS's; `W2`: mean Wasserstein-2 distance to NUTS's draws.",
    ]
    for problem, methods in rows.items():
        lines += ["", f"## {problem}", ""]
        head = "| method | " + " | ".join(f"{r} cover | {r} sd ok | {r} W2" for r in REGIONS)
        lines += [head + " | CPU s |", "|---" * (3 * len(REGIONS) + 2) + "|"]
        for method, regions in methods.items():
            cells = []
            for r in REGIONS:
                if r not in regions:
                    cells += ["—"] * 3
                    continue
                v = regions[r]
                cells += [f"{v['cover']:.2f}", f"{v['sd_ok']:.2f}", f"{v['w2']:.3f}"]
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {regions['seconds']:.0f} |")
    if rows:
        lines += ["", "## Targets", "", *targets(rows)]
    return "\n".join(lines) + "\n"


def plot(bands: dict, path: Path) -> None:
    """One row per problem, one panel per method: its mean ± 2 sd band over NUTS's (grey), the
    true function (dotted) and the training rows, the data's support shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in next(iter(bands.values())) if m != "NUTS (reference)"]
    fig, axes = plt.subplots(
        len(bands), len(methods), figsize=(2.4 * len(methods), 2.2 * len(bands)), squeeze=False
    )
    for row, (name, by_method) in zip(axes, bands.items(), strict=True):
        problem = FUNCTION_PROBLEMS[name]
        grid = problem.grid(judge.GRID_POINTS)[:, 0]
        X, y = problem.sample(0)
        ref_mean, ref_sd = by_method["NUTS (reference)"]
        span = float(ref_mean.max() - ref_mean.min())
        for ax, method in zip(row, methods, strict=True):
            mean, sd = by_method[method]
            for lo, hi in problem.support:
                ax.axvspan(lo, hi, color="0.93", zorder=0)
            ax.fill_between(grid, ref_mean - 2 * ref_sd, ref_mean + 2 * ref_sd, color="0.6",
                            alpha=0.6, lw=0, label="NUTS ± 2 sd")  # fmt: skip
            ax.fill_between(grid, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.35, lw=0,
                            label="method ± 2 sd")  # fmt: skip
            ax.plot(grid, mean, color="C0", lw=0.8)
            ax.plot(grid, problem.noise_free(grid), "k:", lw=0.8, label="true f")
            ax.scatter(X[:, 0], y[:, 0], s=2, color="k", zorder=3)
            ax.set_ylim(float(ref_mean.min()) - 0.6 * span, float(ref_mean.max()) + 0.6 * span)
            ax.tick_params(labelsize=6)
            if name == next(iter(bands)):
                ax.set_title(method, fontsize=8)
        row[0].set_ylabel(name, fontsize=8)
    axes[0, 0].legend(fontsize=5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1%% of the epochs (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    bands: dict = {}
    rows = run(quick=args.quick, bands=bands)
    text = markdown(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    if bands:
        plot(bands, args.out / "no_data.png")
    (args.out / "no_data.md").write_text(text)
    (args.out / "no_data.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
