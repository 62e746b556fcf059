"""The registry names of stochastic-gradient MCMC: ``sghmc``, ``sgld`` and ``csghmc`` (see
:class:`bnn_pyro.spec.MethodSpec`)."""

from __future__ import annotations

from bnn_pyro.spec import MethodSpec, normal_prior

_CLASS = "bnn_pyro.methods.sgmcmc.method:SGMCMC"
_STACKED = "bnn_pyro.methods.sgmcmc.stacked:fit_stacked_sgmcmc"


SPECS = [
    MethodSpec(
        "sghmc", _CLASS, "SGMCMC (scale-adapted SGHMC on the Pyro model)", rank=95,
        estimator_options=normal_prior, scalar_noise=True, stacked_fit=_STACKED, measured_step=True,
    ),
    MethodSpec(
        "csghmc", _CLASS, 'SGMCMC(schedule="cyclical") (cyclical SGHMC)', rank=96,
        defaults={"schedule": "cyclical"}, estimator_options=normal_prior, scalar_noise=True,
        stacked_fit=_STACKED, measured_step=True,
    ),
    MethodSpec(
        "sgld", _CLASS, 'SGMCMC(sampler="sgld") (stochastic gradient Langevin dynamics)',
        rank=97, defaults={"sampler": "sgld"}, estimator_options=normal_prior, scalar_noise=True,
        stacked_fit=_STACKED, measured_step=True,
    ),
]  # fmt: skip
