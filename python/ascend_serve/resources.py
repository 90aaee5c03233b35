"""Where the package's data lives: the ``ascend_serve.fleet`` Ansible collection.

The version matrix, the sets' locks, the serving profiles, the rank-table schemas and the vLLM
launcher template are the collection's own files (its roles read them there), and the node-side
readers are its ``module_utils``. The package finds the collection as Python finds it, under the
name ``ansible_collections.ascend_serve.fleet``:

- in a checkout the repository root is the collection; ``scripts/bootstrap.sh`` links it as
  ``.cache/collections/ansible_collections/ascend_serve/fleet`` and puts ``.cache/collections`` on
  the project venv's ``sys.path`` (a ``.pth`` file), which is also the checkout's collections path
  in ``ansible.cfg``;
- an installed wheel carries a copy of the collection, made when the wheel is built
  (``setup.py``), as ``ansible_collections/ascend_serve/fleet`` beside the package in
  ``site-packages``, where Ansible finds it too (it scans ``sys.path``).

So ``ascend-serve deploy`` can hand the same directory to Ansible as a collections path.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

COLLECTION = "ascend_serve.fleet"
COLLECTION_MODULE = "ansible_collections.ascend_serve.fleet"


class CollectionMissingError(RuntimeError):
    """The ``ascend_serve.fleet`` collection is not importable from this environment."""


def collection_dir() -> Path:
    """The root of the ``ascend_serve.fleet`` collection (as found, links not resolved)."""
    spec = importlib.util.find_spec(COLLECTION_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location)
        if (path / "galaxy.yml").is_file() or (path / "MANIFEST.json").is_file():
            return path
    raise CollectionMissingError(
        f"the {COLLECTION} collection is not on this Python's path: in a checkout, run "
        "scripts/bootstrap.sh (it links the repository as .cache/collections/ansible_collections/"
        "ascend_serve/fleet); otherwise reinstall the ascend-serve wheel, which carries it")


def collections_path() -> Path:
    """The directory holding ``ansible_collections/ascend_serve/fleet``: a collections path."""
    return collection_dir().parents[2]


def data_path(*parts: str) -> Path:
    """A file or directory under the collection's ``data/`` (matrix, profiles, locks, schemas)."""
    return collection_dir().joinpath("data", *parts)


def template_path(*parts: str) -> Path:
    """A file under the collection's ``templates/``: templates several consumers render."""
    return collection_dir().joinpath("templates", *parts)


def role_path(role: str, *parts: str) -> Path:
    """A file or directory of one of the collection's roles."""
    return collection_dir().joinpath("roles", role, *parts)
