"""Training-step and prediction time: bnn_pyro against pure torch and plain Pyro, one process.

Contenders, on the same data, net and batch (128), one thread:

* ``torch MLP``: a deterministic net, Adam, one forward/backward/step (the floor).
* ``torch BBB``: pure-torch Bayes by Backprop: weights sampled in weight space, the closed-form
  Gaussian KL, ``torch.optim.Adam`` (Blundell et al. 2015) -- the reference of the ratios.
* ``plain Pyro``: ``PyroModule[nn.Linear]`` + ``PyroSample`` + ``AutoNormal`` + ``Trace_ELBO`` +
  ``SVI`` with ``pyro.optim.Adam``, the way Pyro's documentation builds a BNN.
* ``bnn_pyro fit``: ``VariationalBNN.fit`` on its default path (``Trace_ELBO``), timed over whole
  epochs (batching and bookkeeping included) and divided by the number of steps; beside it the
  same with ``elbo="meanfield"`` (``TraceMeanField_ELBO``: the closed-form KL, as torch BBB
  computes it; the demo's and the scikit-learn estimators' setting), and with ``compile=True``
  (the loss compiled by ``torch.compile``, compiled once before the timing), each in a table of
  its own.

Prediction: ``VariationalBNN.predict(num_samples=100)`` on 1,000 points against
``pyro.infer.Predictive(parallel=False)`` with the same model and guide.

Contenders are timed round-robin (see :func:`compare`), so load changes hit all alike.
Run: ``python benchmarks/step_time.py [--quick]``. Prints the tables and (full runs) writes them
to ``benchmarks/results/step_time.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timezone

import pyro
import torch
import torch.nn as nn
import torch.nn.functional as F
from _contenders import plain_pyro_svi  # benchmarks/_contenders.py (run from this folder)
from _report import publish  # benchmarks/_report.py (scripts run from this folder)
from pyro.infer import Predictive

import bnn_pyro as bp

BATCH = 128
EPOCHS_PER_CALL = 5
#: The step's target: bnn_pyro's fit step at most this many times pure-torch BBB's, both nets.
STEP_TARGET = 1.0
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "step_time.md")


def compare(fns: dict[str, Callable[[], object]], repeats: int, inner: int) -> dict[str, float]:
    """Median seconds per call of each function, measured round-robin.

    Each of the ``repeats`` rounds times ``inner`` calls of every contender in turn, so a change
    in machine load during the run hits all contenders alike and the ratios stay fair. Timed
    runs (``repeats > 1``) first warm every contender up; a single round is a smoke run (every
    path once, ``--quick``), whose figures are not timings, so it skips the warm-up.
    """
    for fn in fns.values():
        for _ in range(max(2, inner // 4) if repeats > 1 else 0):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(t) for name, t in times.items()}


def make_data(sizes: list[int], n: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, sizes[0], generator=g)
    classification = sizes[-1] > 1
    if classification:
        y = torch.randint(0, sizes[-1], (n,), generator=g)
    else:
        y = X[:, :3].sum(-1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g)
    return X, y, classification


def nll_sum(out: torch.Tensor, y: torch.Tensor, classification: bool) -> torch.Tensor:
    if classification:
        return F.cross_entropy(out, y, reduction="sum")
    return 0.5 * ((out - y) ** 2).sum()


def torch_mlp_step(sizes, X, y, classification):
    net = bp.nn.mlp(sizes[0], sizes[1:-1], sizes[-1])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    xb, yb = X[:BATCH], y[:BATCH]

    def step():
        opt.zero_grad()
        nll_sum(net(xb), yb, classification).backward()
        opt.step()

    return step


def torch_bbb_step(sizes, X, y, classification, fused=False):
    n = X.shape[0]
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
        layer = nn.Linear(d_in, d_out)
        for p in (layer.weight, layer.bias):
            params.append(
                (nn.Parameter(p.detach().clone()), nn.Parameter(torch.full_like(p, -4.6)))
            )
    opt = torch.optim.Adam([t for pair in params for t in pair], lr=1e-3, fused=fused)
    xb, yb = X[:BATCH], y[:BATCH]

    def step():
        opt.zero_grad()
        h, kl = xb, 0.0
        for i in range(0, len(params), 2):
            (wm, wr), (bm, br) = params[i], params[i + 1]
            ws, bs = F.softplus(wr), F.softplus(br)
            w = wm + ws * torch.randn_like(ws)
            b = bm + bs * torch.randn_like(bs)
            for m, s in ((wm, ws), (bm, bs)):  # KL(N(m, s^2) || N(0, 1)), closed form
                kl = kl + (0.5 * (s * s + m * m - 1.0) - torch.log(s)).sum()
            h = F.linear(h, w, b)
            if i < len(params) - 2:
                h = F.relu(h)
        loss = nll_sum(h, yb, classification) * (n / BATCH) + kl
        loss.backward()
        opt.step()

    return step


def plain_pyro_step(sizes, X, y, classification):
    svi = plain_pyro_svi(sizes, X.shape[0], classification)
    xb, yb = X[:BATCH], y[:BATCH]
    return lambda: svi.step(xb, yb)


def bnn_pyro_fit(
    sizes, X, y, classification, elbo="trace", compile=False, epochs_per_call=EPOCHS_PER_CALL
):
    likelihood = bp.Categorical() if classification else bp.Gaussian(scale=1.0)
    bnn = bp.VariationalBNN(bp.nn.mlp(sizes[0], sizes[1:-1], sizes[-1]), likelihood)
    options = dict(batch_size=BATCH, lr=1e-3, progress=False, elbo=elbo, compile=compile)
    bnn.fit(X, y, epochs=1, seed=0, **options)  # (compile=True: compiles here, once)
    steps = epochs_per_call * X.shape[0] // BATCH

    def call() -> None:  # one fit() of epochs_per_call epochs: its set-up counts too
        bnn.fit(X, y, epochs=epochs_per_call, **options)

    return bnn, call, steps


def bench_training(
    sizes: list[int], n_batches: int, repeats: int, inner: int, epochs: int = EPOCHS_PER_CALL
):
    X, y, classification = make_data(sizes, BATCH * n_batches)
    bnn, epoch, steps = bnn_pyro_fit(sizes, X, y, classification, epochs_per_call=epochs)
    per_epoch = {
        "torch MLP": torch_mlp_step(sizes, X, y, classification),
        "torch BBB": torch_bbb_step(sizes, X, y, classification),
        "torch BBB, fused Adam": torch_bbb_step(sizes, X, y, classification, fused=True),
        "plain Pyro": plain_pyro_step(sizes, X, y, classification),
    }
    # one call = `steps` steps for every contender, so all are timed alike
    fns = {name: _repeat(step, steps) for name, step in per_epoch.items()}
    fns["bnn_pyro fit"] = epoch
    fns["bnn_pyro fit, meanfield"] = bnn_pyro_fit(
        sizes, X, y, classification, "meanfield", epochs_per_call=epochs
    )[1]
    fns["bnn_pyro fit, compile=True"] = bnn_pyro_fit(
        sizes, X, y, classification, compile=True, epochs_per_call=epochs
    )[1]
    times = compare(fns, repeats, inner)
    return {name: t / steps for name, t in times.items()}, bnn


def step_verdict(ratios: list[tuple[str, float]]) -> str:
    """The line that holds each net's ``bnn_pyro fit / torch BBB`` to :data:`STEP_TARGET`.

    Example:
        >>> print(step_verdict([("small", 0.98), ("large", 1.04)]))
        - bnn_pyro fit / torch BBB: 0.98× (small), 1.04× (large); target ≤ 1.0×: met on 1 of 2
    """
    met = sum(r <= STEP_TARGET for _, r in ratios)
    figures = ", ".join(f"{r:.2f}× ({net})" for net, r in ratios)
    return (
        f"- bnn_pyro fit / torch BBB: {figures}; target ≤ {STEP_TARGET}×: "
        f"met on {met} of {len(ratios)}"
    )


def _repeat(step: Callable[[], object], times: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(times):
            step()

    return run


def bench_predict(bnn: bp.VariationalBNN, repeats: int) -> dict[str, float]:
    """predict(num_samples=100) on 1,000 points against Pyro's Predictive and a plain loop."""
    x = torch.randn(1000, 13, generator=torch.Generator().manual_seed(1))
    draws = bnn.sample_posterior(100, seed=0)
    w1, b1 = draws["net.0.weight"], draws["net.0.bias"]
    w2, b2 = draws["net.2.weight"], draws["net.2.bias"]

    def torch_loop() -> torch.Tensor:  # the same arithmetic, one sample at a time, no Pyro
        return torch.stack(
            [F.linear(torch.relu(F.linear(x, w1[s], b1[s])), w2[s], b2[s]) for s in range(100)]
        )

    def torch_loop_drawing() -> tuple[torch.Tensor, torch.Tensor]:  # predict's whole job
        d = bnn.sample_posterior(100, seed=0)
        v1, c1, v2, c2 = (
            d[k] for k in ("net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias")
        )
        out = torch.stack(
            [F.linear(torch.relu(F.linear(x, v1[s], c1[s])), v2[s], c2[s]) for s in range(100)]
        )
        return out.mean(0), out.var(0)

    sequential = Predictive(bnn.model, guide=bnn.guide, num_samples=100, parallel=False)
    parallel = Predictive(bnn.model, guide=bnn.guide, num_samples=100, parallel=True)
    fast = compare(
        {
            "bnn_pyro predict": lambda: bnn.predict(x, num_samples=100),
            "Predictive(parallel=True)": lambda: parallel(x),
            "plain torch loop over samples": torch_loop,
            "plain torch loop, drawing the weights": torch_loop_drawing,
        },
        repeats,
        3,
    )
    slow = compare(
        {
            "Predictive(parallel=False)": lambda: sequential(x),
            **{"bnn_pyro predict ": lambda: bnn.predict(x, num_samples=100)},
        },
        min(repeats, max(3, repeats // 2)),  # the slow one: fewer rounds, never more than asked
        1,
    )
    fast["Predictive(parallel=False)"] = slow["Predictive(parallel=False)"]
    fast["bnn_pyro predict (beside it)"] = slow["bnn_pyro predict "]
    return fast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one repeat, fewer batches and epochs (a smoke run)"
    )
    parser.add_argument("--output", default=RESULTS, help="markdown file for the tables")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # the timed fits are a few epochs each: their stds have not moved yet, by design
    warnings.simplefilter("ignore", bp.PosteriorCollapseWarning)
    repeats, inner = (1, 1) if args.quick else (9, 6)  # quick: every path once, no timing
    # quick: a quarter of the batches (whole ones: one compiled graph per net) and one epoch
    # per call; every contender and table as in the full run
    shrink, epochs = (4, 1) if args.quick else (1, EPOCHS_PER_CALL)
    lines = [
        f"torch {torch.__version__}, pyro {pyro.__version__}, 1 thread, batch {BATCH}; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: python benchmarks/step_time.py",
        "",
        "| net | torch MLP | torch BBB | torch BBB, fused Adam | plain Pyro | bnn_pyro fit "
        "| plain Pyro / BBB | bnn_pyro / BBB | bnn_pyro / BBB fused |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    bnn_small = None
    meanfield = [
        "",
        "| net | bnn_pyro fit, elbo='meanfield' | / torch BBB | / torch BBB fused | "
        "/ bnn_pyro fit (Trace_ELBO) |",
        "|---|---|---|---|---|",
    ]
    compiled = [
        "",
        "| net | bnn_pyro fit, compile=True | / torch BBB | / torch BBB fused | "
        "/ bnn_pyro fit (eager) |",
        "|---|---|---|---|---|",
    ]
    verdicts = []  # the step against torch BBB, per net
    for sizes, n_batches, scale in (([13, 50, 1], 20, 1), ([784, 400, 400, 10], 8, 3)):
        n_batches //= shrink
        times, bnn = bench_training(sizes, n_batches, repeats, max(1, inner // scale), epochs)
        bnn_small = bnn_small or bnn
        ms = {k: v * 1e3 for k, v in times.items()}
        mf = ms["bnn_pyro fit, meanfield"]
        meanfield.append(
            f"| {'→'.join(map(str, sizes))} | {mf:.3f} ms | {mf / ms['torch BBB']:.2f}× | "
            f"{mf / ms['torch BBB, fused Adam']:.2f}× | {mf / ms['bnn_pyro fit']:.2f}× |"
        )
        cc = ms["bnn_pyro fit, compile=True"]
        compiled.append(
            f"| {'→'.join(map(str, sizes))} | {cc:.3f} ms | {cc / ms['torch BBB']:.2f}× | "
            f"{cc / ms['torch BBB, fused Adam']:.2f}× | {cc / ms['bnn_pyro fit']:.2f}× |"
        )
        bbb, fused = ms["torch BBB"], ms["torch BBB, fused Adam"]
        lines.append(
            f"| {'→'.join(map(str, sizes))} | {ms['torch MLP']:.3f} ms | {bbb:.3f} ms | "
            f"{fused:.3f} ms | {ms['plain Pyro']:.3f} ms | {ms['bnn_pyro fit']:.3f} ms | "
            f"{ms['plain Pyro'] / bbb:.2f}× | {ms['bnn_pyro fit'] / bbb:.2f}× | "
            f"{ms['bnn_pyro fit'] / fused:.2f}× |"
        )
        verdicts.append((f"{'→'.join(map(str, sizes))}", ms["bnn_pyro fit"] / bbb))
    lines += meanfield + compiled
    pred = {k: v * 1e3 for k, v in bench_predict(bnn_small, repeats).items()}
    ours = pred["bnn_pyro predict"]
    lines += [
        "",
        "| predict, 100 samples, 1,000 points, 13→50→1 | time | bnn_pyro predict is faster by |",
        "|---|---|---|",
    ]
    for name in (
        "bnn_pyro predict",
        "plain torch loop over samples",
        "plain torch loop, drawing the weights",
        "Predictive(parallel=True)",
        "Predictive(parallel=False)",
    ):
        ref = pred["bnn_pyro predict (beside it)"] if name == "Predictive(parallel=False)" else ours
        lines.append(f"| {name} | {pred[name]:.2f} ms | {pred[name] / ref:.1f}× |")
    lines += [
        "",
        step_verdict(verdicts),
        "",
        f"Targets: bnn_pyro / BBB ≤ {STEP_TARGET}× at both nets; predict no "
        "slower than a plain torch loop over samples (≤ 1.0×) and ≥ 12× faster than "
        'Predictive(parallel=False). "torch BBB" uses torch.optim.Adam\'s default (per-tensor) '
        "kernel, the one a hand-written loop gets; bnn_pyro's default optimizer is Adam with "
        "the fused kernel, so the last column compares like with like. The first plain loop "
        "takes weights drawn beforehand; the second draws them too and reduces to mean and "
        "variance, the whole of predict's job.",
    ]
    text = "\n".join(lines) + "\n"
    publish(text, None if args.quick else args.output)


if __name__ == "__main__":
    main()
