"""The registry name of the spectral-normalised neural Gaussian process: ``sngp`` (see
:class:`bnn_pyro.spec.MethodSpec`)."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "sngp", "bnn_pyro.methods.sngp.sngp:SNGP", "SNGP", rank=86,
        estimator_fit=map_weight_decay,
        stacked_fit="bnn_pyro.methods.classic.stacked:fit_classic_stacked",
    ),
]  # fmt: skip
