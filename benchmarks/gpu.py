"""GPU speed: bnn_pyro against pure torch and plain Pyro on one device, all in one process.

Every contender runs on the same device, data and net; they are timed round-robin (see
:func:`compare`), with ``torch.cuda.synchronize()`` before and after each timed call on a GPU, so
the clock stops when the kernels have run, not when they were queued.

Training step, 10 classes, at 784→400→400→10 batch 128 and 784→1200→1200→10 batch 1024:

* ``torch BBB``: pure-torch Bayes by Backprop: weights sampled in weight space, the closed-form
  Gaussian KL, ``torch.optim.Adam`` (Blundell et al. 2015) -- the reference of the ratios.
* ``plain Pyro``: ``PyroModule[nn.Linear]`` + ``PyroSample`` + ``AutoNormal`` + ``Trace_ELBO`` +
  ``SVI`` with ``pyro.optim.Adam``, the way Pyro's documentation builds a BNN.
* ``bnn_pyro fit``: ``VariationalBNN.fit``, timed over whole epochs (set-up, batching and
  bookkeeping included) and divided by the number of steps. Target: bnn_pyro / torch BBB ≤
  1.5×; plain Pyro / bnn_pyro is reported.

Compiled step: ``VariationalBNN.fit(compile=True)`` (compiled once before the timing) at the
training sizes, timed in the same round-robin as the training step's contenders, against the
eager torch BBB and the eager ``fit``. Target: compiled / torch BBB
≤ 0.5× at 784→400→400→10, batch 128.

Stacked: ``bp.fit_stacked`` of K = 16 ``VariationalBNN`` models (members 0..15) at
784→400→400→10, batch 128, one epoch, against 16 separate fits (one ``VariationalBNN.fit`` of
the same epoch, timed, times 16). Target: stacked throughput ≥ 10× the separate fits'.

Predict: ``VariationalBNN.predict(num_samples=100)`` on 10,000 rows at 784→400→400→10 against a
bare torch loop doing predict's whole job: 100 weight samples drawn from the guide's means and
scales, the net run once per sample in a Python loop, softmax, mean and variance over samples.
Target: predict ≤ 1.0× the bare loop. Beside the times, the peak GPU memory of each
(``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; "n/a" on a CPU).

Run: ``python benchmarks/gpu.py [--device cuda] [--quick] [--out PATH]``. ``--quick``: tiny nets
and few repeats, seconds on a CPU (a smoke run). Prints the tables; a full run on CUDA also
writes them to ``benchmarks/results/gpu.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timezone

import pyro
import torch
import torch.nn as nn
import torch.nn.functional as F
from _contenders import plain_pyro_svi  # benchmarks/_contenders.py (run from this folder)
from _report import publish, repo_command  # benchmarks/_report.py (run from this folder)

import bnn_pyro as bp

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "gpu.md")
CLASSES, K, S = 10, 16, 100
TRAIN_TARGET, STACKED_TARGET, PREDICT_TARGET, COMPILED_TARGET = 1.5, 10.0, 1.0, 0.5
SIZES = {  # training: (D, H, batch, rows) each; stacked: (D, H, batch, rows); predict: (D, H, rows)
    "full": {
        "train": ((784, 400, 128, 12_800), (784, 1200, 1024, 61_440)),
        "stacked": (784, 400, 128, 12_800),
        "predict": (784, 400, 10_000),
        "repeats": 5,
    },
    "quick": {
        "train": ((20, 16, 32, 256), (20, 32, 64, 512)),
        "stacked": (20, 16, 32, 256),
        "predict": (20, 16, 1_000),
        "repeats": 2,
    },
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare(
    fns: dict[str, Callable[[], object]], repeats: int, device: torch.device
) -> tuple[dict[str, float], dict[str, str]]:
    """Median seconds per call of each function, measured round-robin, and the errors.

    Each function is called once untimed (kernels loaded, memory pools filled, guides set up);
    one that raises there is left out and its error kept. Each of the ``repeats`` rounds then
    times one call of every contender in turn, so a change in load hits all alike.
    """
    live, errors = {}, {}
    for name, fn in fns.items():
        try:
            fn()
            sync(device)
            live[name] = fn
        except Exception as exc:  # reported in the tables, the other contenders still run
            errors[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    times: dict[str, list[float]] = {name: [] for name in live}
    for _ in range(repeats):
        for name, fn in live.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, errors


def make_data(d: int, rows: int, device: torch.device, stream: int = 0):
    g = torch.Generator().manual_seed(stream)
    X = torch.randn(rows, d, generator=g)
    return X.to(device), torch.randint(0, CLASSES, (rows,), generator=g).to(device)


def epoch_batches(n: int, batch: int, device: torch.device) -> list[torch.Tensor]:
    """One epoch's minibatch indices, reshuffled on every call (as ``fit`` does)."""
    order = torch.randperm(n, device=device)
    return [order[i : i + batch] for i in range(0, n, batch)]


def torch_bbb(sizes: list[int], X: torch.Tensor, y: torch.Tensor, batch: int):
    n, device = X.shape[0], X.device
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
        layer = nn.Linear(d_in, d_out)
        for p in (layer.weight, layer.bias):
            loc = nn.Parameter(p.detach().to(device))
            params.append((loc, nn.Parameter(torch.full_like(loc, -4.6))))  # std 0.01
    opt = torch.optim.Adam([t for pair in params for t in pair], lr=1e-3)

    def epoch() -> None:
        for idx in epoch_batches(n, batch, device):
            opt.zero_grad(set_to_none=True)
            h, kl = X[idx], 0.0
            for i in range(0, len(params), 2):
                (wm, wr), (bm, br) = params[i], params[i + 1]
                ws, bs = F.softplus(wr), F.softplus(br)
                h = F.linear(h, wm + ws * torch.randn_like(ws), bm + bs * torch.randn_like(bs))
                for m, s in ((wm, ws), (bm, bs)):  # KL(N(m, s^2) || N(0, 1)), closed form
                    kl = kl + (0.5 * (s * s + m * m - 1.0) - torch.log(s)).sum()
                if i < len(params) - 2:
                    h = F.relu(h)
            loss = F.cross_entropy(h, y[idx], reduction="sum") * (n / len(idx)) + kl
            loss.backward()
            opt.step()

    return epoch


def plain_pyro(sizes: list[int], X: torch.Tensor, y: torch.Tensor, batch: int):
    n, device = X.shape[0], X.device
    svi = plain_pyro_svi(sizes, n, True, device)

    def epoch() -> None:
        for idx in epoch_batches(n, batch, device):
            svi.step(X[idx], y[idx])

    return epoch


def make_bnn(d: int, h: int, device: torch.device) -> bp.VariationalBNN:
    prior = bp.IIDPrior(bp.dist.Normal(0.0, 1.0))
    net = bp.nn.mlp(d, [h, h], CLASSES)
    return bp.VariationalBNN(net, bp.Categorical(), prior=prior).to(device)


def peak_memory(fn: Callable[[], object], device: torch.device) -> str:
    """Peak GPU memory allocated while ``fn`` runs (and above what was allocated before)."""
    if device.type != "cuda":
        return "n/a | n/a"
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    fn()
    sync(device)
    peak = torch.cuda.max_memory_allocated(device)
    return f"{peak / 2**20:.0f} MiB | {(peak - start) / 2**20:.0f} MiB"


def _t(times: dict[str, float], name: str, scale: float = 1e3, unit: str = "ms") -> str:
    return f"{times[name] * scale:.3f} {unit}" if name in times else "error"


def _x(times: dict[str, float], num: str, den: str, scale: float = 1.0) -> tuple[float, str]:
    """``scale * num / den`` (nan when one of them failed) and its cell."""
    ratio = scale * times[num] / times[den] if num in times and den in times else math.nan
    return ratio, "error" if math.isnan(ratio) else f"{ratio:.2f}×"


def _met(ok: bool) -> str:  # nan compares False: a failed contender misses its target
    return "met" if ok else "**no**"


def training_sections(cfg, device, failures, fitted) -> list[str]:
    """The training step and the compiled step: both tables from one timing of each config,
    every contender round-robin (the compiled fit compiled before the timing)."""
    train = [
        "## Training step (10 classes)",
        "",
        "| net, batch (rows) | torch BBB | plain Pyro | bnn_pyro fit | bnn_pyro / torch BBB | "
        f"target ≤ {TRAIN_TARGET}× | plain Pyro / bnn_pyro |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    compiled_table = [
        "## Compiled step (10 classes)",
        "",
        "| net, batch (rows) | torch BBB | bnn_pyro fit | bnn_pyro fit, compile=True | "
        f"compiled / torch BBB | target ≤ {COMPILED_TARGET}× | compiled / eager fit |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for d, h, batch, rows in cfg["train"]:
        label, sizes = f"{d}→{h}→{h}→{CLASSES}", [d, h, h, CLASSES]
        X, y = make_data(d, rows, device)
        bnn, compiled = make_bnn(d, h, device), make_bnn(d, h, device)
        fit = {"epochs": 1, "batch_size": batch, "lr": 1e-3, "progress": False, "seed": 0}
        compiled.fit(X, y, compile=True, **fit)  # compiles here, outside the timing
        fns = {
            "torch BBB": torch_bbb(sizes, X, y, batch),
            "plain Pyro": plain_pyro(sizes, X, y, batch),
            "bnn_pyro fit": lambda bnn=bnn, X=X, y=y, fit=fit: bnn.fit(X, y, **fit),
            "compiled": lambda bnn=compiled, X=X, y=y, fit=fit: bnn.fit(X, y, compile=True, **fit),
        }
        t, errors = compare(fns, cfg["repeats"], device)
        steps = math.ceil(rows / batch)  # every contender runs one epoch per call
        t = {name: v / steps for name, v in t.items()}
        failures += [f"{label}, {k}: {v}" for k, v in errors.items()]
        if "bnn_pyro fit" in t:
            fitted[d, h] = bnn
        head = f"| {label}, {batch} ({rows:,}) | {_t(t, 'torch BBB')} |"
        ours, ours_cell = _x(t, "bnn_pyro fit", "torch BBB")
        train.append(
            f"{head} {_t(t, 'plain Pyro')} | {_t(t, 'bnn_pyro fit')} | {ours_cell} | "
            f"{_met(ours <= TRAIN_TARGET)} | {_x(t, 'plain Pyro', 'bnn_pyro fit')[1]} |"
        )
        ratio, cell = _x(t, "compiled", "torch BBB")
        compiled_table.append(
            f"{head} {_t(t, 'bnn_pyro fit')} | {_t(t, 'compiled')} | {cell} | "
            f"{_met(ratio <= COMPILED_TARGET)} | {_x(t, 'compiled', 'bnn_pyro fit')[1]} |"
        )
    return train + [""] + compiled_table


def stacked_section(cfg, device, failures) -> list[str]:
    d, h, batch, rows = cfg["stacked"]
    X, y = make_data(d, rows, device)
    bnns = []
    for k in range(K):
        torch.manual_seed(k)
        bnns.append(make_bnn(d, h, device))
    one = make_bnn(d, h, device)
    fit = {"epochs": 1, "batch_size": batch, "lr": 1e-3, "progress": False}
    fns = {
        "stacked": lambda: bp.fit_stacked(bnns, X, y, seeds=list(range(K)), **fit),
        "one fit": lambda: one.fit(X, y, seed=0, **fit),
    }
    t, errors = compare(fns, cfg["repeats"], device)
    failures += [f"stacked, {k}: {v}" for k, v in errors.items()]
    speedup, cell = _x(t, "one fit", "stacked", scale=K)
    return [
        f"## Stacked: bp.fit_stacked of {K} VariationalBNN against {K} separate fits",
        "",
        f"| net, batch, rows, 1 epoch | one fit | {K} separate fits ({K} × one) | "
        f"fit_stacked, K={K} | throughput ratio | target ≥ {STACKED_TARGET:.0f}× |",
        "|---|---:|---:|---:|---:|---|",
        f"| {d}→{h}→{h}→{CLASSES}, {batch}, {rows:,} | {_t(t, 'one fit', 1, 's')} | "
        f"{_t(t, 'one fit', K, 's')} | {_t(t, 'stacked', 1, 's')} | {cell} | "
        f"{_met(speedup >= STACKED_TARGET)} |",
    ]


def predict_section(cfg, device, failures, fitted) -> list[str]:
    d, h, rows = cfg["predict"]
    bnn = fitted.get((d, h))
    if bnn is None:  # its training contender failed: a model of its own, fitted briefly
        bnn = make_bnn(d, h, device)
        try:
            X, y = make_data(d, 256, device)
            bnn.fit(X, y, epochs=1, batch_size=128, lr=1e-3, progress=False, seed=0)
        except Exception as exc:
            failures.append(f"predict, the model's fit: {type(exc).__name__}: {exc}")
    X = make_data(d, rows, device, stream=1)[0]
    locs, scales = bnn.guide.means(), bnn.guide.scales()
    names = bnn.site_names  # weight, bias of each linear layer, in order
    assert [n.rsplit(".", 1)[1] for n in names] == ["weight", "bias"] * (len(names) // 2), names

    @torch.no_grad()
    def bare_loop() -> tuple[torch.Tensor, torch.Tensor]:
        w = [locs[n] + scales[n] * torch.randn((S, *locs[n].shape), device=device) for n in names]
        probs = []
        for s in range(S):
            z = X
            for i in range(0, len(w), 2):
                z = F.linear(z, w[i][s], w[i + 1][s])
                if i < len(w) - 2:
                    z = F.relu(z)
            probs.append(F.softmax(z, -1))
        p = torch.stack(probs)
        return p.mean(0), p.var(0)

    fns = {"bnn_pyro predict": lambda: bnn.predict(X, num_samples=S, seed=0)}
    fns["bare torch loop"] = bare_loop
    t, errors = compare(fns, 2 * cfg["repeats"], device)
    memory = {name: peak_memory(fns[name], device) for name in t}
    failures += [f"predict, {k}: {v}" for k, v in errors.items()]
    ratio, cell = _x(t, "bnn_pyro predict", "bare torch loop")
    return [
        f"## Predict: {S} samples, {rows:,} rows, {d}→{h}→{h}→{CLASSES}",
        "",
        f"| contender | time | / bare torch loop | target ≤ {PREDICT_TARGET}× | peak GPU memory "
        "| of it, allocated during the call |",
        "|---|---:|---:|---|---:|---:|",
        f"| bnn_pyro predict | {_t(t, 'bnn_pyro predict')} | {cell} | "
        f"{_met(ratio <= PREDICT_TARGET)} | {memory.get('bnn_pyro predict', 'error | error')} |",
        f"| bare torch loop | {_t(t, 'bare torch loop')} | | | "
        f"{memory.get('bare torch loop', 'error | error')} |",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help='"cuda" (default), "cuda:1", "cpu"')
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (smoke)")
    parser.add_argument("--out", default=RESULTS, help="markdown file of a full CUDA run")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("CUDA is not available here: pass --device cpu")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = SIZES["quick" if args.quick else "full"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    lines = [
        f"torch {torch.__version__}, pyro {pyro.__version__}, device {name}, 1 CPU thread, "
        f"median of {cfg['repeats']} round-robin runs; "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"command: python benchmarks/gpu.py {repo_command(argv)}".rstrip(),
        "",
    ]
    failures: list[str] = []
    fitted: dict[tuple[int, int], bp.VariationalBNN] = {}  # (D, H): a model trained above
    with warnings.catch_warnings():  # the timed fits are an epoch each: stds barely move
        warnings.simplefilter("ignore", bp.PosteriorCollapseWarning)
        lines += training_sections(cfg, device, failures, fitted) + [""]
        lines += stacked_section(cfg, device, failures) + [""]
        lines += predict_section(cfg, device, failures, fitted)
    lines += [
        "",
        "Times: per training step (one epoch per timed call, divided by its steps), per whole "
        "fit (stacked), per predict call. torch BBB uses torch.optim.Adam's default kernel; "
        "bnn_pyro's default optimizer is Adam with the fused kernel.",
    ]
    if failures:
        lines += ["", "Errors (the contender is left out of its table):", ""]
        lines += [f"- {f}" for f in failures]
    text = "\n".join(lines) + "\n"
    write = device.type == "cuda" and not args.quick and not failures
    publish(text, args.out if write else None)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
