"""Every public name: a docstring with a runnable example (run by --doctest-modules) and type
hints on every argument and return value of public functions and methods."""

from __future__ import annotations

import importlib
import inspect

import pytest

PUBLIC_MODULES = [
    "bnn_pyro",
    "bnn_pyro.nn",
    "bnn_pyro.priors",
    "bnn_pyro.likelihoods",
    "bnn_pyro.guides",
    "bnn_pyro.training",
    "bnn_pyro.metrics",
    "bnn_pyro.datasets",
    "bnn_pyro.plots",
    "bnn_pyro.distributions",
    "bnn_pyro.poutine",
    "bnn_pyro.methods",
    "bnn_pyro.losses",
    "bnn_pyro.methods.vi.map_init",
    "bnn_pyro.estimators",
    "bnn_pyro.exceptions",
    "bnn_pyro.cli",
    "bnn_pyro.cli.demo",
    "bnn_pyro.cli.fit",
    "bnn_pyro.cli.predict",
    "bnn_pyro.cli.io",
    "bnn_pyro.cli.errors",
    "bnn_pyro.cli.output",
    "bnn_pyro.cli.target",
]


def _public_objects() -> list[tuple[str, object]]:
    seen, out = set(), []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and id(obj) not in seen:
                if getattr(obj, "__module__", "").startswith("bnn_pyro"):
                    seen.add(id(obj))
                    out.append((f"{module_name}.{name}", obj))
    return out


OBJECTS = _public_objects()


@pytest.mark.parametrize("name, obj", OBJECTS, ids=[n for n, _ in OBJECTS])
def test_public_name_has_a_docstring_with_an_example(name, obj):
    doc = inspect.getdoc(obj) or ""
    assert doc, f"{name} has no docstring"
    assert ">>>" in doc, f"{name}'s docstring has no runnable example"


def _callables(obj):
    if inspect.isfunction(obj):
        yield obj.__qualname__, obj
        return
    for attr, member in vars(obj).items():
        if inspect.isfunction(member) and (not attr.startswith("_") or attr == "__init__"):
            yield f"{obj.__qualname__}.{attr}", member


@pytest.mark.parametrize("name, obj", OBJECTS, ids=[n for n, _ in OBJECTS])
def test_public_functions_have_type_hints(name, obj):
    for qualname, fn in _callables(obj):
        params = inspect.signature(fn).parameters
        untyped = [
            p
            for p, spec in params.items()
            if p not in ("self", "cls") and spec.annotation is inspect.Parameter.empty
        ]
        assert not untyped, f"{qualname}: arguments without type hints: {untyped}"
        if fn.__name__ != "__init__":
            assert "return" in fn.__annotations__, f"{qualname}: no return type hint"
