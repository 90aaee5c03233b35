"""Where the package's data lives: the ``ascend_serve.fleet`` Ansible collection it ships.

The version matrix, the sets' locks, the serving profiles, the rank-table schemas and the vLLM
launcher template are the collection's own files (its roles read them there). The package carries
the whole collection as package data (``_collections/``, a link in a checkout, copied into the
wheel), so the CLI finds them through :mod:`importlib.resources` wherever it is installed, and
``ascend-serve deploy`` can hand the same directory to Ansible as a collections path.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

COLLECTION = "ascend_serve.fleet"


def collections_path() -> Path:
    """The directory holding ``ansible_collections/ascend_serve/fleet``: a collections path."""
    root = files("ascend_serve") / "_collections"
    if not isinstance(root, Path):  # pragma: no cover - a zipped install; wheels install unpacked
        raise RuntimeError(f"ascend_serve's data must be on a filesystem, not in {root}")
    return root


def collection_dir() -> Path:
    """The root of the ``ascend_serve.fleet`` collection."""
    return collections_path() / "ansible_collections" / "ascend_serve" / "fleet"


def data_path(*parts: str) -> Path:
    """A file or directory under the collection's ``data/`` (matrix, profiles, locks, schemas)."""
    return collection_dir().joinpath("data", *parts)


def role_path(role: str, *parts: str) -> Path:
    """A file or directory of one of the collection's roles."""
    return collection_dir().joinpath("roles", role, *parts)
