"""The one assertion of the reliability suite: a bad call is refused up front.

``assert_refused(call, ValueError, "lr", obj=model)`` runs ``call()``, checks that it raises
``ValueError`` (or a subclass) whose message names every given word (the argument), and that
``obj`` is exactly as it was before: every tensor in its ``state_dict`` bit-identical and its
public attributes equal. A test written with it fails if the call succeeds, raises another
type, gives a message that does not name the argument, or changed the object first.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch


def fingerprint(obj: Any) -> dict[str, Any]:
    """What must not change: the state_dict tensors (cloned) and the plain public attributes."""
    out: dict[str, Any] = {}
    if isinstance(obj, torch.nn.Module):
        out["state"] = {  # a ClassicMethod's ``_extra_state`` is a dict, not a tensor
            k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
            for k, v in obj.state_dict().items()
        }
    attrs = {}
    for name, value in vars(obj).items():
        if name.startswith("_") or isinstance(value, torch.nn.Module | torch.Tensor):
            continue
        if isinstance(value, int | float | str | bool | type(None) | tuple):
            attrs[name] = copy.copy(value)
    out["attrs"] = attrs
    out["keys"] = sorted(k for k in vars(obj) if not k.startswith("__"))
    return out


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert after["keys"] == before["keys"], "attributes were added or removed"
    assert after["attrs"] == before["attrs"], "public attributes changed"
    if "state" in before:
        assert after["state"].keys() == before["state"].keys(), "parameters added or removed"
        for key, value in before["state"].items():
            new = after["state"][key]
            if not isinstance(value, torch.Tensor):
                assert repr(new) == repr(value), f"{key} changed"
                continue
            assert new.shape == value.shape and torch.equal(
                torch.nan_to_num(new), torch.nan_to_num(value)
            ), f"{key} changed"


def assert_refused(
    call: Callable[[], Any],
    exc: type[BaseException] | tuple[type[BaseException], ...],
    *names: str,
    obj: Any = None,
) -> pytest.ExceptionInfo:
    """``call()`` raises ``exc`` naming every word in ``names``; ``obj`` is left unchanged."""
    before = None if obj is None else fingerprint(obj)
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    assert "weights_only=False" not in message, "the message advises the unsafe load"
    if before is not None:
        assert_same(before, fingerprint(obj))
    return info
