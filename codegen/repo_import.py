"""Import `xla_native_functions` from a given checkout, whichever copy is installed.

The package is assembled from four folders of the repository (pyproject.toml's
package-dir); an editable install maps them to the checkout it was made from. The
tests (tests/conftest.py), the OpInfo worker processes and the behaviour snapshot
(codegen/snapshot.py) import the package of the checkout they belong to, so a copy of
the repository (CONTRIBUTING.md's example runs in one) tests itself. Standard library
only: the generator's warm path imports nothing heavier."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

PACKAGE = "xla_native_functions"


def package_folders(root: Path) -> dict[str, Path]:
    """Module name -> folder, as pyproject.toml's package-dir maps them."""
    return {
        PACKAGE: root / "generated" / PACKAGE,
        f"{PACKAGE}.runtime": root / "runtime",
        f"{PACKAGE}.lowerings": root / "lowerings",
        f"{PACKAGE}.shape_fns": root / "shape_fns",
    }


class RepoFinder(importlib.abc.MetaPathFinder):
    """Finds the package's four top folders in one checkout; their submodules are
    found through their packages' paths as usual."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.folders = package_folders(self.root)

    def find_spec(self, fullname, path=None, target=None):
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])


def use_repo(root: Path) -> None:
    """Import the package from `root` from now on. Raises if another copy is imported
    already (a process cannot hold two)."""
    root = Path(root).resolve()
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None:
        where = Path(getattr(loaded, "__file__", "") or "").resolve()
        if where != package_folders(root)[PACKAGE] / "__init__.py":
            raise RuntimeError(f"{PACKAGE} is imported from {where} already, not from {root}")
        return
    if not any(isinstance(f, RepoFinder) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, RepoFinder(root))
