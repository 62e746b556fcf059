"""1-D regression problems with a known function, to judge uncertainty where there is no data.

Each :class:`FunctionProblem` draws its training rows from one or two intervals (its
*support*), knows its true ``f``, and splits a plotting grid into three regions: ``"data"``
(inside the support), ``"gap"`` (between two parts of the support) and ``"extrapolation"``
(outside the support's hull). A good posterior's band is tight on the data, wider in the gap
and wider still far from it. :data:`FUNCTION_PROBLEMS` holds four:

* ``demo``: ``f = sin 2x + x/2`` on ``[-3, -1] ∪ [1, 3]``, noise 0.1, 100 rows, grid
  ``[-4, 4]`` (:func:`~bnn_pyro.datasets.toy_regression_1d`, the demo's data);
* ``cubic_gap``: ``f = x³`` on ``[-4, -1] ∪ [1, 4]``, noise 3, 100 rows, grid ``[-6, 6]``
  (the "in-between" problem of Foong et al. 2019);
* ``sine_gap``: ``f = 2 sin 4x`` on ``[-2, -0.5] ∪ [0.5, 2]``, noise 0.2, 100 rows, grid
  ``[-5, 5]``;
* ``sinusoid``: ``f = sin x`` on ``[0, 8]``, noise 0.3, 150 rows, grid ``[-5, 13]``
  (laplace-torch's regression example).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from bnn_pyro._checks import check_int
from bnn_pyro.datasets._intervals import uniform_on_intervals
from bnn_pyro.datasets.toy import toy_function

__all__ = ["FUNCTION_PROBLEMS", "FunctionProblem", "REGIONS"]

#: The regions of a problem's grid, in the order they are reported.
REGIONS = ("data", "gap", "extrapolation")


@dataclass(frozen=True)
class FunctionProblem:
    """A 1-D regression problem with a known function.

    Args:
        name: the key in :data:`FUNCTION_PROBLEMS`.
        f: the true function, elementwise on a tensor of any shape.
        support: the ``(low, high)`` intervals the inputs are drawn from, uniformly over their
            total length, in increasing order.
        noise_std: the Gaussian observation noise.
        n: the number of training rows.
        grid_range: ``(low, high)`` of the grid the uncertainty is judged on.

    Example:
        >>> problem = FUNCTION_PROBLEMS["cubic_gap"]
        >>> X, y = problem.sample(seed=0)
        >>> X.shape, y.shape, bool((X.abs() >= 1).all() and (X.abs() <= 4).all())
        (torch.Size([100, 1]), torch.Size([100, 1]), True)
        >>> grid = problem.grid(13)  # -6, -5, ..., 6
        >>> {k: int(v.sum()) for k, v in problem.regions(grid).items()}
        {'data': 8, 'gap': 1, 'extrapolation': 4}
    """

    name: str
    f: Callable[[torch.Tensor], torch.Tensor]
    support: tuple[tuple[float, float], ...]
    noise_std: float
    n: int
    grid_range: tuple[float, float]

    def sample(self, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` training rows ``X`` ``(n, 1)`` and ``y`` ``(n, 1)`` (float32), a deterministic
        function of ``seed``."""
        check_int("seed", seed, minimum=0)
        g = torch.Generator().manual_seed(seed)
        x = uniform_on_intervals(self.support, self.n, g)
        y = self.f(x) + self.noise_std * torch.randn(self.n, 1, generator=g, dtype=torch.float64)
        return x.float(), y.float()

    def grid(self, points: int = 201) -> torch.Tensor:
        """``points`` evenly spaced inputs over ``grid_range``, ``(points, 1)`` float32."""
        check_int("points", points, minimum=2)
        return torch.linspace(*self.grid_range, points).unsqueeze(-1)

    def regions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Boolean masks ``(N,)`` of ``x`` ``(N, 1)`` for each of :data:`REGIONS`: inside the
        support, between its parts, outside its hull (together they cover every point once)."""
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != 1:
            raise ValueError(f"x must be an (N, 1) tensor, got {getattr(x, 'shape', type(x))}")
        v = x[:, 0].double()
        data = torch.zeros_like(v, dtype=torch.bool)
        for lo, hi in self.support:
            data |= (v >= lo) & (v <= hi)
        hull = (v >= self.support[0][0]) & (v <= self.support[-1][1])
        return {"data": data, "gap": hull & ~data, "extrapolation": ~hull}

    def noise_free(self, x: torch.Tensor) -> torch.Tensor:
        """The true ``f`` at ``x``, in ``x``'s shape and dtype."""
        return self.f(x.double()).to(x.dtype)


def _cube(x: torch.Tensor) -> torch.Tensor:
    return x**3


def _sine_gap(x: torch.Tensor) -> torch.Tensor:
    return 2.0 * torch.sin(4.0 * x)


#: The four problems, by name.
FUNCTION_PROBLEMS: dict[str, FunctionProblem] = {
    p.name: p
    for p in (
        FunctionProblem("demo", toy_function, ((-3.0, -1.0), (1.0, 3.0)), 0.1, 100, (-4.0, 4.0)),
        FunctionProblem("cubic_gap", _cube, ((-4.0, -1.0), (1.0, 4.0)), 3.0, 100, (-6.0, 6.0)),
        FunctionProblem("sine_gap", _sine_gap, ((-2.0, -0.5), (0.5, 2.0)), 0.2, 100, (-5.0, 5.0)),
        FunctionProblem("sinusoid", torch.sin, ((0.0, 8.0),), 0.3, 150, (-5.0, 13.0)),
    )
}
