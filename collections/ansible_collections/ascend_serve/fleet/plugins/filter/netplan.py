"""NPU device network filters: ``device_ip_plan``, ``hccn_conf`` and ``ranktable``.

The logic lives in the ``ascend_serve`` Python package (``ascend_serve.netplan`` and
``ascend_serve.ranktable``), installed on the controller next to Ansible, so the roles and the
``ascend-serve ranktable`` command cannot disagree::

    npu_plan: "{{ npu_network | ascend_serve.fleet.device_ip_plan }}"
    content: "{{ npu_plan.hosts[inventory_hostname] | ascend_serve.fleet.hccn_conf }}"
    content: "{{ npu_plan | ascend_serve.fleet.ranktable(server_ips) | to_nice_json }}"
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ansible.errors import AnsibleFilterError


def _plain(value: Any) -> Any:
    """Plain dicts/lists/strings: Ansible hands filters lazily templated containers."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def _package(module: str, filter_name: str) -> ModuleType:
    try:
        return importlib.import_module(f"ascend_serve.{module}")
    except ImportError as exc:  # pragma: no cover - depends on the controller's environment
        raise AnsibleFilterError(
            f"{filter_name} needs the ascend_serve package on the controller "
            f"(pip install -e . in the project): {exc}"
        ) from exc


def device_ip_plan(fleet: Any) -> dict[str, Any]:
    """Fleet description -> {hosts: {name: {name, chip, index, tls, devices: [...]}}}."""
    netplan = _package("netplan", "device_ip_plan")
    try:
        result: dict[str, Any] = netplan.plan(_plain(fleet)).model_dump()
    except netplan.NetPlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return result


def hccn_conf(host_plan: Any) -> str:
    """One host's plan -> the text of its /etc/hccn.conf."""
    netplan = _package("netplan", "hccn_conf")
    try:
        text: str = netplan.hccn_conf(_plain(host_plan))
    except netplan.NetPlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return text


def ranktable(plan: Any, servers: Any) -> dict[str, Any]:
    """Plan + {host name: host IP or {server_ip, container_ip, super_pod_id, ...}} -> hccl.json."""
    netplan = _package("netplan", "ranktable")
    tables = _package("ranktable", "ranktable")
    try:
        table: dict[str, Any] = tables.build(_plain(plan), _plain(servers))
    except (netplan.NetPlanError, tables.RankTableError) as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return table


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"device_ip_plan": device_ip_plan, "hccn_conf": hccn_conf, "ranktable": ranktable}
