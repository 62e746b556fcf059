"""The problems of ``benchmarks/ood.py`` and their shifts, offline (scikit-learn's bundled
``load_digits`` and ``make_moons``), every draw seeded.

* :func:`digits_problem`: digits 0–4 to train on and test; out of distribution, the held-out
  digits 5–9, the test images of 0–4 with their pixels shuffled (:func:`pixel_permutation`) and
  images of uniform noise (:func:`uniform_noise`);
* :func:`moons_problem`: ``make_moons`` to train on and test; out, points on a far ring around
  the training data's centre (:func:`ring`).

Each is a :class:`Problem`: training data, in-distribution test inputs and the
out-of-distribution sets by shift name, and the hidden widths of the MLP every contender uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

import bnn_pyro as bp

IN_CLASSES = 5  # digits 0..4 in distribution, 5..9 held out
DIGITS_HIDDEN = [100]
MOONS_HIDDEN = [50, 50]
MOONS_ROWS, MOONS_NOISE = 500, 0.15
RING_RADIUS, RING_WIDTH = 5.0, 1.0  # the far ring: radius 5 to 6 around the moons' centre


@dataclass
class Problem:
    """Training data, in-distribution test inputs and the out-of-distribution sets."""

    name: str
    hidden: list[int]
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_in: torch.Tensor
    y_in: torch.Tensor
    shifts: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def classes(self) -> int:
        """The number of classes the nets predict (the training labels' largest, plus one)."""
        return int(self.y_train.max()) + 1


# --- data ----------------------------------------------------------------------------------
def pixel_permutation(n_pixels: int, seed: int) -> torch.Tensor:
    """One fixed shuffle of ``n_pixels`` pixel positions, from ``seed``.

    Example:
        >>> perm = pixel_permutation(64, seed=0)
        >>> sorted(perm.tolist()) == list(range(64)), torch.equal(perm, pixel_permutation(64, 0))
        (True, True)
    """
    if isinstance(n_pixels, bool) or not isinstance(n_pixels, int) or n_pixels < 2:
        raise ValueError(f"n_pixels must be an int >= 2, got {n_pixels!r}")
    return torch.randperm(n_pixels, generator=torch.Generator().manual_seed(seed))


def uniform_noise(
    n: int, n_pixels: int, seed: int, low: float = 0.0, high: float = 1.0
) -> torch.Tensor:
    """``(n, n_pixels)`` images of independent uniform noise on ``[low, high)``.

    Example:
        >>> x = uniform_noise(100, 64, seed=0)
        >>> x.shape, bool(x.min() >= 0.0), bool(x.max() < 1.0)
        (torch.Size([100, 64]), True, True)
    """
    if n < 1 or n_pixels < 1:
        raise ValueError(f"n and n_pixels must be >= 1, got {n} and {n_pixels}")
    if not low < high:
        raise ValueError(f"low must be below high, got [{low}, {high})")
    g = torch.Generator().manual_seed(seed)
    return low + (high - low) * torch.rand(n, n_pixels, generator=g)


def ring(n: int, radius: float, width: float, centre: Sequence[float], seed: int) -> torch.Tensor:
    """``(n, 2)`` points at uniform angles and radii in ``[radius, radius + width]`` around
    ``centre``.

    Example:
        >>> pts = ring(200, radius=5.0, width=1.0, centre=(0.5, 0.25), seed=0)
        >>> r = (pts - torch.tensor([0.5, 0.25])).norm(dim=1)
        >>> bool(r.min() >= 5.0), bool(r.max() <= 6.0)
        (True, True)
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not radius > 0 or width < 0:
        raise ValueError(f"radius must be > 0 and width >= 0, got {radius} and {width}")
    if len(centre) != 2:
        raise ValueError(f"centre must be two coordinates, got {centre!r}")
    g = torch.Generator().manual_seed(seed)
    angle = 2 * math.pi * torch.rand(n, generator=g, dtype=torch.float64)
    r = radius + width * torch.rand(n, generator=g, dtype=torch.float64)
    points = torch.stack([r * angle.cos(), r * angle.sin()], dim=1)
    return (points + torch.tensor(centre, dtype=torch.float64)).float()


def digits_problem(seed: int) -> Problem:
    """Digits 0–4 to train on and test, and the three digit shifts (scikit-learn's bundled
    ``load_digits``, pixels / 16, one seeded 80/20 split)."""
    split = bp.datasets.load_digits_split(seed=seed)
    train, test = split.y_train < IN_CLASSES, split.y_test < IN_CLASSES
    X_in = split.X_test[test]
    perm = pixel_permutation(X_in.shape[1], seed)
    shifts = {
        "held-out classes": split.X_test[~test],
        "permuted pixels": X_in[:, perm],
        "uniform noise": uniform_noise(len(X_in), X_in.shape[1], seed + 1),
    }
    return Problem(
        "digits",
        DIGITS_HIDDEN,
        split.X_train[train],
        split.y_train[train],
        X_in,
        split.y_test[test],
        shifts,
    )


def moons_problem(seed: int) -> Problem:
    """``make_moons`` to train on and test (fresh points), and the far ring."""
    from sklearn.datasets import make_moons

    def moons(rs: int) -> tuple[torch.Tensor, torch.Tensor]:
        X, y = make_moons(MOONS_ROWS, noise=MOONS_NOISE, random_state=rs)
        return torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)

    X, y = moons(seed)
    X_in, y_in = moons(seed + 1)
    centre = X.mean(0).tolist()
    far = ring(MOONS_ROWS, RING_RADIUS, RING_WIDTH, centre, seed + 2)
    return Problem("moons", MOONS_HIDDEN, X, y, X_in, y_in, {"moons: far ring": far})
