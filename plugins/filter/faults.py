"""Fault filters: whether a chip fault keeps its host out of service, and what to tell the operator.

``fault_blocks`` is :func:`fault_codes.blocks` of the collection's ``module_utils`` (the one home
of the classes, their order and the policy window); ``fault_refusals`` words each blocking fault
of a host's ``ascend_npu_faults`` fact with the class's action from ``data/faults/rules.yml``,
read by the ``ascend_serve`` package's classifier on the controller::

    blocked: "{{ 'SeparateNPU' | ascend_serve.fleet.fault_blocks(cleared_at, 3600) }}"
    refusals: "{{ ascend_npu_faults.faults | ascend_serve.fleet.fault_refusals(3600) }}"
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend_serve.fleet.plugins.module_utils import fault_codes
from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    needs_package,
    plain,
)


def _window(window: Any, name: str) -> int:
    try:
        seconds = int(window)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"{name}: the window must be seconds, got {window!r}") from exc
    if seconds < 0:
        raise AnsibleFilterError(f"{name}: the window must be 0 seconds or more, got {seconds}")
    return seconds


def fault_blocks(fault_class: Any, cleared_at: Any = "", window: Any = 0,
                 now: Any = None) -> bool:
    """Whether a fault of this class, cleared at ``cleared_at`` (empty: still present), keeps
    its host out of service ``window`` seconds after it cleared."""
    seconds = _window(window, "fault_blocks")
    try:
        return fault_codes.blocks(None if fault_class is None else str(fault_class),
                                  str(cleared_at or ""), seconds,
                                  str(now) if now else fault_codes.utc_now())
    except fault_codes.FaultCodeError as exc:
        raise AnsibleFilterError(f"fault_blocks: {exc}") from exc


def fault_refusals(faults: Any, window: Any = 0, now: Any = None) -> list[dict[str, Any]]:
    """The faults of a lifetime record (``ascend_npu_faults.faults``) that keep the host out of
    service, each with ``message`` (code, class, chip, since when, and the fix), worst first."""
    with needs_package("fault_refusals"):
        from ascend_serve.doctor.faults import classifier
    seconds = _window(window, "fault_refusals")
    record = plain(faults) or {}
    if not isinstance(record, dict):
        raise AnsibleFilterError(f"fault_refusals: expected the faults record, got {record!r}")
    table = classifier().classes
    try:
        found = fault_codes.blocking_faults(record, seconds, str(now) if now else
                                            fault_codes.utc_now())
    except fault_codes.FaultCodeError as exc:
        raise AnsibleFilterError(f"fault_refusals: {exc}") from exc
    out = []
    for fault in sorted(found, key=lambda f: (fault_codes.rank(f.get("class")),
                                              f.get("npu", 0), f.get("chip", 0))):
        name = str(fault.get("class"))
        since = (f"present since {fault.get('first_seen')}" if fault.get("state") == "present"
                 else f"cleared at {fault.get('cleared_at')}, blocking for {seconds} s after")
        fix = table[name].does if name in table else "see docs/faults.md"
        out.append({**fault, "message": (
            f"chip {fault.get('npu')}/{fault.get('chip')}: fault code {fault.get('code')}, "
            f"class {name} ({since}); fix: {fix}")})
    return out


def fault_restart_plan(faults: Any, previous: Any = None, limit: Any = 3,
                       window: Any = 3600, now: Any = None) -> dict[str, Any]:
    """:func:`fault_codes.restart_plan`: whether a RestartBusiness fault restarts the unit now."""
    seconds = _window(window, "fault_restart_plan")
    try:
        return fault_codes.restart_plan(plain(faults) or {}, plain(previous) or {}, int(limit),
                                        seconds, str(now) if now else fault_codes.utc_now())
    except (fault_codes.FaultCodeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"fault_restart_plan: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(fault_blocks, fault_refusals, fault_restart_plan)
