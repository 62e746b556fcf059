"""The registry name of MC dropout: ``dropout`` (see :class:`bnn_pyro.spec.MethodSpec`)."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "dropout", "bnn_pyro.methods.mc_dropout.dropout:MCDropout", "MCDropout", rank=50,
        estimator_options=lambda p: {"dropout_rate": p["dropout_rate"]},
        estimator_fit=map_weight_decay, dropout_net=True,
        stacked_fit="bnn_pyro.methods.classic.stacked:fit_classic_stacked",
    ),
]  # fmt: skip
