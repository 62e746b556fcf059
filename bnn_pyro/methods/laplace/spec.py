"""The registry name of the Laplace approximation: ``laplace`` (see
:class:`bnn_pyro.spec.MethodSpec`)."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "laplace", "bnn_pyro.methods.laplace.laplace:LaplaceApproximation",
        "LaplaceApproximation", rank=80,
        estimator_options=lambda p: {
            "prior_precision": p["prior_scale"] ** -2, "hessian": "ggn", "predictive": "glm",
        },
        estimator_fit=map_weight_decay,
        stacked_fit="bnn_pyro.methods.classic.stacked:fit_classic_stacked",
    ),
]  # fmt: skip
