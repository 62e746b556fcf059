"""MkDocs hook: the API reference, generated from the package on every build.

Nothing in ``docs/api/`` is written by hand. On each build this hook reads ``bnn_pyro`` with
griffe (statically, nothing is imported) and makes one page per public module, that is every
module whose dotted path has no ``_``-prefixed part. A module that moves or appears gets its
page, and its place in the navigation, without an edit here.

Each public object is rendered once, at its *home*:

* an object defined in a public module is rendered on that module's page (its canonical path,
  e.g. ``bnn_pyro.methods.vi.model.VariationalBNN``);
* an object defined in a private module (``bnn_pyro.estimators._params.METHODS``) is rendered on
  the page of the public module that exports it, under that module's path
  (``bnn_pyro.estimators.METHODS``).

Every page also lists its public names (``__all__`` when the module has one) in a table that
links each name to its home, so ``bnn_pyro``'s page is the index of the top-level API.
``Layout.identifier`` maps a canonical path to the identifier its documentation registers; the
griffe extension in ``docs/griffe_roles.py`` uses it to turn Sphinx roles into links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "bnn_pyro"
ROOT = Path(__file__).resolve().parent.parent
API_DIR = "api"
NAV_TITLE = "API reference"

# Where a name exported from outside the package is documented.
EXTERNAL_DOCS = {
    "pyro": "https://docs.pyro.ai/en/stable/",
    "torch": "https://pytorch.org/docs/stable/",
}


def is_private(path: str) -> bool:
    """Whether a dotted path has a ``_name`` part (dunder names such as ``__version__`` are
    public)."""
    return any(
        p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in path.split(".")
    )


@dataclass
class Export:
    """One public name of a module: where its documentation lives."""

    name: str
    kind: str  # "module", "class", "function", "attribute", "external"
    target: str  # the identifier to link to (or the external path)
    summary: str = ""


@dataclass
class ModulePage:
    """The page of one public module."""

    path: str  # bnn_pyro.nn.layers
    is_package: bool
    render: list[str] = field(default_factory=list)  # names rendered in full on this page
    exports: list[Export] = field(default_factory=list)

    @property
    def uri(self) -> str:
        """The page's file under ``docs/``: ``api/bnn_pyro.md``, ``api/nn/index.md``,
        ``api/nn/layers.md``."""
        parts = self.path.split(".")[1:]
        if not parts:
            return f"{API_DIR}/{self.path}.md"
        if self.is_package:
            return "/".join([API_DIR, *parts, "index.md"])
        return "/".join([API_DIR, *parts]) + ".md"


def load_package():
    """The package as griffe sees it, from this checkout (not an installed copy)."""
    import griffe

    return griffe.load(
        PACKAGE,
        search_paths=[str(ROOT)],
        docstring_parser="google",
        resolve_aliases=True,
        resolve_external=False,
    )


def _walk(module):
    yield module
    for sub in module.modules.values():
        if not sub.is_alias:
            yield from _walk(sub)


def _target(obj):
    """The object an alias finally points to, or None when it lies outside the package."""
    if not obj.is_alias:
        return obj
    try:
        target = obj.final_target
    except Exception:  # noqa: BLE001 (griffe raises several kinds for external targets)
        return None
    return target if target.path.split(".")[0] == PACKAGE else None


def _public_names(module) -> list[str]:
    if module.exports is not None:
        return [str(n) for n in module.exports]
    return [
        name
        for name, member in module.members.items()
        if not member.is_alias and not member.is_module and not is_private(name)
    ]


def _shadowed_member(obj):
    """``bnn_pyro.nn.mlp`` is both a module and, at run time, the function it defines (the
    package imports the function over the module's name). Prefer the function."""
    if obj.is_module and obj.name in obj.members and not obj.members[obj.name].is_alias:
        return obj.members[obj.name]
    return obj


def _kind(obj) -> str:
    return obj.kind.value if hasattr(obj.kind, "value") else str(obj.kind)


_ROLE = re.compile(r":(?:py:)?[a-z]+:`~?!?\.?(?:[^`<]*<)?([^`>]+)>?`")


def _summary(obj) -> str:
    if not obj.docstring:
        return ""
    first = obj.docstring.value.strip().split("\n\n")[0]
    first = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", first)
    first = " ".join(first.split()).replace("|", "\\|")
    return first


@dataclass
class Layout:
    """The API pages, and where each object's documentation is registered."""

    pages: list[ModulePage]
    ids: dict[str, str]  # canonical path -> identifier (heading anchor) of its documentation

    def identifier(self, path: str) -> str | None:
        """The identifier documenting ``path`` (a canonical path, possibly a member of a
        rendered class such as ``bnn_pyro.methods.vi.model.VariationalBNN.fit``), or None."""
        head, rest = path, ""
        while head:
            if head in self.ids:
                return self.ids[head] + rest
            if "." not in head:
                return None
            head, last = head.rsplit(".", 1)
            rest = f".{last}{rest}"
        return None


def layout(pkg=None) -> Layout:
    """The API pages of the package, in navigation order."""
    pkg = pkg if pkg is not None else load_package()
    modules = sorted(
        (m for m in _walk(pkg) if not is_private(m.path)), key=lambda m: m.path.split(".")
    )
    pages = {m.path: ModulePage(m.path, m.is_init_module) for m in modules}
    ids: dict[str, str] = {m.path: m.path for m in modules}

    # first pass: objects rendered where they are defined
    for module in modules:
        for name in _public_names(module):
            member = module.members.get(name)
            if member is None or member.is_alias or member.is_module:
                continue
            pages[module.path].render.append(name)
            ids[member.path] = member.path
    # second pass: exports of objects defined in private modules are rendered by the
    # shortest public module that exports them
    for module in sorted(modules, key=lambda m: (m.path.count("."), m.path)):
        for name in _public_names(module):
            member = module.members.get(name)
            target = _target(member) if member is not None else None
            if target is None or target.is_module:
                continue
            if target.path not in ids:
                pages[module.path].render.append(name)
                ids[target.path] = f"{module.path}.{name}"
    # the tables of public names
    for module in modules:
        page = pages[module.path]
        for name in _public_names(module):
            member = module.members.get(name)
            if member is None:
                page.exports.append(Export(name, "external", f"{module.path}.{name}"))
                continue
            target = _target(member)
            if target is None:
                page.exports.append(Export(name, "external", member.target_path))
                continue
            target = _shadowed_member(target)
            kind = "module" if target.is_module else _kind(target)
            identifier = ids.get(target.path, target.path)
            page.exports.append(Export(name, kind, identifier, _summary(target)))
    return Layout([pages[m.path] for m in modules], ids)


# ---------------------------------------------------------------------------------------------
# the pages


def _link(export: Export) -> str:
    if export.kind == "external":
        root = export.target.split(".")[0]
        url = EXTERNAL_DOCS.get(root)
        return f"[`{export.target}`]({url})" if url else f"`{export.target}`"
    return f"[`{export.name}`][{export.target}]"


def page_markdown(page: ModulePage) -> str:
    lines = [
        "<!-- generated by docs/api_pages.py on every build: do not edit -->",
        "",
        f"::: {page.path}",
        "    options:",
        "      members: false",
        "      heading_level: 1",
        "      show_root_full_path: true",
        "",
    ]
    if page.exports:
        lines += [
            "## Public names" if page.is_package or page.path == PACKAGE else "## Names",
            "",
            "| name | kind | summary |",
            "|---|---|---|",
        ]
        for export in page.exports:
            summary = export.summary
            if export.kind == "external":
                summary = f"`{page.path}.{export.name}` is `{export.target}` (not part of "
                summary += f"{PACKAGE}; see its own documentation)."
            lines.append(f"| {_link(export)} | {export.kind} | {summary} |")
        lines.append("")
        externals = [e for e in page.exports if e.kind == "external"]
        for export in externals:
            lines += [
                f"### `{export.name}` {{ #{page.path}.{export.name} }}",
                "",
                f"`{page.path}.{export.name}` is {_link(export)}, re-exported for convenience.",
                "",
            ]
    for name in page.render:
        lines += [f"::: {page.path}.{name}", ""]
    return "\n".join(lines)


def index_markdown(pages: list[ModulePage]) -> str:
    lines = [
        "<!-- generated by docs/api_pages.py on every build: do not edit -->",
        "",
        "# API reference",
        "",
        f"One page per public module of `{PACKAGE}`, generated from the code on every build.",
        f"Start with [`{PACKAGE}`][{PACKAGE}], whose table lists the top-level names",
        "(`import bnn_pyro as bp; bp.VariationalBNN`) and links each to its documentation.",
        "",
        "| module | summary |",
        "|---|---|",
    ]
    for page in pages:
        lines.append(f"| [`{page.path}`][{page.path}] | {page_summary.get(page.path, '')} |")
    return "\n".join(lines) + "\n"


page_summary: dict[str, str] = {}


#: The navigation's groups, by what a user does, each by the modules' first name below the
#: package; a module in none of them goes under "More", so a new module still appears.
GROUPS = (
    ("Methods", ("base", "methods", "registry", "spec", "stacking")),
    (
        "Building blocks",
        (
            "nn",
            "priors",
            "learned_prior",
            "likelihoods",
            "guides",
            "distributions",
            "weight_distributions",
            "elbos",
            "poutine",
            "losses",
        ),
    ),  # fmt: skip
    ("Training", ("training", "checkpoint", "exceptions")),
    ("Evaluation", ("metrics", "calibration", "plots", "datasets")),
    ("Scikit-learn and the command line", ("estimators", "cli")),
)


def _group(path: str) -> str:
    first = path.split(".")[1] if "." in path else ""
    return next((title for title, names in GROUPS if first in names), "More")


def nav(pages: list[ModulePage]) -> list:
    """The navigation: the index and the package's page, then one section per group of
    :data:`GROUPS`; inside a group, packages become sections (their page first), modules
    entries."""
    tree: list = [f"{API_DIR}/index.md"]
    groups: dict[str, list] = {}
    sections: dict[str, list] = {}
    for page in pages:
        if page.path == PACKAGE:
            tree.append({PACKAGE: page.uri})
            continue
        title = _group(page.path)
        if title not in groups:
            groups[title] = []
        parent = page.path.rsplit(".", 1)[0]
        entries = sections.get(parent, groups[title])
        if page.is_package:
            children: list = [page.uri]
            sections[page.path] = children
            entries.append({page.path.split(".")[-1] + "/": children})
        else:
            entries.append({page.path.split(".")[-1]: page.uri})
    order = [title for title, _ in GROUPS] + ["More"]
    tree.extend({title: groups[title]} for title in order if title in groups)
    return tree


# ---------------------------------------------------------------------------------------------
# mkdocs events

_pages: list[ModulePage] = []


def on_config(config):
    global _pages
    pkg = load_package()
    _pages = layout(pkg).pages
    page_summary.clear()
    for module in _walk(pkg):
        page_summary[module.path] = _summary(module)
    for i, item in enumerate(config["nav"] or []):
        if isinstance(item, dict) and NAV_TITLE in item:
            config["nav"][i] = {NAV_TITLE: nav(_pages)}
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for page in _pages:
        files.append(File.generated(config, page.uri, content=page_markdown(page)))
    files.append(File.generated(config, f"{API_DIR}/index.md", content=index_markdown(_pages)))
    return files
