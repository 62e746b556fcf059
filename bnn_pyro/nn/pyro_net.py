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
   distribution the prior builds on the module's current device and dtype, told the site's
   name. A prior with latent sites of its own (a hierarchical scale) samples them there, each
   time the weight site is drawn.
4. A call of the net (of any converted module, from outside the net) other than an MLP
   (:func:`~bnn_pyro.nn.folding.keeps_sample_dims`) runs with the weights' sample dims folded
   into the batch dim of its first argument (:func:`~bnn_pyro.nn.folding.folded_call`; the
   input too, to the sample dims of the plates around the call, where the net's forward is user
   code): under ``Predictive(parallel=True)`` or vectorized particles its ``nn.Flatten``,
   ``view`` and ``reshape`` see a plain batch, and it returns ``(*S, B, ...)``.

:class:`FixedLatents` runs the converted net on given weights without drawing anything: the net
needs only the weights, so a prior's own latents take a fixed point of their support instead of
a draw (what the net evaluator does, under ``torch.func.vmap`` among others, which refuses a
draw of a tensor the batch does not carry); :func:`prior_latent_sites` names those latents.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import pyro.poutine as poutine
import torch
import torch.nn as nn
from pyro.distributions import constraints
from pyro.nn import PyroModule, PyroSample
from pyro.nn.module import _Context
from pyro.poutine.messenger import Messenger
from pyro.poutine.runtime import effectful
from pyro.poutine.util import site_is_subsample
from torch.distributions import biject_to

from bnn_pyro.nn.folding import (
    folded_call,
    in_pass,
    keeps_sample_dims,
    needs_folded_input,
    plate_sample_shape,
)
from bnn_pyro.nn.layers import BATCHED_REPLACEMENTS
from bnn_pyro.nn.param_scope import register_param
from bnn_pyro.priors.base import takes_name

if TYPE_CHECKING:
    from pyro.distributions.torch_distribution import TorchDistribution

    from bnn_pyro.priors import Prior

__all__ = [
    "BayesianSite",
    "FixedLatents",
    "make_bayesian_",
    "param_statement",
    "prior_latent_sites",
    "site_prior",
    "DEVICE_REF",
]

#: Name of the empty buffer that tells a converted module's prior which device/dtype to use.
DEVICE_REF = "_bnn_device_ref"


def _return_value(name: str, value: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return value


_param = effectful(_return_value, type="param")


def param_statement(name: str, value: torch.Tensor) -> torch.Tensor:
    """Announce a module-held tensor to Pyro as the param site ``name`` and return it.

    Handlers (``poutine.trace``, ``SVI``'s param capture, ``pyro.optim``) see a normal param
    site; the global param store is never touched. Inside the model's own store
    (:class:`~bnn_pyro.nn.param_scope.ParamScope`) the tensor is also found by ``name`` there,
    as Pyro's JIT looks it up.

    Args:
        name: site name, e.g. ``"guide.loc.net.0.weight"``.
        value: a leaf tensor (usually an ``nn.Parameter``) of any shape.

    Returns:
        ``value`` itself (outside any handler) or what the handlers return for it.
    """
    ref = getattr(value, "unconstrained", None)
    if ref is None or ref() is not value:
        value.unconstrained = weakref.ref(value)  # what SVI.step reads to find the leaf
    register_param(name, value)  # in the model's own store, if one is entered: found by name
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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # the outermost call of a pass folds the weights' sample dims into the batch dim (an
        # MLP takes them as leading dims, as they are)
        if args and isinstance(args[0], torch.Tensor) and not in_pass():
            call, fold = super().__call__, not keeps_sample_dims(self)
            shape = plate_sample_shape() if fold and needs_folded_input(self) else None
            return folded_call(lambda x: call(x, *args[1:], **kwargs), args[0], shape, fold)
        return super().__call__(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, nn.Parameter):
            self.__dict__["_pyro_samples"].pop(name, None)
            nn.Module.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)

    def __reduce__(self) -> tuple:
        # PyroModule[M].__reduce__ would rebuild a plain PyroModule[M] on copy/pickle and lose
        # this mixin (and with it the guarantee that nothing goes to the global param store).
        state = self.__getstate__()  # nn.Module's
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
    module: nn.Module,
    *,
    prior: Prior,
    param_name: str,
    shape: torch.Size,
    name: str | None = None,
) -> TorchDistribution:
    """The prior of ``module``'s weight site ``param_name`` (``shape``: the parameter's;
    ``name``: the site's dotted name, ``"net.0.weight"``), on the device and dtype of the
    module's reference buffer (see :func:`make_bayesian_`): what the ``PyroSample`` of that
    site draws from. A prior with latent sites samples them here."""
    ref = getattr(module, DEVICE_REF)
    named = {"name": name} if takes_name(type(prior).site_distribution) else {}
    return prior.site_distribution(module, param_name, shape, ref.device, ref.dtype, **named)


class FixedLatents(Messenger):
    """Give every sample site a value without drawing one: a site of ``values`` takes its value
    (observed, as under ``poutine.condition``); any other latent site (a prior's own, such as a
    hierarchical scale) a fixed point of its support, ``biject_to(support)(0)`` (``1`` for a
    positive site, ``0`` for a real one). For running a converted net on given weights: its
    output depends on the weights alone, and no random number is drawn.

    Args:
        values: ``{site: value}`` (e.g. ``{"net.0.weight": (S, out, in)}``), or ``None``.
        like: a tensor whose device and dtype the fixed points take (default: the first of
            ``values``, else torch's default dtype on the CPU).

    Example:
        >>> import pyro, pyro.distributions as dist
        >>> def model():
        ...     s = pyro.sample("s", dist.HalfCauchy(1.0))
        ...     return pyro.sample("w", dist.Normal(0.0, s))
        >>> with FixedLatents({"w": torch.tensor(0.5)}):
        ...     model()
        tensor(0.5000)
    """

    def __init__(
        self, values: Mapping[str, torch.Tensor] | None = None, like: torch.Tensor | None = None
    ) -> None:
        super().__init__()
        self.values = dict(values or {})
        if like is None and self.values:
            like = next(iter(self.values.values()))
        if like is not None and not isinstance(like, torch.Tensor):
            raise TypeError(f"like must be a tensor, got {type(like).__name__}")
        self.like = like

    def _pyro_sample(self, msg: dict) -> None:
        name = msg["name"]
        if name in self.values:
            msg["value"], msg["is_observed"] = self.values[name], True
            return
        if msg["is_observed"] or msg["value"] is not None or site_is_subsample(msg):
            return
        fn = msg["fn"]
        like = self.like
        zero = torch.zeros(
            fn.shape(),
            dtype=like.dtype if like is not None else torch.get_default_dtype(),
            device=like.device if like is not None else None,
        )
        try:
            msg["value"] = biject_to(fn.support)(zero)
        except NotImplementedError:  # a discrete site: 0 if it is in the support
            if not bool(fn.support.check(zero).all()):
                raise ValueError(
                    f"latent site {name!r} has a support ({fn.support}) with no fixed point to "
                    "evaluate the net at"
                ) from None
            msg["value"] = zero


def prior_latent_sites(net: nn.Module, sites: list[BayesianSite], prior: Prior) -> list[str]:
    """The names of the prior's own latent sites (e.g. ``"net.0.weight_prior_scale"``), in
    model order: what the prior samples besides the weights; ``[]`` for a prior without.

    Builds each weight site's prior once, under :class:`FixedLatents` (nothing is drawn).

    Args:
        net: the net converted by :func:`make_bayesian_` with this ``prior``.
        sites: what :func:`make_bayesian_` returned.
        prior: the prior it was converted with.

    Example:
        >>> from bnn_pyro.priors import HierarchicalNormalPrior
        >>> net, prior = torch.nn.Linear(2, 1), HierarchicalNormalPrior()
        >>> sites = make_bayesian_(net, prior)
        >>> prior_latent_sites(net, sites, prior)
        ['net.weight_prior_scale', 'net.bias_prior_scale']
    """
    modules = dict(net.named_modules())
    with torch.no_grad(), poutine.trace() as tracer:
        for s in sites:
            with FixedLatents(like=s.init):
                module = modules[s.module_name]
                site_prior(module, prior=prior, param_name=s.param_name, shape=s.shape, name=s.name)
    return [
        n
        for n, site in tracer.trace.nodes.items()
        if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
    ]


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
        ValueError: the prior selects no parameter at all, or refuses the site names
            (:meth:`~bnn_pyro.priors.Prior.check_site_names`).
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
    prior.check_site_names([".".join(p for p in (name, m, n) if p) for m, _, n, _ in chosen])
    _to_local_pyro_module_(net)
    sites = []
    for module_name, module, param_name, param in chosen:
        full = ".".join(p for p in (name, module_name, param_name) if p)
        sites.append(BayesianSite(full, module_name, param_name, param.detach().clone()))
        if not hasattr(module, DEVICE_REF):
            empty = torch.empty(0, dtype=param.dtype, device=param.device)
            module.register_buffer(DEVICE_REF, empty, persistent=False)
        delattr(module, param_name)
        draw = partial(site_prior, prior=prior, param_name=param_name, shape=param.shape, name=full)
        setattr(module, param_name, PyroSample(draw))
    net._pyro_set_supermodule(name, net._pyro_context)
    return sites
