"""Griffe extension: the Sphinx roles of bnn_pyro's docstrings become cross-references.

The docstrings are Google style with Sphinx roles (``:class:`~bnn_pyro.priors.IIDPrior```,
``:func:`mlp```, ``:meth:`fit```, ``:data:``, ``:attr:``, ``:mod:``, ``:exc:``). Once griffe has
loaded the whole package, this extension rewrites each role into a mkdocs-autorefs link,
``[`IIDPrior`][bnn_pyro.priors.IIDPrior]``, the way Sphinx resolves it: an absolute
``bnn_pyro.…`` path as written, a relative name against the docstring's own object, then its
class, its module and the enclosing packages (inherited members included). The link's target is
the identifier under which ``docs/api_pages.py`` renders the object, so every link lands on a
heading of the API reference.

* A target outside the package (``torch.nn.Module``, ``pyro.infer.SVI``) becomes code, no link.
* A target that exists but is private (``_outputs``, ``bnn_pyro._rng.seeded``) becomes code.
* Anything else that does not resolve, or resolves to a public object that no page documents,
  is logged as a warning naming the file and line, so ``mkdocs build --strict`` fails on it.
  Warnings are only raised for docstrings that appear on a page.

Two more things of the Napoleon dialect the docstrings are written in, which griffe's Google
parser reads differently, are normalised first (in the text griffe parses, not in the files):

* an ``Example:`` section header becomes ``Examples:`` (griffe knows only the plural; the
  singular would render the doctest as prose);
* an ``Args:`` item naming several parameters, ``loc, scale: (out, in)``, becomes one item per
  parameter with the same description.

Loaded through mkdocstrings' ``extensions`` option in ``mkdocs.yml``.
"""

from __future__ import annotations

import builtins
import importlib.util
import re
import sys
from pathlib import Path

import griffe

_spec = importlib.util.spec_from_file_location(
    "_bnn_pyro_docs_api_pages", Path(__file__).with_name("api_pages.py")
)
api_pages = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api_pages)

ROLE = re.compile(
    r"(?<![\w`]):(?:py:)?(?P<role>class|func|meth|data|attr|exc|mod|obj|const):`(?P<body>[^`]+)`"
)
_EXTERNAL = object()
_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.M)
_ARGS_HEADERS = {
    "Args:",
    "Arguments:",
    "Parameters:",
    "Params:",
    "Keyword Args:",
    "Keyword Arguments:",
    "Other Parameters:",
}
_MULTI_ARG = re.compile(r"^(\s+)(\w+(?:\s*,\s*\w+)+)\s*:(.*)$")


def normalise_napoleon(text: str) -> str:
    """``Example:`` -> ``Examples:``; ``a, b: text`` in an Args section -> one item each."""
    text = _EXAMPLE.sub(r"\1Examples:", text)
    lines, out, i = text.split("\n"), [], 0
    section_indent = None
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if line.strip() and section_indent is not None and indent <= section_indent:
            section_indent = None
        if line.strip() in _ARGS_HEADERS:
            section_indent = indent
            out.append(line)
            i += 1
            continue
        match = _MULTI_ARG.match(line) if section_indent is not None else None
        if match:
            body = [match[3]]
            i += 1
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(match[1])
            ):
                body.append(lines[i])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            for name in match[2].split(","):
                out.append(f"{match[1]}{name.strip()}:{body[0]}")
                out.extend(body[1:])
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _final(obj):
    """Follow aliases; ``_EXTERNAL`` when the chain leaves the loaded package."""
    if obj is None or not obj.is_alias:
        return obj
    try:
        return obj.final_target
    except Exception:  # noqa: BLE001 (griffe raises several kinds for unloaded targets)
        return _EXTERNAL


def _is_importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles into autorefs links once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.path != api_pages.PACKAGE:
            return
        self.pkg = pkg
        self.layout = api_pages.layout(pkg)
        for obj in self._objects(pkg):
            if obj.docstring and ":" in obj.docstring.value:
                obj.docstring.value = normalise_napoleon(obj.docstring.value)
                obj.docstring.value = self.convert(obj)

    def _objects(self, obj):
        yield obj
        for member in obj.members.values():
            if not member.is_alias:
                yield from self._objects(member)

    # -----------------------------------------------------------------------------------------

    def lookup(self, path: str):
        """The object at a dotted path (following aliases and inheritance), ``_EXTERNAL``, or
        None."""
        parts = path.split(".")
        if parts[0] != self.pkg.name:
            return None
        obj = self.pkg
        for part in parts[1:]:
            obj = _final(obj)
            if obj is None or obj is _EXTERNAL:
                return obj
            try:
                members = obj.all_members if obj.is_class else obj.members
            except Exception:  # noqa: BLE001 (bases that cannot be resolved)
                members = obj.members
            if part not in members:
                return None
            obj = members[part]
        return _final(obj)

    def resolve(self, obj, role: str, target: str):
        """The object a role in ``obj``'s docstring names, ``_EXTERNAL``, or None."""
        if target == self.pkg.name or target.startswith(self.pkg.name + "."):
            candidates = [target]
        else:
            candidates, scope = [], obj
            while scope is not None:
                candidates.append(f"{scope.path}.{target}")
                scope = scope.parent
        for candidate in candidates:
            found = self.lookup(candidate)
            if found is not None:
                if found is not _EXTERNAL and found.is_module and role != "mod":
                    # bnn_pyro.nn.mlp: the module, and the function its package exports
                    found = found.members.get(found.name, found)
                    found = _final(found)
                return found
        first = target.split(".")[0]
        if hasattr(builtins, first) or _is_importable(first):
            return _EXTERNAL
        return None

    def convert(self, obj) -> str:
        documented = self._shown(obj)
        docstring = obj.docstring

        def replace(match: re.Match) -> str:
            role, body = match["role"], " ".join(match["body"].split())
            title = None
            if body.endswith(">") and "<" in body:
                title, body = body[:-1].split("<", 1)
                title = title.strip()
            short = body.startswith("~")
            target = body.lstrip("~!.")
            text = title or (target.rsplit(".", 1)[-1] if short else target)
            found = self.resolve(obj, role, target)
            if found is _EXTERNAL:
                return f"`{text}`"
            if found is not None:
                # an undocumented member has no heading of its own: link to its class
                while found.parent is not None and not found.docstring and not found.is_module:
                    found = found.parent
            identifier = None if found is None else self.layout.identifier(found.path)
            if identifier is not None and not api_pages.is_private(identifier):
                return f"[`{text}`][{identifier}]"
            if found is not None and api_pages.is_private(found.path):
                return f"`{text}`"  # a private helper: named, not documented
            if documented:
                where = f"{obj.relative_filepath}:{docstring.lineno}"
                why = (
                    f"names {found.path}, which no page documents" if found else "does not resolve"
                )
                griffe.logger.warning(
                    "%s: %s in the docstring of %s %s", where, match.group(0), obj.path, why
                )
            return f"`{text}`"

        return ROLE.sub(replace, docstring.value)

    def _shown(self, obj) -> bool:
        """Whether ``obj``'s docstring appears on an API page."""
        identifier = self.layout.identifier(obj.path)
        return identifier is not None and not api_pages.is_private(identifier)
