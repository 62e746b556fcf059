"""One rank of a 2-process gloo run for ``tests/distributed/test_ddp.py``.

Run as ``python ddp_worker.py SCENARIO[,SCENARIO...] OUT`` with ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` set (what torchrun sets); for each scenario, in the order
given, writes ``OUT/SCENARIO/rank{R}.pt`` (what the test compares) and, on an error,
``OUT/SCENARIO/rank{R}.err``. Several scenarios in one run share the two processes' start (a few
seconds of imports each); every scenario seeds what it draws, so its numbers do not depend on
what ran before it.
"""

from __future__ import annotations

import datetime
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pyro  # noqa: E402

import bnn_pyro as bp  # noqa: E402
from bnn_pyro.methods.vi.svi import GuardedSVI, as_pyro_optim, make_elbo  # noqa: E402
from bnn_pyro.training import Checkpoint, distributed  # noqa: E402
from tests.methods.vi.test_exact_posterior import NOISE, _data, _posterior  # noqa: E402


def _blr() -> bp.VariationalBNN:
    torch.manual_seed(0)  # the same initial weights on every rank (rank 0's are broadcast)
    return bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian(scale=NOISE))


def gradient(out: dict) -> None:
    """One DDP step (SGD, lr 1: the step is minus the averaged gradient) and this rank's own
    gradient of the same loss on its shard under the same seed."""
    X, y = _data()
    rows = distributed.shard(len(X))
    xb, yb = X[rows], y[rows]
    bnn = _bnn_ready(X, y)
    params = [p for p in bnn.parameters() if p.requires_grad]
    elbo = make_elbo("trace", 1, vectorize=True)
    pyro.set_rng_seed(100 + distributed.rank())
    loss = elbo.differentiable_loss(bnn.model, bnn.guide, xb, yb, dataset_size=len(X))
    out["local"] = [g.detach().clone() for g in torch.autograd.grad(loss, params)]
    before = [p.detach().clone() for p in params]
    svi = GuardedSVI(
        bnn.model, bnn.guide, as_pyro_optim(torch.optim.SGD, params, 1.0), elbo, params
    )
    pyro.set_rng_seed(100 + distributed.rank())
    svi.step(xb, yb, dataset_size=len(X))
    out["step"] = [b - p.detach() for b, p in zip(before, params, strict=True)]


def _bnn_ready(X: torch.Tensor, y: torch.Tensor) -> bp.VariationalBNN:
    bnn = _blr()
    bnn.setup_guide(X[:2], y[:2])
    bnn.guide.emit_params = False
    return bnn


def posterior(out: dict, folder: Path) -> None:
    """The default fit of the exact-posterior test, data-parallel, with a Checkpoint callback."""
    X, y = _data()
    bnn = _blr()
    path = folder / f"checkpoint-rank{distributed.rank()}.pt"
    history = bnn.fit(
        X,
        y,
        epochs=3000,
        elbo="meanfield",
        progress=False,
        seed=0,
        callbacks=[Checkpoint(path, every=1000)],
    )
    out["loc"], out["scale"] = _posterior(bnn)
    out["loss"] = history["loss"]
    out["state"] = {k: v.clone() for k, v in bnn.state_dict().items()}


def classic(out: dict) -> None:
    """MC dropout (dropout masks per rank) and Laplace (its MAP phase) under two ranks."""
    X, y = _data()
    torch.manual_seed(1)
    dropout = bp.make("dropout", bp.nn.mlp(3, [16], 1, dropout=0.1), bp.Gaussian(scale=NOISE))
    history = dropout.fit(X, y, epochs=100, batch_size=32, lr=1e-2, progress=False, seed=0)
    out["dropout_history"] = history["loss"]
    out["dropout"] = dropout.predict(X[:10], num_samples=20, seed=0)[0]
    torch.manual_seed(2)
    laplace = bp.make("laplace", bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=NOISE))
    laplace.fit(X, y, epochs=30, batch_size=32, progress=False, seed=0)
    out["laplace"] = laplace.predict(X[:10], num_samples=20, seed=0)
    torch.manual_seed(3)  # no MAP phase: the curvature of the same weights on every rank
    fixed = bp.make("laplace", bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=NOISE))
    fixed.fit(X, y, epochs=0, progress=False)
    out["precision"] = fixed.posterior_precision
    out["n_data"] = fixed._n_data


def others(out: dict) -> None:
    """The remaining gradient-trained methods, a few epochs each on two ranks."""
    X, y = _data()
    for name in ("ensemble", "swag", "vbnn", "hidden_layer", "lrt"):
        torch.manual_seed(4)
        method = bp.make(name, bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=NOISE))
        history = method.fit(X, y, epochs=6, batch_size=32, lr=1e-2, progress=False, seed=0)
        draws = None if name == "ensemble" else 10
        out[name] = (history["loss"], method.predict(X[:10], num_samples=draws, seed=0)[0])


def predict(out: dict) -> None:
    """predict is a collective: each rank its blocks, gathered; equal to predicting alone."""
    from bnn_pyro.methods.vi import predictive as vi_predictive

    X, y = _data()
    bnn = _blr()
    bnn.fit(X, y, epochs=5, progress=False, seed=0)
    # 13 blocks of 200 rows (this patched svi_model.block_rows, a name predict does not read:
    # every row went in one block, all on rank 0)
    block_rows, vi_predictive.block_rows = vi_predictive.block_rows, lambda samples, width: 16
    try:
        sharded = bnn.predict(X, return_samples=True, num_samples=7, seed=3)
        with distributed.local():
            alone = bnn.predict(X, return_samples=True, num_samples=7, seed=3)
    finally:  # the next scenario in this run predicts with the library's blocks
        vi_predictive.block_rows = block_rows
    out["equal"] = all(torch.equal(a, b) for a, b in zip(sharded, alone, strict=True))
    out["mean"] = sharded[0]
    torch.manual_seed(1)
    dropout = bp.make("dropout", bp.nn.mlp(3, [16], 1, dropout=0.1), bp.Gaussian(scale=NOISE))
    dropout.fit(X, y, epochs=2, progress=False, seed=0)
    sharded = dropout.predict(X, num_samples=5, seed=2)  # one block: rank 1 has no rows
    with distributed.local():
        alone = dropout.predict(X, num_samples=5, seed=2)
    out["dropout_equal"] = all(torch.equal(a, b) for a, b in zip(sharded, alone, strict=True))


def dies(out: dict) -> None:
    """Rank 1 dies at the end of epoch 2; rank 0 must stop with a clear error."""
    X, y = _data()
    bnn = _blr()

    def die(model, epoch, history):  # noqa: ANN001
        if epoch == 2 and distributed.rank() == 1:
            os._exit(3)

    bnn.fit(X, y, epochs=200, progress=False, seed=0, callbacks=[die])


SCENARIOS = {
    "gradient": lambda out, folder: gradient(out),
    "posterior": posterior,
    "classic": lambda out, folder: classic(out),
    "others": lambda out, folder: others(out),
    "predict": lambda out, folder: predict(out),
    "dies": lambda out, folder: dies(out),
}


def main() -> None:
    scenarios, folder = sys.argv[1].split(","), Path(sys.argv[2])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}")
    for scenario in scenarios:
        here = folder / scenario
        here.mkdir(exist_ok=True)
        out: dict = {}
        try:
            SCENARIOS[scenario](out, here)
            torch.save(out, here / f"rank{rank}.pt")
        except Exception as err:  # the test reads the message
            (here / f"rank{rank}.err").write_text(
                f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
            )
            raise
    dist.barrier()  # both ranks past their last collective before the group is torn down
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
