"""What a last-layer method costs over the plain net it is built on, side by side in one process.

For each problem, a plain net is trained by a hand-written PyTorch loop (Adam, the same
minibatches, the squared error or the cross-entropy), what a user without a Bayesian method
writes; then ``VBLL`` and ``SNGP`` train the same architecture with ``fit`` (the same epochs,
batch size and learning rate) and predict in closed form. The table gives each one's fit and
predict time and its ratio to the plain net's (``fit`` with everything it does: the engine's
loop, the method's own step, SNGP's Laplace step over the training rows; ``predict``: one pass
over the test rows against one forward of the plain net).

On the regression, ``DKL`` too: its exact GP (one full-batch step an epoch: the marginal
likelihood reads every row) and its sparse GP (64 inducing points, the same minibatches as the
others), beside the exact GP on the input with no net (Pyro's ``GPRegression``, the same
full-batch steps), the row DKL's cost is read against.

Targets: VBLL's and SNGP's fit at most 1.3x the plain net's; predict in one pass; DKL's cost
against the exact GP's reported.

VBLL runs twice: with its default dense covariance (a Cholesky factor per output, ``O·H²``
parameters: more than the body itself on these nets) and with the diagonal one (``O·H``). Beside
each, the ``vbll`` package's own layer (Harrison et al.'s code, where it is installed: ``pip
install vbll``) on the same body, trained by the loop its README writes (Adam, the same
minibatches, ``train_loss_fn``): the method's cost as its authors wrote it, the floor the target
is read against (not held to it).

Problems: a UCI-sized regression (13-50-1, 400 rows, batch 32, 40 epochs), a digits-sized
classifier (64-100-10, 1,437 rows, batch 64, 20 epochs) and an MNIST-sized one (784-400-400-10,
4,096 rows, batch 128, 5 epochs), on one thread; each time the median of ``--repeats`` runs
after a warm-up.

Run: ``python benchmarks/last_layer_cost.py [--repeats 5] [--quick] [--output PATH]``; a full
run writes ``benchmarks/results/last_layer_cost.md``. Most of a full run is the ``vbll``
package's dense rows (its loss reads each output's Cholesky factor once per row): half an hour
at three repeats on one thread.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from _report import publish  # benchmarks/_report.py (scripts run from this folder)
from methods import median_seconds  # benchmarks/methods.py: median of repeats after a warm-up

import bnn_pyro as bp
from bnn_pyro.methods.dkl.gp import build_gp, gp_objective
from bnn_pyro.nn.param_scope import ParamScope

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "last_layer_cost.md")
FIT_TARGET = 1.3
#: The rows held to the fit target: label -> (method, options); and the regression's GP rows
#: (DKL against the GP).
TARGETED = {
    "vbll": ("vbll", {}),
    "vbll, diagonal covariance": ("vbll", {"covariance": "diagonal"}),
    "sngp": ("sngp", {}),
}
GP_ROWS = {"dkl": {}, "dkl, 64 inducing points": {"inducing_points": 64}}
#: The ``vbll`` package's layer beside each VBLL row: label -> its ``parameterization``.
PEER_ROWS = {
    "vbll package, its own loop": "dense",
    "vbll package, its own loop, diagonal": "diagonal",
}
GP = "exact GP on the input (no net)"


@dataclass
class Problem:
    name: str
    inputs: int
    hidden: int | tuple[int, ...]
    outputs: int
    rows: int
    batch: int
    epochs: int

    @property
    def classifies(self) -> bool:
        return self.outputs > 1

    def data(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Train inputs and targets, and 1,000 test inputs (a random teacher net's labels)."""
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.rows + 1000, self.inputs, generator=g)
        teacher = torch.randn(self.inputs, self.outputs, generator=g)
        f = torch.tanh(x @ teacher)
        y = f.argmax(-1) if self.classifies else f[:, 0] + 0.1 * torch.randn(len(x), generator=g)
        return x[: self.rows], y[: self.rows], x[self.rows :]

    def net(self) -> nn.Module:
        hidden = [self.hidden] if isinstance(self.hidden, int) else list(self.hidden)
        return bp.nn.mlp(self.inputs, hidden, self.outputs)

    def likelihood(self) -> bp.likelihoods.Likelihood:
        return bp.Categorical() if self.classifies else bp.Gaussian(scale="learned")


PROBLEMS = [
    Problem("UCI-sized regression 13-50-1", 13, 50, 1, 400, 32, 40),
    Problem("digits-sized classifier 64-100-10", 64, 100, 10, 1437, 64, 20),
    Problem("MNIST-sized classifier 784-400-400-10", 784, (400, 400), 10, 4096, 128, 5),
]


def hand_loop(
    model: nn.Module,
    loss: Callable[[Any, torch.Tensor], torch.Tensor],
    problem: Problem,
    x: torch.Tensor,
    y: torch.Tensor,
) -> nn.Module:
    """The loop a user writes: Adam at 1e-3 on ``loss(model(xb), yb)`` over ``problem.epochs``
    of minibatches reshuffled by a generator seeded 0 (the same ones for every hand-written
    contender)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(problem.epochs):
        for idx in torch.randperm(len(x), generator=g).split(problem.batch):
            opt.zero_grad()
            loss(model(x[idx]), y[idx]).backward()
            opt.step()
    return model


def plain_fit(problem: Problem, x: torch.Tensor, y: torch.Tensor) -> nn.Module:
    """The plain net by :func:`hand_loop`, on the cross-entropy or the squared error."""
    torch.manual_seed(0)
    if problem.classifies:
        return hand_loop(problem.net(), F.cross_entropy, problem, x, y)
    return hand_loop(problem.net(), lambda out, yb: F.mse_loss(out[:, 0], yb), problem, x, y)


def method_fit(
    name: str, problem: Problem, x: torch.Tensor, y: torch.Tensor, **options: object
) -> bp.BaseBayesianMethod:
    torch.manual_seed(0)
    method = bp.make(name, problem.net(), problem.likelihood(), **options)
    method.fit(x, y, epochs=problem.epochs, batch_size=problem.batch, lr=1e-3, progress=False,
               seed=0)  # fmt: skip
    return method


def peer_fit(
    problem: Problem, x: torch.Tensor, y: torch.Tensor, parameterization: str
) -> nn.Module:
    """The ``vbll`` package's last layer (``Regression`` or ``DiscClassification``, its
    defaults but the weight ``1 / N``) on the plain net's body, trained as its README writes
    (:func:`hand_loop` on ``train_loss_fn``)."""
    import vbll  # the peers extra: only where it is installed

    torch.manual_seed(0)
    body = problem.net()[:-1]  # bp.nn.mlp is an nn.Sequential ending in its last nn.Linear
    hidden = problem.hidden if isinstance(problem.hidden, int) else problem.hidden[-1]
    layer = (vbll.DiscClassification if problem.classifies else vbll.Regression)(
        hidden, problem.outputs, 1.0 / len(x), parameterization=parameterization
    )
    targets = y if problem.classifies else y.unsqueeze(-1)
    return hand_loop(
        nn.Sequential(body, layer), lambda out, yb: out.train_loss_fn(yb), problem, x, targets
    )


def gp_fit(problem: Problem, x: torch.Tensor, y: torch.Tensor) -> torch.nn.Module:
    """The exact GP on the input: Pyro's ``GPRegression`` with an RBF kernel, its kernel and
    noise trained on the marginal likelihood per row by Adam at 1e-3, one full-batch step an
    epoch (as DKL's exact GP steps)."""
    model = build_gp(problem.inputs, 1, kernel="rbf", inducing_points=None, lengthscale=1.0,
                     variance=1.0, jitter=1e-6)  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with ParamScope():
        for _ in range(problem.epochs):
            opt.zero_grad()
            gp_objective(model, x, y.unsqueeze(0), len(x)).backward()
            opt.step()
    return model


def gp_predict(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad(), ParamScope():
        return model(x, full_cov=False)


def measure(problem: Problem, repeats: int, epochs: int | None = None) -> list[dict]:
    """One row per contender: fit and predict seconds and their ratios to the plain net's."""
    if epochs is not None:
        problem = Problem(**{**problem.__dict__, "epochs": epochs})
    x, y, x_test = problem.data()
    plain = plain_fit(problem, x, y)
    base_fit = median_seconds(lambda: plain_fit(problem, x, y), repeats)
    with torch.no_grad():
        base_predict = median_seconds(lambda: plain(x_test), repeats)
    rows = [{"method": "plain net", "fit": base_fit, "predict": base_predict}]
    contenders = dict(TARGETED)
    if not problem.classifies:
        contenders.update({label: ("dkl", options) for label, options in GP_ROWS.items()})
    for label, (name, options) in contenders.items():
        fitted = method_fit(name, problem, x, y, **options)
        rows.append({
            "method": label,
            "fit": median_seconds(lambda n=name, o=options: method_fit(n, problem, x, y, **o),
                                  repeats),
            "predict": median_seconds(lambda m=fitted: m.predict(x_test), repeats),
        })  # fmt: skip
    if _has_vbll():
        for label, parameterization in PEER_ROWS.items():
            peer = peer_fit(problem, x, y, parameterization)
            rows.append({
                "method": label,
                "fit": median_seconds(
                    lambda p=parameterization: peer_fit(problem, x, y, p), repeats
                ),
                "predict": median_seconds(lambda m=peer: m(x_test).predictive, repeats),
            })  # fmt: skip
    if not problem.classifies:
        gp = gp_fit(problem, x, y)
        rows.append({
            "method": GP,
            "fit": median_seconds(lambda: gp_fit(problem, x, y), repeats),
            "predict": median_seconds(lambda: gp_predict(gp, x_test), repeats),
        })  # fmt: skip
    for row in rows:
        row["fit_ratio"], row["predict_ratio"] = (
            row["fit"] / base_fit,
            row["predict"] / base_predict,
        )
    return rows


def _has_vbll() -> bool:
    try:
        import vbll  # noqa: F401
    except ImportError:
        return False
    return True


def table(results: dict[str, list[dict]]) -> str:
    lines = [
        "| problem | method | fit (ms) | fit / plain | predict 1,000 rows (ms) | predict / plain |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for problem, rows in results.items():
        for r in rows:
            lines.append(
                f"| {problem} | {r['method']} | {1e3 * r['fit']:.1f} | {r['fit_ratio']:.2f}x | "
                f"{1e3 * r['predict']:.2f} | {r['predict_ratio']:.1f}x |"
            )
    return "\n".join(lines)


def verdicts(results: dict[str, list[dict]]) -> list[str]:
    """One line per targeted row: its fit ratio on each problem, in order, and on how many it
    meets the target; one per ``vbll`` package row, its fit ratio and our VBLL row's fit against
    it; one per DKL row, its fit and predict against the exact GP on the input's."""
    lines = []
    for name in TARGETED:
        ratios = [r["fit_ratio"] for rows in results.values() for r in rows if r["method"] == name]
        met = sum(ratio <= FIT_TARGET for ratio in ratios)
        lines.append(
            f"- {name}: fit {' / '.join(f'{r:.2f}x' for r in ratios)} the plain net's "
            f"(target {FIT_TARGET}x: met on {met} of {len(ratios)})"
        )
    for label, parameterization in PEER_ROWS.items():
        ours = "vbll" if parameterization == "dense" else "vbll, diagonal covariance"
        tables = [{r["method"]: r for r in rows} for rows in results.values()]
        ratios = [by[ours]["fit"] / by[label]["fit"] for by in tables if label in by]
        if ratios:
            peer = [by[label]["fit_ratio"] for by in tables if label in by]
            lines.append(
                f"- {label}: fit {' / '.join(f'{r:.2f}x' for r in peer)} the plain net's; "
                f"{ours}'s fit {' / '.join(f'{r:.2f}x' for r in ratios)} its (no target)"
            )
    for problem, rows in results.items():
        by_name = {r["method"]: r for r in rows}
        if GP not in by_name:
            continue
        gp = by_name[GP]
        for label in GP_ROWS:
            r = by_name[label]
            lines.append(
                f"- {label} ({problem}): fit {r['fit'] / gp['fit']:.2f}x and predict "
                f"{r['predict'] / gp['predict']:.2f}x the {GP}'s (reported, no target)"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 repeat, 2 epochs (a smoke run)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    repeats, epochs = (1, 2) if args.quick else (args.repeats, None)
    results = {p.name: measure(p, repeats, epochs) for p in PROBLEMS}
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = (
        f"torch {torch.__version__}, 1 thread, median of {repeats} runs; {stamp}; "
        "command: python benchmarks/last_layer_cost.py"
    )
    text = "\n".join([head, "", table(results), "", *verdicts(results), ""])
    output = args.output if args.output is not None else (None if args.quick else RESULTS)
    publish(text, output)


if __name__ == "__main__":
    main()
