"""Every module of the installed packages, found from pyproject.toml's package-dir map.

The layering and docstring-example tests walk the source folders (``tacos/``,
``formats/``, ``importers/``, ``exporters/``, ``proto/``) under the names the
modules are installed as.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from paths import REPO_DIR

GENERATED = {"tacos.proto.et_def_pb2"}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


@cache
def modules() -> dict[str, Module]:
    """Every module of the installed packages, by dotted name (pyproject's package-dir map)."""
    config = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {}
    for package in config["packages"]:
        folder = REPO_DIR / config["package-dir"].get(package, package.replace(".", "/"))
        if package not in config["package-dir"]:
            parent, _, leaf = package.rpartition(".")
            folder = REPO_DIR / config["package-dir"].get(parent, parent) / leaf
        for path in sorted(folder.glob("*.py")):
            is_package = path.name == "__init__.py"
            name = package if is_package else f"{package}.{path.stem}"
            if name not in GENERATED:
                found[name] = Module(name, path, is_package)
    return found
