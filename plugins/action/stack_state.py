"""The action of ``stack_state``: the module's answers, stamped with the play they belong to
(plugin_utils/state_cache.py)."""

from __future__ import annotations

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.state_cache import (
    StackStateAction as ActionModule,
)

__all__ = ["ActionModule"]
