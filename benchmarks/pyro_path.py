"""The Pyro path: what a model that only Pyro's machinery covers costs through ``fit``, against
plain Pyro running the same model and guide, one process, one thread.

Such a model leaves the library's plain-torch fast path (which knows the mean-field guide and
the priors without latents) for Pyro's own ELBO; the question is whether the library adds
anything on top. Contenders, on the same data (1,024 rows), net (13→50→1, ReLU) and batch (128):

* ``plain Pyro``: ``PyroModule[nn.Linear]`` layers with ``PyroSample`` N(0, 1) priors (the way
  Pyro's documentation builds a BNN, ``benchmarks/_contenders.py``) and ``SVI.step``.
* ``bnn_pyro fit``: ``VariationalBNN.fit`` over the same net, timed over whole epochs (batching,
  the divergence guard and the history included) and divided by the number of steps.

Models: a composed guide (``AutoGuideList``: an ``AutoDelta`` on the output bias, ``AutoNormal``
on the rest; a guide experiment), under ``Trace_ELBO`` and under ``JitTrace_ELBO``. The targets:
``fit`` no slower per step than plain Pyro's own step (ratio ≤ 1.0), and JIT's speed-up through
``fit`` at least plain Pyro's.

Run: ``python benchmarks/pyro_path.py [--quick]``. Prints the table and (full runs) writes it
to ``benchmarks/results/pyro_path.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import warnings
from collections.abc import Callable
from datetime import datetime, timezone

import pyro
import torch
from _contenders import plain_pyro_svi  # benchmarks/_contenders.py (run from this folder)
from _report import publish  # benchmarks/_report.py (scripts run from this folder)
from pyro import poutine
from pyro.infer import JitTrace_ELBO, Trace_ELBO
from pyro.infer.autoguide import AutoDelta, AutoGuideList, AutoNormal
from step_time import compare, make_data

import bnn_pyro as bp

SIZES = [13, 50, 1]
N, BATCH = 1024, 128
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "pyro_path.md")


def composed(delta_site: str) -> Callable[[Callable], AutoGuideList]:
    """A factory of the composed guide: ``AutoDelta`` on ``delta_site``, ``AutoNormal`` (initial
    scale 0.01) on every other site.

    Example:
        >>> import pyro.distributions as dist
        >>> def model(x=None):
        ...     pyro.sample("a", dist.Normal(0.0, 1.0)); pyro.sample("b", dist.Normal(0.0, 1.0))
        >>> guide = composed("b")(model)
        >>> [type(part).__name__ for part in guide]
        ['AutoDelta', 'AutoNormal']
    """

    def factory(model: Callable) -> AutoGuideList:
        guide = AutoGuideList(model)
        guide.append(AutoDelta(poutine.block(model, expose=[delta_site])))
        guide.append(AutoNormal(poutine.block(model, hide=[delta_site]), init_scale=0.01))
        return guide

    return factory


def plain_step(elbo_cls: type, X: torch.Tensor, y: torch.Tensor) -> Callable[[], float]:
    elbo = elbo_cls(ignore_jit_warnings=True) if elbo_cls is JitTrace_ELBO else elbo_cls()
    svi = plain_pyro_svi(SIZES, N, False, guide=composed("layers.1.bias"), elbo=elbo)
    xb, yb = X[:BATCH], y[:BATCH]
    return lambda: svi.step(xb, yb)


def fit_epoch(elbo_cls: type, X: torch.Tensor, y: torch.Tensor) -> Callable[[], object]:
    """One epoch of ``fit`` per call; the ELBO object is kept, so JIT compiles once."""
    elbo = elbo_cls(ignore_jit_warnings=True) if elbo_cls is JitTrace_ELBO else elbo_cls()
    torch.manual_seed(0)
    net = bp.nn.mlp(SIZES[0], SIZES[1:-1], SIZES[-1])
    bnn = bp.VariationalBNN(net, bp.Gaussian(scale=1.0), guide=composed("net.2.bias"))
    options = dict(batch_size=BATCH, lr=1e-3, progress=False, elbo=elbo, lr_schedule="constant")
    return lambda: bnn.fit(X, y, epochs=1, **options)


def run(repeats: int, inner: int) -> dict[str, float]:
    """Seconds per step of each contender (``fit``: an epoch's time over its steps)."""
    X, y, _ = make_data(SIZES, N)
    steps = math.ceil(N / BATCH)
    fns = {}
    for label, cls in (("Trace_ELBO", Trace_ELBO), ("JitTrace_ELBO", JitTrace_ELBO)):
        fns[f"plain Pyro, {label}"] = plain_step(cls, X, y)
        fns[f"bnn_pyro fit, {label}"] = fit_epoch(cls, X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JIT's tracer warnings; short fits' collapse checks
        times = compare(fns, repeats, inner)
    return {k: v / steps if k.startswith("bnn_pyro") else v for k, v in times.items()}


def table(times: dict[str, float]) -> str:
    """The results as markdown: per-step times, ``fit`` over plain Pyro, and JIT's speed-up.

    Example:
        >>> t = {"plain Pyro, Trace_ELBO": 4e-3, "bnn_pyro fit, Trace_ELBO": 3e-3,
        ...      "plain Pyro, JitTrace_ELBO": 2e-3, "bnn_pyro fit, JitTrace_ELBO": 1e-3}
        >>> print(table(t).splitlines()[2])
        | Trace_ELBO | 4.000 ms | 3.000 ms | 0.75× |
    """
    rows = ["| ELBO | plain Pyro | bnn_pyro fit | fit / plain Pyro |", "|---|---|---|---|"]
    for label in ("Trace_ELBO", "JitTrace_ELBO"):
        plain, ours = times[f"plain Pyro, {label}"], times[f"bnn_pyro fit, {label}"]
        rows.append(
            f"| {label} | {plain * 1e3:.3f} ms | {ours * 1e3:.3f} ms | {ours / plain:.2f}× |"
        )
    plain_jit = times["plain Pyro, Trace_ELBO"] / times["plain Pyro, JitTrace_ELBO"]
    ours_jit = times["bnn_pyro fit, Trace_ELBO"] / times["bnn_pyro fit, JitTrace_ELBO"]
    rows += [
        "",
        "| JIT speed-up (Trace_ELBO time / JitTrace_ELBO time) | plain Pyro | bnn_pyro fit |",
        "|---|---|---|",
        f"| composed guide | {plain_jit:.2f}× | {ours_jit:.2f}× |",
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round: a smoke run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    times = run(repeats=1, inner=1) if args.quick else run(repeats=21, inner=5)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"torch {torch.__version__}, pyro {pyro.__version__}, 1 thread, 13→50→1, batch {BATCH}, "
        f"{N} rows; {stamp}; command: python benchmarks/pyro_path.py"
    )
    targets = (
        "Targets: fit / plain Pyro ≤ 1.0× for a model only the Pyro path covers (here a "
        "composed guide), and JIT's speed-up through fit at least plain Pyro's."
    )
    publish(f"{header}\n\n{table(times)}\n\n{targets}\n", None if args.quick else RESULTS)


if __name__ == "__main__":
    main()
