"""MkDocs hook: the API reference, generated from the package on every build.

Nothing in ``docs/api/`` is written by hand. On each build this hook reads ``bnn_pyro`` with
griffe and lays the reference out the way a user looks things up:

* **one page per public class** at a shallow place, ``api/<module>/<Class>.md`` under the
  first-level module that exports it (``bnn_pyro.methods.VariationalBNN`` ->
  ``api/methods/VariationalBNN.md``, in the navigation as Methods -> ``VariationalBNN``). A
  class's page shows its public members only: the members a method defines for the library
  (its ``hooks``, e.g. ``prepare_inputs``, ``fast_loss``) are left off, except on
  ``BaseBayesianMethod``'s own page, which is the contract of a new method;
* **one page per first-level module** (``bnn_pyro.metrics``) for its functions and constants,
  with a table of every public name linking to its home;
* the deeper modules (``bnn_pyro.methods.vi.model``) are the implementation: their pages are
  built, so a link from a docstring lands somewhere, but they are **not in the navigation**.

Each public object is rendered once, at its *home*; ``Layout.identifier`` maps a canonical
path to the identifier its documentation registers, and the griffe extension in
``docs/griffe_roles.py`` uses it to turn Sphinx roles into links.
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

    @property
    def in_nav(self) -> bool:
        """The package and its first-level modules are the public face; deeper modules are
        the implementation."""
        return self.path.count(".") <= 1


@dataclass
class ClassPage:
    """The page of one public class, under the first-level module that exports it."""

    module: str  # bnn_pyro.methods
    name: str  # VariationalBNN
    canonical: str  # bnn_pyro.methods.vi.model.VariationalBNN
    members: list[str] | None  # the members shown; None: every public member
    hidden: frozenset[str] = frozenset()  # public names left off (the class's hooks)
    summary: str = ""

    @property
    def path(self) -> str:
        """The path it is rendered under, and the identifier of its heading."""
        return f"{self.module}.{self.name}"

    @property
    def uri(self) -> str:
        """``api/methods/VariationalBNN.md``."""
        return "/".join([API_DIR, *self.module.split(".")[1:], self.name]) + ".md"


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


def _runtime_class(module: str, name: str):
    """The class itself, imported (its ``hooks`` are a tuple built at class creation)."""
    import importlib

    return getattr(importlib.import_module(module), name, None)


def _shown_members(cls_obj, module: str, name: str) -> tuple[list[str] | None, frozenset[str]]:
    """A class's public members minus its ``hooks`` (see
    :attr:`bnn_pyro.BaseBayesianMethod.hooks`), or None (all) for a class without hooks and
    for the class that declares them first, whose page is the contract of a new method."""
    cls = _runtime_class(module, name)
    hooks = frozenset(getattr(cls, "hooks", ()) or ())
    if not hooks or not any(hasattr(base, "hooks") for base in cls.__mro__[1:]):
        return None, frozenset()
    try:
        names = list(cls_obj.all_members)
    except Exception:  # noqa: BLE001 (bases griffe cannot resolve)
        names = list(cls_obj.members)
    members = cls_obj.all_members if hasattr(cls_obj, "all_members") else cls_obj.members
    shown = [
        n
        for n in names
        if not n.startswith("_")
        and n not in hooks
        and n not in MODULE_PLUMBING
        and _is_api_member(members[n])
    ]
    return shown, frozenset(n for n in names if n in hooks)


#: What a method overrides of ``torch.nn.Module`` for printing and state: not its API.
MODULE_PLUMBING = frozenset({"extra_repr", "get_extra_state", "set_extra_state"})


def _is_api_member(member) -> bool:
    """A method or property, or a documented class attribute; not the attributes an instance
    sets for itself (``dataset_size``, ``guide``), which its class's docstring describes."""
    try:
        member = member.final_target if member.is_alias else member
    except Exception:  # noqa: BLE001
        return False
    if not member.is_attribute:
        return True
    labels = {str(label) for label in member.labels}
    return "property" in labels or ("class-attribute" in labels and bool(member.docstring))


@dataclass
class Layout:
    """The API pages, and where each object's documentation is registered."""

    pages: list[ModulePage]
    ids: dict[str, str]  # canonical path -> identifier (heading anchor) of its documentation
    classes: list[ClassPage] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._hidden = {c.path: c.hidden for c in self.classes}

    def identifier(self, path: str) -> str | None:
        """The identifier documenting ``path`` (a canonical path, possibly a member of a
        rendered class such as ``bnn_pyro.methods.vi.model.VariationalBNN.fit``), or None. A
        member its class's page leaves off (a hook) is documented by the class's heading."""
        head, rest = path, ""
        while head:
            if head in self.ids:
                identifier = self.ids[head]
                if rest and rest.split(".")[1] in self._hidden.get(identifier, ()):
                    return identifier
                return identifier + rest
            if "." not in head:
                return None
            head, last = head.rsplit(".", 1)
            rest = f".{last}{rest}"
        return None


def layout(pkg=None) -> Layout:
    """The API pages of the package: module pages in navigation order, and class pages."""
    pkg = pkg if pkg is not None else load_package()
    modules = sorted(
        (m for m in _walk(pkg) if not is_private(m.path)), key=lambda m: m.path.split(".")
    )
    pages = {m.path: ModulePage(m.path, m.is_init_module) for m in modules}
    ids: dict[str, str] = {m.path: m.path for m in modules}

    # what the package and its first-level modules export is homed under the first-level
    # module that defines it, else the first that exports it, else the package: a class on a
    # page of its own, a function or constant on its module's page
    surface = [m for m in modules if m.path.count(".") == 1] + [pkg]
    classes: list[ClassPage] = []
    for own in (True, False):
        for module in surface:
            for name in _public_names(module):
                member = module.members.get(name)
                target = _target(member) if member is not None else None
                target = _shadowed_member(target) if target is not None else None
                if target is None or target.is_module or target.path in ids:
                    continue
                if own and not target.path.startswith(module.path + "."):
                    continue
                if not target.is_class:
                    # bnn_pyro.nn.mlp is a module too: the function keeps its full path
                    shadowing = f"{module.path}.{name}" in pages
                    identifier = target.path if shadowing else f"{module.path}.{name}"
                    pages[module.path].render.append(identifier)
                    ids[target.path] = identifier
                    continue
                members, hidden = _shown_members(target, module.path, name)
                page = ClassPage(module.path, name, target.path, members, hidden, _summary(target))
                classes.append(page)
                ids[target.path] = page.path
    # objects rendered where they are defined
    for module in modules:
        for name in _public_names(module):
            member = module.members.get(name)
            if member is None or member.is_alias or member.is_module or member.path in ids:
                continue
            pages[module.path].render.append(name)
            ids[member.path] = member.path
    # exports of objects defined in private modules are rendered by the shortest public
    # module that exports them
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
    return Layout([pages[m.path] for m in modules], ids, classes)


# ---------------------------------------------------------------------------------------------
# the pages


def _link(export: Export) -> str:
    if export.kind == "external":
        root = export.target.split(".")[0]
        url = EXTERNAL_DOCS.get(root)
        return f"[`{export.target}`]({url})" if url else f"`{export.target}`"
    return f"[`{export.name}`][{export.target}]"


GENERATED = "<!-- generated by docs/api_pages.py on every build: do not edit -->"


def page_markdown(page: ModulePage) -> str:
    lines = [GENERATED, ""]
    lines += [
        f"::: {page.path}",
        "    options:",
        "      members: false",
        "      heading_level: 1",
        "      show_root_full_path: true",
    ]
    lines.append("")
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
    for name in page.render:  # a name, or a full path
        lines += [f"::: {name if name.startswith(PACKAGE + '.') else f'{page.path}.{name}'}", ""]
    return "\n".join(lines)


def class_markdown(page: ClassPage) -> str:
    """One class, its public members only, under a short heading; below them, the module
    that defines it and the hooks left off."""
    lines = [
        GENERATED,
        "",
        f"::: {page.path}",
        "    options:",
        "      heading_level: 1",
        "      show_root_full_path: true",
    ]
    if page.members is not None:
        lines.append(f"      members: {page.members!r}")
    defined_in = page.canonical.rsplit(".", 1)[0]
    if defined_in != page.module:
        lines += ["", f"*Defined in* `{defined_in}`."]
    if page.hidden:
        hooks = ", ".join(f"`{h}`" for h in sorted(page.hidden))
        lines += [
            "",
            f"*Not shown*: the hooks a method defines for the library ({hooks}); "
            f"see [`BaseBayesianMethod`][{PACKAGE}.base.BaseBayesianMethod].",
        ]
    return "\n".join(lines) + "\n"


def index_markdown(pages: list[ModulePage], classes: list[ClassPage] = ()) -> str:
    lines = [
        GENERATED,
        "",
        "# API reference",
        "",
        "One page per public class and per first-level module, generated from the code on every",
        f"build. Every name is importable from where it is listed (`{PACKAGE}.methods."
        "VariationalBNN`);",
        f"the most used are also at the top level (`import {PACKAGE} as bp; bp.VariationalBNN`,",
        f"listed on [`{PACKAGE}`][{PACKAGE}]'s page).",
        "",
    ]
    in_nav = [p for p in pages if p.in_nav and p.path != PACKAGE]
    for title, _names, _flat in GROUPS + (("More", (), False),):
        mods = [p for p in in_nav if _group(p.path) == title]
        if not mods:
            continue
        lines += [f"## {title}", "", "| name | summary |", "|---|---|"]
        for module in mods:
            lines.append(
                f"| [`{module.path}`][{module.path}] | {page_summary.get(module.path, '')} |"
            )
            for cls in classes:
                if cls.module == module.path:
                    lines.append(f"| [`{cls.name}`][{cls.path}] | {cls.summary} |")
        lines.append("")
    return "\n".join(lines) + "\n"


page_summary: dict[str, str] = {}


#: The navigation's groups, by what a user does, each by the modules' first name below the
#: package; a module in none of them goes under "More", so a new module still appears. In a
#: flat group the classes are entries of the group itself (Methods -> VariationalBNN); in the
#: others each module is a section holding its page and its classes' (priors -> IIDPrior).
GROUPS = (
    ("Methods", ("methods", "base", "registry", "spec", "stacking"), True),
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
        False,
    ),  # fmt: skip
    ("Training", ("training", "threads", "checkpoint", "exceptions"), False),
    ("Evaluation", ("metrics", "calibration", "plots", "datasets"), False),
    ("Scikit-learn and the command line", ("estimators", "cli"), False),
)


def _group(path: str) -> str:
    first = path.split(".")[1] if "." in path else ""
    return next((title for title, names, _ in GROUPS if first in names), "More")


def _order(path: str) -> tuple[int, str]:
    first = path.split(".")[1] if "." in path else ""
    for _, names, _ in GROUPS:
        if first in names:
            return names.index(first), path
    return 0, path


def nav(pages: list[ModulePage], classes: list[ClassPage] = ()) -> list:
    """The navigation: the index and the package's page, then one section per group of
    :data:`GROUPS` holding the first-level modules and their classes. Deeper modules' pages
    are built but left out."""
    tree: list = [f"{API_DIR}/index.md"]
    groups: dict[str, list] = {}
    flat = {title: is_flat for title, _, is_flat in GROUPS}
    tail: dict[str, list] = {}
    for page in sorted((p for p in pages if p.in_nav), key=lambda p: _order(p.path)):
        if page.path == PACKAGE:
            tree.append({PACKAGE: page.uri})
            continue
        title = _group(page.path)
        entries = groups.setdefault(title, [])
        own = [{c.name: c.uri} for c in classes if c.module == page.path]
        short = page.path.split(".", 1)[1]
        if flat.get(title, False):
            entries.extend(own)
            tail.setdefault(title, []).append({short: page.uri})
        elif own:
            entries.append({short: [page.uri, *own]})
        else:
            entries.append({short: page.uri})
    root_classes = [{c.name: c.uri} for c in classes if c.module == PACKAGE]
    if root_classes:
        groups.setdefault("More", []).extend(root_classes)
    order = [title for title, _, _ in GROUPS] + ["More"]
    tree.extend({t: groups[t] + tail.get(t, [])} for t in order if t in groups)
    return tree


# ---------------------------------------------------------------------------------------------
# mkdocs events

_layout: Layout | None = None


def on_config(config):
    global _layout
    pkg = load_package()
    _layout = layout(pkg)
    page_summary.clear()
    for module in _walk(pkg):
        page_summary[module.path] = _summary(module)
    for i, item in enumerate(config["nav"] or []):
        if isinstance(item, dict) and NAV_TITLE in item:
            config["nav"][i] = {NAV_TITLE: nav(_layout.pages, _layout.classes)}
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for page in _layout.pages:
        files.append(File.generated(config, page.uri, content=page_markdown(page)))
    for page in _layout.classes:
        files.append(File.generated(config, page.uri, content=class_markdown(page)))
    content = index_markdown(_layout.pages, _layout.classes)
    files.append(File.generated(config, f"{API_DIR}/index.md", content=content))
    return files
