"""The one method registry: names → method classes, :func:`make` and :func:`load`.

The command line, the scikit-learn estimators and the benchmark harness all read
:data:`METHODS`. The names are the methods' own: each method folder declares its
:class:`~bnn_pyro.spec.MethodSpec` entries in its ``spec.py``, found on first use (classes named
as ``"module:Class"`` strings, so this file imports no method); :func:`register_method` adds a
user's own class.

=================  ===============================================================
name               method
=================  ===============================================================
``vi``             ``VariationalBNN`` (Bayes by Backprop on Pyro)
``lrt``            ``VariationalBNN(local_reparameterization=True)``
``bb_alpha``       ``VariationalBNN(elbo="alpha")`` (black-box alpha, Hernandez-Lobato 2016)
``hidden_layer``   ``HiddenLayerBNN`` (an MLP of local-reparameterization layers)
``dropout``        ``MCDropout``
``ensemble``       ``DeepEnsemble`` (members: copies of the net, re-initialised)
``swag``           ``SWAG``
``laplace``        ``LaplaceApproximation``
``vbll``           ``VBLL`` (variational Bayesian last layers, Harrison et al. 2024)
``sngp``           ``SNGP`` (spectral-normalised neural GP, Liu et al. 2020)
``dkl``            ``DKL`` (deep kernel learning on ``pyro.contrib.gp``, Wilson et al. 2016)
``vbnn``           ``VariationalBayesNN`` (pure-torch BBB of ``GaussianLinear`` layers)
``sghmc``          ``SGMCMC`` (scale-adapted SGHMC on the Pyro model, Springenberg 2016)
``csghmc``         ``SGMCMC(schedule="cyclical")`` (cyclical SGHMC, Zhang et al. 2020)
``sgld``           ``SGMCMC(sampler="sgld")`` (stochastic gradient Langevin dynamics)
=================  ===============================================================
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from bnn_pyro.spec import MethodSpec, discover_specs, method_folders

if TYPE_CHECKING:  # (torch: imported where a method is built, not by the names' listing)
    import torch.nn as nn

    from bnn_pyro.base import BaseBayesianMethod
    from bnn_pyro.likelihoods import Likelihood

__all__ = [
    "METHODS",
    "load",
    "make",
    "method_class",
    "method_spec",
    "method_specs",
    "register_method",
]

_USER: dict[str, MethodSpec] = {}  # register_method's, after the discovered ones
_FOUND: dict[str, MethodSpec] = {}  # every folder's SPECS, read again when a folder appears
_FOLDERS: list[tuple[tuple[str, str], ...]] = []  # the folders _FOUND was read from


def method_specs() -> dict[str, MethodSpec]:
    """Every registered :class:`~bnn_pyro.spec.MethodSpec` by name, in table order: the
    methods' own (each folder's ``spec.py``, read again when a folder is added), then those
    :func:`register_method` added.

    Example:
        >>> list(method_specs())[:3]
        ['vi', 'lrt', 'bb_alpha']
    """
    folders = method_folders()
    if _FOLDERS != [folders]:
        found = {spec.name: spec for spec in discover_specs()}
        _FOUND.clear()
        _FOUND.update(found)
        _FOLDERS[:] = [folders]
    return {**_FOUND, **_USER}


def method_spec(name: str) -> MethodSpec:
    """The spec registered under ``name`` (a ``ValueError`` naming the choices otherwise).

    Example:
        >>> method_spec("ensemble").own_samples
        True
    """
    specs = method_specs()
    if not isinstance(name, str) or name not in specs:
        raise ValueError(f"method must be one of {tuple(specs)}, got {name!r}")
    return specs[name]


class _Methods(Mapping[str, tuple[Any, dict[str, Any]]]):
    """The read-only view :data:`METHODS`: name → ``(class or "module:Class", defaults)``."""

    def __getitem__(self, name: str) -> tuple[Any, dict[str, Any]]:
        spec = method_specs()[name]
        return spec.cls, dict(spec.defaults)

    def __iter__(self) -> Iterator[str]:
        return iter(method_specs())

    def __len__(self) -> int:
        return len(method_specs())

    def __repr__(self) -> str:
        return f"METHODS({list(self)})"


#: The registered method names and their ``(class or "module:Class", default options)``,
#: read-only; ``list(bnn_pyro.METHODS)`` gives the names in table order.
METHODS: Mapping[str, tuple[Any, dict[str, Any]]] = _Methods()


def register_method(name: str, cls: type, **defaults: Any) -> None:
    """Register ``cls`` (a ``BaseBayesianMethod`` subclass) under ``name`` for :func:`make`.

    Args:
        name: the registry key (a new one; built-in names cannot be replaced).
        cls: a subclass of :class:`bnn_pyro.BaseBayesianMethod` whose constructor is
            ``cls(net, likelihood=..., **options)``.
        **defaults: options :func:`make` passes unless the call overrides them.

    Example:
        >>> import bnn_pyro as bp
        >>> class Tempered(bp.MCDropout):
        ...     pass
        >>> register_method("tempered_dropout", Tempered, dropout_rate=0.2)
        >>> "tempered_dropout" in METHODS
        True
        >>> del _USER["tempered_dropout"]  # tidy up: the doctests share one process
    """
    from bnn_pyro.base import BaseBayesianMethod

    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if name in method_specs() and name not in _USER:
        raise ValueError(f"{name!r} is a built-in method name and cannot be replaced")
    if not (isinstance(cls, type) and issubclass(cls, BaseBayesianMethod)):
        raise TypeError(f"cls must be a BaseBayesianMethod subclass, got {cls!r}")
    _USER[name] = MethodSpec(name, cls, cls.__name__, defaults, rank=1000 + len(_USER))


def method_class(name: str) -> type[BaseBayesianMethod]:
    """The class registered under ``name``.

    Example:
        >>> method_class("swag").__name__
        'SWAG'
    """
    return method_spec(name).load_class()


def make(name: str, net: nn.Module, likelihood: Likelihood, **options: Any) -> BaseBayesianMethod:
    """Build the method called ``name`` around a plain ``net`` and a likelihood.

    Args:
        name: one of :data:`METHODS` (``"vi"``, ``"lrt"``, ``"bb_alpha"``, ``"hidden_layer"``,
            ``"dropout"``, ``"ensemble"``, ``"swag"``, ``"laplace"``, ``"vbnn"``, ``"sghmc"``,
            ``"csghmc"``, ``"sgld"``).
        net: a ``torch.nn.Module`` mapping ``(N, D)`` to ``(N, O)``. Ensembles copy and
            re-initialise it per member; ``hidden_layer`` and ``vbnn`` read the widths of an
            MLP of ``nn.Linear`` layers (and refuse any other net with a clear error).
        likelihood: a :class:`bnn_pyro.likelihoods.Likelihood`, e.g. ``Gaussian(scale="learned")``
            or ``Categorical()``.
        **options: the method's constructor options (e.g. ``num_samples``, ``dropout_rate``).

    Returns:
        The unfitted method.

    Example:
        >>> import torch, bnn_pyro as bp
        >>> m = bp.make("swag", bp.nn.mlp(2, [8], 1), bp.Gaussian(scale="learned"))
        >>> history = m.fit(torch.randn(32, 2), torch.randn(32), epochs=4, progress=False)
        >>> m.predict(torch.randn(3, 2), num_samples=5)[0].shape
        torch.Size([3, 1])
    """
    from bnn_pyro._checks import check_instance, check_module
    from bnn_pyro.likelihoods import LIKELIHOOD_EXPECTED, Likelihood

    cls = method_class(name)
    check_module("net", net)
    check_instance("likelihood", likelihood, Likelihood, LIKELIHOOD_EXPECTED)
    kwargs = {**method_spec(name).defaults, **options}
    return cls.from_net(net, likelihood, **kwargs)  # type: ignore[attr-defined]


def load(
    path: str | os.PathLike, net: nn.Module | None = None, map_location: Any = None
) -> BaseBayesianMethod:
    """Rebuild any saved method (see :meth:`bnn_pyro.BaseBayesianMethod.save`).

    Args:
        path: the checkpoint file.
        net: a fresh instance of the saved net's architecture (``None`` for the methods that
            build their own layers: ``HiddenLayerBNN``, ``VariationalBayesNN``).
        map_location: as in ``torch.load``.

    Returns:
        The method, of the class the file names, with its fitted state.

    Example:
        >>> import os, tempfile, torch, bnn_pyro as bp
        >>> m = bp.make("dropout", bp.nn.mlp(2, [8], 1, dropout=0.1), bp.Gaussian(0.5))
        >>> _ = m.fit(torch.randn(16, 2), torch.randn(16), epochs=2, progress=False)
        >>> path = os.path.join(tempfile.mkdtemp(), "m.pt"); m.save(path)
        >>> type(bp.load(path, net=bp.nn.mlp(2, [8], 1, dropout=0.1))).__name__
        'MCDropout'
    """
    from bnn_pyro.checkpoint import load_method

    return load_method(path, net=net, map_location=map_location)
