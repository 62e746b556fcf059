"""``BNNLightningModule``: the loss of ``fit``, trained by Lightning in one and two processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyro
import pytest
import torch

import bnn_pyro as bp

lightning = pytest.importorskip("lightning")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from bnn_pyro.methods.vi.lightning import BNNLightningModule  # noqa: E402
from bnn_pyro.methods.vi.svi import GuardedSVI, as_pyro_optim, make_elbo  # noqa: E402
from tests.distributed.launch import run_past_exit_race  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _data(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, 1, generator=g) * 6 - 3
    return X, torch.sin(X).squeeze(-1) + 0.1 * torch.randn(n, generator=g)


def _trainer(**options) -> lightning.Trainer:
    quiet = dict(enable_progress_bar=False, logger=False, enable_model_summary=False)
    return lightning.Trainer(accelerator="cpu", enable_checkpointing=False, **quiet, **options)


@pytest.mark.parametrize(
    ("elbo", "particles"), [("trace", 1), ("meanfield", 3), ("stl", 1), ("alpha", 4)]
)
def test_the_loss_is_fits_loss_for_the_same_batch_and_draws(elbo, particles):
    X, y = _data()
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [8], 1), bp.Gaussian(scale="learned"))
    module = BNNLightningModule(
        bnn, dataset_size=len(X), example=(X, y), elbo=elbo, num_particles=particles
    )
    params = [p for p in bnn.parameters() if p.requires_grad]
    loss = make_elbo(elbo, particles, vectorize=True)
    svi = GuardedSVI(bnn.model, bnn.guide, as_pyro_optim(None, params, 0.01), loss, params)
    xb, yb = X[:32], y[:32].unsqueeze(-1)
    pyro.set_rng_seed(7)
    want = svi._loss(xb, yb, dataset_size=len(X))  # what fit's step minimises
    pyro.set_rng_seed(7)
    got = module.loss(X[:32], y[:32])
    if elbo != "alpha":
        assert torch.equal(got, want)
    else:  # the plain-torch alpha energy against Pyro's: the same terms, the particles'
        # log-mean-exp summed in another order; float32 round-off of a ~330 loss (1 ulp, 3e-5,
        # on an AMD EPYC; equal bit for bit on the machine the test was written on), while a
        # wrong term, scale or draw moves it by far more than the 1e-6 relative allowed
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


def test_one_process_lightning_fit_trains_the_method():
    X, y = _data()
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [32], 1), bp.Gaussian(scale=0.1))
    module = BNNLightningModule(bnn, dataset_size=len(X), example=(X[:2], y[:2]), lr=1e-2)
    X_test = torch.linspace(-3, 3, 50).unsqueeze(-1)

    def rmse() -> float:
        mean, _ = bnn.predict(X_test, seed=0)
        return float((mean.squeeze(-1) - torch.sin(X_test).squeeze(-1)).pow(2).mean().sqrt())

    before = rmse()
    loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
    _trainer(max_epochs=30).fit(module, loader)
    after = rmse()
    # sin(x) on [-3, 3] has std 0.7; the untrained net is about that far off, a fit ~ the noise
    assert after < 0.3 < before, (before, after)


def test_two_process_ddp_run_trains_with_identical_parameters(tmp_path):
    done = run_past_exit_race(
        [
            sys.executable,
            str(ROOT / "tests" / "distributed" / "lightning_worker.py"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert ranks[0]["world"] == 2
    for key, value in ranks[0]["state"].items():
        assert torch.equal(value, ranks[1]["state"][key]), key
    assert ranks[0]["rmse"] < 0.3, ranks[0]["rmse"]  # it trained (noise 0.1)


def test_bad_arguments_are_refused_naming_them():
    X, y = _data(8)
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [4], 1), bp.Gaussian(scale=0.1))
    with pytest.raises(ValueError, match="example"):
        BNNLightningModule(bnn, dataset_size=8)
    with pytest.raises(ValueError, match="dataset_size"):
        BNNLightningModule(bnn, dataset_size=0, example=(X, y))
    with pytest.raises(ValueError, match="elbo"):
        BNNLightningModule(bnn, dataset_size=8, example=(X, y), elbo="renyi")
    dropout = bp.make("dropout", bp.nn.mlp(1, [4], 1, dropout=0.1), bp.Gaussian(scale=0.1))
    with pytest.raises(TypeError, match="method"):
        BNNLightningModule(dropout, dataset_size=8)
