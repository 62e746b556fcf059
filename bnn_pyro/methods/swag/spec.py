"""The registry name of SWA-Gaussian: ``swag`` (see :class:`bnn_pyro.spec.MethodSpec`)."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "swag", "bnn_pyro.methods.swag.swag:SWAG", "SWAG", rank=70,
        estimator_fit=map_weight_decay,
        stacked_fit="bnn_pyro.methods.classic.stacked:fit_classic_stacked",
    ),
]  # fmt: skip
