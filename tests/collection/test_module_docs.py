"""Every module of the collection documents itself the way ansible-doc reads it."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

MODULES_DIR = (Path(__file__).resolve().parents[2]
               / "collections/ansible_collections/ascend_serve/fleet/plugins/modules")
PACKAGE = "ansible_collections.ascend_serve.fleet.plugins.modules"
NAMES = sorted(p.stem for p in MODULES_DIR.glob("*.py") if p.stem != "__init__")


def _descriptions(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every description entry that is not text (a stray ': ' makes YAML read a mapping)."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description":
                items = value if isinstance(value, list) else [value]
                found += [(path, i) for i in items if not isinstance(i, str)]
            elif key not in ("sample", "default"):
                found += _descriptions(value, f"{path}.{key}")
    elif isinstance(node, list):
        for item in node:
            found += _descriptions(item, path)
    return found


@pytest.mark.parametrize("name", NAMES)
def test_documentation_parses_and_every_description_is_text(name: str) -> None:
    module = importlib.import_module(f"{PACKAGE}.{name}")
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == name
    assert isinstance(doc["short_description"], str)
    yaml.safe_load(module.EXAMPLES)
    returned = yaml.safe_load(module.RETURN) or {}
    assert _descriptions(doc, "DOCUMENTATION") == []
    assert _descriptions(returned, "RETURN") == []
