"""``fit(compile=True)``: the plain-torch ELBO of a mean-field :class:`~bnn_pyro.VariationalBNN`
(:class:`~bnn_pyro.methods.vi.fast_loss.DirectLoss`) compiled by ``torch.compile``, forward and
backward, into one graph per batch shape.

The compiled loss draws its random numbers with torch's own generator, in the eager order
(inductor's ``fallback_random``): the same seed gives the same weights as the eager loss, and a
compiled fit follows the eager fit up to float rounding (tested). ``dataset_size`` and
``kl_weight`` enter as tensors, so an annealed ``kl_weight`` is an input of the one graph, not a
recompilation; a last, smaller batch is a second graph.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import torch

from bnn_pyro._checks import check_bool
from bnn_pyro.methods.vi.engine import why_not_direct
from bnn_pyro.training.compiled import compile_loss

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "COMPILED_ELBOS",
    "CompiledLoss",
    "CompiledStackedLoss",
    "check_compile",
    "compiled_objective",
]

#: The objectives ``fit(compile=True)`` takes by name: those with a plain-torch loss.
COMPILED_ELBOS = ("trace", "meanfield", "stl")


class CompiledLoss:
    """``(x, y, dataset_size=N, kl_weight=beta) -> (loss, nll)`` as the wrapped
    :class:`~bnn_pyro.methods.vi.fast_loss.DirectLoss` returns them, compiled on its first call.

    Args:
        direct: the eager loss (a ``DirectLoss``); its ``params`` are this loss's.

    Example:
        >>> import bnn_pyro as bp, pyro
        >>> from bnn_pyro.methods.vi.fast_loss import direct_loss_for
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5))
        >>> X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> bnn.setup_guide(X, y)
        >>> eager = direct_loss_for(bnn)
        >>> compiled = CompiledLoss(eager)
        >>> pyro.set_rng_seed(0); loss, _ = compiled(X, y, dataset_size=8)  # compiles: seconds
        >>> pyro.set_rng_seed(0); ref, _ = eager(X, y, dataset_size=8)
        >>> bool(torch.isclose(loss, ref, rtol=1e-5))
        True
    """

    def __init__(self, direct: Any) -> None:
        self.direct, self.params = direct, direct.params
        self._fn = compile_loss(self._loss)
        self._warm = False

    def _loss(
        self, x: torch.Tensor, y: torch.Tensor, n: torch.Tensor | None, beta: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.direct(x, y, dataset_size=n, kl_weight=beta)

    def __call__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        dataset_size: int | None = None,
        kl_weight: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ref = self.params[0]  # the scalars on the parameters' device, in their dtype
        if not self._warm:
            _warm_up(ref.device, lambda: self.direct(x, y, dataset_size, kl_weight))
            self._warm = True
        n = None if dataset_size is None else ref.new_tensor(float(dataset_size))
        beta = ref.new_tensor(float(kl_weight))
        return self._fn(x, y, n, beta)


def _warm_up(device: torch.device, eager: Callable[[], Any]) -> None:
    """One eager pass of a loss about to be compiled, without gradients and leaving the random
    state as it found it: it fills the objective's caches (the priors' constants, a learned
    noise's prior), so the graph traced next holds no cache miss, which would break it in two
    and recompile it on the second call."""
    with torch.random.fork_rng([device] if device.type == "cuda" else []), torch.no_grad():
        eager()


class CompiledStackedLoss:
    """``(x, y, kl_weight) -> (loss, nll)`` of a :class:`~bnn_pyro.methods.vi.stacked.StackedVI`
    (each ``(K,)``), compiled: what ``fit_stacked(..., compile=True)`` steps with. The members'
    weight noise is drawn eagerly from their own generators
    (:meth:`~bnn_pyro.methods.vi.objective.VIObjective.noise`, the numbers the eager objective
    draws, in its order) and handed to the one compiled graph of the rest: ``torch.compile``
    cannot trace a draw from a generator object.

    Args:
        stacked: the stacked guides (weight-space draws: no local reparameterization, no
            dropout, whose draws happen inside the net).

    Example:
        >>> import bnn_pyro as bp
        >>> from bnn_pyro.methods.vi.stacked import StackedVI
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5)) for _ in range(2)]
        >>> X, y = torch.randn(2, 8, 2), torch.randn(2, 8, 1)
        >>> for bnn, x, t in zip(bnns, X, y):
        ...     bnn.setup_guide(x, t)
        >>> gens = lambda: [torch.Generator().manual_seed(k) for k in range(2)]
        >>> compiled = CompiledStackedLoss(StackedVI(bnns, gens(), 64))
        >>> loss, _ = compiled(X, y, 1.0)  # compiles: seconds
        >>> ref, _ = StackedVI(bnns, gens(), 64)(X, y, 1.0)
        >>> bool(torch.allclose(loss, ref, rtol=1e-5)), loss.shape
        (True, torch.Size([2]))
    """

    def __init__(self, stacked: Any) -> None:
        self.stacked = stacked
        self._fn = compile_loss(self._loss)
        self._warm = False

    def _loss(
        self, x: torch.Tensor, y: torch.Tensor, beta: torch.Tensor, noise: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        st = self.stacked
        return st.objective(list(st.locs), list(st.rhos), x, y, st.dataset_size, beta, noise=noise)

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor, kl_weight: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        st, locs = self.stacked, list(self.stacked.locs)
        noise = st.objective.noise(locs)  # eager: the members' generators
        if not self._warm:
            rhos, n = list(st.rhos), st.dataset_size
            warm = lambda: st.objective(locs, rhos, x, y, n, kl_weight, noise=noise)  # noqa: E731
            _warm_up(locs[0].device, warm)
            self._warm = True
        return self._fn(x, y, locs[0].new_tensor(float(kl_weight)), noise)


def compiled_objective(model: Any, elbo: str, direct: Any) -> CompiledLoss:
    """``direct``, ``model``'s plain-torch objective for ``elbo`` (what
    :func:`~bnn_pyro.methods.vi.engine.direct_objective` returns), compiled: what
    ``fit(compile=True)`` steps with.

    The compiled loss is kept on the model, one per ``elbo``, and handed out again while the
    guide's parameters are the same tensors, so a second ``fit`` (training on) runs the graph
    the first compiled instead of compiling anew.

    Example:
        >>> import bnn_pyro as bp
        >>> from bnn_pyro.methods.vi.engine import direct_objective
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5))
        >>> bnn.setup_guide(torch.randn(8, 2), torch.randn(8, 1))
        >>> first = compiled_objective(bnn, "trace", direct_objective(bnn, "trace", 1))
        >>> compiled_objective(bnn, "trace", direct_objective(bnn, "trace", 1)) is first
        True
    """
    held = model.__dict__.setdefault("_compiled_losses", {})
    compiled = held.get(elbo)
    same = compiled is not None and len(compiled.params) == len(direct.params)
    if not (same and all(map(operator.is_, compiled.params, direct.params))):
        compiled = held[elbo] = CompiledLoss(direct)
    return compiled


def check_compile(
    model: object, compile: object, elbo: object, num_particles: int, optimizer: Any = None
) -> None:
    """Refuse ``fit(compile=True)`` before any work where there is no plain-torch loss to compile:
    an ELBO other than :data:`COMPILED_ELBOS`, several particles, or a fit that runs Pyro's
    ``SVI`` (:func:`~bnn_pyro.methods.vi.engine.why_not_direct`: a model, likelihood or optimizer
    the plain-torch objective does not cover).

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5))
        >>> check_compile(bnn, True, "trace", 1)  # the default: compiled
        >>> check_compile(bnn, True, "alpha", 1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
          ...
        ValueError: compile=True compiles the ELBOs (...) of one particle, got elbo='alpha', ...
    """
    if not check_bool("compile", compile):
        return
    if elbo not in COMPILED_ELBOS or num_particles != 1:
        raise ValueError(
            f"compile=True compiles the ELBOs {COMPILED_ELBOS} of one particle, got "
            f"elbo={elbo!r}, num_particles={num_particles}"
        )
    reason = why_not_direct(model, elbo, num_particles, optimizer)
    if reason is not None:
        raise ValueError(f"compile=True compiles the plain-torch loss, and here is none: {reason}")
