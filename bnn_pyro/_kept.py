"""A fit that raises leaves its models as they were: :func:`kept_on_error` and :class:`Kept`.

What a method holds lives in three places, and each is put back in its own way:

* the ``__dict__`` of every module of the method (``_parameters``, ``_buffers`` and
  ``_modules`` included, so a guide's lazily made parameters, a new submodule, an added
  attribute or a fitted flag disappear again), and of every object of this package that they
  reach (a Pyro param store of the model's own, a likelihood, a prior, a potential): each
  ``__dict__`` as it was, and the dicts, lists and sets in it (two levels down) refilled in
  place, so that whatever else holds them (Pyro's global store, the scope of a model whose
  ``param_scope()`` is entered) still holds the model's own;
* the values of every tensor found there (parameters, buffers, tensor attributes, the tensors
  of a param store), their ``.grad`` and ``requires_grad``: copied back *in place*, so that
  an optimizer, a view or a user's reference to a parameter still sees the model's own tensor;
* nothing else: the global RNG (a seeded fit leaves it alone anyway), files a callback wrote.

``BaseBayesianMethod`` wraps every subclass's ``fit`` in it, and :func:`bnn_pyro.fit_stacked`
its K models; a ``fit`` inside another (a subclass's ``fit`` calling its base's, one model's
stacked fit calling its own ``fit``) keeps nothing twice. Only an ``Exception`` restores: a
``KeyboardInterrupt`` keeps the progress made.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn as nn

__all__ = ["Kept", "kept_on_error"]

_PACKAGE = __name__.split(".")[0]
_CONTAINERS = (dict, list, set)
#: ids of the models inside a block that keeps them: an inner block keeps nothing more
_KEEPING: set[int] = set()


def _ours(value: Any) -> bool:
    """An object of this package with state of its own (not a module, tensor or class)."""
    kind = type(value)
    return (
        kind.__module__.split(".")[0] == _PACKAGE
        and hasattr(value, "__dict__")
        and not isinstance(value, nn.Module | torch.Tensor | type)
    )


def _contents(container: Any) -> Any:
    """A copy of a dict's, list's or set's items (the items themselves shared)."""
    return dict(container) if isinstance(container, dict) else list(container)


def _refill(container: Any, items: Any) -> None:
    """Put ``items`` (from :func:`_contents`) back into ``container`` itself, in order."""
    if isinstance(container, dict):
        container.clear()
        container.update(items)
    elif isinstance(container, list):
        container[:] = items
    else:
        container.clear()
        container.update(items)


def _members(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list | set | tuple):
        return list(value)
    return [value]


class Kept:
    """The state of one model, taken now; :meth:`restore` puts it back.

    Args:
        model: an ``nn.Module`` (a method, or any module).

    Example:
        >>> net = nn.Linear(2, 1)
        >>> kept = Kept(net)
        >>> with torch.no_grad():
        ...     _ = net.weight.add_(1.0)
        >>> net.extra = nn.Linear(1, 1)
        >>> before = net.weight
        >>> kept.restore()
        >>> hasattr(net, "extra"), net.weight is before, bool(torch.equal(net.weight, kept.value(net.weight)))
        (False, True, True)
    """  # noqa: E501

    def __init__(self, model: nn.Module) -> None:
        self._dicts: list[tuple[Any, dict[str, Any]]] = []  # (object, its __dict__'s items)
        self._containers: dict[int, tuple[Any, Any]] = {}  # id -> (container, its items)
        self._tensors: dict[int, tuple[torch.Tensor, torch.Tensor, bool, Any]] = {}
        seen: set[int] = set()
        pending: list[Any] = list(model.modules())
        while pending:
            obj = pending.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            self._dicts.append((obj, dict(vars(obj))))
            pending += self._walk(list(vars(obj).values()), depth=2)

    def _walk(self, values: list[Any], depth: int) -> list[Any]:
        """Keep the tensors and containers among ``values`` (and inside the containers, to
        ``depth`` levels); return the modules and objects of this package found."""
        found = []
        for value in values:
            if isinstance(value, torch.Tensor):
                self._keep_tensor(value)
            elif isinstance(value, nn.Module):
                found.append(value)
            elif isinstance(value, (*_CONTAINERS, tuple)):
                if isinstance(value, _CONTAINERS) and id(value) not in self._containers:
                    self._containers[id(value)] = (value, _contents(value))
                if depth > 0:
                    found += self._walk(_members(value), depth - 1)
            elif _ours(value):
                found.append(value)
        return found

    def _keep_tensor(self, t: torch.Tensor) -> None:
        if id(t) in self._tensors:
            return
        grad = t.grad if t.is_leaf else None
        kept_grad = None if grad is None else (grad, grad.detach().clone())
        self._tensors[id(t)] = (t, t.detach().clone(), t.requires_grad, kept_grad)

    def value(self, tensor: torch.Tensor) -> torch.Tensor:
        """The kept copy of ``tensor``'s value (a tensor the model held when it was kept)."""
        return self._tensors[id(tensor)][1]

    @torch.no_grad()
    def restore(self) -> None:
        """Put every ``__dict__``, every dict, list and set in them (the same objects, refilled)
        and every tensor's value back as they were when kept."""
        for obj, state in self._dicts:
            current = vars(obj)
            current.clear()
            current.update(state)
        for container, items in self._containers.values():
            _refill(container, items)
        for t, value, requires_grad, grad in self._tensors.values():
            _put(t, value)
            if t.is_leaf:
                t.requires_grad_(requires_grad)
                if grad is None:
                    t.grad = None
                else:
                    _put(grad[0], grad[1])
                    t.grad = grad[0]


def _put(t: torch.Tensor, value: torch.Tensor) -> None:
    """``t``'s value becomes ``value``: in place where the shape, dtype and device still match
    (an unchanged tensor is left alone: an expanded one cannot be written to)."""
    same = t.shape == value.shape and t.dtype == value.dtype and t.device == value.device
    if same and torch.equal(t, value):
        return
    if same:
        try:
            t.copy_(value)
            return
        except RuntimeError:  # memory shared by several elements (an expanded tensor)
            pass
    t.data = value.clone()


@contextmanager
def kept_on_error(*models: nn.Module) -> Iterator[None]:
    """Run the block; if it raises an ``Exception``, put every model back as it was before.

    A model already inside such a block (a ``fit`` inside another) is kept by the outer one.

    Args:
        *models: the modules to keep (methods, nets).

    Example:
        >>> net = nn.Linear(2, 1)
        >>> before = net.weight.detach().clone()
        >>> try:
        ...     with kept_on_error(net):
        ...         with torch.no_grad():
        ...             _ = net.weight.mul_(0.0)
        ...         raise RuntimeError("the fit failed")
        ... except RuntimeError:
        ...     pass
        >>> bool(torch.equal(net.weight, before))
        True
    """
    with ExitStack() as stack:
        for model in models:
            stack.enter_context(_kept_one(model))
        yield


@contextmanager
def _kept_one(model: nn.Module) -> Iterator[None]:
    if id(model) in _KEEPING:
        yield
        return
    kept = Kept(model)
    _KEEPING.add(id(model))
    try:
        yield
    except Exception:
        kept.restore()
        raise
    finally:
        _KEEPING.discard(id(model))
