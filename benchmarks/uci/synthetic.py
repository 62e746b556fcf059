"""A synthetic regression shaped like a plant simulator's: nearly noiseless, inputs collinear.

Made to reproduce, without a downloaded file, how VI's final fits broke on the naval propulsion
set (10,740 training rows, 16 inputs, a target whose spread is 1.5% of its level): a good search,
then finals whose test RMSE was tens of times the search's.

The rows are a full grid, as a simulator's runs are: ``speeds`` operating points × ``levels`` of
one slow latent × ``nuisance`` levels of another (9 × 51 × 26 = 11,934 rows by default, the
naval set's count). Each of 12 measured columns is a cubic in the operating point plus 3% of a
linear-in-the-point multiple of each latent, so all 12 are combinations of 8 functions of the
row, the constant among them. The 16 inputs are the operating point, those 12 columns
with one written twice, and two constant columns (the naval set has a constant 288 and a
constant 0.998 too). Centred, the 16 inputs span 7 directions: exactly collinear. The target
is a smooth function of the standardised inputs (a tanh teacher net plus a linear part), scaled
to sd 0.0147 around 0.975, with no noise.

What that shape does, measured:

* the harness's ``vi`` row on the code before the fix (lr 3e-3, no guard; 20 splits,
  ``benchmarks/results/uci/collinear_plant.md``): 3 finals broke, test RMSE 0.055-0.29 (4-20
  target sds) against 3e-5-5e-4 for the rest, with test log-likelihoods still positive
  (3.9-7.1): what the naval set showed;
* the inputs must be collinear. Twelve seeds of one split's final (lr 3e-3, 400 epochs): this
  set broke 4; the same grid and a target read from 16 inputs of full rank broke none; a tanh
  teacher on the real naval inputs broke 3 (the real naval target: 6);
* the broken fits are not a few wild Monte Carlo draws: with the noise learned per input
  (``HeteroscedasticGaussian``) the net abandons whole operating points, 11-22% of the training
  rows more than 3 target-sds off (the real naval set's broken finals: 19-67%), and the noise it
  learns there grows to cover them. The ELBO barely notices (about 4 nats a row, against -3 for
  a row that fits), so the fit never comes back; :mod:`bnn_pyro.training.in_sample` now names
  such a fit.

Write it as a data set folder the harness reads::

    python -m benchmarks.uci.synthetic --out data/collinear_plant
    python -m benchmarks.uci --data data --datasets collinear_plant --methods vi,bb_alpha
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.uci.writer import write_uci_folder  # noqa: E402

__all__ = ["collinear_plant", "main"]

LEVEL, SPREAD = 0.975, 0.0147  #: the target's level and sd (the naval set's)


def collinear_plant(
    speeds: int = 9, levels: int = 51, nuisance: int = 26, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The grid's inputs and noiseless targets (see the module docstring).

    Args:
        speeds, levels, nuisance: the grid's sizes (each >= 2); rows = their product.
        seed: seed of the columns' and the teacher's random coefficients.

    Returns:
        ``X`` ``(rows, 16)`` and ``y`` ``(rows, 1)``, float64.

    Example:
        >>> X, y = collinear_plant(3, 4, 5)
        >>> tuple(X.shape), tuple(y.shape)
        ((60, 16), (60, 1))
        >>> sd = X.std(0); Z = (X - X.mean(0)) / torch.where(sd > 0, sd, torch.ones_like(sd))
        >>> int(torch.linalg.matrix_rank(Z))  # 16 columns; 3 points: u**3 is in 1, u, u**2
        6
    """
    for name, value in (("speeds", speeds), ("levels", levels), ("nuisance", nuisance)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an int >= 2, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=f64)

    axes = (
        torch.linspace(-1, 1, speeds, dtype=f64),
        torch.linspace(0, 1, levels, dtype=f64),
        torch.linspace(0, 1, nuisance, dtype=f64),
    )
    u, c, t = (a.reshape(-1) for a in torch.meshgrid(*axes, indexing="ij"))
    powers = torch.stack([torch.ones_like(u), u, u**2, u**3], 1)  # (rows, 4)
    slopes = powers[:, :2]
    columns = powers @ normal(4, 12) + 0.03 * (
        (slopes @ normal(2, 12)) * c[:, None] + (slopes @ normal(2, 12)) * t[:, None]
    )
    const = torch.ones_like(u)[:, None]
    X = torch.cat(
        [u[:, None], columns[:, :4], columns[:, 3:4], columns[:, 4:7], 288.0 * const,
         columns[:, 7:9], 0.998 * const, columns[:, 9:12]],
        1,
    )  # fmt: skip
    sd = X.std(0)
    Z = (X - X.mean(0)) / torch.where(sd > 0, sd, torch.ones_like(sd))
    f = torch.tanh(1.5 * Z @ (normal(16, 8) / 4)) @ normal(8) + Z @ (normal(16) / 4)
    y = LEVEL + SPREAD * (f - f.mean()) / f.std()
    return X, y[:, None]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the data set folder to write")
    parser.add_argument("--splits", type=int, default=20, help="random 90/10 splits (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    X, y = collinear_plant(seed=args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    folder = write_uci_folder(args.out, X, y, n_splits=args.splits)
    print(f"wrote {folder}: {X.shape[0]} rows, {X.shape[1]} inputs, {args.splits} splits")


if __name__ == "__main__":
    main()
