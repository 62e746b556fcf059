"""Training-step and prediction time: bnn_pyro against pure torch and plain Pyro, one process.

Contenders, on the same data, net and batch (128), one thread:

* ``torch MLP``: a deterministic net, Adam, one forward/backward/step (the floor).
* ``torch BBB``: pure-torch Bayes by Backprop: weights sampled in weight space, the closed-form
  Gaussian KL, ``torch.optim.Adam`` (Blundell et al. 2015) -- the reference of the ratios.
* ``plain Pyro``: ``PyroModule[nn.Linear]`` + ``PyroSample`` + ``AutoNormal`` + ``Trace_ELBO`` +
  ``SVI`` with ``pyro.optim.Adam``, the way Pyro's documentation builds a BNN.
* ``bnn_pyro fit``: ``VariationalBNN.fit`` on its default path (``Trace_ELBO``), timed over whole
  epochs (batching and bookkeeping included) and divided by the number of steps.

Prediction: ``VariationalBNN.predict(num_samples=100)`` on 1,000 points against
``pyro.infer.Predictive(parallel=False)`` with the same model and guide.

Run: ``python benchmarks/step_time.py [--quick]``. Prints a markdown table and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import pyro
import pyro.distributions as dist
import torch
import torch.nn as nn
import torch.nn.functional as F
from pyro.infer import SVI, Predictive, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroSample

import bnn_pyro as bp

BATCH = 128


def median_time(fn: Callable[[], object], repeats: int, inner: int) -> float:
    """Median over ``repeats`` blocks of the mean time of ``inner`` calls (seconds)."""
    for _ in range(max(2, inner // 4)):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


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


def torch_bbb_step(sizes, X, y, classification):
    n = X.shape[0]
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
        layer = nn.Linear(d_in, d_out)
        for p in (layer.weight, layer.bias):
            params.append(
                (nn.Parameter(p.detach().clone()), nn.Parameter(torch.full_like(p, -4.6)))
            )
    opt = torch.optim.Adam([t for pair in params for t in pair], lr=1e-3)
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
    n = X.shape[0]
    pyro.clear_param_store()

    class Net(PyroModule):
        def __init__(self):
            super().__init__()
            layers = []
            for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
                layer = PyroModule[nn.Linear](d_in, d_out)
                layer.weight = PyroSample(dist.Normal(0.0, 1.0).expand([d_out, d_in]).to_event(2))
                layer.bias = PyroSample(dist.Normal(0.0, 1.0).expand([d_out]).to_event(1))
                layers.append(layer)
            self.layers = PyroModule[nn.ModuleList](layers)

        def forward(self, x, y=None):
            h = x
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i < len(self.layers) - 1:
                    h = F.relu(h)
            with pyro.plate("data", n, subsample=torch.arange(x.shape[0])):
                if classification:
                    pyro.sample("obs", dist.Categorical(logits=h), obs=y)
                else:
                    pyro.sample("obs", dist.Normal(h, 1.0).to_event(1), obs=y)

    model = Net()
    guide = AutoNormal(model, init_scale=0.01)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
    xb, yb = X[:BATCH], y[:BATCH]
    return lambda: svi.step(xb, yb)


def bnn_pyro_fit(sizes, X, y, classification):
    likelihood = bp.Categorical() if classification else bp.Gaussian(scale=1.0)
    bnn = bp.VariationalBNN(bp.nn.mlp(sizes[0], sizes[1:-1], sizes[-1]), likelihood)
    bnn.fit(X, y, epochs=1, batch_size=BATCH, lr=1e-3, progress=False, seed=0)
    steps = X.shape[0] // BATCH
    return bnn, (lambda: bnn.fit(X, y, epochs=1, batch_size=BATCH, lr=1e-3, progress=False)), steps


def bench_training(sizes: list[int], n_batches: int, repeats: int, inner: int) -> dict[str, float]:
    X, y, classification = make_data(sizes, BATCH * n_batches)
    out = {}
    for name, make in (
        ("torch MLP", torch_mlp_step),
        ("torch BBB", torch_bbb_step),
        ("plain Pyro", plain_pyro_step),
    ):
        out[name] = median_time(make(sizes, X, y, classification), repeats, inner)
    bnn, epoch, steps = bnn_pyro_fit(sizes, X, y, classification)
    out["bnn_pyro fit"] = median_time(epoch, repeats, max(1, inner // steps)) / steps
    return out, bnn, X


def bench_predict(bnn: bp.VariationalBNN, X: torch.Tensor, repeats: int) -> dict[str, float]:
    x = X[:1000]
    ours = median_time(lambda: bnn.predict(x, num_samples=100), repeats, 2)
    predictive = Predictive(
        bnn.model, guide=bnn.guide, num_samples=100, parallel=False, return_sites=["_RETURN"]
    )
    theirs = median_time(lambda: predictive(x), max(3, repeats // 2), 1)
    return {"bnn_pyro predict": ours, "Predictive(parallel=False)": theirs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    repeats, inner = (3, 10) if args.quick else (7, 60)
    print(f"torch {torch.__version__}, pyro {pyro.__version__}, 1 thread, batch {BATCH}\n")
    print(
        "| net | torch MLP | torch BBB | plain Pyro | bnn_pyro fit "
        "| plain Pyro / BBB | bnn_pyro / BBB |"
    )
    print("|---|---|---|---|---|---|---|")
    bnn_small = None
    for sizes, n_batches, scale in (([13, 50, 1], 20, 1), ([784, 400, 400, 10], 8, 6)):
        times, bnn, X = bench_training(sizes, n_batches, repeats, max(2, inner // scale))
        if bnn_small is None:
            bnn_small = bnn
        ms = {k: v * 1e3 for k, v in times.items()}
        bbb = ms["torch BBB"]
        print(
            f"| {'→'.join(map(str, sizes))} | {ms['torch MLP']:.3f} ms | {bbb:.3f} ms | "
            f"{ms['plain Pyro']:.3f} ms | {ms['bnn_pyro fit']:.3f} ms | "
            f"{ms['plain Pyro'] / bbb:.2f}× | {ms['bnn_pyro fit'] / bbb:.2f}× |"
        )
    X_pred = torch.randn(1000, 13)
    pred = bench_predict(bnn_small, X_pred, repeats)
    ratio = pred["Predictive(parallel=False)"] / pred["bnn_pyro predict"]
    print(
        "\n| predict, 100 samples, 1,000 points (13→50→1) | bnn_pyro predict | "
        "Predictive(parallel=False) | speed-up |\n|---|---|---|---|\n"
        f"| time | {pred['bnn_pyro predict'] * 1e3:.2f} ms | "
        f"{pred['Predictive(parallel=False)'] * 1e3:.1f} ms | {ratio:.1f}× |"
    )
    print("\ntargets: bnn_pyro / BBB ≤ 2.0× (13→50→1) and ≤ 1.4× (784→400→400→10); predict ≥ 10×")


if __name__ == "__main__":
    main()
