"""Rotated digits: every classifier under a gradual shift, offline (after Ovadia et al. 2019).

Every classifier of :data:`bnn_pyro.METHODS` (those whose registry entry ``classifies``) and a
plain network train on scikit-learn's bundled 8×8 digits (``load_digits``, no download), pixels
scaled from ``0..16`` to ``[0, 1]`` (so the background is 0 and a rotation pads with
background), one seeded, stratified 70/30 split. They are then tested on the test images
rotated by :data:`ANGLES` degrees (:func:`rotate`: bilinear, about the image's centre, the
corners filled with 0): the further the rotation, the further the test images are from the
training images, and the less a network should trust its answer.

Per method and angle, from the class probabilities ``predict(x)`` gives as its mean
(:mod:`bnn_pyro.metrics`): accuracy, NLL (mean ``-log p(true class)``, probabilities clamped at
1e-12) and ECE (15 equal-width confidence bins). The plain network and the methods are built,
trained and scored as in ``benchmarks/ood.py`` (its ``fit_plain``, ``build_method``,
``fit_method`` and scorers, imported from it), on the same 64→100→10 MLP; one seed each.

Run: ``python benchmarks/rotated_digits.py [--quick] [--seed 0] [--out FOLDER]``; a run writes
``rotated_digits.md`` (copied into the Results page by ``update_readme.py``),
``rotated_digits.json`` (the same numbers) and ``rotated_digits.png`` (NLL and ECE against the
angle) into ``--out`` (default ``benchmarks/results``). ``--quick``: two epochs and ten
predictive samples, a smoke run whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from importlib.metadata import version

import pyro
import torch

import bnn_pyro as bp
from bnn_pyro.metrics import accuracy, expected_calibration_error, nll
from bnn_pyro.registry import method_spec

HERE = os.path.dirname(os.path.abspath(__file__))
# ood.py imports its siblings from this folder (it runs as a script from here); on sys.path only
# while it loads, so that a test run importing this file leaves the folder off sys.path
_ADDED = HERE not in sys.path
if _ADDED:
    sys.path.insert(0, HERE)
try:
    from _report import publish, repo_command  # noqa: E402
    from ood import (  # noqa: E402
        FULL,
        QUICK,
        Scorer,
        Settings,
        build_method,
        fit_method,
        fit_plain,
        method_scorer,
        plain_scorer,
    )
    from ood_data import DIGITS_HIDDEN, Problem  # noqa: E402
    from ood_report import PLAIN  # noqa: E402
finally:
    if _ADDED:
        sys.path.remove(HERE)

RESULTS = os.path.join(HERE, "results")
NAME = "rotated_digits"
#: The test images' rotations, in degrees (counter-clockwise as the image is drawn).
ANGLES = (0, 15, 30, 45, 60, 90, 120, 180)
#: The Reading's "far" angles: the mean NLL over the angles at least this large.
FAR = 45
TEST_FRACTION = 0.3
BINS = 15  # ECE's equal-width confidence bins
#: The full run: ood.py's FULL settings (fourteen methods and the plain network on the 1,257
#: training images take about five minutes of one core).
SETTINGS: Settings = FULL
METRICS = ("accuracy", "nll", "ece")
TITLES = {"accuracy": "Accuracy", "nll": "NLL (nats)", "ece": f"ECE ({BINS} bins)"}

Table = dict[str, dict[str, dict[str, float]]]  # row -> angle (as text) -> metric -> value


def _say(message: str) -> None:
    print(f"[{NAME}] {message}", file=sys.stderr, flush=True)


# --- data ----------------------------------------------------------------------------------
def rotate(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """``(N, H, W)`` images rotated by ``degrees`` counter-clockwise (as drawn, row 0 on top)
    about their centre, bilinear, with 0 where a rotated pixel falls outside the image.

    A multiple of 90 degrees of a square image moves pixel centres onto pixel centres, so it
    equals :func:`torch.rot90` up to float round-off; 0 degrees is the identity.

    Example:
        >>> image = torch.arange(9.0).reshape(1, 3, 3)  # no rotational symmetry
        >>> torch.allclose(rotate(image, 90), torch.rot90(image, 1, dims=(1, 2)), atol=1e-6)
        True
        >>> torch.allclose(rotate(image, 0), image, atol=1e-6)
        True
    """
    if images.dim() != 3:
        raise ValueError(f"images must be (N, H, W), got {tuple(images.shape)}")
    a = math.radians(degrees)
    # affine_grid maps each output position (x right, y down) to the input position it reads
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]])
    theta = theta.to(images).expand(len(images), 2, 3)
    size = [len(images), 1, *images.shape[1:]]
    grid = torch.nn.functional.affine_grid(theta, size, align_corners=False)
    out = torch.nn.functional.grid_sample(
        images[:, None], grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )
    return out[:, 0]


def digits_problem(seed: int) -> Problem:
    """The digits split 70/30, stratified by class (``seed``), pixels / 16; its ``shifts``: the
    test images rotated by each of :data:`ANGLES` (keys: the angle as text), ``(N, 64)`` each.

    Example:
        >>> problem = digits_problem(0)
        >>> len(problem.X_train), len(problem.X_in), list(problem.shifts)[:3], problem.classes
        (1257, 540, ['0', '15', '30'], 10)
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    X_train, X_test, y_train, y_test = train_test_split(
        data.data / 16.0, data.target, test_size=TEST_FRACTION, stratify=data.target,
        random_state=seed,
    )  # fmt: skip
    X_train, X_test = (torch.as_tensor(x, dtype=torch.float32) for x in (X_train, X_test))
    side = math.isqrt(X_test.shape[1])
    square = X_test.reshape(-1, side, side)
    shifts = {str(angle): rotate(square, angle).reshape(len(X_test), -1) for angle in ANGLES}
    return Problem(
        "rotated digits",
        list(DIGITS_HIDDEN),
        X_train,
        torch.as_tensor(y_train, dtype=torch.long),
        X_test,
        torch.as_tensor(y_test, dtype=torch.long),
        shifts,
    )


# --- the contenders and their scores -------------------------------------------------------
def classifiers() -> list[str]:
    """The methods of :data:`bnn_pyro.METHODS` that fit a ``Categorical`` likelihood, in order.

    Example:
        >>> names = classifiers()
        >>> names[0], "dkl" in names
        ('vi', False)
    """
    return [name for name in bp.METHODS if method_spec(name).classifies]


def metrics(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Accuracy, NLL (probabilities clamped at 1e-12) and ECE (:data:`BINS` bins) of ``(N, C)``
    class probabilities against ``(N,)`` labels.

    Example:
        >>> probs = torch.tensor([[0.75, 0.25]] * 4)
        >>> {k: round(v, 4) for k, v in metrics(probs, torch.tensor([0, 0, 0, 1])).items()}
        {'accuracy': 0.75, 'nll': 0.5623, 'ece': 0.0}
    """
    return {
        "accuracy": accuracy(probs, labels),
        "nll": nll(probs, labels, eps=1e-12),
        "ece": expected_calibration_error(probs, labels, n_bins=BINS),
    }


def evaluate(scorer: Scorer, problem: Problem) -> dict[str, dict[str, float]]:
    """Per rotation of ``problem`` (its ``shifts``): :func:`metrics` of ``scorer``'s mean."""
    out = {}
    for angle, x in problem.shifts.items():
        probs = scorer(x)[0].double()
        out[angle] = metrics(probs / probs.sum(-1, keepdim=True), problem.y_in)
    return out


def run(problem: Problem, settings: Settings, seed: int) -> tuple[Table, dict[str, float]]:
    """The plain network and every :func:`classifiers` method on ``problem``: their
    :func:`evaluate` by row, and each row's seconds (fit and scoring)."""
    table: Table = {}
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    table[PLAIN] = evaluate(plain_scorer(fit_plain(problem, settings, seed)), problem)
    seconds[PLAIN] = time.perf_counter() - start
    _say(f"{PLAIN} {seconds[PLAIN]:.1f} s")
    for name in classifiers():
        start = time.perf_counter()
        model = build_method(name, problem, settings, seed)
        fit_method(model, name, problem, settings, seed)
        table[name] = evaluate(method_scorer(model, seed), problem)
        seconds[name] = time.perf_counter() - start
        _say(f"{name} {seconds[name]:.1f} s")
    return table, seconds


# --- the report ----------------------------------------------------------------------------
def metric_table(table: Table, metric: str) -> list[str]:
    """A markdown table of one metric: a row per contender, a column per angle.

    Example:
        >>> t = {"a": {"0": {"nll": 0.1}, "90": {"nll": 2.0}}}
        >>> metric_table(t, "nll")
        ['| method | 0° | 90° |', '|---|---:|---:|', '| a | 0.100 | 2.000 |']
    """
    angles = list(next(iter(table.values())))
    lines = ["| method | " + " | ".join(f"{a}°" for a in angles) + " |"]
    lines.append("|---|" + "---:|" * len(angles))
    for row, by_angle in table.items():
        cells = " | ".join(f"{by_angle[a][metric]:.3f}" for a in angles)
        lines.append(f"| {row} | {cells} |")
    return lines


def far_means(table: Table, far: float = FAR) -> dict[str, float]:
    """Each row's mean NLL over the angles ``>= far``.

    Example:
        >>> far_means({"a": {"0": {"nll": 0.1}, "45": {"nll": 1.0}, "90": {"nll": 2.0}}})
        {'a': 1.5}
    """
    out = {}
    for row, by_angle in table.items():
        values = [v["nll"] for a, v in by_angle.items() if float(a) >= far]
        out[row] = sum(values) / len(values)
    return out


def reading(table: Table, plain: str = PLAIN) -> list[str]:
    """The Reading, computed: the lowest NLL and ECE at each angle, and each row's mean NLL over
    the angles ``>= FAR`` beside the plain network's.

    Example:
        >>> t = {"plain": {"0": {"nll": 0.2, "ece": 0.05}, "90": {"nll": 3.0, "ece": 0.4}},
        ...      "m": {"0": {"nll": 0.3, "ece": 0.02}, "90": {"nll": 2.0, "ece": 0.3}}}
        >>> reading(t, plain="plain")[2]
        '- 0°: lowest NLL plain (0.200; plain 0.200), lowest ECE m (0.020; plain 0.050)'
    """
    lines = ["Per angle, the row with the lowest NLL and the lowest ECE:", ""]
    for angle in next(iter(table.values())):
        parts = []
        for metric, label in (("nll", "NLL"), ("ece", "ECE")):
            best = min(table, key=lambda r: table[r][angle][metric])
            parts.append(
                f"lowest {label} {best} ({table[best][angle][metric]:.3f}; "
                f"{plain} {table[plain][angle][metric]:.3f})"
            )
        lines.append(f"- {angle}°: " + ", ".join(parts))
    means = far_means(table)
    below = [r for r in means if r != plain and means[r] < means[plain]]
    lines += [
        "",
        f"Mean NLL over the angles ≥ {FAR}°, lowest first ({plain}: {means[plain]:.3f}; "
        f"{len(below)} of {len(means) - 1} methods below it):",
        "",
        "| method | mean NLL, angles ≥ " + f"{FAR}° | minus {plain}'s |",
        "|---|---:|---:|",
    ]
    for row in sorted(means, key=means.get):
        lines.append(f"| {row} | {means[row]:.3f} | {means[row] - means[plain]:+.3f} |")
    return lines


def render(table: Table, header: Sequence[str]) -> str:
    """The report: title, ``header``, a table per metric and the Reading."""
    lines = ["# Rotated digits: every classifier under a gradual shift", "", *header]
    for metric in METRICS:
        lines += ["", f"## {TITLES[metric]}", "", *metric_table(table, metric)]
    lines += ["", "## Reading", "", *reading(table)]
    return "\n".join(lines) + "\n"


def describe(problem: Problem, settings: Settings) -> list[str]:
    """The report's paragraph on data, nets and training, every figure read from the run."""
    net = "→".join(map(str, [problem.X_train.shape[1], *problem.hidden, problem.classes]))
    return [
        "",
        f"scikit-learn's bundled 8×8 digits, pixels / 16, one stratified "
        f"{1 - TEST_FRACTION:.0%}/{TEST_FRACTION:.0%} split: {len(problem.X_train)} training "
        f"images (unrotated), {len(problem.X_in)} test images rotated by each angle (bilinear, "
        f"about the centre, corners 0). Every net: the {net} MLP, {settings.epochs} epochs, "
        f"minibatches of {settings.batch_size}, one seed. The methods: `bp.make(name, mlp, "
        f"bp.Categorical())` with their own defaults, {settings.samples} predictive samples "
        f"(the deep ensemble: its members), built and trained as in `benchmarks/ood.py` "
        f"(Laplace's prior precision by its marginal likelihood). The {PLAIN}: the same MLP, "
        f"cross-entropy, Adam at 1e-3, scored by its softmax. Metrics of `predict`'s mean "
        f"class probabilities: accuracy, NLL (mean −log p(true class), probabilities clamped "
        f"at 1e-12) and ECE ({BINS} equal-width confidence bins).",
    ]


def plot(table: Table, path: str) -> None:
    """NLL and ECE against the angle, one line per row (the plain network black, dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    colours = plt.get_cmap("tab20")
    for ax, metric in zip(axes, ("nll", "ece"), strict=True):
        for i, (row, by_angle) in enumerate(table.items()):
            angles = [float(a) for a in by_angle]
            values = [v[metric] for v in by_angle.values()]
            style = {"color": "k", "ls": "--", "lw": 2} if row == PLAIN else {
                "color": colours(i % 20), "lw": 1.2}  # fmt: skip
            ax.plot(angles, values, marker="o", ms=3, label=row, **style)
        ax.set_xlabel("rotation of the test images (degrees)")
        ax.set_ylabel(TITLES[metric])
        ax.set_xticks([float(a) for a in next(iter(table.values()))])
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside, not over
    fig.suptitle("Rotated digits: trained upright, tested rotated")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def write(table: Table, header: Sequence[str], out: str, extra: Mapping[str, object]) -> str:
    """Print the report and write ``rotated_digits.{md,json,png}`` into ``out``; returns it."""
    text = render(table, header)
    os.makedirs(out, exist_ok=True)
    publish(text, os.path.join(out, f"{NAME}.md"))
    with open(os.path.join(out, f"{NAME}.json"), "w", encoding="utf-8") as handle:
        json.dump({"header": list(header), **extra, "results": table}, handle, indent=1)
        handle.write("\n")
    plot(table, os.path.join(out, f"{NAME}.png"))
    return text


def main(argv: list[str] | None = None) -> int:
    """Train every contender, test it at every angle, print and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs, 10 samples (smoke)")
    parser.add_argument("--seed", type=int, default=0, help="split, weights and draws (>= 0)")
    parser.add_argument("--out", default=RESULTS, help="output folder (benchmarks/results)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    settings = QUICK if args.quick else SETTINGS
    wall = time.perf_counter()
    pyro.set_rng_seed(args.seed)
    problem = digits_problem(args.seed)
    with warnings.catch_warnings(), bp.threads(1):
        warnings.simplefilter("ignore", bp.PosteriorCollapseWarning)  # --quick's short fits
        table, seconds = run(problem, settings, args.seed)
    command = repo_command(["python", "benchmarks/rotated_digits.py", *argv])
    header = [
        f"torch {torch.__version__}, pyro {pyro.__version__}, scikit-learn "
        f"{version('scikit-learn')}; `--seed {args.seed}`; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; wall time "
        f"{time.perf_counter() - wall:.0f} s on 1 thread; command: `{command}`",
        *describe(problem, settings),
    ]
    extra = {"angles": list(ANGLES), "settings": asdict(settings), "seconds": seconds}
    write(table, header, args.out, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
