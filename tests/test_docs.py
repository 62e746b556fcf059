"""The documentation site builds with warnings as errors, and documents every public name.

The build (``mkdocs build --strict``, about 15 s) runs once per session into a temporary
folder. It needs the ``docs`` extra (also in ``dev``); without mkdocs these tests are skipped.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bnn_pyro as bp

ROOT = Path(__file__).resolve().parents[1]
DOCS_PACKAGES = ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter")


def _missing() -> list[str]:
    missing = []
    for name in DOCS_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


needs_mkdocs = pytest.mark.skipif(
    bool(_missing()),
    reason=f"the docs tools are not installed ({', '.join(_missing())}): pip install -e '.[docs]'",
)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return site, result


@needs_mkdocs
def test_strict_build_has_no_warnings(built_site):
    site, result = built_site
    log = result.stdout + result.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0 and not warnings, "mkdocs build --strict failed:\n" + log
    assert (site / "index.html").exists()
    assert (site / "notebooks" / "01_toy_regression" / "index.html").exists()


def _runtime_object(path: str):
    """The object a dotted identifier names at run time (longest importable module, then
    attributes), or a sentinel."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return _runtime_object
        return obj
    return _runtime_object


def _public_namespaces() -> list[str]:
    import bnn_pyro

    modules = ["bnn_pyro", "bnn_pyro.estimators"]
    for name in bnn_pyro.__all__:
        obj = getattr(bnn_pyro, name)
        if getattr(obj, "__name__", "").startswith("bnn_pyro.") and hasattr(obj, "__all__"):
            modules.append(obj.__name__)
    return sorted(set(modules))


@needs_mkdocs
@pytest.mark.parametrize("module_name", _public_namespaces())
def test_every_public_name_has_an_api_entry(built_site, module_name):
    """Every name in ``__all__`` of ``bnn_pyro`` and of its public subpackages has a heading on
    an API page whose identifier names that very object (``bnn_pyro.VariationalBNN`` is
    documented as ``bnn_pyro.methods.vi.model.VariationalBNN``)."""
    site, _ = built_site
    ids = set()
    for page in (site / "api").rglob("*.html"):
        ids.update(re.findall(r'id="(bnn_pyro(?:\.[\w]+)*)"', page.read_text()))
    assert ids, "no API pages were built"
    module = importlib.import_module(module_name)
    objects = [_runtime_object(identifier) for identifier in ids]  # kept alive: ids stay unique
    documented = {id(obj) for obj in objects}
    missing = [
        name
        for name in module.__all__
        if f"{module_name}.{name}" not in ids and id(getattr(module, name)) not in documented
    ]
    assert not missing, f"{module_name}: no API entry for {missing}"


# ------------------------------------------------------------------------------------------
# the docstring-role extension on its own (griffe only, no mkdocs build)


def _roles_extension():
    griffe = pytest.importorskip("griffe", reason="griffe comes with mkdocstrings[python]")
    return griffe, griffe.load_extensions(str(ROOT / "docs" / "griffe_roles.py") + ":SphinxRoles")


def test_roles_become_links_to_the_documented_object():
    griffe, extensions = _roles_extension()
    pkg = griffe.load("bnn_pyro", search_paths=[str(ROOT)], extensions=extensions)
    nn_doc = pkg["nn"].docstring.value
    assert "[`mlp`][bnn_pyro.nn.mlp.mlp]" in nn_doc  # the function, not the module
    assert (
        "[`VariationalBNN`][bnn_pyro.methods.VariationalBNN]" in nn_doc
    )  # ~ shortens the text; the class's page is under the first-level module
    assert ":class:" not in nn_doc


def test_an_unresolvable_role_is_a_warning(tmp_path, caplog):
    griffe, extensions = _roles_extension()
    package = tmp_path / "bnn_pyro"
    package.mkdir()
    (package / "__init__.py").write_text(
        '"""Toy.\n\nSee :class:`Thing`, :func:`helper`, :class:`torch.nn.Module`, '
        ':class:`ValueError` and :class:`Nothing`."""\n\n'
        'class Thing:\n    """A thing."""\n\n\ndef helper():\n    """Help."""\n'
    )
    with caplog.at_level("WARNING"):
        pkg = griffe.load(package, extensions=extensions)  # this folder, not the installed one
    doc = pkg.docstring.value
    assert "[`Thing`][bnn_pyro.Thing]" in doc and "[`helper`][bnn_pyro.helper]" in doc
    assert "`torch.nn.Module`" in doc and "`ValueError`" in doc  # outside: code, no link
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and ":class:`Nothing`" in warnings[0], warnings


METHOD_CLASSES = sorted({spec.split(":")[1] for spec, _ in bp.METHODS.values()})


@needs_mkdocs
@pytest.mark.parametrize("cls", METHOD_CLASSES)
def test_a_method_page_shows_the_public_face_only(built_site, cls):
    """Each method has a page of its own at ``api/methods/<Class>/``: the inherited contract
    (``fit``, ``predict``, ``save``, ``load``) is on it, the hooks a method defines for the
    library (``prepare_inputs``, ``fast_loss``, ``forward``...) are not, nor are the
    attributes an instance sets for itself."""
    site, _ = built_site
    html = (site / "api" / "methods" / cls / "index.html").read_text()
    shown = set(re.findall(rf'id="bnn_pyro\.methods\.{cls}\.(\w+)"', html))
    assert {"fit", "predict", "save", "load", "from_net"} <= shown, sorted(shown)
    hooks = set(getattr(bp.methods, cls).hooks)
    assert not shown & hooks, sorted(shown & hooks)
    assert not shown & {"dataset_size", "input_shape", "extra_repr", "get_extra_state"}


def test_every_hook_a_method_declares_is_one_of_its_members():
    """``hooks`` names members: a renamed hook left in the tuple would show on the API page."""
    for cls in METHOD_CLASSES:
        method = getattr(bp.methods, cls)
        assert {"fit", "predict", "save", "load"}.isdisjoint(method.hooks), cls
        missing = [name for name in method.hooks if not hasattr(method, name)]
        assert not missing, (cls, missing)


@needs_mkdocs
def test_the_contract_page_shows_the_hooks(built_site):
    """``BaseBayesianMethod``'s page is the contract of a new method: its hooks are on it."""
    site, _ = built_site
    html = (site / "api" / "base" / "BaseBayesianMethod" / "index.html").read_text()
    shown = set(re.findall(r'id="bnn_pyro\.base\.BaseBayesianMethod\.(\w+)"', html))
    assert {"fit", "predict", "checkpoint_config", "fitted_state"} <= shown, sorted(shown)


def _flat(nav: list) -> list[str]:
    out = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        else:
            (value,) = item.values()
            out.extend(_flat(value) if isinstance(value, list) else [value])
    return out


def _api_pages():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        return importlib.import_module("api_pages")
    finally:
        sys.path.remove(str(ROOT / "docs"))


@needs_mkdocs
def test_the_api_navigation_is_grouped_shallow_and_complete():
    """The API navigation groups the pages by what a user does: a method is one click into
    Methods (Methods -> VariationalBNN), every class and first-level module is in it once, a
    new module lands in its group (or in "More") without an edit, and the deeper modules (the
    implementation) are left out."""
    api_pages = _api_pages()
    layout = api_pages.layout()
    tree = api_pages.nav(layout.pages, layout.classes)
    titles = [next(iter(item)) for item in tree if isinstance(item, dict)]
    assert titles[:3] == ["bnn_pyro", "Methods", "Building blocks"], titles
    methods = next(item["Methods"] for item in tree if isinstance(item, dict) and "Methods" in item)
    direct = [next(iter(entry)) for entry in methods]
    assert set(METHOD_CLASSES) <= set(direct), direct
    assert direct[0] == "VariationalBNN", direct
    uris = _flat(tree)
    public = [p.uri for p in layout.pages if p.path.count(".") <= 1]
    expected = public + [c.uri for c in layout.classes] + ["api/index.md"]
    assert sorted(uris) == sorted(expected)
    deep = [p.uri for p in layout.pages if p.path.count(".") > 1]
    assert deep and not set(deep) & set(uris)


def _method_guide():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        return importlib.import_module("method_guide")
    finally:
        sys.path.remove(str(ROOT / "docs"))


@needs_mkdocs
def test_the_method_guide_lists_every_method_with_the_benchmarks_figures(built_site):
    """The "Which method?" page has a row per registered method, and its UCI rank of the
    first method is the one recomputed here from uci.json by hand (not by the hook's code)."""
    site, _ = built_site
    html = (site / "which-method" / "index.html").read_text()
    for name in bp.METHODS:
        assert f"<code>{name}</code>" in html, name
    payload = json.loads((ROOT / "benchmarks" / "results" / "uci" / "uci.json").read_text())
    rows = [r for r in payload["summary"] if r["metric"] == "test_ll"]
    places = []
    for dataset in {r["dataset"] for r in rows}:
        ordered = sorted((r for r in rows if r["dataset"] == dataset), key=lambda r: -r["mean"])
        places.append(1 + [r["method"] for r in ordered].index("vi"))
    methods = {r["method"] for r in rows}
    assert f"{sum(places) / len(places):.1f} of {len(methods)}" in html


def test_the_method_guide_shows_a_dash_for_what_was_not_measured():
    guide = _method_guide()
    assert guide.uci_columns(None) == {} and guide.coverage_column(None) == {}
    assert guide.ood_columns({"results": {}}, ("held-out classes",)) == {}


@needs_mkdocs
def test_the_built_site_has_no_machine_path_and_no_internal_word(built_site):
    """Every built page (those outside the navigation too, which the site's search finds) and
    the search index, scanned with the source pages' patterns (tests/test_user_pages.py)."""
    from tests.test_user_pages import INTERNAL, MACHINE_PATH

    site, _ = built_site
    found = []
    for page in [*site.rglob("*.html"), *site.rglob("*.json")]:
        text = page.read_text(encoding="utf-8", errors="replace")
        for pattern in (MACHINE_PATH, INTERNAL):
            found += [f"{page.relative_to(site)}: {m.group(0)!r}" for m in pattern.finditer(text)]
    assert not found, found[:20]


def test_the_method_guide_opens_with_a_recommendation_and_lists_every_method_twice():
    """A newcomer reads where to start before the tables; each of the two narrower tables (cost
    and fit; uncertainty) has a row for every registered method, and no bullet ends in ';'."""
    page = _method_guide().page_markdown()
    intro, rest = page.split("## Cost and fit")
    fit_part, uq_part = rest.split("## Uncertainty")
    assert "**Start** with `vi`" in intro and "**Switch**" in intro
    for name in bp.METHODS:
        assert f"| `{name}` |" in fit_part, name
        assert f"| `{name}` |" in uq_part, name
    assert not [line for line in page.splitlines() if line.startswith("* ") and line.endswith(";")]
