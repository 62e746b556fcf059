"""The registry name of deep ensembles: ``ensemble`` (see :class:`bnn_pyro.spec.MethodSpec`).
Its members already train as one stacked net inside ``fit``; ``fit_stacked`` refuses it."""

from bnn_pyro.spec import MethodSpec, map_weight_decay

SPECS = [
    MethodSpec(
        "ensemble", "bnn_pyro.methods.ensemble.deep_ensemble:DeepEnsemble",
        "DeepEnsemble (members: copies of the net, re-initialised)", rank=60,
        estimator_options=lambda p: {"num_models": p["ensemble_size"]},
        estimator_fit=map_weight_decay, own_samples=True,
    ),
]  # fmt: skip
