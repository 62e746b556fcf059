"""The registry name of deep kernel learning: ``dkl`` (see :class:`bnn_pyro.spec.MethodSpec`)."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "dkl", "bnn_pyro.methods.dkl.dkl:DKL", "DKL", rank=87,
        estimator_fit=map_weight_decay, scalar_noise=True, classifies=False,
        unstacked=(
            "its GP is a pyro.contrib.gp model trained through Pyro's ELBO and param store, "
            "which the torch.func batching of fit_stacked does not reach: fit each model on its own"
        ),
    ),
]  # fmt: skip
