"""Documentation of the facts modules (``ascend_serve.fleet.facts``).

A facts module reads the host and sets ``ansible_facts``; it extends
``ascend_serve.fleet.common`` and ``ascend_serve.fleet.common.read_only`` too.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  facts:
    description: Returns an C(ansible_facts) dictionary that updates the host's facts.
    support: full
notes:
  - The facts are set on the host for the rest of the play; no C(register) is needed.
"""
