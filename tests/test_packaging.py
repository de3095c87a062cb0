"""The package list in pyproject.toml names every package, so a plain install has them all.

Editable installs (``pip install -e``) find packages that the list forgets; ``pip install .``,
which CI and users run, does not.
"""

from __future__ import annotations

import tomllib

from paths import REPO_DIR


def test_every_package_folder_is_installed():
    config = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {name: REPO_DIR / path for name, path in config["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder).parts
            found.add(".".join((name, *relative)))
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
