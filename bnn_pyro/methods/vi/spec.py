"""The registry names of variational inference: ``vi``, ``lrt``, ``bb_alpha``,
``hidden_layer`` and ``vbnn`` (see :class:`bnn_pyro.spec.MethodSpec`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bnn_pyro.spec import MethodSpec, normal_prior

_MODEL = "bnn_pyro.methods.vi.model:VariationalBNN"
_STACKED = "bnn_pyro.methods.vi.stacked_fit:fit_stacked_vi"
_WHY_NOT = "bnn_pyro.methods.vi.stacked_support:why_not_stacked_vi"


def _meanfield(p: Mapping[str, Any], n: int) -> dict[str, Any]:
    return {"elbo": "meanfield"}  # the closed-form KL of the Normal prior


SPECS = [
    MethodSpec(
        "vi", _MODEL, "VariationalBNN (Bayes by Backprop on Pyro)", rank=10,
        estimator_options=normal_prior, estimator_fit=_meanfield, scalar_noise=True,
        stacked_fit=_STACKED, why_not_stacked=_WHY_NOT,
    ),
    MethodSpec(
        "lrt", _MODEL, "VariationalBNN(local_reparameterization=True)", rank=20,
        defaults={"local_reparameterization": True}, estimator_options=normal_prior,
        estimator_fit=_meanfield, scalar_noise=True, stacked_fit=_STACKED, why_not_stacked=_WHY_NOT,
    ),
    MethodSpec(
        "bb_alpha", _MODEL, 'VariationalBNN(elbo="alpha") (black-box alpha)', rank=30,
        defaults={"elbo": "alpha"}, estimator_options=normal_prior, scalar_noise=True,
        stacked_fit=_STACKED, why_not_stacked=_WHY_NOT,
    ),
    MethodSpec(
        "hidden_layer", "bnn_pyro.methods.vi.hidden_layer:HiddenLayerBNN",
        "HiddenLayerBNN (an MLP of local-reparameterization layers)", rank=40,
        estimator_options=lambda p: {"prior_scale": p["prior_scale"]}, scalar_noise=True,
    ),
    MethodSpec(
        "vbnn", "bnn_pyro.methods.vi.bayes_nn:VariationalBayesNN",
        "VariationalBayesNN (pure-torch BBB of GaussianLinear layers)", rank=90,
        estimator_options=lambda p: {"prior_std": p["prior_scale"]},
    ),
]  # fmt: skip
