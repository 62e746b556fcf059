"""``Trace_ELBO``'s loss of a mean-field :class:`~bnn_pyro.VariationalBNN`, in plain torch.

What remains of a small net's step on Pyro's path (even :class:`~bnn_pyro.elbos.trace.
FastTrace_ELBO`'s lean one) is one ``pyro.sample`` call per weight (the messenger stack, a
distribution object, ``PyroModule`` attribute look-ups) in the guide and again in the model.
:class:`DirectLoss` computes the same single-particle estimator with none of that: the library's
one VI objective (:class:`~bnn_pyro.methods.vi.objective.VIObjective`) of one model, on the
guide's own parameters,

    loss = -( N/B * sum_n log p(y_n | f(x_n; w)) + beta * (log p(w) - log q(w)) ),
    w = loc + softplus(rho) * eps,  eps ~ N(0, I)

drawing ``eps`` with the same ``torch.randn`` calls, in the same order, as the guide. ``fit``
steps with it where :func:`~bnn_pyro.methods.vi.engine.why_not_direct` passes the model (chosen
by type, before any work; anything it does not know, a custom guide or several particles, keeps
Pyro's ``SVI``); that it is ``Trace_ELBO``'s loss and gradients under the same draws is the
parametrised test of ``tests/methods/vi/test_fast_loss.py``. With ``analytic_kl=True`` it is
``TraceMeanField_ELBO``'s loss instead (``elbo="meanfield"``), with ``stl=True``
``StickingTheLanding_ELBO``'s, with ``alpha`` and ``particles`` ``AlphaELBO``'s energy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.methods.vi.objective import VIObjective
from bnn_pyro.nn.batched import has_hooks
from bnn_pyro.nn.pyro_net import DEVICE_REF

if TYPE_CHECKING:
    from bnn_pyro.methods.vi.svi_model import SVIModel

__all__ = ["DirectLoss", "direct_loss_for", "why_no_direct_loss"]


class DirectLoss:
    """``(x, y, dataset_size=N, kl_weight=beta) -> (loss, nll)`` of a mean-field VariationalBNN.

    ``loss`` is the negative single-particle ELBO estimate that ``Trace_ELBO`` computes for
    ``bnn.model``/``bnn.guide`` under the same draws; ``nll`` is its detached likelihood part
    (minus the scaled log-likelihood). Shapes: ``x (B, *features)``, ``y`` as the likelihood's
    ``check_targets`` returns it; both results are scalars.

    Build it with :func:`direct_loss_for`, which returns ``None`` for the models it does not
    cover.

    Example:
        >>> import bnn_pyro as bp, pyro
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.5))
        >>> X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> bnn.setup_guide(X, y)
        >>> direct = direct_loss_for(bnn)
        >>> pyro.set_rng_seed(0); loss, nll = direct(X, y, dataset_size=8)
        >>> pyro.set_rng_seed(0)
        >>> ref = pyro.infer.Trace_ELBO().differentiable_loss(bnn.model, bnn.guide, X, y, 8)
        >>> bool(torch.isclose(loss, ref))
        True
    """

    def __init__(
        self,
        bnn: SVIModel,
        stl: bool = False,
        analytic_kl: bool = False,
        *,
        alpha: float | None = None,
        particles: int = 0,
    ) -> None:
        if (stl, analytic_kl, alpha is not None).count(True) > 1:
            raise ValueError("stl, analytic_kl and alpha are different objectives: choose one")
        self.bnn, self.stl, self.analytic_kl = bnn, stl, analytic_kl
        self.params = [p for p in bnn.parameters() if p.requires_grad]
        if alpha is None:
            mode, options = ("stl" if stl else "meanfield" if analytic_kl else "trace"), {}
        else:
            mode, options = "alpha", {"alpha": alpha, "particles": particles}
        self.objective = VIObjective([bnn], mode=mode, **options)
        guide = bnn.guide
        keys = [guide.param_key(spec.name) for spec in guide.site_specs]
        self._locs = [guide.locs[k] for k in keys]
        self._rhos = [guide.rhos[k] for k in keys]
        self._shared = {
            k: v
            for k, v in {
                **dict(bnn.net.named_parameters()),
                **dict(bnn.net.named_buffers()),
            }.items()
            if not k.endswith(DEVICE_REF)
        }

    def __call__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        dataset_size: int | None = None,
        kl_weight: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.objective(
            self._locs, self._rhos, x, y, dataset_size, kl_weight, shared=self._shared
        )


def direct_loss_for(
    bnn: Any,
    stl: bool = False,
    analytic_kl: bool = False,
    *,
    alpha: float | None = None,
    particles: int = 0,
) -> DirectLoss | None:
    """A :class:`DirectLoss` for ``bnn`` (a :class:`~bnn_pyro.VariationalBNN`, whose
    ``fast_loss`` calls this), or ``None`` when the model is not one it covers: the library's
    mean-field guide (set up), no forward or backward hooks on the net's modules (the
    plain-torch twin would not call them), a prior without latent sites of its own (a
    hierarchical scale: its prior and the weights' prior given it are Pyro's to score), and for
    the alpha energy (``alpha`` with ``particles``) the weight-space estimator.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
        >>> direct_loss_for(bnn) is None  # a Pyro autoguide: the Pyro path
        True
    """
    if why_no_direct_loss(bnn) is not None or not bnn.guide.is_setup:
        return None
    if alpha is not None and bnn.local_reparameterization:
        return None  # (each particle's pre-activations: Pyro's vectorized path)
    return DirectLoss(bnn, stl, analytic_kl, alpha=alpha, particles=particles)


def why_no_direct_loss(bnn: Any) -> str | None:
    """Why :func:`direct_loss_for` gives ``bnn`` no loss whatever its guide's set-up, or
    ``None``: a guide other than the library's mean-field one, a prior with latent sites of its
    own (scored by Pyro's path), hooks on the net's modules.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
        >>> why_no_direct_loss(bnn)
        "guide='normal' is not the library's mean-field guide (guide='meanfield')"
    """
    guide = bnn.guide
    if not isinstance(guide, MeanFieldNormalGuide) or type(guide).forward is not (
        MeanFieldNormalGuide.forward
    ):
        spec = getattr(bnn, "guide_spec", type(guide).__name__)
        return f"guide={spec!r} is not the library's mean-field guide (guide='meanfield')"
    if getattr(bnn, "prior_sites", None):
        return "the prior has latent sites of its own (a hierarchical scale), which Pyro scores"
    if has_hooks(bnn.net):
        return "the net's modules have forward or backward hooks, which the plain-torch twin skips"
    return None
