"""MAP-initialised variational inference: ``VariationalBNN.fit(..., init="map")``.

Before SVI, a short MAP phase finds a mode of the model's own posterior density, and the
mean-field guide starts there:

1. **MAP phase.** Adam (the fit's ``lr``, cosine-decayed to 0 over ``map_epochs`` so the last
   iterate is the optimum, not a point of a constant step's jitter) minimises
   ``-log p(y | w) - log p(w) - log |dw/du|`` through the one training loop
   (:func:`bnn_pyro.training.train` with a :class:`~bnn_pyro.training.LossStep`). The
   log-density is the model's own: a trace of ``bnn.model`` with every latent site conditioned
   on the guide's means (``poutine.condition``), so the prior, the likelihood and the ``N / B``
   minibatch scaling are exactly the ELBO's. ``u`` is the guide's unconstrained space (the
   identity for weights; the log for a learned noise scale): its Jacobian term makes the phase
   find the mode of the density the guide's Gaussian lives on.
2. **Means.** The guide's means become the MAP point ``u_MAP``.
3. **Scales.** Every scale restarts at the model's ``init_scale`` (default 0.01), as TyXe's
   ``PretrainedInitializer`` does (means from the pretrained net, scales the guide's small
   constant): the guide then starts as a narrow Gaussian at the mode, its predictions those
   of the MAP fit, and SVI grows each scale to what the data leave uncertain. The curvature
   that would set each scale (the mean-field optimum of a Gaussian posterior has variances
   ``1 / diag(precision)``) is not known without a Hessian. MOPED's rule (Krishnan, Subedar &
   Tickoo, AAAI 2020; bayesian-torch: ``scale = 0.1 |w_MAP|``) was measured and dropped: on a
   small nonlinear regression with little noise it ended with a worse test log-likelihood and a
   higher loss than the constant: a 10% perturbation of every weight undoes much of the fit the
   MAP phase bought when the likelihood is sharp.
   Measured: ``benchmarks/results/library_measurements.md``, section 'Scales after the MAP phase'.

**How long.** ``map_epochs`` defaults to ``epochs // 4``. A MAP epoch costs less than an SVI
epoch (no guide to sample), so the default adds a fraction of a fit's time. On the regression
above, a short MAP phase barely helped the test log-likelihood and a longer one held the gain; a
quarter of the epochs is past that point and keeps the cost small
(``tests/methods/vi/test_map_init.py`` checks that a MAP start helps there).
Measured: ``benchmarks/results/library_measurements.md``, section 'Length of the MAP phase'.

Only the mean-field guide (``guide="meanfield"``) holds one mean per weight to set; other guides
are refused, by name of the argument.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.poutine.util import site_is_subsample

from bnn_pyro._checks import check_int
from bnn_pyro.guides import MeanFieldNormalGuide, inverse_softplus
from bnn_pyro.training.callbacks import History
from bnn_pyro.training.loop import Batch, LossStep, train
from bnn_pyro.training.optim import make_optimizer

__all__ = ["INITS", "check_init", "map_phase", "start_from_map"]

#: The values of ``fit``'s ``init``: ``None``/``"prior"`` (the guide's means start at the net's
#: own initial weights), ``"map"`` (at a MAP fit, see the module docstring).
INITS = ("prior", "map")


def check_init(bnn: Any, init: Any, map_epochs: Any, epochs: int) -> int | None:
    """Check ``fit``'s ``init`` and ``map_epochs`` before any work; return the number of MAP
    epochs (``None``: no MAP phase). The default ``map_epochs`` is a quarter of ``epochs``, at
    least 1 (see the module docstring).

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
        >>> check_init(bnn, "map", None, 300), check_init(bnn, None, None, 300)
        (75, None)
        >>> check_init(bnn, "mle", None, 300)
        Traceback (most recent call last):
          ...
        ValueError: init must be None, 'prior' or 'map', got 'mle'
    """
    if init is not None and not isinstance(init, str):
        raise TypeError(f"init must be None, 'prior' or 'map', got {type(init).__name__}")
    if init is not None and init not in INITS:
        raise ValueError(f"init must be None, 'prior' or 'map', got {init!r}")
    if init != "map":
        if map_epochs is not None:
            raise ValueError(f"map_epochs is used only with init='map', got init={init!r}")
        return None
    guide = getattr(bnn, "guide", None)
    if not (hasattr(bnn, "net") and isinstance(guide, MeanFieldNormalGuide)):
        # a model without a net of weight sites (HiddenLayerBNN) has no guide of weights to
        # name: its own guide, if any, is the likelihood's
        spec = getattr(bnn, "guide_spec", type(guide).__name__)
        got = f" with guide={spec!r}" if hasattr(bnn, "net") else ""
        raise ValueError(
            "init='map' needs a VariationalBNN with the mean-field guide (guide='meanfield'), "
            f"got a {type(bnn).__name__}{got}"
        )
    if map_epochs is None:
        return max(1, epochs // 4)
    return check_int("map_epochs", map_epochs)


def _neg_log_joint(bnn: Any, dataset_size: int) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """``(xb, yb) -> -log p(yb | w) (N / B scaled) - log p(w) - log |dw/du|`` at the guide's
    means ``u`` (the MAP objective, in the units of the ELBO: the whole data set)."""
    guide: MeanFieldNormalGuide = bnn.guide
    sites = [(s, guide.locs[guide.param_key(s.name)]) for s in guide.site_specs]

    def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        values = {s.name: s.transform(u) for s, u in sites}
        conditioned = poutine.condition(bnn.model, data=values)
        trace = poutine.trace(conditioned).get_trace(xb, yb, dataset_size=dataset_size)
        free = [
            name
            for name, site in trace.iter_stochastic_nodes()
            if not site["is_observed"] and not site_is_subsample(site)
        ]
        if free:
            raise ValueError(f"init='map': the model has latent sites the guide lacks: {free}")
        jacobian = sum(s.transform.log_abs_det_jacobian(u, values[s.name]).sum() for s, u in sites)
        return -(trace.log_prob_sum() + jacobian)

    return loss


def map_phase(
    bnn: Any,
    batches: Callable[[], Iterable[Batch]],
    *,
    dataset_size: int,
    epochs: int,
    lr: float,
    progress: bool = True,
) -> History:
    """Run the MAP phase on ``bnn``'s mean-field guide, then set its means and scales (see the
    module docstring); ``VariationalBNN.fit(..., init="map")`` calls it before SVI.

    The phase starts from the guide's current means (a fitted model's, on a second ``fit``)
    and every scale restarts at ``init_scale``. Point-estimate parameters of the net (layers
    the prior leaves out) are fitted with the weights. The phase's :class:`History`
    (``loss``: the negative log joint density of the whole data set, per epoch) is kept as
    ``bnn.map_history``.

    Args:
        bnn: a :class:`~bnn_pyro.VariationalBNN` whose mean-field guide has its sites.
        batches: called once per epoch; yields ``(x (B, ...), y (B, ...))`` minibatches.
        dataset_size: ``N``, the number of points the minibatches stand for.
        epochs: MAP epochs (``>= 1``).
        lr: Adam's initial learning rate (cosine-decayed to 0).
        progress: show a progress bar.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(64, 2); y = X @ torch.tensor([[1.0], [-2.0]])
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
        >>> _ = bnn.fit(X, y, epochs=0, lr=0.05, init="map", map_epochs=300, progress=False, seed=0)
        >>> bnn.guide.means()["net.0.weight"].round(decimals=2)
        tensor([[ 1., -2.]])
        >>> bnn.guide.scales()["net.0.weight"]
        tensor([[0.0100, 0.0100]])
    """
    guide: MeanFieldNormalGuide = bnn.guide
    rhos = {id(p) for p in guide.rhos.values()}
    params = [p for p in bnn.parameters() if id(p) not in rhos and p.requires_grad]
    step = LossStep(_neg_log_joint(bnn, dataset_size), make_optimizer(None, params, lr), "map")
    estimator, bnn.local_reparameterization = bnn.local_reparameterization, None
    try:  # the MAP phase evaluates the net on the weights themselves: no local reparam.
        history = train(
            bnn, step, batches, epochs=epochs, progress=progress, desc="map",
            lr_schedule="cosine",
        )  # fmt: skip
    finally:
        bnn.local_reparameterization = estimator
        for p in params:  # the last MAP step's gradient must not add to SVI's first one
            p.grad = None
    with torch.no_grad():
        for s in guide.site_specs:
            key = guide.param_key(s.name)
            scale = torch.full_like(guide.locs[key], guide.init_scale)
            guide.rhos[key].copy_(inverse_softplus(scale))
    bnn.map_history = history
    return history


def start_from_map(
    bnn: Any,
    batches: Callable[[], Iterable[Batch]],
    dataset_size: int,
    map_epochs: int | None,
    lr: float,
    progress: bool,
    resume: Any,
) -> None:
    """``fit``'s hook before SVI: :func:`map_phase` when ``map_epochs`` (from
    :func:`check_init`) is set, unless the fit resumes a saved run (whose state already holds
    the guide the MAP phase started, and whatever SVI made of it).

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1))
        >>> start_from_map(bnn, lambda: [], 8, None, 0.01, False, None)  # init=None: nothing
        >>> hasattr(bnn, "map_history")
        False
    """
    if map_epochs and (resume is None or resume.saved is None):
        map_phase(
            bnn, batches, dataset_size=dataset_size, epochs=map_epochs, lr=lr, progress=progress
        )
