"""SGLD's dense preconditioner: the inverse of the potential's measured curvature, so that the
chain moves at one rate along every direction of the posterior.

Plain SGLD steps along every direction with the same ``ε``, which the stiffest one bounds
(``ε λ_max < 2``; the default step is ``ε λ_max = 0.1``); the flattest direction then relaxes
at ``ε λ_min`` per step, so that a posterior of condition number ``κ`` needs of the order of
``κ / 0.1`` steps per effective draw (correlated inputs make ``κ`` large). Langevin dynamics
with a constant positive definite matrix ``M``, ``dθ = -M ∇U dt + sqrt(2 T M) dW``, has the
same stationary law ``exp(-U / T)`` for any such ``M`` (no correction term: ``M`` does not
depend on ``θ``), and with ``M = (∇²U)⁻¹`` every direction of a Gaussian posterior relaxes at
the same rate.

:func:`dense_preconditioner` measures the per-datum Hessian ``H = ∇²U / N`` column by column
(``P`` Hessian-vector products), symmetrises it and takes ``M = Q diag(1 / c) Qᵀ`` from its
eigendecomposition ``H = Q diag(λ) Qᵀ``, with ``c = max(|λ|, floor · max|λ|)``: a direction of
negative curvature (a network's posterior away from a mode) is stepped as one of positive
curvature of the same size, and a flat one no further than ``1 / floor`` times the stiffest.
The measured step (:mod:`~bnn_pyro.methods.sgmcmc.measured`) is then taken on the
preconditioned potential ``M^{1/2} H M^{1/2}``, whose largest curvature is 1 where ``H`` is
constant, so it bounds whatever the measure missed. A run travels without it (the first half of
its burn-in, a cycle's exploration), measures ``M`` once the chain has settled (the second half
of the burn-in, its end, the start of a sampling stage) and keeps it while it samples.

One fixed ``M`` suits a posterior whose curvature is nearly the same everywhere: that of a model
linear in its weights (Bayesian linear, logistic or softmax regression). A network's changes
from place to place and has directions of negative and near-zero curvature, where ``M`` takes
steps far longer than the curvature a little further on allows: on the small tanh network of
the no-data benchmark the dense chain diverged soon after its first measure. So
``preconditioner="auto"`` (:class:`~bnn_pyro.methods.sgmcmc.method.SGMCMC`) takes it for a net
linear in its weights (:func:`linear_in_weights`) of at most :data:`DENSE_MAX_PARAMS`
parameters, and runs any other with the identity. The cost is ``P`` gradients of the whole
data set and a ``P × P`` eigendecomposition per measure, and ``P²`` numbers per chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from bnn_pyro._checks import check_choice, check_module
from bnn_pyro.nn.layers import Linear

__all__ = [
    "DENSE_FLOOR",
    "DENSE_MAX_PARAMS",
    "PRECONDITIONERS",
    "DensePreconditioner",
    "check_dense_step",
    "check_preconditioner",
    "dense_preconditioner",
    "linear_in_weights",
    "uses_dense",
]

#: SGMCMC's ``preconditioner`` choices (SGLD's; SGHMC adapts its own diagonal one).
PRECONDITIONERS = ("auto", "dense", "none")

#: The most parameters ``preconditioner="auto"`` measures a dense preconditioner for: ``P``
#: gradients per measure and ``P²`` numbers per chain (4 MB in float32 at this bound).
DENSE_MAX_PARAMS = 1000

#: The smallest curvature kept, relative to the largest: the preconditioner's widest step is
#: ``1 / DENSE_FLOOR`` times its narrowest (a finite-difference Hessian measures curvatures far
#: below its largest only to its arithmetic's precision, and a prior bounds the flat ones).
DENSE_FLOOR = 1e-6


@dataclass
class DensePreconditioner:
    """``M = Q diag(root²) Qᵀ`` and its symmetric square root ``M^{1/2} = Q diag(root) Qᵀ``.

    Attributes:
        basis: ``Q``, ``(P, P)`` or ``(K, P, P)`` (one per chain), orthonormal columns.
        root: ``(P,)`` or ``(K, P)``: ``c^{-1/2}`` for the curvatures ``c`` kept along them.

    Example:
        >>> pre = DensePreconditioner(torch.eye(2), torch.tensor([1.0, 0.5]))
        >>> pre.apply(torch.ones(2)).tolist(), pre.sqrt_apply(torch.ones(2)).tolist()
        ([1.0, 0.25], [1.0, 0.5])
    """

    basis: torch.Tensor
    root: torch.Tensor

    def _through(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """``Q diag(scale) Qᵀ x`` for ``x`` ``(P,)`` or ``(K, P)``."""
        coords = (x.unsqueeze(-2) @ self.basis).squeeze(-2)  # Qᵀ x, as a row
        return ((coords * scale).unsqueeze(-2) @ self.basis.transpose(-1, -2)).squeeze(-2)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``M x``, ``x`` shaped like :attr:`root`."""
        return self._through(x, self.root.square())

    def sqrt_apply(self, x: torch.Tensor) -> torch.Tensor:
        """``M^{1/2} x``: standard normal ``x`` becomes ``N(0, M)``."""
        return self._through(x, self.root)

    @classmethod
    def from_hessian(cls, hessian: torch.Tensor, floor: float = DENSE_FLOOR) -> DensePreconditioner:
        """The preconditioner of a measured ``hessian`` ``(P, P)`` or ``(K, P, P)``: its
        symmetric part's eigenvalues ``λ`` kept as ``c = max(|λ|, floor · max|λ|)``.

        Raises:
            ValueError: a Hessian that is not finite or is zero (nothing to scale by).

        Example:
            >>> H = torch.tensor([[4.0, 0.0], [0.0, -1.0]])
            >>> pre = DensePreconditioner.from_hessian(H)
            >>> sorted(round(v, 4) for v in pre.root.tolist())  # 1/sqrt(|λ|)
            [0.5, 1.0]
        """
        if not bool(torch.isfinite(hessian).all()):
            raise ValueError("the measured Hessian is not finite: no preconditioner from it")
        symmetric = 0.5 * (hessian + hessian.transpose(-1, -2))
        values, basis = torch.linalg.eigh(symmetric)
        size = values.abs()
        top = size.amax(-1, keepdim=True)
        if not bool((top > 0).all()):
            raise ValueError("the measured Hessian is zero: no preconditioner from it")
        return cls(basis, torch.maximum(size, floor * top).rsqrt())


def dense_preconditioner(
    hvp: Callable[[torch.Tensor], torch.Tensor], like: torch.Tensor, floor: float = DENSE_FLOOR
) -> DensePreconditioner:
    """Measure ``H`` column by column, ``H e_j = hvp(e_j)``, and precondition by its inverse
    (:meth:`DensePreconditioner.from_hessian`).

    Args:
        hvp: ``x ↦ H x`` for ``x`` shaped like ``like``, row by row for a ``(K, P)`` stack.
        like: ``(P,)`` or ``(K, P)``: the position (its shape, dtype and device).
        floor: the smallest curvature kept, relative to the largest.

    Returns:
        The :class:`DensePreconditioner` (one per chain for ``(K, P)``).

    Example:
        >>> A = torch.tensor([[100.0, 9.0], [9.0, 1.0]])  # condition number about 500
        >>> pre = dense_preconditioner(lambda x: x @ A, torch.zeros(2))
        >>> torch.allclose(pre.apply(torch.eye(2)) @ A, torch.eye(2), atol=1e-4)  # M = A⁻¹
        True
    """
    size = like.shape[-1]
    columns = []
    for j in range(size):
        unit = torch.zeros_like(like)
        unit[..., j] = 1.0
        columns.append(hvp(unit))
    return DensePreconditioner.from_hessian(torch.stack(columns, -1), floor)


def _plain(module: nn.Module, kind: type[nn.Module]) -> bool:
    """``module`` is a ``kind`` whose forward is ``kind``'s own (a PyroModule copy's is), or
    this library's batched :class:`~bnn_pyro.nn.layers.Linear`'s."""
    forwards = {kind.forward} | ({Linear.forward} if kind is nn.Linear else set())
    return isinstance(module, kind) and type(module).forward in forwards


def linear_in_weights(net: nn.Module) -> bool:
    """Whether ``net`` is one affine map of its inputs: an ``nn.Linear``, or an
    ``nn.Sequential`` of one ``nn.Linear`` and only ``nn.Flatten``/``nn.Identity`` besides
    (``bnn_pyro.nn.mlp(d, [], O)``), none of them with a forward of its own.

    Raises:
        TypeError: ``net`` is not a ``torch.nn.Module``.

    Example:
        >>> import bnn_pyro as bp
        >>> linear_in_weights(bp.nn.mlp(3, [], 1)), linear_in_weights(bp.nn.mlp(3, [4], 1))
        (True, False)
    """
    check_module("net", net)
    if _plain(net, nn.Linear):
        return True
    if not _plain(net, nn.Sequential):
        return False
    parts = list(net.children())
    return sum(_plain(p, nn.Linear) for p in parts) == 1 and all(
        _plain(p, nn.Linear) or _plain(p, nn.Flatten) or _plain(p, nn.Identity) for p in parts
    )


def check_preconditioner(preconditioner: str, sampler: str) -> str:
    """``preconditioner`` checked (one of :data:`PRECONDITIONERS`; ``"auto"`` only for SGHMC,
    which adapts its own diagonal ``M⁻¹``) and returned.

    Example:
        >>> check_preconditioner("dense", "sgld")
        'dense'
        >>> check_preconditioner("dense", "sghmc")
        Traceback (most recent call last):
          ...
        ValueError: preconditioner='dense' is SGLD's: SGHMC adapts its own diagonal M⁻¹ (leave ...
    """
    check_choice("preconditioner", preconditioner, PRECONDITIONERS)
    if sampler == "sghmc" and preconditioner != "auto":
        raise ValueError(
            f"preconditioner={preconditioner!r} is SGLD's: SGHMC adapts its own diagonal "
            "M⁻¹ (leave preconditioner='auto')"
        )
    return preconditioner


def uses_dense(preconditioner: str, linear: bool, size: int) -> bool:
    """Whether a run with a measured step takes the dense preconditioner: ``"dense"``, or
    ``"auto"`` for a net ``linear`` in its weights (:func:`linear_in_weights`) of at most
    :data:`DENSE_MAX_PARAMS` parameters (``size``).

    Example:
        >>> uses_dense("auto", True, 11), uses_dense("auto", False, 11)
        (True, False)
        >>> uses_dense("auto", True, 5000), uses_dense("dense", False, 5000)
        (False, True)
    """
    return preconditioner == "dense" or (
        preconditioner == "auto" and linear and size <= DENSE_MAX_PARAMS
    )


def check_dense_step(preconditioner: str, lr: float | str | None) -> None:
    """Refuse ``preconditioner="dense"`` with a given step size ``lr`` (a float): the dense
    preconditioner is measured with the step (``lr=None`` or ``"measured"``).

    Example:
        >>> check_dense_step("dense", "measured"); check_dense_step("auto", 0.01)  # accepted
        >>> check_dense_step("dense", 0.01)
        Traceback (most recent call last):
          ...
        ValueError: preconditioner='dense' is measured with the step: ... not lr=0.01
    """
    if preconditioner == "dense" and isinstance(lr, int | float):
        raise ValueError(
            "preconditioner='dense' is measured with the step: fit with lr=None or "
            f"lr='measured', not lr={lr}"
        )
