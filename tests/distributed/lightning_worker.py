"""A 2-process ``strategy="ddp"`` Lightning run for ``tests/distributed/test_lightning.py``.

``python lightning_worker.py OUT``: Lightning starts the second process itself (it re-runs this
script); each rank saves its trained parameters to ``OUT/rank{R}.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import lightning  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import bnn_pyro as bp  # noqa: E402
from bnn_pyro.methods.vi.lightning import BNNLightningModule  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    g = torch.Generator().manual_seed(0)
    X = torch.rand(512, 1, generator=g) * 6 - 3
    y = torch.sin(X).squeeze(-1) + 0.1 * torch.randn(512, generator=g)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [32], 1), bp.Gaussian(scale=0.1))
    module = BNNLightningModule(bnn, dataset_size=len(X), example=(X[:2], y[:2]), lr=1e-2)
    trainer = lightning.Trainer(
        strategy="ddp",
        devices=2,
        accelerator="cpu",
        max_epochs=40,
        enable_progress_bar=False,
        logger=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
    trainer.fit(module, loader)
    rank = trainer.global_rank
    X_test = torch.linspace(-3, 3, 100).unsqueeze(-1)
    mean, _ = bnn.predict(X_test, seed=0)
    rmse = float((mean.squeeze(-1) - torch.sin(X_test).squeeze(-1)).pow(2).mean().sqrt())
    state = {k: v.clone() for k, v in bnn.state_dict().items()}
    torch.save({"state": state, "rmse": rmse, "world": trainer.world_size}, out / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
