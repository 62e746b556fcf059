"""A plain training script that runs data-parallel unchanged under torchrun.

    python examples/train_ddp.py                                  # one process
    torchrun --nproc_per_node=2 examples/train_ddp.py             # two (gloo on CPUs)
    python -m torch.distributed.run --nproc_per_node=2 examples/train_ddp.py --out result.pt

The script never calls torch.distributed: under torchrun, ``fit`` initialises the process group
from the environment, shards the rows, averages the gradients and shows its progress bar on
rank 0 only (see ``bnn_pyro/training/distributed.py``).
"""

from __future__ import annotations

import argparse

import torch

import bnn_pyro as bp
from bnn_pyro.training import distributed

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=200)
parser.add_argument("--out", default=None, help="save the test RMSE and the parameters here")
args = parser.parse_args()

g = torch.Generator().manual_seed(0)  # the same data on every process
X = torch.rand(2000, 1, generator=g) * 6 - 3
y = torch.sin(X).squeeze(-1) + 0.1 * torch.randn(2000, generator=g)

torch.manual_seed(0)
bnn = bp.VariationalBNN(bp.nn.mlp(1, [50], 1), bp.Gaussian(scale=0.1))
history = bnn.fit(X, y, epochs=args.epochs, batch_size=128, lr=1e-2, seed=0)

X_test = torch.linspace(-3, 3, 200).unsqueeze(-1)
mean, _ = bnn.predict(X_test, seed=0)
rmse = float((mean.squeeze(-1) - torch.sin(X_test).squeeze(-1)).pow(2).mean().sqrt())
if distributed.rank() == 0:  # one line, not one per process glued together
    print(f"final loss {history['loss'][-1]:.1f}, RMSE to sin(x) {rmse:.3f}")
if args.out and distributed.rank() == 0:  # one writer
    result = {"rmse": rmse, "ranks": distributed.world_size(), "loss": history["loss"]}
    torch.save(result, args.out)
