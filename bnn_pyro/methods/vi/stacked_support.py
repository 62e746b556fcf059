"""Which ``VariationalBNN`` models :func:`bnn_pyro.fit_stacked` can train
as one: :func:`why_not_stacked_vi` names what stands in the way, or returns ``None``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.nn as nn

from bnn_pyro.likelihoods.plain import why_not_plain
from bnn_pyro.nn.batched import has_hooks
from bnn_pyro.nn.layers import BATCHED_REPLACEMENTS
from bnn_pyro.nn.pyro_net import DEVICE_REF
from bnn_pyro.training.stacked import same_layers

__all__ = [
    "likelihood_setting", "members_elbo", "why_not_stacked_nets", "why_not_stacked_prior",
    "why_not_stacked_vi",
]  # fmt: skip


def likelihood_setting(likelihood: Any) -> tuple[type, bool, float | None]:
    """What stacked members' likelihoods must share: the class, whether the noise is learned
    (a latent site of the likelihood's own) and a heteroscedastic likelihood's ``min_scale``.

    Example:
        >>> from bnn_pyro.likelihoods import Gaussian
        >>> likelihood_setting(Gaussian(0.1)) == likelihood_setting(Gaussian(0.2))
        True
        >>> likelihood_setting(Gaussian(scale="learned"))[1]
        True
    """
    return type(likelihood), likelihood.learned, getattr(likelihood, "min_scale", None)


def why_not_stacked_vi(bnns: Sequence[Any]) -> str | None:
    """``None`` when the models can train stacked, else why not (what is covered:
    :mod:`bnn_pyro.methods.vi.stacked`'s docstring).

    Example:
        >>> import bnn_pyro as bp
        >>> make = lambda: bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
        >>> why_not_stacked_vi([make(), make()]) is None
        True
    """
    from bnn_pyro.methods.vi.model import VariationalBNN

    if len(bnns) < 1 or any(type(b) is not VariationalBNN for b in bnns):
        return "fit_stacked trains VariationalBNN models (the class itself)"
    reason = why_not_stacked_nets(bnns)
    if reason is not None:
        return reason
    if len({likelihood_setting(b.likelihood) for b in bnns}) > 1:
        return (
            "the likelihoods must be of one class with one setting (a learned noise, a "
            "heteroscedastic min_scale)"
        )
    reason = why_not_plain(bnns[0].likelihood, stacked=True)
    if reason is not None:
        return reason
    estimators = {b.local_reparameterization for b in bnns}
    if len(estimators) > 1:
        return "the models differ in local_reparameterization"
    if None not in estimators and any(
        isinstance(m, nn.Conv2d) for b in bnns for m in b.net.modules()
    ):
        return "local reparameterization of conv layers is not stacked"
    reason = why_not_stacked_prior(bnns, "model")
    if reason is not None:
        return reason
    if any(b.prior.cached is False for b in bnns):
        return "a learned prior is not stacked"
    if any(b.guide_spec != "meanfield" for b in bnns):
        return "the guide must be the library's mean-field guide ('meanfield')"
    return None


def why_not_stacked_prior(bnns: Sequence[Any], member: str) -> str | None:
    """Why the models' priors cannot be scored stacked, or ``None``: a prior with latent sites
    of its own (a hierarchical scale) is scored by each model's Pyro trace alone. ``member``
    names one of them in the message (``"model"``, ``"chain"``).

    Example:
        >>> import bnn_pyro as bp
        >>> plain = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))
        >>> why_not_stacked_prior([plain, plain], "model") is None
        True
        >>> scaled = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1),
        ...                            prior=bp.HierarchicalNormalPrior())
        >>> why_not_stacked_prior([plain, scaled], "chain")  # doctest: +ELLIPSIS
        "a prior with latent sites of its own (...) is not stacked: fit each chain with its own fit"
    """
    latent = next((b.prior_sites for b in bnns if b.prior_sites), None)
    if not latent:
        return None
    return (
        f"a prior with latent sites of its own ({latent[0]!r}, ...) is not stacked: fit each "
        f"{member} with its own fit"
    )


def why_not_stacked_nets(bnns: Sequence[Any]) -> str | None:
    """``None`` when the models' nets can run as one stacked net on their Bayesian sites'
    draws (the plain-torch twin of :class:`~bnn_pyro.nn.batched.BatchedTwin` that the stacked
    VI objective and the stacked SG-MCMC potential both run), else why not: read off the nets'
    sites, parameters, layer types and hooks, before any work.

    Example:
        >>> import bnn_pyro as bp
        >>> make = lambda w: bp.VariationalBNN(bp.nn.mlp(2, [w], 1), bp.Gaussian(0.1))
        >>> why_not_stacked_nets([make(4), make(4)]) is None
        True
        >>> why_not_stacked_nets([make(4), make(5)])
        'the models differ in their nets or their Bayesian sites'
    """
    shapes = [
        [(s.name, s.shape) for s in b.evaluator.sites]
        + [(k, v.shape) for k, v in b.net.named_parameters()]
        for b in bnns
    ]
    if any(s != shapes[0] for s in shapes[1:]):
        return "the models differ in their nets or their Bayesian sites"
    if not same_layers([b.net for b in bnns]):  # one forward (the first net's) runs them all
        return "the models' nets differ in their layers (an activation, a dropout rate, ...)"
    point = next((k for b in bnns for k, _ in b.net.named_parameters()), None)
    point = point or next(
        (k for b in bnns for k, _ in b.net.named_buffers() if not k.endswith(DEVICE_REF)), None
    )
    if point is not None:  # the stacked net runs on the Bayesian sites' draws alone
        return (
            f"the nets hold point-estimate parameters or buffers ({point!r}, ...): the stacked "
            "fit trains the Bayesian sites only, fit each model with its own fit"
        )
    layers = BATCHED_REPLACEMENTS.values()
    site = next(
        (
            s
            for b in bnns
            for s in b.evaluator.sites
            if type(b.evaluator.twin.module.get_submodule(s.module_name)) not in layers
        ),
        None,
    )
    if site is not None:
        return (
            f"the Bayesian site {site.name!r} is in a layer the stacked net cannot run for "
            "several members at once (nn.Linear and nn.Conv2d can)"
        )
    if any(has_hooks(b.net) for b in bnns):
        return "the nets have forward or backward hooks (the stacked copy would skip them)"
    return None


def members_elbo(bnns: Sequence[Any]) -> str:
    """The objective the models' own ``fit`` uses when not told (``VariationalBNN(elbo=)``),
    which must be one for all.

    Raises:
        ValueError: the models were built with different objectives.

    Example:
        >>> import bnn_pyro as bp
        >>> make = lambda **kw: bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), **kw)
        >>> members_elbo([make(elbo="alpha"), make(elbo="alpha")])
        'alpha'
    """
    own = {getattr(b, "default_elbo", "trace") for b in bnns}
    if len(own) > 1:
        raise ValueError(f"the models' own objectives (elbo=) differ: {sorted(own)}; pass elbo=")
    return own.pop() if own else "trace"
