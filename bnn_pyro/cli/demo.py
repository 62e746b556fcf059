"""``bnn-pyro demo``, the README's main job: a BNN on a 1-D toy regression with a gap, metrics
and a PNG.

``bnn-pyro demo`` (or ``make demo``) trains :class:`~bnn_pyro.VariationalBNN` on the embedded
toy data of :func:`~bnn_pyro.datasets.toy_regression_1d` (``y = sin(2x) + x/2 + 0.1 eps`` on
``[-3, -1] U [1, 3]``), prints test metrics inside and outside the gap, and writes a PNG of the
predictive mean with its epistemic +-1 and +-2 sigma bands, which widen in the gap where there is
no data (the observation noise, 0.1, is known and not drawn).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from bnn_pyro.cli.output import removed_on_failure
from bnn_pyro.exceptions import CLIError

if TYPE_CHECKING:
    import torch

    from bnn_pyro.methods.vi.model import VariationalBNN

# torch and the library's methods are imported where the demo runs, not here: building the
# parser (``bnn-pyro --help``) imports neither

__all__ = ["DemoResult", "add_parser", "format_result", "format_table", "run", "run_demo"]

NOISE_STD = 0.1
GAP = (-1.0, 1.0)


@dataclass
class DemoResult:
    """What the demo measured.

    Attributes:
        rmse_data / rmse_gap / rmse_beyond: RMSE of the predictive mean against fresh noisy
            targets on the data region (``1 <= |x| <= 3``) / inside the gap (``|x| < 1``) /
            beyond the data (``3 < |x| <= 4``, extrapolation).
        test_ll_data / test_ll_gap / test_ll_beyond: mean predictive log-likelihood per point
            there.
        std_data / std_gap / std_beyond: mean epistemic standard deviation there.
        seconds: training time.
        png: path of the plot.

    Example:
        >>> result = DemoResult(0.1, 0.5, 0.9, 0.8, -1.2, -3.0, 0.05, 0.4, 0.1, 9.8, "demo.png")
        >>> round(result.std_gap / result.std_data, 1)  # how much the band widens in the gap
        8.0
    """

    rmse_data: float
    rmse_gap: float
    rmse_beyond: float
    test_ll_data: float
    test_ll_gap: float
    test_ll_beyond: float
    std_data: float
    std_gap: float
    std_beyond: float
    seconds: float
    png: str


def run_demo(
    out_dir: str = "demo_output",
    epochs: int = 5000,
    seed: int = 0,
    progress: bool = True,
    reference: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> DemoResult:
    """Train, evaluate and plot; returns the :class:`DemoResult` (also written as JSON).

    Args:
        out_dir: folder for ``demo.png`` and ``demo_metrics.json`` (created if missing).
        epochs: full-batch SVI steps.
        seed: seed of the data and of training.
        progress: show a progress bar.
        reference: ``(x (G,), low (G,), high (G,))``: a band to draw over the plot for
            comparison, e.g. a converged NUTS posterior's ``mean ± 2 sd`` of ``f``
            (``benchmarks/demo.py`` draws the cached one); ``None``: none.

    Returns:
        The metrics on fresh test points on the data, inside the gap and beyond the data, and
        the PNG's path.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     result = run_demo(tmp, epochs=50, progress=False)
        ...     sorted(os.listdir(tmp))
        ['demo.png', 'demo_metrics.json']
        >>> result.std_gap > 0 and result.seconds > 0
        True
    """
    import torch

    from bnn_pyro._checks import check_int
    from bnn_pyro.datasets import toy_function, toy_regression_1d
    from bnn_pyro.likelihoods import Gaussian
    from bnn_pyro.methods.vi.model import VariationalBNN
    from bnn_pyro.metrics import gaussian_log_likelihood, rmse
    from bnn_pyro.nn import mlp

    epochs = check_int("epochs", epochs)
    if reference is not None:
        ok = isinstance(reference, tuple) and len(reference) == 3
        ok = ok and all(isinstance(t, torch.Tensor) and t.dim() == 1 for t in reference)
        if not ok or len({len(t) for t in reference}) != 1:
            raise ValueError(
                "reference must be a tuple (x, low, high) of three 1-D tensors of one length"
            )
    os.makedirs(out_dir, exist_ok=True)
    X, y = toy_regression_1d(n=100, gap=GAP, noise_std=NOISE_STD, seed=seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # the net's initial weights, which the guide's means start from
        net = mlp(1, [50], 1, activation="tanh")
    bnn = VariationalBNN(net, Gaussian(scale=NOISE_STD))
    start = time.perf_counter()
    bnn.fit(
        X,
        y,
        epochs=epochs,
        batch_size=None,
        lr=1e-2,
        elbo="meanfield",
        progress=progress,
        seed=seed,
    )
    seconds = time.perf_counter() - start

    g = torch.Generator().manual_seed(seed + 1)
    x_test = torch.rand(2000, 1, generator=g) * 6 - 3
    y_test = toy_function(x_test) + NOISE_STD * torch.randn(x_test.shape, generator=g)
    # beyond the data: 3 < |x| <= 4, drawn after the rows above so their figures do not move
    side = torch.where(torch.rand(500, 1, generator=g) < 0.5, -1.0, 1.0)
    x_beyond = side * (3.0 + torch.rand(500, 1, generator=g))
    y_beyond = toy_function(x_beyond) + NOISE_STD * torch.randn(x_beyond.shape, generator=g)
    in_gap = ((x_test > GAP[0]) & (x_test < GAP[1])).squeeze(-1)
    beyond = torch.cat([torch.zeros_like(in_gap), torch.ones(500, dtype=torch.bool)])
    in_gap = torch.cat([in_gap, torch.zeros(500, dtype=torch.bool)])
    x_test, y_test = torch.cat([x_test, x_beyond]), torch.cat([y_test, y_beyond])
    locs, scales = bnn.predictive_gaussian(x_test, num_samples=200, seed=seed)
    mean, std = locs.mean(0), locs.std(0, correction=0)
    metrics = {}
    for name, rows in (("data", ~in_gap & ~beyond), ("gap", in_gap), ("beyond", beyond)):
        metrics[f"rmse_{name}"] = rmse(mean[rows], y_test[rows])
        metrics[f"test_ll_{name}"] = gaussian_log_likelihood(locs[:, rows], scales, y_test[rows])
        metrics[f"std_{name}"] = float(std[rows].mean())

    png = os.path.join(out_dir, "demo.png")
    _plot(bnn, X, y, png, seed, reference)
    result = DemoResult(**metrics, seconds=seconds, png=png)
    with open(os.path.join(out_dir, "demo_metrics.json"), "w") as handle:
        json.dump(asdict(result), handle, indent=2)
    return result


def _plot(
    bnn: VariationalBNN,
    X: torch.Tensor,
    y: torch.Tensor,
    png: str,
    seed: int,
    reference: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> None:
    import matplotlib
    import torch

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bnn_pyro.datasets import toy_function
    from bnn_pyro.plots import plot_predictive_1d

    grid = torch.linspace(-4, 4, 400).unsqueeze(-1)
    mean, var = bnn.predict(grid, num_samples=500, seed=seed)
    fig, ax = plt.subplots(figsize=(7, 4))
    plot_predictive_1d(
        grid,
        mean,
        var.sqrt(),
        x_train=X,
        y_train=y,
        ax=ax,
        title="VariationalBNN, 1-50-1 tanh: epistemic bands widen in the gap (grey)",
    )
    ax.plot(grid.squeeze(-1), toy_function(grid).squeeze(-1), "k:", lw=1, label="true f(x)")
    ax.axvspan(*GAP, color="0.9", zorder=0)
    if reference is not None:
        x_ref, low, high = (t.detach().cpu() for t in reference)
        ax.plot(x_ref, low, color="C3", ls="--", lw=1, label="NUTS ±2σ (reference)")
        ax.plot(x_ref, high, color="C3", ls="--", lw=1)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def format_table(result: DemoResult) -> str:
    """The demo's metrics table: RMSE, test log-likelihood and epistemic std on the data and in
    the gap, to three decimals.

    The part of the report that depends only on the seed and the settings (not on the machine's
    speed): ``benchmarks/demo.py`` writes it to ``benchmarks/results/demo.md`` for the README.

    Args:
        result: what :func:`run_demo` measured.

    Returns:
        The table, four lines.

    Example:
        >>> r = DemoResult(0.1, 0.5, 0.9, 0.8, -1.2, -3.0, 0.05, 0.4, 0.1, 9.8, "demo.png")
        >>> print(format_table(r))
                         on the data    in the gap   beyond data
        RMSE                   0.100         0.500         0.900
        test log-lik           0.800        -1.200        -3.000
        epistemic std          0.050         0.400         0.100   (x8.0 in the gap, x2.0 beyond)
    """
    gap, beyond = result.std_gap / result.std_data, result.std_beyond / result.std_data
    return (
        f"{'':14}{'on the data':>14}{'in the gap':>14}{'beyond data':>14}\n"
        f"{'RMSE':14}{result.rmse_data:14.3f}{result.rmse_gap:14.3f}{result.rmse_beyond:14.3f}\n"
        f"{'test log-lik':14}{result.test_ll_data:14.3f}{result.test_ll_gap:14.3f}"
        f"{result.test_ll_beyond:14.3f}\n"
        f"{'epistemic std':14}{result.std_data:14.3f}{result.std_gap:14.3f}"
        f"{result.std_beyond:14.3f}   (x{gap:.1f} in the gap, x{beyond:.1f} beyond)"
    )


def format_result(result: DemoResult) -> str:
    """The demo's printed report: training time, the metrics table of :func:`format_table` and
    the plot's path.

    Args:
        result: what :func:`run_demo` measured.

    Returns:
        The report, six lines.

    Example:
        >>> r = DemoResult(0.1, 0.5, 0.9, 0.8, -1.2, -3.0, 0.05, 0.4, 0.1, 9.8, "demo.png")
        >>> report = format_result(r)
        >>> lines = report.splitlines()
        >>> lines[0], lines[-1], len(lines)
        ('trained in 9.8 s', 'plot: demo.png', 6)
    """
    return f"trained in {result.seconds:.1f} s\n{format_table(result)}\nplot: {result.png}"


def run(args: argparse.Namespace) -> int:
    """``bnn-pyro demo``: :func:`run_demo` with the parsed arguments; prints the report.

    Args:
        args: the parsed arguments of ``bnn-pyro demo`` (see :func:`add_parser`).

    Returns:
        0 (bad options raise naming the option; a failed run removes the ``--out`` folder it
        created).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     run(argparse.Namespace(out=tmp, epochs=50, seed=0, quiet=True))
        ... # doctest: +ELLIPSIS
        trained in ...
        0
    """
    from bnn_pyro._checks import check_int

    check_int("--epochs", args.epochs)
    check_int("--seed", args.seed, minimum=0)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CLIError(f"--out: {args.out} is a file, not a folder")
    with removed_on_failure(args.out):  # a folder made for a failed run does not stay
        result = run_demo(args.out, epochs=args.epochs, seed=args.seed, progress=not args.quiet)
    print(format_result(result))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``demo`` to the subcommands ``sub`` of ``bnn-pyro``; return its parser, whose
    ``func`` is :func:`run`.

    Example:
        >>> from bnn_pyro.cli.io import parse_with
        >>> args = parse_with(add_parser, ["demo", "--epochs", "100"])
        >>> args.out, args.epochs, args.seed, args.func is run
        ('demo_output', 100, 0, True)
    """
    demo = sub.add_parser(
        "demo", help="train a BNN on a 1-D toy regression with a gap; print metrics, write a PNG"
    )
    demo.add_argument("--out", default="demo_output", help="output folder (default: demo_output)")
    demo.add_argument("--epochs", type=int, default=5000, help="training steps (default: 5000)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=run)
    return demo
