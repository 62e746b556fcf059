"""The report of ``benchmarks/co2.py``: its header, tables, targets and figure.

Rows are ``{label: {"buckets": {bucket: {"cover", "nll", "rmse", "sd", "weeks"}}, "seconds"}}``
(what :func:`benchmarks.co2.run` returns), the reference's label first.
"""

from __future__ import annotations

import platform
import sys
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import repo_command  # noqa: E402

TITLE = "# Mauna Loa CO2: a real shift"
LOW, HIGH = 0.85, 0.95  #: the target's range of the 90% intervals' coverage, all test weeks
NOMINAL = 0.90
#: the methods drawn beside the reference (chosen before any run: the library's default, the
#: deep ensemble, a sampler and the deep-kernel GP)
PLOTTED = ("vi", "ensemble", "sghmc", "dkl")
#: ``(section title, metric key, format)`` of the tables
TABLES = (
    ("90% interval coverage (share of weeks inside mean ± 1.645 sd)", "cover", "{:.2f}"),
    ("Gaussian NLL per week (nats, y in ppm)", "nll", "{:.2f}"),
    ("RMSE of the mean (ppm)", "rmse", "{:.2f}"),
    ("Mean predictive sd (ppm)", "sd", "{:.2f}"),
)


def _version(package: str) -> str:
    try:
        return version(package)
    except Exception:  # noqa: BLE001 - a missing package is reported, not raised
        return "not installed"


def _every(k: int) -> str:
    """``every week``, ``every second week`` or ``one week in k``.

    Example:
        >>> [_every(k) for k in (1, 2, 16)]
        ['every week', 'every second week', 'one week in 16']
    """
    return {1: "every week", 2: "every second week"}.get(k, f"one week in {k}")


def _span(t: np.ndarray) -> str:
    """First and last week of decimal years ``t`` as ``year.frac``."""
    return f"{float(t.min()):.2f}–{float(t.max()):.2f}"


def header(
    settings: Any, series: Any, notes: dict, argv: list[str], seconds: float, seed: int = 0
) -> list[str]:
    """The report's lines before its tables: versions, machine, command; the data, the
    contenders' settings and the fitted GP kernel (the weeks, the settings and the kernel read
    from the run's objects; the net and the dropout rate are ``co2.py``'s constants)."""
    s = settings
    command = repo_command(["python", "benchmarks/co2.py", *argv])
    lines = [
        f"torch {_version('torch')}, pyro {_version('pyro-ppl')}, scikit-learn "
        f"{_version('scikit-learn')}, statsmodels {_version('statsmodels')}; {platform.machine()}"
        f", 1 thread; `--seed {seed}`; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; wall "
        f"time {seconds:.0f} s; command: `{command}`",
        "",
        f"Data: statsmodels' weekly Mauna Loa CO2, missing weeks dropped; training: "
        f"{_every(s.train_every)} before 1990, {len(series.t_train)} weeks "
        f"({_span(series.t_train)}); test: {_every(s.test_every)} from 1990 on, "
        f"{len(series.t_test)} weeks "
        f"({_span(series.t_test)}); input: the time in years, target: ppm, both standardised "
        f"on the training weeks; every figure below in ppm.",
        "",
        f"GP reference: scikit-learn's exact GP with the Mauna Loa kernel (trend SE + seasonal "
        f"SE × periodic with a fixed one-year period + rational quadratic + SE + white noise), "
        f"hyperparameters by the marginal likelihood from the classic initial values, L-BFGS-B "
        f"run to its optimum, no restart, `normalize_y=True`, on the same training weeks; "
        f"fitted kernel (standardised "
        f"units): `{notes['kernel']}`.",
        "",
        f'Methods: `bp.make(name, bp.nn.mlp(1, [50, 50], 1), bp.Gaussian(scale="learned"))` '
        f"(dropout: rate 0.1 after each hidden layer), {s.epochs} epochs of minibatches of "
        f"{s.batch_size}, Adam at {s.lr:g} (SG-MCMC: the sampler's own step, `lr=None`), "
        f"{s.samples} predictive samples (the ensemble: its members), Laplace's prior precision "
        f"by its marginal likelihood; each `predictive_gaussian` moment-matched to one "
        f"Gaussian (the noise included). One seed per method; no setting tuned on the test weeks.",
    ]
    if notes.get("gp_bounds"):
        lines += ["", "GP hyperparameters left at a bound of their range (scikit-learn's warning): "
                  + ", ".join(f"`{p}`" for p in notes["gp_bounds"]) + "."]  # fmt: skip
    if notes.get("warnings"):
        told = "; ".join(f"`{m}` {', '.join(w)}" for m, w in notes["warnings"].items())
        lines += ["", f"Warnings raised by the fits: {told}."]
    return lines


def table(rows: dict[str, dict], key: str, fmt: str, seconds: bool = False) -> list[str]:
    """One markdown table: a row per contender, a column per horizon bucket (and the CPU
    seconds of each contender's fit and predictive, if ``seconds``); a row whose fit
    diverged says so in each cell.

    Example:
        >>> cell = {"cover": 0.5, "weeks": 2}
        >>> table({"gp": {"buckets": {"all": cell}, "seconds": 3.0}}, "cover", "{:.2f}", True)
        ['| contender | all (2 weeks) | CPU s |', '|---|---:|---:|', '| gp | 0.50 | 3 |']
    """
    buckets = next(r["buckets"] for r in rows.values() if "buckets" in r)
    head = [f"{b} ({cell['weeks']} weeks)" for b, cell in buckets.items()]
    head += ["CPU s"] if seconds else []
    lines = ["| contender | " + " | ".join(head) + " |", "|---" + "|---:" * len(head) + "|"]
    for label, row in rows.items():
        if "buckets" in row:
            cells = [fmt.format(row["buckets"][b][key]) for b in buckets]
        else:  # a fit that diverged: no predictive
            cells = ["diverged"] * len(buckets)
        cells += [f"{row['seconds']:.0f}"] if seconds else []
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def targets(rows: dict[str, dict], reference: str) -> list[str]:
    """The target, each line with its figures: which methods' 90% intervals cover between
    0.85 and 0.95 of all test weeks; the best method (coverage closest to 0.90, ties broken by
    the NLL) and the best by the NLL; the reference's coverage. A method whose fit diverged
    (``"diverged"`` in place of its buckets) has no predictive and is listed as such. The
    coverage is printed to four decimals with its count of weeks, so that a figure next to a
    bound of the range reads on the right side of it.

    Example:
        >>> def r(c, n):
        ...     return {"buckets": {"all": {"cover": c, "nll": n, "rmse": 1.0, "weeks": 100}}}
        >>> lines = targets({"gp": r(0.5, 2.0), "a": r(0.88, 3.0), "b": r(0.99, 1.0)}, "gp")
        >>> lines[0].split(": ")[-1], lines[1].split(" (")[0]
        ('a', '- the best method by coverage: `a`')
    """
    methods = {m: r["buckets"]["all"] for m, r in rows.items() if m != reference and "buckets" in r}
    failed = [f"`{m}` (diverged {r['diverged']})" for m, r in rows.items() if "buckets" not in r]
    met = [m for m, c in methods.items() if LOW <= c["cover"] <= HIGH]
    best = min(methods, key=lambda m: (abs(methods[m]["cover"] - NOMINAL), methods[m]["nll"]))
    by_nll = min(methods, key=lambda m: methods[m]["nll"])
    ref = rows[reference]["buckets"]["all"]
    inside = "inside" if LOW <= ref["cover"] <= HIGH else "outside"

    def verdict(cover: float) -> str:
        return "met" if LOW <= cover <= HIGH else "missed"

    def figures(c: dict) -> str:
        covered = round(c["cover"] * c["weeks"])
        return (
            f"coverage {c['cover']:.4f} ({covered} of {c['weeks']} weeks), NLL {c['nll']:.2f}, "
            f"RMSE {c['rmse']:.2f} ppm"
        )

    return [
        f"- 90% intervals covering {LOW:.2f}–{HIGH:.2f} of all test weeks: "
        + (", ".join(met) or "none")
        + (f" (no predictive, not counted: {', '.join(failed)})" if failed else ""),
        f"- the best method by coverage: `{best}` (closest to {NOMINAL:.2f}; "
        f"{figures(methods[best])}): target {verdict(methods[best]['cover'])}",
        f"- the best method by NLL: `{by_nll}` ({figures(methods[by_nll])})",
        f"- the GP reference: {figures(ref)} ({inside} {LOW:.2f}–{HIGH:.2f})",
    ]


def render(header_lines: list[str], rows: dict[str, dict], notes: dict) -> str:
    """The whole markdown page: title, header, one table per metric, the targets (the first
    row: the reference).

    Example:
        >>> cell = {"cover": 0.9, "nll": 2.0, "rmse": 1.0, "sd": 1.0, "weeks": 10}
        >>> rows = {"gp": {"buckets": {"all": cell}, "seconds": 1.0},
        ...         "vi": {"buckets": {"all": cell}, "seconds": 2.0}}
        >>> page = render(["header"], rows, {})
        >>> [line.split(": ")[-1] for line in page.splitlines() if "`vi`" in line][0]
        'target met'
        >>> page.count("| vi | ")  # a row in each of the four tables
        4
    """
    lines = [TITLE, "", *header_lines]
    for i, (title, key, fmt) in enumerate(TABLES):
        lines += ["", f"## {title}", "", *table(rows, key, fmt, seconds=i == len(TABLES) - 1)]
    reference = next(iter(rows))
    lines += ["", "## Targets", "", *targets(rows, reference)]
    return "\n".join(lines) + "\n"


def plot(series: Any, bands: dict[str, tuple[np.ndarray, np.ndarray]], path: Path) -> None:
    """One panel per contender (the reference, then :data:`PLOTTED`): the weeks from 1980 on
    (training grey, test black), the contender's mean and 90% band over the test horizon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [next(iter(bands))] + [m for m in PLOTTED if m in bands]
    fig, axes = plt.subplots(len(labels), 1, figsize=(7, 1.9 * len(labels)), sharex=True)
    early = series.t_train >= 1980
    lo = min(float(series.y_train[early].min()), float(series.y_test.min())) - 8
    hi = max(float(series.y_train[early].max()), float(series.y_test.max())) + 8
    for ax, label in zip(np.atleast_1d(axes), labels, strict=True):
        mean, sd = bands[label]
        ax.plot(series.t_train[early], series.y_train[early], ".", ms=1.5, color="0.6")
        ax.plot(series.t_test, series.y_test, ".", ms=1.5, color="k", label="test weeks")
        ax.fill_between(series.t_test, mean - 1.645 * sd, mean + 1.645 * sd, color="C0",
                        alpha=0.35, lw=0, label="90% band")  # fmt: skip
        ax.plot(series.t_test, mean, color="C0", lw=0.8, label="mean")
        ax.axvline(1990.0, color="0.3", lw=0.6, ls="--")
        ax.set_ylim(lo, hi)
        ax.set_ylabel("ppm", fontsize=7)
        ax.set_title(label, fontsize=8, loc="left")
        ax.tick_params(labelsize=7)
    np.atleast_1d(axes)[0].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
