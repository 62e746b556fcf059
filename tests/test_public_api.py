"""Every public name: a docstring with a runnable example (run by --doctest-modules) and type
hints on every argument and return value of public functions and methods."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

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


def test_import_bnn_pyro_imports_torch_only_when_a_name_is_used():
    # the package's face loads its names on first use (``bnn-pyro --help`` needs no torch);
    # a fresh process, since this one has torch already
    code = (
        "import sys, bnn_pyro as bp\n"
        "before = [m for m in ('torch', 'pyro') if m in sys.modules]\n"
        "bp.VariationalBNN\n"
        "print(before, 'torch' in sys.modules and 'pyro' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[] True", run.stdout


def test_every_public_name_resolves_and_threads_stays_the_function():
    import bnn_pyro as bp

    threads_module = sys.modules["bnn_pyro.threads"]  # (`import a.b as c` would get bp.threads)

    missing = [n for n in bp.__all__ if not hasattr(bp, n)]
    assert not missing, missing
    assert set(bp.__all__) <= set(dir(bp))
    # bp.threads is the context manager, not the module of the same name that holds it
    assert bp.threads is threads_module.threads
    assert bp.dist.Normal is importlib.import_module("pyro.distributions").Normal
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        bp.no_such_name  # noqa: B018
