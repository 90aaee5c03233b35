"""The action of ``host_tuning_state``: the answer of the play's one state read (``stack_state``)
when it read with the same arguments, else the module on the host
(plugin_utils/state_cache.py)."""

from __future__ import annotations

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.state_cache import (
    StateReadAction as ActionModule,
)

__all__ = ["ActionModule"]
