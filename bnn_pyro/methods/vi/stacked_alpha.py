"""K mean-field ``VariationalBNN`` fits of the black-box alpha energy in one pass:
``fit_stacked(..., elbo="alpha")``.

:class:`StackedAlphaVI` is :class:`~bnn_pyro.methods.vi.stacked.StackedVI` with
:class:`~bnn_pyro.elbos.alpha.AlphaELBO`'s loss: each member draws ``P`` joint samples of its
weights from its own generator, ``(K, P, *shape)`` in its own site order (what Pyro's vectorized
particle plate draws in ``fit(elbo="alpha")``), the ``K * P`` nets run as one stacked net, and
each row's ``P`` log-likelihoods enter through ``log mean exp``. Member k's loss is the energy
its own ``fit(elbo="alpha", num_particles=P, seed=seed_k)`` minimises, up to float rounding
(tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bnn_pyro.elbos.alpha import DEFAULT_PARTICLES, check_alpha, log_mean_exp
from bnn_pyro.methods.vi.stacked import StackedVI
from bnn_pyro.methods.vi.stacked_likelihoods import row_log_likelihood

__all__ = ["StackedAlphaVI"]


class StackedAlphaVI(StackedVI):
    """The guides of K set-up ``VariationalBNN`` models stacked; ``member_losses(x, y)`` is
    each member's black-box alpha energy on its minibatch: ``x (K, B, D)``, ``y (K, B, ...)`` →
    ``(K,)``.

    Args:
        bnns, generators, dataset_size, kl_weight: as :class:`StackedVI`.
        alpha: in ``(0, 1]``.
        num_particles: ``P >= 2`` draws per member and step.

    Example:
        >>> import bnn_pyro as bp
        >>> from bnn_pyro.stacking import fit_stacked
        >>> X = torch.randn(64, 2); y = X.sum(-1, keepdim=True)
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1)) for _ in range(3)]
        >>> h = fit_stacked(bnns, X, y, seeds=[0, 1, 2], epochs=2, elbo="alpha", progress=False)
        >>> len(h["member_loss"][-1])
        3
    """

    def __init__(
        self,
        bnns: Sequence[Any],
        generators: Sequence[torch.Generator],
        dataset_size: int,
        kl_weight: float = 1.0,
        alpha: float = 0.5,
        num_particles: int = DEFAULT_PARTICLES,
    ) -> None:
        super().__init__(bnns, generators, dataset_size, kl_weight)
        self.alpha, self.num_particles = check_alpha(alpha, num_particles)

    def member_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``(K,)``: ``-(N/B sum_n (1/alpha) log mean_p p(y_n | w_kp)^alpha + beta mean_p
        (log p(w_kp) - log q(w_kp)))`` per member."""
        k, p = len(self.bnns), self.num_particles
        values, log_q, _ = self._draw(p)  # (K, P, *shape), (K, P)
        log_p = self._log_prior(values, p)
        flat = {self._paths[n]: v.flatten(0, 1) for n, v in values.items() if n in self._paths}
        net = self._twin.load({}, flat)

        def per_draw(t: torch.Tensor) -> torch.Tensor:  # (K, ...) -> (K * P, ...)
            return t.unsqueeze(1).expand(k, p, *t.shape[1:]).flatten(0, 1)

        f = net(per_draw(x))  # (K * P, B, O)
        noise = self._learned_noise(values)
        log_p = log_p + self._noise_log_prior(noise, f)
        scale = None if noise is None else noise.flatten(0, 1)
        lik = self.bnns[0].likelihood
        rows = row_log_likelihood(self.bnns, lik, f, per_draw(y), scale, self._fixed_latents)
        rows = rows.view(k, p, -1)
        data = (log_mean_exp(self.alpha * rows.transpose(0, 1)) / self.alpha).sum(-1)  # (K,)
        n_over_b = self.dataset_size / x.shape[1]
        return -(n_over_b * data + self.kl_weight * (log_p - log_q).mean(1))
