"""The step sizes of a run: which one ``fit``'s arguments ask for, and the ones a run measures
(:mod:`~bnn_pyro.methods.sgmcmc.measured`), scaled to the largest curvature of the
preconditioned potential and bounded by the minibatch noise.

* :func:`run_step`: from ``fit``'s ``lr`` and ``batch_size``, the step (a float, or measured),
  the rows per step and SGHMC's friction; :func:`even_batch`, the equal minibatches of a
  measured run.
* :func:`largest_curvature`: ``λ_max`` of the preconditioned per-datum Hessian ``M⁻¹ ∇²U / N``
  by power iteration on Hessian-vector products, which the default step sizes are scaled by.
* :func:`sghmc_step_size`, :func:`sgld_step_size`: the step at a target ``lr² λ_max`` (SGHMC,
  BAOAB: exact on a Gaussian at every stable step) or ``lr λ_max`` (SGLD, whose bias grows with
  it), or shorter where the minibatch noise's share of the injected noise would pass
  :data:`NOISE_SHARE`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = [
    "MDECAY",
    "MEASURED",
    "MINIBATCH_LR",
    "MINIBATCH_MDECAY",
    "NOISE_SHARE",
    "SGLD_TRAVEL",
    "even_batch",
    "largest_curvature",
    "run_step",
    "sghmc_step_size",
    "sgld_step_size",
]

#: The largest share of the injected noise's variance that the minibatch gradient's noise may
#: add along any direction at a default step size (:func:`sghmc_step_size`,
#: :func:`sgld_step_size`): where it is white noise it widens the samples' variance along that
#: direction by about that share, less along the others; a tenth is about the sampling error of
#: a variance at the few hundred effective draws a default run reaches (``sqrt(2 / ESS)``).
NOISE_SHARE = 0.1

#: SGLD's ``lr λ_max`` while it burns in (or explores): its bias does not matter before the chain
#: is collected, its stability does (``lr λ_max < 2``), and it travels as far per step as that
#: allows with a margin for a curvature that grows on the way.
SGLD_TRAVEL = 1.0


def even_batch(n: int, batch: int) -> int:
    """The rows per minibatch of a measured run asked for ``batch`` of ``n`` rows: as many
    minibatches an epoch as ``batch`` gives, of (nearly) equal size, so that no small last one
    (``n mod batch`` rows, whose gradient noise is many times the others') sets the step.

    Args:
        n: the rows of the data set (>= 1).
        batch: the rows asked for per minibatch, in ``[1, n]``.

    Returns:
        ``ceil(n / k)`` for ``k = ceil(n / batch)`` minibatches, at most ``batch``: the same
        ``k`` minibatches an epoch, the last at most ``k - 1`` rows short of the others.

    Example:
        >>> even_batch(100, 32), even_batch(200, 128), even_batch(100, 100), even_batch(7, 3)
        (25, 100, 100, 3)
    """
    if n < 1 or not 1 <= batch <= n:
        raise ValueError(f"even_batch needs 1 <= batch <= n, got batch={batch}, n={n}")
    return math.ceil(n / math.ceil(n / batch))


#: The step a run on minibatches takes when ``fit`` is given no ``lr``: a fixed step on the plain
#: minibatch gradient (SGHMC's ``ε`` of Springenberg et al., SGLD's ``ε N``). A measured step on
#: minibatches (``lr="measured"``: the control variate, the step bounded by the noise) is right
#: on a Gaussian posterior, but on a small network's it was measured further from the posterior
#: than this fixed step (fewer classes told apart, lower out-of-distribution scores).
MINIBATCH_LR = {"sghmc": 0.05, "sgld": 0.01}

#: SGHMC's friction per step (``mdecay``) when none is given: :data:`MDECAY`, or, at the fixed
#: step on minibatches, the friction that step was tuned with (:data:`MINIBATCH_MDECAY`).
#: :data:`MDECAY` damps a posterior's slow directions at about the critical rate for condition
#: numbers of a few tens at the measured step, and its stiff ones within a few steps.
MDECAY = 0.25
MINIBATCH_MDECAY = 0.2

#: What ``fit(lr=...)`` takes besides a positive float and ``None``.
MEASURED = "measured"


def run_step(
    sampler: str, lr: float | str | None, batch: int | None, n: int, mdecay: float | None = None
) -> tuple[float | None, int, float]:
    """The step size a run of ``sampler`` takes, its rows per step and its friction, from
    ``fit``'s ``lr`` and ``batch_size`` on ``n`` rows and the method's ``mdecay``: ``(lr, rows,
    mdecay)``, ``lr`` ``None`` for a step measured on the posterior (this module), ``mdecay``
    the given one or else :data:`MDECAY` (:data:`MINIBATCH_MDECAY` at the fixed minibatch
    step).

    * ``lr`` a positive float: that step, on minibatches of ``batch`` (``None``: all ``n``).
    * ``lr=None`` on the whole data set (``batch`` ``None`` or ``>= n``): measured.
    * ``lr=None`` on minibatches: :data:`MINIBATCH_LR`'s fixed step.
    * ``lr="measured"``: measured, on :func:`even_batch` minibatches with the control variate.

    Args:
        sampler: ``"sghmc"`` or ``"sgld"``.
        lr: ``fit``'s ``lr``.
        batch: ``fit``'s ``batch_size`` (checked: a positive int or ``None``).
        n: the rows of the data set.
        mdecay: the method's (``None``: the default).

    Example:
        >>> run_step("sghmc", None, None, 100), run_step("sghmc", None, 32, 100)
        ((None, 100, 0.25), (0.05, 32, 0.2))
        >>> run_step("sgld", "measured", 32, 100), run_step("sghmc", 0.2, 500, 100, 0.1)
        ((None, 25, 0.25), (0.2, 100, 0.1))
    """
    rows = n if batch is None else min(batch, n)
    if lr == MEASURED:
        lr, rows = None, even_batch(n, rows)
    elif isinstance(lr, str):
        raise ValueError(f"lr must be a positive float, None or {MEASURED!r}, got {lr!r}")
    elif lr is None and rows < n:
        lr = MINIBATCH_LR[sampler]
        mdecay = MINIBATCH_MDECAY if mdecay is None else mdecay
    return lr, rows, MDECAY if mdecay is None else mdecay


def largest_curvature(
    hvp: Callable[[torch.Tensor], torch.Tensor],
    start: torch.Tensor,
    minv: torch.Tensor | None = None,
    iterations: int = 12,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``λ_max`` of the preconditioned Hessian ``M⁻¹ H`` by power iteration.

    ``M⁻¹ H`` is similar to the symmetric ``M^{-1/2} H M^{-1/2}``, so the iteration converges to
    the eigenvalue of largest magnitude; its estimate is the growth of the ``M``-norm
    ``sqrt(xᵀ M x)`` of the last iterate (from below as the iterate converges).

    Args:
        hvp: ``x ↦ H x`` for ``x`` shaped like ``start``, row by row for a ``(K, P)`` stack.
        start: ``(P,)`` or ``(K, P)``: the first iterate (any vector not orthogonal to the
            top eigenvector).
        minv: the diagonal ``M⁻¹``, shaped like ``start``; ``None``: the identity.
        iterations: the Hessian-vector products spent.

    Returns:
        ``(λ, x)``: ``λ`` ``()`` or ``(K,)``, and the last iterate ``x`` shaped like ``start``.
        ``λ`` is ``inf`` for a chain whose iterate's norm overflowed (or was not finite).

    Example:
        >>> H = torch.tensor([[3.0, 1.0], [1.0, 2.0]])
        >>> lam, _ = largest_curvature(lambda x: x @ H, torch.ones(2), iterations=30)
        >>> round(float(lam), 4), round(float(torch.linalg.eigvalsh(H).max()), 4)
        (3.618, 3.618)
    """
    minv = torch.ones_like(start) if minv is None else minv

    def m_norm(x: torch.Tensor) -> torch.Tensor:
        return (x.square() / minv).sum(-1, keepdim=True).sqrt().clamp_min(1e-30)

    x = start / m_norm(start)
    value = torch.zeros_like(x[..., :1])
    lost = torch.zeros_like(value, dtype=torch.bool)
    for _ in range(iterations):
        y = minv * hvp(x)
        value = m_norm(y)
        lost |= ~torch.isfinite(value)  # the norm overflowed: the next iterates are 0 or nan
        x = y / value
    return torch.where(lost, torch.inf, value).squeeze(-1), x


def sghmc_step_size(
    curvature: torch.Tensor,
    noise: torch.Tensor | None,
    *,
    target: float,
    mdecay: float,
    temperature: float,
    dataset_size: int,
    share: float = NOISE_SHARE,
) -> torch.Tensor:
    """The SGHMC step ``lr`` with ``lr² λ_max = target`` for ``λ_max`` the largest curvature of
    ``M⁻¹ ∇²U / N`` (:func:`largest_curvature`), or smaller where the minibatch noise asks.

    The kick's noise ``lr² M⁻¹ ζ`` (``ζ`` the minibatch gradient's error, per datum, of
    covariance ``V``) against the injected ``mdecay (2 - mdecay) T (lr²/N) M⁻¹`` is the share
    ``lr² N w / (mdecay (2 - mdecay) T)`` along the direction where ``w``, the largest variance
    of ``M^{-1/2} ζ``, is reached; the step keeps it ``<= share``.

    Args:
        curvature: ``λ_max``, ``()`` or ``(K,)`` (one per chain).
        noise: ``w`` like ``curvature``, or ``None`` for full-batch gradients (no noise).
        target: ``lr² λ_max`` (BAOAB is stable below 4 on a Gaussian).
        mdecay, temperature, dataset_size: the chain's.
        share: the noise's largest share.

    Returns:
        ``lr`` like ``curvature``.

    Example:
        >>> float(sghmc_step_size(torch.tensor(4.0), None, target=1.0, mdecay=0.2,
        ...                       temperature=1.0, dataset_size=100))
        0.5
    """
    lr2 = target / curvature.clamp_min(1e-30)
    if noise is not None:
        bound = share * mdecay * (2.0 - mdecay) * temperature / (dataset_size * noise)
        lr2 = torch.minimum(lr2, bound.clamp_min(1e-30))
    return lr2.sqrt()


def sgld_step_size(
    curvature: torch.Tensor,
    noise: torch.Tensor | None,
    *,
    target: float,
    temperature: float,
    dataset_size: int,
    share: float = NOISE_SHARE,
) -> torch.Tensor:
    """The SGLD step ``lr`` (``ε = lr / N``) with ``ε λ_max(∇²U) = lr λ_max(∇²U / N) = target``,
    or smaller where the minibatch noise asks.

    The step's own bias on a Gaussian posterior widens the variance along the stiffest direction
    by ``1 / (1 - target / 2)`` (module docstring) and less along the others. The minibatch
    noise ``lr ζ`` against the injected ``2 lr T / N`` is the share ``lr N w / (2 T)`` for ``w``
    the largest variance of ``ζ``; the step keeps it ``<= share``.

    Args:
        curvature: ``λ_max`` of ``∇²U / N``, ``()`` or ``(K,)``.
        noise: ``w`` like ``curvature``, or ``None`` for full-batch gradients.
        target: ``lr λ_max``.
        temperature, dataset_size: the chain's.
        share: the noise's largest share.

    Example:
        >>> float(sgld_step_size(torch.tensor(4.0), None, target=0.5, temperature=1.0,
        ...                      dataset_size=100))
        0.125
    """
    lr = target / curvature.clamp_min(1e-30)
    if noise is not None:
        lr = torch.minimum(
            lr, (2.0 * share * temperature / (dataset_size * noise)).clamp_min(1e-30)
        )
    return lr
