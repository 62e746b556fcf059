"""The registry name of variational Bayesian last layers: ``vbll`` (see
:class:`bnn_pyro.spec.MethodSpec`)."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "vbll", "bnn_pyro.methods.vbll.vbll:VBLL", "VBLL", rank=85,
        estimator_fit=map_weight_decay,
        stacked_fit="bnn_pyro.methods.classic.stacked:fit_classic_stacked",
    ),
]  # fmt: skip
