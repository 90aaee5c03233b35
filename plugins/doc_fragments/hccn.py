"""Options of the modules that run ``hccn_tool`` (``ascend_serve.fleet.hccn``).

They match ``COMMON_ARGS`` of ``plugins/module_utils/hccn.py``.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  tool:
    description: Path of hccn_tool.
    type: path
    default: /usr/local/Ascend/driver/tools/hccn_tool
  workers:
    description: How many C(hccn_tool) calls (getters, pings) run at the same time.
    type: int
    default: 8
"""
