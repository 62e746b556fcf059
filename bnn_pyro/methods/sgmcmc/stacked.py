"""K SG-MCMC chains run as one: :func:`fit_stacked_sgmcmc`, the SG-MCMC branch of
:func:`bnn_pyro.fit_stacked`.

A chain's step is mostly fixed cost: one pass of a small net per minibatch. Stacked, the K
chains' positions are one ``(K, P)`` tensor, the net runs once on a ``(K, B, ...)`` block of
minibatches with each chain's weights (the batched twin of
:class:`~bnn_pyro.methods.vi.posterior.NetEvaluator`), and :class:`StackedPotential` adds each
chain's prior and likelihood terms (:class:`~bnn_pyro.methods.vi.log_joint.LogJoint`, the log joint
the VI objective scores too) and its transforms' Jacobians in plain torch, so the gradient of the
sum is each chain's own. The update rules are elementwise and draw each chain's noise from its own
generator (:func:`~bnn_pyro.methods.sgmcmc.samplers.standard_normal`); every chain is set up by its
own :meth:`~bnn_pyro.methods.sgmcmc.method.SGMCMC.start_run` under its seed and sees its
minibatches in the order its own ``fit`` would. Each chain thus ends as its own ``fit(X_k, y_k,
seed=seeds[k])`` would, up to float rounding (tested). Which chains run stacked is read off
their types and settings before any work (:func:`why_not_stacked_chains`); that the plain-torch
potential is each chain's Pyro potential, value and gradient, is a parametrised test, not a
check at run time. A chain's own ``fit`` steps with the same potential at K = 1
(:class:`DirectPotential`, chosen by :func:`chain_potential`) wherever the rule passes it alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from bnn_pyro._checks import as_tensor, check_bool, check_float, check_int
from bnn_pyro._rng import order_generators, seeded
from bnn_pyro.likelihoods.plain import why_not_plain
from bnn_pyro.methods.sgmcmc.chain import ChainStep
from bnn_pyro.methods.sgmcmc.dense import check_dense_step
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.methods.sgmcmc.step_sizes import MEASURED, run_step
from bnn_pyro.methods.vi.log_joint import LogJoint
from bnn_pyro.methods.vi.stacked_support import (
    likelihood_setting,
    why_not_stacked_nets,
    why_not_stacked_prior,
)
from bnn_pyro.training.batches import validation_pair
from bnn_pyro.training.callbacks import History, check_callbacks
from bnn_pyro.training.loop import Callback, train
from bnn_pyro.training.stacked_batches import (
    check_member_sets,
    member_data,
    shuffled_member_batches,
)

__all__ = [
    "DirectPotential",
    "StackedPotential",
    "chain_potential",
    "fit_stacked_sgmcmc",
    "why_not_stacked_chains",
]

#: What every chain of a stacked run must share (their run plan and update rule).
SHARED = ("sampler", "temperature", "mdecay", "schedule", "cycles", "explore", "preconditioner",
          "burn_in", "thinning", "max_samples")  # fmt: skip


class StackedPotential:
    """The potentials of K chains over ``theta (K, P)``: ``gradient(theta, x (K, B, ...), y (K,
    B, ...), N) -> (U (K,), ∇U / N (K, P))``, each row chain ``k``'s
    :meth:`PyroPotential.gradient <bnn_pyro.methods.sgmcmc.potential.PyroPotential.gradient>`
    on its own minibatch, in plain torch.

    Args:
        models: the K :class:`~bnn_pyro.methods.sgmcmc.method.SGMCMC` models (one architecture;
            each keeps its own prior and likelihood settings).
        potentials: their Pyro potentials (one site layout).

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(8, 2); y = X.sum(-1, keepdim=True)
        >>> ms = [bp.make("sgld", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale="learned"))
        ...       for _ in range(2)]
        >>> steps = [m.start_run(X, y, steps=4, lr=0.01) for m in ms]
        >>> stacked = StackedPotential(ms, [s.potential for s in steps])
        >>> theta = torch.stack([s.theta for s in steps])
        >>> u, g = stacked.gradient(theta, torch.stack([X, X]), torch.stack([y, y]), 8)
        >>> u0, g0 = steps[0].potential.gradient(theta[0], X, y, 8)
        >>> u.shape, g.shape, bool(torch.allclose(g[0], g0, atol=1e-5))
        (torch.Size([2]), torch.Size([2, 18]), True)
    """

    def __init__(self, models: Sequence[Any], potentials: Sequence[PyroPotential]) -> None:
        self.models, self.potentials = list(models), list(potentials)
        reason = why_not_stacked_chains(self.models)
        if reason is not None:
            raise ValueError(reason)
        # one net, no prior latents and one likelihood setting (checked above): one site layout
        self.sites = self.potentials[0].sites
        evaluator = self.models[0].bnn.evaluator
        self.twin, self.paths = evaluator.twin, evaluator.paths
        # the model's terms as the VI objective scores them: the chains' priors (one call on
        # all of them where they share one), the likelihood's latents and each row's density
        self.joint = LogJoint([m.bnn for m in self.models], stacked=True)
        #: the sites as laid end to end in ``theta``: the Gaussian priors of those whose value is
        #: their unconstrained part score in one pass over it (``LogJoint.flat_priors``)
        self.layout = tuple((s.name, s.numel) for s in self.sites)

    def constrain(self, theta: torch.Tensor) -> torch.Tensor:
        """``(..., P)`` unconstrained → the sites' own spaces (as every chain's potential)."""
        return self.potentials[0].constrain(theta)

    def gradient(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, dataset_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``U_k(θ_k)`` on chain k's minibatch ``(x[k] (B, ...), y[k])`` standing for
        ``dataset_size`` points, and the per-datum gradients ``∇U_k / N``.

        Returns:
            ``(U (K,), g (K, P))``.
        """
        k = theta.shape[0]
        theta = theta.detach().requires_grad_(True)
        values, log_det = {}, theta.new_zeros(k)
        for site in self.sites:
            part = theta[:, site.start : site.start + site.numel].reshape(k, *site.shape)
            value = site.transform(part)
            if value is not part:  # not the identity: its Jacobian enters U
                jacobian = site.transform.log_abs_det_jacobian(part, value)
                log_det = log_det + jacobian.reshape(k, -1).sum(-1)
            values[site.name] = value
        net = self.twin.load(
            {},
            {self.paths[n]: v for n, v in values.items() if n in self.paths},
            training=self.models[0].bnn.training,  # as each chain's own net: fit runs it in eval
        )
        f = net(x)  # (K, B, O)
        joint = self.joint
        log_joint = log_det + joint.log_prior(values, theta, (theta, self.layout))
        if len(values) > len(self.paths):  # each chain's draw of the likelihood's own latents
            log_joint = log_joint + joint.latent_terms(values, f)[0]
        rows = joint.row_log_likelihood(f, y, values)  # (K, B)
        potential = -(log_joint + dataset_size / x.shape[1] * rows.sum(-1))
        (grad,) = torch.autograd.grad(potential.sum(), theta)
        return potential.detach(), grad / dataset_size


class DirectPotential(PyroPotential):
    """One chain's potential in plain torch: the sites, start and maps of
    :class:`~bnn_pyro.methods.sgmcmc.potential.PyroPotential`, its :meth:`gradient` the one row
    of :class:`StackedPotential` at K = 1. What :meth:`SGMCMC.start_run
    <bnn_pyro.methods.sgmcmc.method.SGMCMC.start_run>` steps with where
    :func:`why_not_stacked_chains` passes the chain alone (chosen by type, before any work), so
    a chain's own ``fit`` is the stacked run's one chain; the Pyro trace stays the reference
    (the parametrised test of ``tests/methods/sgmcmc/test_sgmcmc_stacked_terms.py``) and the
    path for every model the rule refuses.

    Args:
        method: the :class:`~bnn_pyro.methods.sgmcmc.method.SGMCMC` model (its likelihood
            names the observation site).
        x, y: as :class:`~bnn_pyro.methods.sgmcmc.potential.PyroPotential`.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(8, 2); y = X.sum(-1, keepdim=True)
        >>> m = bp.make("sgld", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.1))
        >>> direct = DirectPotential(m, X, y)
        >>> reference = PyroPotential(m.bnn.model, X, y)
        >>> theta = direct.flat()
        >>> u, g = direct.gradient(theta, X, y, 16)
        >>> u0, g0 = reference.gradient(theta, X, y, 16)
        >>> # U is about 2e3 in float32 (one ulp ~ 2e-4): equal to a few ulps, relatively
        >>> abs(u - u0) < 1e-6 * abs(u0), g.shape, bool(torch.allclose(g, g0, atol=1e-6))
        (True, torch.Size([17]), True)
    """

    def __init__(self, method: Any, x: torch.Tensor, y: torch.Tensor | None) -> None:
        super().__init__(method.bnn.model, x, y, method.likelihood.name)
        self.stacked = StackedPotential([method], [self])

    def gradient(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, dataset_size: int
    ) -> tuple[float, torch.Tensor]:
        """As :meth:`PyroPotential.gradient
        <bnn_pyro.methods.sgmcmc.potential.PyroPotential.gradient>`: ``(U, ∇U / N (P,))``."""
        value, grad = self.stacked.gradient(theta[None], x[None], y[None], dataset_size)
        return float(value[0]), grad[0]


def chain_potential(method: Any, x: torch.Tensor, y: torch.Tensor | None) -> PyroPotential:
    """The potential of ``method``'s chain (an ``SGMCMC``), its sites found on ``x (n, ...)``
    and ``y`` (``None``: drawn), chosen by type before any work: :class:`DirectPotential`, a
    stacked run's one chain, where :func:`why_not_stacked_chains` passes the chain alone; else
    the Pyro model's trace (:class:`~bnn_pyro.methods.sgmcmc.potential.PyroPotential`, the
    reference) for a likelihood that observes its rows by code of its own, a prior with latent
    sites of its own, or a net the stacked net does not run (hooks, buffers, other layers).

    Example:
        >>> import bnn_pyro as bp
        >>> m = bp.make("sgld", bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.1))
        >>> type(chain_potential(m, torch.zeros(2, 2), torch.zeros(2, 1))).__name__
        'DirectPotential'
        >>> _ = m.bnn.net.register_forward_hook(lambda module, args, out: out)
        >>> type(chain_potential(m, torch.zeros(2, 2), torch.zeros(2, 1))).__name__
        'PyroPotential'
    """
    if why_not_stacked_chains([method]) is None:
        return DirectPotential(method, x, y)
    return PyroPotential(method.bnn.model, x, y, method.likelihood.name)


def why_not_stacked_chains(models: Sequence[Any]) -> str | None:
    """Why the chains of ``models`` (``SGMCMC``) cannot run as one, or ``None``: read off their
    types and settings before any work. They must share the run's settings (:data:`SHARED`)
    and one likelihood class and setting
    (:func:`~bnn_pyro.methods.vi.stacked_support.likelihood_setting`: a noise learned by all or
    by none) that scores its rows by the library's own code
    (:func:`~bnn_pyro.likelihoods.plain.why_not_plain`), have no prior with latent sites of its
    own, and nets that run as one stacked net
    (:func:`~bnn_pyro.methods.vi.stacked_support.why_not_stacked_nets`). That the stacked
    potential of such chains is each chain's Pyro potential is the parametrised test of
    ``tests/methods/sgmcmc/test_sgmcmc_stacked_terms.py`` (every row against its chain's Pyro
    trace) and ``test_sgmcmc_stacked.py`` (whole runs against each chain's own ``fit``).

    Example:
        >>> import bnn_pyro as bp
        >>> make = lambda lik: bp.make("sgld", bp.nn.mlp(2, [4], 1), lik)
        >>> why_not_stacked_chains([make(bp.Gaussian(0.1)), make(bp.Gaussian(0.2))]) is None
        True
        >>> why_not_stacked_chains([make(bp.Gaussian(0.1)), make(bp.Bernoulli())])
        "the chains' likelihoods must be of one class; got ['Bernoulli', 'Gaussian']"
        >>> why_not_stacked_chains([make(bp.Gaussian(0.1)), make(bp.Gaussian("learned"))])[:47]
        "the chains' likelihoods must share one setting:"
    """
    reason = why_not_stacked_prior([m.bnn for m in models], "chain")
    if reason is not None:
        return reason
    for name in SHARED:
        settings = {getattr(m, name) for m in models}
        if len(settings) > 1:
            return f"the chains must share {name}; got {sorted(settings, key=str)}"
    kinds = sorted({type(m.likelihood).__name__ for m in models})
    if len(kinds) > 1:
        return f"the chains' likelihoods must be of one class; got {kinds}"
    if len({likelihood_setting(m.likelihood) for m in models}) > 1:
        return (
            "the chains' likelihoods must share one setting: a noise learned by every chain or "
            "fixed for every chain, one heteroscedastic min_scale"
        )
    reason = why_not_plain(models[0].likelihood, stacked=True)
    if reason is None:
        reason = why_not_stacked_nets([m.bnn for m in models])
    return None if reason is None else f"these models cannot run stacked: {reason}"


def fit_stacked_sgmcmc(
    models: Sequence[Any],
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    seeds: Sequence[int],
    epochs: int = 100,
    batch_size: int | None = None,
    lr: float | str | None = None,
    shuffle: bool = True,
    callbacks: Iterable[Callback] = (),
    validation_data: tuple[Any, Any] | None = None,
    progress: bool = True,
) -> History:
    """Run K SG-MCMC chains as one: what :func:`bnn_pyro.fit_stacked` does with K
    :class:`~bnn_pyro.methods.sgmcmc.method.SGMCMC` models; each ends as its own ``fit(X_k,
    y_k, seed=seeds[k], epochs=..., batch_size=..., lr=...)`` would, up to float rounding.

    Args:
        models: K ``SGMCMC`` models of one architecture with the same sampler settings
            (:data:`SHARED`); their priors and likelihood settings may differ.
        X: ``(N, D)`` shared by the chains, or ``(K, N, D)`` each its own.
        y: ``(N,)``/``(N, O)``, or ``(K, N)``/``(K, N, O)``.
        seeds: K seeds, each as ``fit(seed=)``.
        epochs, batch_size, lr, shuffle, progress: as :meth:`SGMCMC.fit
            <bnn_pyro.methods.sgmcmc.method.SGMCMC.fit>` (``lr``: the sampler's default).
        callbacks: ``fn(models, epoch, history)`` after each epoch (the kept samples are
            written back at the end); ``True`` stops.
        validation_data: ``(Nv, D)`` shared or ``(K, Nv, D)`` one set per chain: adds
            ``val_nll`` (the chains' mean) and ``member_val_nll``, each chain's as its own
            ``fit`` scores it (its last 20 kept samples).

    Returns:
        A :class:`~bnn_pyro.training.History`: ``loss`` (the chains' mean ``U``) and
        ``member_loss``.

    Raises:
        ValueError: no model, differing sampler settings (named), a seed count
            that is not K, members with different numbers of rows, or a model the stacked
            potential does not reproduce.

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(3, 32, 2); y = X.sum(-1)  # each chain its own rows
        >>> ms = [bp.make("sghmc", bp.nn.mlp(2, [8], 1), bp.Gaussian(scale=0.1))
        ...       for _ in range(3)]
        >>> h = fit_stacked_sgmcmc(ms, X, y, seeds=[0, 1, 2], epochs=4, batch_size=16,
        ...                        progress=False)
        >>> len(h["member_loss"][-1]), ms[2].samples()["net.0.weight"].shape
        (3, torch.Size([6, 8, 2]))
    """
    X, y = as_tensor("X", X, min_dim=2), as_tensor("y", y)
    models = list(models)
    k = len(models)
    if k < 1:
        raise ValueError("fit_stacked needs at least one chain")
    if len(seeds) != k:
        raise ValueError(f"seeds must give one seed per model ({k}), got {len(seeds)}")
    reason = why_not_stacked_chains(models)
    if reason is not None:
        raise ValueError(reason)
    epochs = check_int("epochs", epochs)
    first = models[0]
    if lr is not None and lr != MEASURED:
        lr = check_float("lr", lr, minimum=0.0, strict=True)
    check_dense_step(first.preconditioner, lr)
    per_member = check_member_sets(X, y, k)
    xs = [m.bnn.prepare_inputs(X[i] if per_member else X) for i, m in enumerate(models)]
    ys = [m.bnn.prepare_targets(y[i] if per_member else y, xs[i]) for i, m in enumerate(models)]
    n = xs[0].shape[0]
    if any(x.shape[0] != n for x in xs):
        raise ValueError("every chain needs the same number of rows")
    check_bool("shuffle", shuffle)
    callbacks = check_callbacks(callbacks, validation_data is not None)
    validation = [
        validation_pair(
            member_data(validation_data, i, k),
            m.bnn.prepare_inputs,
            lambda t, x, m=m: m.bnn.prepare_targets(t, x, "y_val"),
        )
        for i, m in enumerate(models)
    ] if validation_data is not None else []  # fmt: skip
    batch_size = None if batch_size is None else check_int("batch_size", batch_size)
    lr, batch, mdecay = run_step(first.sampler, lr, batch_size, n, first.mdecay)
    steps = []
    for m, x, t, seed in zip(models, xs, ys, seeds, strict=True):
        with seeded(int(seed), m.device):  # what each chain's own fit draws before its run
            total = epochs * math.ceil(n / batch)
            steps.append(m.start_run(x, t, steps=total, lr=lr, mdecay=mdecay))
    potential = StackedPotential(models, [s.potential for s in steps])
    x_all, y_all = torch.stack(xs), torch.stack(ys)
    theta = torch.stack([s.theta for s in steps])
    batches = shuffled_member_batches(x_all, y_all, batch, order_generators(seeds), None, shuffle)
    scores = []
    for i, (m, own) in enumerate(zip(models, steps, strict=True)):
        own.theta = theta[i]  # a view: the chain's position as the stacked run moves it
        if validation:
            scores.append(m.validation_score(*validation[i], own))
    modes = [m.bnn.training for m in models]
    for m in models:
        m.bnn.eval()  # as fit: dropout off
    try:
        step = ChainStep(
            potential,
            theta,
            first.sampler,
            steps[0].plan,
            [s.collector for s in steps],
            n,
            first.temperature,
            mdecay,
            [s.generator for s in steps],
            target=steps[0].target,
            data=(x_all, y_all),
            dense=steps[0].use_dense,
        )
        seen = [lambda _, epoch, h, cb=cb: cb(models, epoch, h) for cb in callbacks]

        def validate() -> dict[str, Any]:
            per_chain = [score()["val_nll"] for score in scores]
            return {"val_nll": sum(per_chain) / k, "member_val_nll": per_chain}

        chains = torch.nn.Module()  # what the loop snapshots (and restores on a divergence)
        chains.register_buffer("theta", theta)
        history = train(
            chains,
            step,
            batches,
            epochs=epochs,
            callbacks=seen,
            validation=validate if scores else None,
            progress=progress,
            desc=f"{first.sampler.upper()}, {k} chains stacked",
        )
    finally:
        for m, mode in zip(models, modes, strict=True):
            m.bnn.train(mode)
    for i, (m, own) in enumerate(zip(models, steps, strict=True)):
        if isinstance(step.scale, torch.Tensor):  # the step chain i measured
            own.scale = step.scale[i]
        m.position = theta[i].clone()
        what = f"chain {i} of the stacked fit"
        m.keep_run(own, xs[i], heat=step.heat(i), what=what)
        m.check_in_sample(xs[i], ys[i], what=what)
    return history
