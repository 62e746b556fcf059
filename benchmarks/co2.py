"""Mauna Loa CO2, a real shift: every regression method forecasting a decade past its data.

The weekly CO2 series of the Mauna Loa observatory (1958-2001) that ships inside statsmodels
(``statsmodels.datasets.co2``: no download), its missing weeks dropped. Every contender trains
on the weeks before 1990 and predicts every week from 1990 on, about eleven years ahead: a shift
in time, not a synthetic one. The input is the time in years and the target the CO2 in ppm, both
standardised on the training rows; every figure is reported back in ppm. Every contender
trains on every second training week (800 weeks): the exact GPs (the reference, DKL) solve a
cubic system at every step of their fit, and all of the weeks would cost them about eight times
the CPU (the full run would not fit in a quarter of an hour on one core).

Contenders, each giving a Gaussian predictive of ``y`` (mean and sd, the noise included) on the
test weeks:

* the reference: an exact Gaussian process with the classic Mauna Loa kernel (Rasmussen and
  Williams, section 5.4.3, as scikit-learn's CO2 forecasting example builds it): a long-term
  squared-exponential trend, a yearly periodic component damped by a squared exponential, a
  rational quadratic for the medium-term irregularities, and a short squared exponential plus
  white noise; scikit-learn's ``GaussianProcessRegressor`` with every hyperparameter but the
  period (one year) fitted by the marginal likelihood (L-BFGS-B from the example's initial
  values, no restart, ``normalize_y=True``);
* every method of :data:`bnn_pyro.METHODS`:
  ``bp.make(name, bp.nn.mlp(1, [50, 50], 1), bp.Gaussian(scale="learned"))`` (dropout layers
  at rate 0.1 after each hidden layer where the method needs them), one seed, the same fit for
  all: 500 epochs of minibatches of 128 weeks, Adam at 1e-2 (the SG-MCMC samplers: their own
  step, ``lr=None``), 100 predictive samples (the deep ensemble: its members); Laplace then
  sets its prior precision by the marginal likelihood. Each method's
  ``predictive_gaussian`` (a mixture over its samples) is moment-matched to one Gaussian. A
  fit that diverges (``TrainingDivergedError``) is a row that says so: no method's settings
  are changed to avoid it.

Per horizon bucket (the test weeks of years 1-3, 4-7 and 8 onwards after 1990, and all of
them): the coverage of the 90% central interval (share of weeks inside mean ± 1.645 sd), the
mean Gaussian negative log-likelihood per week (in ppm units: nats of a density over ppm) and
the RMSE of the mean.

Target: the 90% intervals cover between 0.85 and 0.95 of all test weeks for the best method
(the one whose coverage is closest to 0.90).
Nets on the raw time have nothing to tell them what the curve does beyond the data; the run
reports what comes out.

Run: ``python benchmarks/co2.py [--quick] [--out DIR]``; the full run (about seven CPU-minutes
on one thread) writes ``benchmarks/results/co2.{md,json,png}`` (the markdown copied into the
Results page by ``update_readme.py``). ``--quick``: two epochs on a subsample, seconds, for the
tests (its figures mean nothing). Needs statsmodels and scikit-learn (the ``ood`` extra:
``pip install ".[ood]"``). The markdown, the targets and the figure are in ``co2_report.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import bnn_pyro as bp  # noqa: E402
from benchmarks import co2_report as report  # noqa: E402
from bnn_pyro.registry import method_spec  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SPLIT = 1990.0  #: the first test year: train before it, test from it on
Z90 = NormalDist().inv_cdf(0.95)  #: the 90% central interval's half-width in sds (1.645)
#: the horizon buckets: (first, last) year after the split, ``None``: to the end of the data
BUCKETS = ((1, 3), (4, 7), (8, None))
ALL = "all"
REFERENCE = "GP reference"
HIDDEN = [50, 50]
DROPOUT = 0.1  #: MC dropout's rate, after each hidden layer
#: the library's warnings a fit may raise, noted in the report
OURS = (bp.PosteriorCollapseWarning, bp.TrainingInstabilityWarning)


@dataclass(frozen=True)
class Settings:
    """A run's settings: the methods' fit, their predictive samples, and the weeks used
    (every ``train_every``-th training week, for every contender; every ``test_every``-th
    test week)."""

    epochs: int
    batch_size: int
    lr: float
    samples: int
    train_every: int
    test_every: int


FULL = Settings(500, 128, 1e-2, 100, train_every=2, test_every=1)
QUICK = Settings(2, 128, 1e-2, 5, train_every=16, test_every=4)


def _say(message: str) -> None:
    print(f"[co2] {message}", file=sys.stderr, flush=True)


# --- the data ------------------------------------------------------------------------------
def decimal_years(dates: Any) -> np.ndarray:
    """Dates (a pandas ``DatetimeIndex``, ``(N,)``) as decimal years ``(N,)``: the year plus
    the share of it gone by at the start of the day.

    Example:
        >>> import pandas as pd
        >>> decimal_years(pd.DatetimeIndex(["1990-01-01", "1990-07-02", "1992-12-31"])).round(4)
        array([1990.    , 1990.4986, 1992.9973])
    """
    days = np.where(dates.is_leap_year, 366.0, 365.0)
    return np.asarray(dates.year, dtype=float) + (np.asarray(dates.day_of_year) - 1.0) / days


@dataclass(frozen=True)
class Series:
    """The weekly series split at :data:`SPLIT`: years ``t_*`` and ppm ``y_*`` ``(N,)`` of the
    training and test weeks, and the training weeks' means and sds (the standardisation)."""

    t_train: np.ndarray
    y_train: np.ndarray
    t_test: np.ndarray
    y_test: np.ndarray
    t_mean: float
    t_std: float
    y_mean: float
    y_std: float

    def inputs(self, t: np.ndarray) -> torch.Tensor:
        """Years ``(N,)`` as the nets' standardised inputs ``(N, 1)``, float32."""
        return torch.as_tensor((t - self.t_mean) / self.t_std, dtype=torch.float32)[:, None]

    def targets(self, y: np.ndarray) -> torch.Tensor:
        """ppm ``(N,)`` as standardised targets ``(N, 1)``, float32."""
        return torch.as_tensor((y - self.y_mean) / self.y_std, dtype=torch.float32)[:, None]


def load_series(train_every: int = 1, test_every: int = 1) -> Series:
    """statsmodels' bundled weekly Mauna Loa series, missing weeks dropped, split at
    :data:`SPLIT`; every ``train_every``-th training week and ``test_every``-th test week
    (the standardisation: on the training weeks kept).

    Example:
        >>> s = load_series()
        >>> len(s.t_train), len(s.t_test), float(s.t_train.max()) < SPLIT <= float(s.t_test.min())
        (1599, 626, True)
    """
    from statsmodels.datasets import co2

    data = co2.load_pandas().data.dropna()
    t, y = decimal_years(data.index), data["co2"].to_numpy(dtype=float)
    train = t < SPLIT
    t_train, y_train = t[train][::train_every], y[train][::train_every]
    return Series(
        t_train, y_train, t[~train][::test_every], y[~train][::test_every],
        float(t_train.mean()), float(t_train.std()), float(y_train.mean()), float(y_train.std()),
    )  # fmt: skip


# --- the metrics ---------------------------------------------------------------------------
def interval_coverage(mean: np.ndarray, sd: np.ndarray, y: np.ndarray, z: float = Z90) -> float:
    """The share of ``y`` ``(N,)`` inside ``mean ± z sd`` (each ``(N,)``; by default the 90%
    central interval of the Gaussian).

    Example:
        >>> interval_coverage(np.zeros(4), np.ones(4), np.array([0.0, 1.0, -1.6, 1.7]))
        0.75
    """
    mean, sd, y = np.asarray(mean), np.asarray(sd), np.asarray(y)
    return float(np.mean(np.abs(y - mean) <= z * sd))


def gaussian_nll(mean: np.ndarray, sd: np.ndarray, y: np.ndarray) -> float:
    """The mean negative log density of ``y`` ``(N,)`` under ``N(mean, sd²)`` (each ``(N,)``),
    in nats, in ``y``'s units.

    Example:
        >>> round(gaussian_nll(np.zeros(2), np.ones(2), np.array([0.0, 2.0])), 4)
        1.9189
    """
    mean, sd, y = np.asarray(mean), np.asarray(sd), np.asarray(y)
    return float(np.mean(0.5 * np.log(2 * np.pi * sd**2) + 0.5 * ((y - mean) / sd) ** 2))


def rmse(mean: np.ndarray, y: np.ndarray) -> float:
    """The root mean squared error of ``mean`` ``(N,)`` against ``y`` ``(N,)``.

    Example:
        >>> rmse(np.zeros(2), np.array([3.0, -3.0]))
        3.0
    """
    return float(np.sqrt(np.mean((np.asarray(y) - np.asarray(mean)) ** 2)))


def horizon_buckets(t: np.ndarray, split: float = SPLIT) -> dict[str, np.ndarray]:
    """The test weeks' (years ``t`` ``(N,)``) masks ``(N,)`` per horizon bucket of
    :data:`BUCKETS` (year ``k`` after the split: ``split + k - 1 <= t < split + k``; the last
    bucket runs to the last week, and is left out if no week reaches it) and ``"all"``.

    Example:
        >>> masks = horizon_buckets(np.array([1990.5, 1993.2, 1999.0, 2001.9]))
        >>> {k: v.tolist() for k, v in masks.items()}  # doctest: +NORMALIZE_WHITESPACE
        {'years 1–3': [True, False, False, False], 'years 4–7': [False, True, False, False],
         'years 8–12': [False, False, True, True], 'all': [True, True, True, True]}
    """
    year = np.floor(np.asarray(t) - split).astype(int) + 1
    out = {}
    for first, last in BUCKETS:
        end = int(year.max()) if last is None else last
        if end >= first:  # (a last bucket the weeks do not reach: none)
            out[f"years {first}–{end}"] = (year >= first) & (year <= end)
    out[ALL] = np.ones(len(year), dtype=bool)
    return out


def score(mean: np.ndarray, sd: np.ndarray, y: np.ndarray, t: np.ndarray) -> dict[str, dict]:
    """Per horizon bucket of the weeks ``t`` (:func:`horizon_buckets`): the 90% coverage, the
    mean Gaussian NLL, the RMSE, the mean predictive sd and the number of weeks, of the
    predictive ``N(mean, sd²)`` of ``y`` (each ``(N,)``, in ppm).

    Example:
        >>> t = np.array([1990.5, 1995.0]); y = np.array([350.0, 360.0])
        >>> s = score(y + 1.0, np.ones(2), y, t)
        >>> s["all"]["cover"], s["all"]["rmse"], s["years 4–7"]["weeks"], list(s)
        (1.0, 1.0, 1, ['years 1–3', 'years 4–7', 'all'])
    """
    out = {}
    for bucket, mask in horizon_buckets(t).items():
        m, s, obs = mean[mask], sd[mask], y[mask]
        out[bucket] = {
            "cover": interval_coverage(m, s, obs),
            "nll": gaussian_nll(m, s, obs),
            "rmse": rmse(m, obs),
            "sd": float(np.mean(s)),
            "weeks": int(mask.sum()),
        }
    return out


# --- the reference -------------------------------------------------------------------------
def mauna_loa_kernel(t_std: float, y_std: float) -> Any:
    """The Mauna Loa kernel of Rasmussen and Williams (section 5.4.3) with scikit-learn's
    example's initial values, given in years and ppm and put in the units of inputs divided by
    ``t_std`` and targets divided by ``y_std``: trend ``50² SE(50)``, seasonal ``2² SE(100)
    periodic(1; period 1 year, fixed)``, irregularities ``0.5² RQ(1, α=1)``, noise ``0.1²
    SE(0.1) + white(0.1²)``.

    Example:
        >>> mauna_loa_kernel(1.0, 1.0).n_dims  # the period fixed: 11 hyperparameters to fit
        11
    """
    from sklearn.gaussian_process.kernels import RBF, ExpSineSquared, RationalQuadratic, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as Amplitude

    def amp(ppm: float) -> Amplitude:
        return Amplitude((ppm / y_std) ** 2)

    def years(value: float) -> float:
        return value / t_std

    trend = amp(50.0) * RBF(years(50.0))
    seasonal = (
        amp(2.0)
        * RBF(years(100.0))
        * ExpSineSquared(years(1.0), years(1.0), periodicity_bounds="fixed")
    )
    irregular = amp(0.5) * RationalQuadratic(years(1.0), alpha=1.0)
    noise = amp(0.1) * RBF(years(0.1)) + WhiteKernel(
        (0.1 / y_std) ** 2, noise_level_bounds=(1e-8, 1e5)
    )
    return trend + seasonal + irregular + noise


def converged_lbfgs(
    objective: Any, theta: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, float]:
    """scikit-learn's GP optimizer (L-BFGS-B on the negative log marginal likelihood and its
    gradient) run until it can no longer improve (``ftol`` 1e-15, ``gtol`` 1e-9): the optimum
    itself, not the first point within scikit-learn's default tolerances, which depends on the
    machine's last-bit rounding (on the Mauna Loa fit, a sd shifted by 5e-4 ppm).

    Args:
        objective: ``theta -> (value, gradient)``; theta ``(P,)``, the log hyperparameters.
        theta: the initial values ``(P,)``.
        bounds: ``(P, 2)`` lower and upper bounds of theta.

    Returns:
        The optimum ``(P,)`` and the objective there.

    Example:
        >>> quadratic = lambda t: (float(((t - 1.0) ** 2).sum()), 2 * (t - 1.0))
        >>> theta, value = converged_lbfgs(quadratic, np.zeros(2), np.array([[-5, 5], [-5, 5]]))
        >>> np.round(theta, 6).tolist(), value < 1e-12
        ([1.0, 1.0], True)
    """
    from scipy.optimize import minimize

    found = minimize(objective, theta, method="L-BFGS-B", jac=True, bounds=bounds,
                     options={"maxiter": 100_000, "ftol": 1e-15, "gtol": 1e-9})  # fmt: skip
    return found.x, float(found.fun)


def reference_gaussian(series: Series, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """The GP reference's predictive mean and sd of ``y`` ``(N_test,)`` in ppm (the white
    noise included), fitted on the series' training weeks on one thread with the
    hyperparameters run to their optimum (:func:`converged_lbfgs`), and its fitted kernel (in
    standardised units).

    Example:
        >>> s = load_series(train_every=32, test_every=64)
        >>> mean, sd, kernel = reference_gaussian(s)
        >>> mean.shape == sd.shape == s.t_test.shape, bool((sd > 0).all())
        (True, True)
    """
    from sklearn.gaussian_process import GaussianProcessRegressor
    from threadpoolctl import threadpool_limits

    x = ((series.t_train - series.t_mean) / series.t_std)[:, None]
    y = (series.y_train - series.y_mean) / series.y_std
    gp = GaussianProcessRegressor(
        mauna_loa_kernel(series.t_std, series.y_std),
        normalize_y=True,
        optimizer=converged_lbfgs,
        n_restarts_optimizer=0,
        random_state=seed,
    )
    with threadpool_limits(1):
        gp.fit(x, y)
        mean, sd = gp.predict(((series.t_test - series.t_mean) / series.t_std)[:, None],
                              return_std=True)  # fmt: skip
    return mean * series.y_std + series.y_mean, sd * series.y_std, str(gp.kernel_)


def at_bounds(messages: list[str]) -> list[str]:
    """The hyperparameters that scikit-learn's fit warned were left at a bound of their range,
    read from its warnings' ``messages``, as ``"name (upper)"``.

    Example:
        >>> at_bounds(["The optimal value found for dimension 0 of parameter k1__k2__alpha is "
        ...            "close to the specified upper bound 100000.0. Increasing the bound ..."])
        ['k1__k2__alpha (upper)']
    """
    found = (
        re.search(r"parameter (\S+) is close to the specified (\w+) bound", m) for m in messages
    )
    return [f"{m.group(1)} ({m.group(2)})" for m in found if m is not None]


# --- the methods ---------------------------------------------------------------------------
def build_method(name: str, settings: Settings, seed: int) -> bp.BaseBayesianMethod:
    """``bp.make(name, mlp(1, [50, 50], 1), Gaussian(scale="learned"))`` from ``seed``'s
    weights, dropout layers where the method needs them, ``settings.samples`` predictive
    samples (an ensemble: its members).

    Example:
        >>> type(build_method("swag", QUICK, 0)).__name__
        'SWAG'
    """
    spec = method_spec(name)
    torch.manual_seed(seed)
    net = bp.nn.mlp(1, HIDDEN, 1, dropout=DROPOUT if spec.dropout_net else 0.0)
    options = {} if spec.own_samples else {"num_samples": settings.samples}
    return bp.make(name, net, bp.Gaussian(scale="learned"), **options)


def fit_method(
    model: bp.BaseBayesianMethod, name: str, series: Series, settings: Settings, seed: int
) -> None:
    """One fit with ``settings``: Adam at ``settings.lr``, or the sampler's own step where the
    method measures it (SG-MCMC: ``lr=None``); Laplace then sets its prior precision by the
    marginal likelihood.

    Example:
        >>> s = load_series(train_every=64, test_every=64)
        >>> model = build_method("laplace", QUICK, 0)
        >>> fit_method(model, "laplace", s, QUICK, 0)
        >>> model.predict(s.inputs(s.t_test))[0].shape
        torch.Size([10, 1])
    """
    lr = None if method_spec(name).measured_step else settings.lr
    model.fit(
        series.inputs(series.t_train), series.targets(series.y_train),
        epochs=settings.epochs, batch_size=settings.batch_size, lr=lr, progress=False, seed=seed,
    )  # fmt: skip
    if name == "laplace":
        model.optimize_prior_precision()


def moment_match(locs: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and sd ``(N,)`` of the mixture ``1/K Σ_k N(locs[k], scales[k]²)`` of one
    output (``locs`` ``(K, N, 1)``, ``scales`` broadcastable to it).

    Example:
        >>> mean, sd = moment_match(torch.tensor([[[0.0]], [[2.0]]]), torch.ones(2, 1, 1))
        >>> mean.tolist(), round(sd.item() ** 2, 6)
        ([1.0], 2.0)
    """
    locs = locs.double()[..., 0]
    scales = torch.as_tensor(scales, dtype=locs.dtype).expand(*locs.shape, 1)[..., 0]
    mean = locs.mean(0)
    variance = (scales**2).mean(0) + ((locs - mean) ** 2).mean(0)
    return mean, variance.sqrt()


def method_gaussian(
    model: bp.BaseBayesianMethod, x: torch.Tensor, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A fitted method's Gaussian predictive of ``y`` at ``x`` ``(N, 1)``, in standardised
    units: its ``predictive_gaussian`` mixture moment-matched (:func:`moment_match`), or where
    it has none, ``predict``'s mean and epistemic variance plus ``noise_scale²``. Mean and sd
    ``(N,)``.

    Example:
        >>> s = load_series(train_every=64, test_every=64)
        >>> model = build_method("swag", QUICK, 0)
        >>> fit_method(model, "swag", s, QUICK, 0)
        >>> mean, sd = method_gaussian(model, s.inputs(s.t_test), seed=0)
        >>> mean.shape == sd.shape == (len(s.t_test),), bool((sd > 0).all())
        (True, True)
    """
    with torch.no_grad():
        try:
            return moment_match(*model.predictive_gaussian(x, seed=seed))
        except NotImplementedError:
            mean, variance = model.predict(x, seed=seed)[:2]
            noise = torch.as_tensor(model.noise_scale, dtype=torch.float64)
            return mean[:, 0].double(), (variance[:, 0].double() + noise**2).sqrt()


def method_row(
    name: str, series: Series, settings: Settings, seed: int
) -> tuple[dict, tuple[np.ndarray, np.ndarray] | None, list[str]]:
    """One method built, fitted and scored: its row (``{"buckets": score(...), "seconds"}``,
    or ``{"diverged": when, "seconds"}`` for a fit that diverged, left as it came out), its band
    ``(mean, sd)`` in ppm on the test weeks (``None`` if it failed) and the names of the
    library's warnings its fit raised.

    Example:
        >>> s = load_series(train_every=64, test_every=64)
        >>> row, band, told = method_row("swag", s, QUICK, 0)
        >>> list(row["buckets"]) == list(horizon_buckets(s.t_test)), band[0].shape
        (True, (10,))
    """
    start = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        for category in OURS:
            warnings.simplefilter("always", category)
        try:
            model = build_method(name, settings, seed)
            fit_method(model, name, series, settings, seed)
            z_mean, z_sd = method_gaussian(model, series.inputs(series.t_test), seed)
        except bp.TrainingDivergedError as err:
            z_mean = z_sd = None
            epoch = re.search(r"at epoch (\d+)", str(err))
            when = f"at epoch {epoch.group(1)} of {settings.epochs}" if epoch else str(err)
    told = sorted({w.category.__name__ for w in caught if issubclass(w.category, OURS)})
    seconds = time.process_time() - start
    if z_mean is None:
        return {"diverged": when, "seconds": seconds}, None, told
    mean = z_mean.numpy() * series.y_std + series.y_mean
    sd = z_sd.numpy() * series.y_std
    row = {"buckets": score(mean, sd, series.y_test, series.t_test), "seconds": seconds}
    return row, (mean, sd), told


# --- the run -------------------------------------------------------------------------------
def run(
    settings: Settings, seed: int = 0, methods: tuple[str, ...] | None = None
) -> tuple[Series, dict[str, dict], dict[str, tuple[np.ndarray, np.ndarray]], dict[str, Any]]:
    """The reference and every method (or those in ``methods``): the series, the rows
    ``{label: {"buckets": score(...), "seconds": CPU s}}`` (a diverged fit: ``"diverged"`` in
    place of its buckets), the bands ``{label: (mean, sd)}`` in ppm on the test weeks, and
    notes (the GP's fitted kernel, its hyperparameters left at a bound, the library's warnings
    raised by the fits). ``main`` runs it; the tests run ``main --quick``."""
    series = load_series(settings.train_every, settings.test_every)
    rows: dict[str, dict] = {}
    bands: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    notes: dict[str, Any] = {"warnings": {}}
    start = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mean, sd, notes["kernel"] = reference_gaussian(series, seed)
    notes["gp_bounds"] = at_bounds([str(w.message) for w in caught])
    rows[REFERENCE] = {"buckets": score(mean, sd, series.y_test, series.t_test),
                       "seconds": time.process_time() - start}  # fmt: skip
    bands[REFERENCE] = (mean, sd)
    _say(f"{REFERENCE}: {rows[REFERENCE]['seconds']:.0f} CPU-s")
    for name in methods or tuple(bp.METHODS):
        rows[name], band, told = method_row(name, series, settings, seed)
        if band is not None:
            bands[name] = band
        if told:
            notes["warnings"][name] = told
        row = rows[name]
        outcome = "diverged" if "diverged" in row else f"cover {row['buckets'][ALL]['cover']:.2f}"
        _say(f"{name}: {rows[name]['seconds']:.0f} CPU-s, {outcome}")
    return series, rows, bands, notes


def main(argv: list[str] | None = None) -> int:
    """Run, print the report and write ``co2.md``, ``co2.json`` and ``co2.png`` into ``--out``
    (default: ``benchmarks/results``). Returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two epochs on a subsample (smoke)")
    parser.add_argument("--seed", type=int, default=0, help="the nets' weights, data order, draws")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the three files")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    torch.set_num_threads(1)
    wall = time.perf_counter()
    with bp.threads(1):
        series, rows, bands, notes = run(settings, args.seed)
    header = report.header(settings, series, notes, argv, time.perf_counter() - wall, args.seed)
    text = report.render(header, rows, notes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "co2.md").write_text(text, encoding="utf-8")
    payload = {"header": header, "settings": asdict(settings), "notes": notes, "rows": rows}
    (args.out / "co2.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    report.plot(series, bands, args.out / "co2.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
