"""Documentation of the facts modules (``ascend_serve.fleet.facts``): all that a facts module's
documentation shares, so that it lists this one fragment (and ``common.install_path`` where it
takes that option).

A facts module reads the host and sets ``ansible_facts``: the documentation of every module
(``ascend_serve.fleet.common``), of one that only reads (``common.read_only``) and the
``facts`` attribute with its note, merged here as ansible-doc merges fragments.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from ansible_collections.ascend_serve.fleet.plugins.doc_fragments.common import (
    ModuleDocFragment as Common,
)

FACTS = r"""
attributes:
  facts:
    description: Returns an C(ansible_facts) dictionary that updates the host's facts.
    support: full
notes:
  - The facts are set on the host for the rest of the play; no C(register) is needed.
"""


def _merge(target: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """``source`` into ``target``: mappings merged key by key, lists (notes) extended."""
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif isinstance(value, list) and isinstance(target.get(key), list):
            target[key] = target[key] + value
        else:
            target[key] = value
    return target


def merged(*fragments: str) -> str:
    """One fragment (as YAML text: JSON) of the YAML texts of several, in order."""
    doc: dict[str, Any] = {}
    for text in fragments:
        _merge(doc, yaml.safe_load(text))
    return json.dumps(doc)


class ModuleDocFragment:
    DOCUMENTATION = merged(Common.DOCUMENTATION, Common.READ_ONLY, FACTS)
