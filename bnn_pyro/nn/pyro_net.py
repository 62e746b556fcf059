"""Turn a torch net into a Pyro model whose Bayesian parameters are ``PyroSample`` sites.

``make_bayesian_(net, prior)`` converts ``net`` in place:

1. ``nn.Linear``/``nn.Conv2d`` become :mod:`bnn_pyro.nn.layers` twins that accept weights with
   leading sample dimensions (same parameters, same ``state_dict``).
2. Every module becomes a :class:`~pyro.nn.PyroModule`, with one difference from
   :func:`pyro.nn.module.to_pyro_module_`: point-estimate parameters stay in the module. Pyro's
   own ``PyroModule`` registers them in the global param store under their name, so two models
   whose layers share names (two ``mlp(13, [50], 1)``) would silently share weights. Here they
   emit a param statement (so ``poutine.trace``, ``SVI`` and ``pyro.optim`` see them) whose value
   is the module's own tensor.
3. Each parameter the prior selects is deleted and replaced by a ``PyroSample`` whose
   distribution the prior builds on the module's current device and dtype.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
from pyro.distributions import constraints
from pyro.nn import PyroModule, PyroSample
from pyro.nn.module import _Context
from pyro.poutine.runtime import effectful

from bnn_pyro.nn.layers import BATCHED_REPLACEMENTS

if TYPE_CHECKING:
    from pyro.distributions.torch_distribution import TorchDistribution

    from bnn_pyro.priors import Prior

__all__ = ["BayesianSite", "make_bayesian_", "param_statement", "site_prior", "DEVICE_REF"]

#: Name of the empty buffer that tells a converted module's prior which device/dtype to use.
DEVICE_REF = "_bnn_device_ref"


def _return_value(name: str, value: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return value


_param = effectful(_return_value, type="param")


def param_statement(name: str, value: torch.Tensor) -> torch.Tensor:
    """Announce a module-held tensor to Pyro as the param site ``name`` and return it.

    Handlers (``poutine.trace``, ``SVI``'s param capture, ``pyro.optim``) see a normal param
    site; the global param store is never touched.

    Args:
        name: site name, e.g. ``"guide.loc.net.0.weight"``.
        value: a leaf tensor (usually an ``nn.Parameter``) of any shape.

    Returns:
        ``value`` itself (outside any handler) or what the handlers return for it.
    """
    ref = getattr(value, "unconstrained", None)
    if ref is None or ref() is not value:
        value.unconstrained = weakref.ref(value)  # what SVI.step reads to find the leaf
    return _param(name, value, constraint=constraints.real, event_dim=None, name=name)


class _LocalParamsMixin(PyroModule):
    """PyroModule whose plain ``nn.Parameter`` attributes never enter the global param store."""

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        params = d.get("_parameters")
        if params is not None and name in params:
            value = params[name]
            if value is not None and d["_pyro_context"].active:
                prefix = d["_pyro_name"]
                return param_statement(f"{prefix}.{name}" if prefix else name, value)
            return value
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, nn.Parameter):
            self.__dict__["_pyro_samples"].pop(name, None)
            nn.Module.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)

    def __reduce__(self) -> tuple:
        # PyroModule[M].__reduce__ would rebuild a plain PyroModule[M] on copy/pickle and lose
        # this mixin (and with it the guarantee that nothing goes to the global param store).
        state = getattr(self, "__getstate__", self.__dict__.copy)()
        return _NewLocal, (type(self)._bnn_module_cls,), state


_LOCAL_CLASSES: dict[type, type] = {}


def _local_pyro_class(module_cls: type[nn.Module]) -> type:
    cls = _LOCAL_CLASSES.get(module_cls)
    if cls is None:
        cls = type(
            "Pyro" + module_cls.__name__,
            (_LocalParamsMixin, PyroModule[module_cls]),
            {"_bnn_module_cls": module_cls},
        )
        cls.__module__ = __name__
        _LOCAL_CLASSES[module_cls] = cls
    return cls


class _NewLocal:
    """Unpickling helper: an empty object of the local PyroModule class of ``module_cls``."""

    def __init__(self, module_cls: type[nn.Module]) -> None:
        self.__class__ = _local_pyro_class(module_cls)


def _to_local_pyro_module_(m: nn.Module) -> None:
    for child in m.children():
        _to_local_pyro_module_(child)
    if isinstance(m, _LocalParamsMixin):
        return
    if isinstance(m, PyroModule):
        raise TypeError(
            f"net already contains a PyroModule ({type(m).__name__}); pass a plain torch "
            "nn.Module and let bnn_pyro make it Bayesian"
        )
    replacement = BATCHED_REPLACEMENTS.get(type(m))
    module_cls = replacement if replacement is not None else type(m)
    m.__class__ = _local_pyro_class(module_cls)
    m._pyro_name = ""
    m._pyro_context = _Context()
    m._pyro_params = OrderedDict()
    m._pyro_samples = OrderedDict()


@dataclass(frozen=True)
class BayesianSite:
    """One Bayesian parameter of a converted net.

    Attributes:
        name: Pyro site name, e.g. ``"net.0.weight"``.
        module_name: dotted path of the owning module inside the net (``"0"``).
        param_name: attribute name on that module (``"weight"``).
        init: the net's own initial value, ``(*shape)`` — the guide starts its means here.
    """

    name: str
    module_name: str
    param_name: str
    init: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.init.shape


def site_prior(
    module: nn.Module, *, prior: Prior, param_name: str, shape: torch.Size
) -> TorchDistribution:
    """The prior of ``module``'s weight site ``param_name`` (``shape``: the parameter's), on
    the device and dtype of the module's reference buffer (see :func:`make_bayesian_`): what the
    ``PyroSample`` of that site draws from."""
    ref = getattr(module, DEVICE_REF)
    return prior.site_distribution(module, param_name, shape, ref.device, ref.dtype)


def make_bayesian_(net: nn.Module, prior: Prior, name: str = "net") -> list[BayesianSite]:
    """Convert ``net`` in place into a Pyro model with ``PyroSample`` weights chosen by ``prior``.

    Args:
        net: a plain ``torch.nn.Module`` (not yet a ``PyroModule``).
        prior: decides which parameters are Bayesian and their distributions.
        name: prefix of every site name (``"net"`` gives ``"net.0.weight"``).

    Returns:
        The Bayesian sites, in ``named_modules`` order.

    Raises:
        TypeError: ``net`` is not an ``nn.Module`` or already contains a ``PyroModule``.
        ValueError: the prior selects no parameter at all.
    """
    if not isinstance(net, nn.Module):
        raise TypeError(f"net must be a torch.nn.Module, got {type(net).__name__}")
    chosen = [
        (module_name, module, param_name, param)
        for module_name, module in net.named_modules()
        for param_name, param in module.named_parameters(recurse=False)
        if prior.is_bayesian(module_name, module, param_name)
    ]
    if not chosen:
        raise ValueError(
            f"{type(prior).__name__} selects no parameter of the net as Bayesian; check its "
            "include/exclude patterns and types (parameter names: "
            f"{[n for n, _ in net.named_parameters()]})"
        )
    _to_local_pyro_module_(net)
    sites = []
    for module_name, module, param_name, param in chosen:
        full = ".".join(p for p in (name, module_name, param_name) if p)
        sites.append(BayesianSite(full, module_name, param_name, param.detach().clone()))
        if not hasattr(module, DEVICE_REF):
            empty = torch.empty(0, dtype=param.dtype, device=param.device)
            module.register_buffer(DEVICE_REF, empty, persistent=False)
        delattr(module, param_name)
        draw = partial(site_prior, prior=prior, param_name=param_name, shape=param.shape)
        setattr(module, param_name, PyroSample(draw))
    net._pyro_set_supermodule(name, net._pyro_context)
    return sites
