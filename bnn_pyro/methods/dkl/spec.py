"""The registry name of deep kernel learning: ``dkl`` (see :class:`bnn_pyro.spec.MethodSpec`)."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "dkl", "bnn_pyro.methods.dkl.dkl:DKL", "DKL", rank=87,
        estimator_fit=map_weight_decay, scalar_noise=True, classifies=False,
    ),
]  # fmt: skip
