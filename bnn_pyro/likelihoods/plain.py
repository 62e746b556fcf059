"""Which likelihoods the library's plain-torch objectives can score as the Pyro model observes
them: :func:`why_not_plain`, read off the likelihood's class before any work (the VI engine's
choice between its objective and Pyro's ``SVI``, :mod:`bnn_pyro.methods.vi.engine`)."""

from __future__ import annotations

import sys

from bnn_pyro.likelihoods.base import Likelihood

__all__ = ["why_not_plain"]


def why_not_plain(
    likelihood: Likelihood, particles: bool = False, stacked: bool = False
) -> str | None:
    """Why the plain-torch objectives (the VI engine's, stacked fits') cannot score
    ``likelihood`` as the Pyro model observes it, or ``None`` where they can.

    The objectives call :meth:`~Likelihood.log_prob` and :meth:`~Likelihood.sample_latents`
    (or :meth:`~Likelihood.latent_priors`), the model :meth:`~Likelihood.observe`. A subclass of
    the library's own that changes
    :meth:`loc_scale <bnn_pyro.likelihoods.gaussian.GaussianLikelihood.loc_scale>` or its
    latents is read the same way by both; one that observes or scores its rows by code of its
    own is not. ``particles``: several draws per step (the alpha energy), whose layout of a
    user's own latent sites only Pyro's vectorized plate knows; ``stacked``: several models in
    one pass (``fit_stacked``), whose layout only the library's own latents have.

    Example:
        >>> from bnn_pyro.likelihoods import Gaussian
        >>> why_not_plain(Gaussian(0.1)) is None
        True
        >>> class Mine(Gaussian):
        ...     def observe(self, f, y, latents, dataset_size=None):
        ...         super().observe(f, y, latents, dataset_size)
        >>> why_not_plain(Mine(0.1))
        'Mine defines its own observe(), which the plain-torch objective does not read'
    """
    if not isinstance(likelihood, Likelihood):
        raise TypeError(f"likelihood must be a Likelihood, got {type(likelihood).__name__}")
    cls = type(likelihood)

    def owner(name: str) -> type:
        return next(c for c in cls.__mro__ if name in c.__dict__)

    def own(name: str) -> bool:  # defined in the library's own module, at its top level
        found = owner(name)
        module = sys.modules.get(found.__module__)
        library = found.__module__.startswith("bnn_pyro.")
        return library and getattr(module, found.__qualname__, None) is found

    reads = "which the plain-torch objective does not read"
    for name in ("observe", "log_prob"):
        if not own(name):
            return f"{cls.__name__} defines its own {name}(), {reads}"
    if owner("log_prob") is not Likelihood and not own("distribution"):
        return (
            f"{cls.__name__} defines its own distribution(), which "
            f"{owner('log_prob').__name__}.log_prob (the plain-torch density) does not read"
        )
    if (particles or stacked) and not own("sample_latents"):
        laid = (
            "laid out under several particles by Pyro's vectorized plate"
            if particles
            else "which a stacked fit does not lay out for several models"
        )
        return f"{cls.__name__} draws latent sites of its own, {laid}"
    return None
