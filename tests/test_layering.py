"""Who may import whom, read from the source: the layering ARCHITECTURE.md draws.

core (``tacos/``) <- each format's model and wire code (``formats/``) <- readers
(``importers/``) and writers (``exporters/``) <- the format registry
(``tacos/registry.py``) <- the CLI. The core imports no format and not the
registry, importers never import exporters, formats import neither, and no
module uses a name another module keeps private (a leading underscore).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache

import pytest
from paths import REPO_DIR
from source_modules import Module, modules

FORMAT_PACKAGES = ("tacos.formats", "tacos.importers", "tacos.exporters", "tacos.proto")
REGISTRY = "tacos.registry"
REGISTRY_USERS = {"tacos", "tacos.cli", "tacos.sweep"}
"""The front of the library: the package's own namespace (``tacos.load_topology``
reads any file ``--topology`` does), the command line, and sweeps (whose grids
name topologies as ``--topology`` does)."""


@dataclass(frozen=True)
class Use:
    """One import (or private attribute of an imported module) in a module, with its line."""

    target: str
    name: str | None
    line: int


@cache
def uses(module_name: str) -> tuple[Use, ...]:
    """Everything ``module_name`` imports, anywhere in its body (functions included)."""
    module = modules()[module_name]
    tree = ast.parse(module.path.read_text(), str(module.path))
    found: list[Use] = []
    module_aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Use(alias.name, None, node.lineno))
                module_aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                found.append(Use(base, alias.name, node.lineno))
                if f"{base}.{alias.name}" in modules():
                    module_aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in module_aliases
        ):
            found.append(Use(module_aliases[node.value.id], node.attr, node.lineno))
    return tuple(found)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.package.rsplit(".", node.level - 1)[0] if node.level > 1 else module.package
    return f"{base}.{node.module}" if node.module else base


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def where(module_name: str, package: str) -> list[str]:
    """Lines of ``module_name`` that import from ``package``."""
    return [
        f"{modules()[module_name].path.relative_to(REPO_DIR)}:{use.line}: {use.target}"
        for use in uses(module_name)
        if _in(use.target, package) or (use.name and _in(f"{use.target}.{use.name}", package))
    ]


def test_the_module_list_covers_every_folder():
    names = set(modules())
    for expected in ("tacos.cli", "tacos.exporters.msccl", "tacos.importers.ns3", REGISTRY):
        assert expected in names
    assert any(_in(name, "tacos.formats") for name in names)
    assert {"tacos.topology", "tacos.synthesizer.greedy"} <= set(core_modules())


def core_modules() -> list[str]:
    return [
        name
        for name in sorted(modules())
        if name not in REGISTRY_USERS | {REGISTRY}
        and not any(_in(name, package) for package in FORMAT_PACKAGES)
    ]


@pytest.mark.parametrize("name", core_modules())
def test_the_core_never_imports_a_format_nor_the_registry(name):
    found = [line for package in (*FORMAT_PACKAGES, REGISTRY) for line in where(name, package)]
    assert not found


@pytest.mark.parametrize("name", [n for n in sorted(modules()) if _in(n, "tacos.importers")])
def test_importers_never_import_exporters(name):
    assert not where(name, "tacos.exporters")


@pytest.mark.parametrize("name", [n for n in sorted(modules()) if _in(n, "tacos.formats")])
def test_formats_import_neither_readers_nor_writers(name):
    assert not where(name, "tacos.importers") + where(name, "tacos.exporters")


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_uses_another_modules_private_names(name):
    """``from m import _x`` and ``m._x`` only inside ``m``'s own package (a private submodule
    such as ``tacos.synthesizer._kernels`` is its package's business)."""
    package = modules()[name].package
    private = [
        f"{use.target}.{use.name} (line {use.line})"
        for use in uses(name)
        if use.name
        and use.name.startswith("_")
        and not use.name.startswith("__")
        and _in(use.target, "tacos")
        and not (use.target == package and f"{use.target}.{use.name}" in modules())
    ]
    assert not private, f"{name} uses private names of other modules: {private}"
