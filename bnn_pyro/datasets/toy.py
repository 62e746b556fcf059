"""Small embedded toy problems, deterministic functions of their ``seed``.

:func:`toy_regression_1d` (1-D regression with a gap in the data), :func:`two_moons` (2-D binary
classification) and :func:`load_digits_split` (scikit-learn's bundled 8x8 digits, 10 classes).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from bnn_pyro._checks import check_float, check_int
from bnn_pyro.datasets._intervals import uniform_on_intervals

__all__ = [
    "ClassificationSplit",
    "load_digits_split",
    "toy_function",
    "toy_regression_1d",
    "two_moons",
]


def toy_function(x: torch.Tensor) -> torch.Tensor:
    """The noise-free curve of :func:`toy_regression_1d`: ``f(x) = sin(2x) + x / 2``.

    Args:
        x: inputs of any shape.

    Returns:
        ``f(x)``, same shape and dtype.

    Example:
        >>> [round(v, 4) for v in toy_function(torch.tensor([0.0, 2.0])).tolist()]  # 1 + sin 4
        [0.0, 0.2432]
    """
    return torch.sin(2.0 * x) + 0.5 * x


def toy_regression_1d(
    n: int = 100,
    gap: tuple[float, float] | None = (-1.0, 1.0),
    noise_std: float = 0.1,
    seed: int = 0,
    x_range: tuple[float, float] = (-3.0, 3.0),
) -> tuple[torch.Tensor, torch.Tensor]:
    """1-D regression with a gap: ``y = sin(2x) + x/2 + noise_std * eps`` off the gap.

    The inputs are uniform on ``x_range`` minus the open interval ``gap``
    (``[-3, -1] U [1, 3]`` by default), the classic test of "in-between" uncertainty: a good
    posterior widens its band inside the gap, where the wiggle of ``sin(2x)`` is not observed.

    Args:
        n: number of points.
        gap: ``(low, high)`` interval without data, inside ``x_range``; ``None`` for no gap.
        noise_std: standard deviation of the Gaussian observation noise.
        seed: seed of the ``torch.Generator``; the same seed gives the same data.
        x_range: ``(low, high)`` range of the inputs.

    Returns:
        ``X`` ``(n, 1)`` and ``y`` ``(n, 1)``, float32.

    Raises:
        TypeError: if ``n`` or ``seed`` is not an int, or ``noise_std`` not a number.
        ValueError: if ``n < 1``, ``noise_std < 0`` or the intervals are not ordered
            ``x_range[0] < gap[0] < gap[1] < x_range[1]``.

    Example:
        >>> X, y = toy_regression_1d(n=50, seed=1)
        >>> X.shape, y.shape, bool(((X > -1) & (X < 1)).any())
        (torch.Size([50, 1]), torch.Size([50, 1]), False)
    """
    check_int("n", n, minimum=1)
    check_int("seed", seed, minimum=0)
    noise_std = check_float("noise_std", noise_std, minimum=0.0)
    lo, hi = map(float, x_range)
    g_lo, g_hi = map(float, gap) if gap is not None else (hi, hi)
    if not (lo < hi and (gap is None or lo < g_lo < g_hi < hi)):
        raise ValueError(
            f"need x_range[0] < gap[0] < gap[1] < x_range[1], got x_range={x_range}, gap={gap}"
        )
    g = torch.Generator().manual_seed(seed)
    support = ((lo, g_lo), (g_hi, hi)) if gap is not None else ((lo, hi),)
    x = uniform_on_intervals(support, n, g)
    y = toy_function(x) + noise_std * torch.randn(n, 1, generator=g, dtype=torch.float64)
    return x.float(), y.float()


def two_moons(
    n: int = 200, noise: float = 0.1, seed: int = 0, shuffle: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaving half circles, as scikit-learn's ``make_moons`` (no sklearn needed).

    Class 0 (the first ``n // 2`` points before shuffling) lies on ``(cos t, sin t)``, class 1
    on ``(1 - cos t, 1/2 - sin t)``, ``t`` evenly spaced on ``[0, pi]``; then Gaussian noise
    of std ``noise`` is added to both coordinates.

    Args:
        n: number of points (``>= 2``).
        noise: standard deviation of the Gaussian noise.
        seed: seed of the ``torch.Generator``.
        shuffle: shuffle the points (else class 0 comes first).

    Returns:
        ``X`` ``(n, 2)`` float32 and labels ``(n,)`` int64.

    Example:
        >>> X, labels = two_moons(n=10, noise=0.0, shuffle=False)
        >>> X[0].tolist(), labels.tolist()
        ([1.0, 0.0], [0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    """
    check_int("n", n, minimum=2)
    check_int("seed", seed, minimum=0)
    noise = check_float("noise", noise, minimum=0.0)
    g = torch.Generator().manual_seed(seed)
    n_out = n // 2
    t_out = torch.linspace(0, math.pi, n_out, dtype=torch.float64)
    t_in = torch.linspace(0, math.pi, n - n_out, dtype=torch.float64)
    outer = torch.stack([t_out.cos(), t_out.sin()], dim=1)
    inner = torch.stack([1 - t_in.cos(), 0.5 - t_in.sin()], dim=1)
    X = torch.cat([outer, inner])
    labels = torch.cat([torch.zeros(n_out, dtype=torch.long), torch.ones(n - n_out).long()])
    if shuffle:
        perm = torch.randperm(n, generator=g)
        X, labels = X[perm], labels[perm]
    X = X + noise * torch.randn(n, 2, generator=g, dtype=torch.float64)
    return X.float(), labels


class ClassificationSplit(NamedTuple):
    """A train/test split of a classification data set (``X`` float32, labels int64).

    Example:
        >>> z = torch.zeros
        >>> split = ClassificationSplit(z(3, 2), z(3).long(), z(1, 2), z(1).long())
        >>> split.X_train.shape
        torch.Size([3, 2])
    """

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor


def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> ClassificationSplit:
    """scikit-learn's bundled 8x8 digits (1797 images, 10 classes), randomly split.

    Pixels are scaled from ``0..16`` to ``[0, 1]``. The split is a ``torch.randperm`` from
    ``seed``; the test part has ``ceil(test_fraction * 1797)`` images. Needs scikit-learn (a
    development dependency), imported only when this function runs.

    Args:
        seed: seed of the permutation.
        test_fraction: fraction of the images in the test part, in ``(0, 1)``.

    Returns:
        :class:`ClassificationSplit` with ``X`` ``(N, 64)`` float32 and labels ``(N,)`` int64.

    Raises:
        ImportError: if scikit-learn is not installed.
        ValueError: if ``test_fraction`` is outside ``(0, 1)``.

    Example:
        >>> split = load_digits_split(seed=0, test_fraction=0.25)
        >>> split.X_train.shape, split.X_test.shape, int(split.y_test.max())
        (torch.Size([1347, 64]), torch.Size([450, 64]), 9)
    """
    check_int("seed", seed, minimum=0)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)):
        raise TypeError(f"test_fraction must be a float, got {type(test_fraction).__name__}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError(
            "load_digits_split needs scikit-learn: pip install scikit-learn "
            "(it is in the bnn_pyro[dev] extras)"
        ) from err
    images, labels = load_digits(return_X_y=True)
    X = torch.as_tensor(images / 16.0, dtype=torch.float32)
    y = torch.as_tensor(labels, dtype=torch.long)
    n_test = math.ceil(test_fraction * len(y))
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    test, train = perm[:n_test], perm[n_test:]
    return ClassificationSplit(X[train], y[train], X[test], y[test])
