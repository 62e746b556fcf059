"""Which torch layers a Pyro model built from a plain net (:class:`~bnn_pyro.VariationalBNN`)
can hold, and the one refusal, in the constructor, of those it cannot.

The Pyro model runs the net on weights with leading sample dims (``Predictive``, the batched
twin of ``predict``, vectorized particles). Three kinds of layer break that or would silently
not be Bayesian:

* batch norm (``BatchNorm1d/2d/3d``, ``SyncBatchNorm``, ``InstanceNorm`` with running stats):
  its running statistics are updated in place and cannot be batched over samples;
* recurrent layers (``RNN``/``LSTM``/``GRU`` and their cells): their weights would stay point
  estimates (they are no linear/conv layer a prior selects) and the fused kernels take no
  sampled weights;
* embeddings (``Embedding``/``EmbeddingBag``): they take integer indices, while ``X`` is cast
  to the model's float dtype; their table would stay a point estimate.
"""

from __future__ import annotations

import torch.nn as nn

__all__ = ["UNSUPPORTED_LAYERS", "check_supported_layers"]

#: ``(layer types, what to do instead)`` for the layers a Pyro model cannot hold.
UNSUPPORTED_LAYERS: tuple[tuple[tuple[type[nn.Module], ...], str], ...] = (
    (
        (nn.modules.batchnorm._BatchNorm,),
        "use nn.LayerNorm (no running statistics), or MCDropout/DeepEnsemble/SWAG, which keep "
        "batch norm",
    ),
    (
        (nn.modules.instancenorm._InstanceNorm,),
        "use track_running_stats=False or nn.LayerNorm",
    ),
    (
        (nn.RNNBase, nn.RNNCellBase),
        "its weights would stay point estimates; use MCDropout/DeepEnsemble for recurrent nets, "
        "or feed fixed features to a net of Linear/Conv layers",
    ),
    (
        (nn.Embedding, nn.EmbeddingBag),
        "X is cast to a float dtype; embed the inputs beforehand (one-hot or a fixed, "
        "pre-trained embedding) and pass float features",
    ),
)


def _unsupported(module: nn.Module) -> str | None:
    for types, advice in UNSUPPORTED_LAYERS:
        if isinstance(module, types):
            if isinstance(module, nn.modules.instancenorm._InstanceNorm) and not (
                module.track_running_stats
            ):
                return None
            return advice
    return None


def check_supported_layers(name: str, net: nn.Module, owner: str) -> nn.Module:
    """Return ``net`` if ``owner`` can make every layer of it Bayesian, else raise a
    ``ValueError`` naming ``name``, the layer's type and path, and what to do instead; a
    ``TypeError`` naming the sites of a Pyro net that carries its own ``PyroSample`` priors.

    Args:
        name: the argument's name (``"net"``).
        net: the plain torch net.
        owner: the class that refuses (``"VariationalBNN"``).

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
        >>> try:
        ...     check_supported_layers("net", net, "VariationalBNN")
        ... except ValueError as err:
        ...     print(str(err).split(":")[0])
        VariationalBNN does not support BatchNorm1d at net.1
    """
    sampled = [
        f"{name}.{path}.{site}" if path else f"{name}.{site}"
        for path, module in net.named_modules()
        for site in getattr(module, "_pyro_samples", {})
    ]
    if sampled:
        where = ", ".join(sampled)
        raise TypeError(
            f"{owner} makes the net Bayesian itself, and this one carries its own "
            f"PyroSample priors ({where}): pass the plain torch net (nn.Linear, not "
            "PyroModule[nn.Linear]) and say the prior with prior=, e.g. "
            "IIDPrior(dist.Normal(0., 10.)) for PyroSample(dist.Normal(0., 10.))"
        )
    for path, module in net.named_modules():
        advice = _unsupported(module)
        if advice is not None:
            where = f"{name}.{path}" if path else name
            raise ValueError(
                f"{owner} does not support {type(module).__name__} at {where}: {advice}"
            )
    return net
