"""NPU device network filters: the device IP plan, hccn.conf, ping pairs and report, rank table.

The logic lives in the ``ascend_serve`` Python package (``ascend_serve.network.netplan``,
``ascend_serve.network.netcheck`` and ``ascend_serve.network.ranktable``), installed on the
controller next to Ansible, so the roles and the ``ascend-serve ranktable`` command cannot
disagree::

    npu_plan: "{{ npu_network | ascend_serve.fleet.device_ip_plan }}"
    content: "{{ npu_plan.hosts[inventory_hostname] | ascend_serve.fleet.hccn_conf }}"
    pairs: "{{ npu_plan | ascend_serve.fleet.device_ping_pairs(inventory_hostname, 'rail') }}"
    matrix: "{{ npu_plan | ascend_serve.fleet.device_ping_report(results_by_host, 'rail', 3) }}"
    text: "{{ matrix | ascend_serve.fleet.device_ping_text }}"
    failures: "{{ matrix | ascend_serve.fleet.device_ping_failures }}"
    content: "{{ npu_plan | ascend_serve.fleet.ranktable(server_ips) | to_nice_json }}"
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    needs_package,
    plain,
)


def device_ip_plan(fleet: Any) -> dict[str, Any]:
    """Fleet description -> {hosts: {name: {name, chip, index, tls, devices: [...]}}}."""
    with needs_package("device_ip_plan"):
        from ascend_serve.network import netplan
    try:
        result: dict[str, Any] = netplan.plan(plain(fleet)).model_dump()
    except netplan.NetPlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return result


def hccn_conf(host_plan: Any) -> str:
    """One host's plan -> the text of its /etc/hccn.conf."""
    with needs_package("hccn_conf"):
        from ascend_serve.network import netplan
    try:
        text: str = netplan.hccn_conf(plain(host_plan))
    except netplan.NetPlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return text


def ranktable(plan: Any, servers: Any) -> dict[str, Any]:
    """Plan + {host name: host IP or {server_ip, container_ip, super_pod_id, ...}} -> hccl.json."""
    with needs_package("ranktable"):
        from ascend_serve.network import netplan
        from ascend_serve.network import ranktable as tables
    try:
        table: dict[str, Any] = tables.build(plain(plan), plain(servers))
    except (netplan.NetPlanError, tables.RankTableError) as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return table


def device_ping_pairs(
    plan: Any, host: str, plane: str = "rail", peers: Any = None
) -> list[dict[str, Any]]:
    """The pings one host sends: [{device, address, peer_host, peer_device}, ...]."""
    with needs_package("device_ping_pairs"):
        from ascend_serve.network import netcheck, netplan
    try:
        found = netcheck.pairs(plain(plan), str(host), str(plane),
                               None if peers is None else plain(peers))
    except netplan.NetPlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return [p.model_dump() for p in found]


def device_ping_report(
    plan: Any, results: Any, plane: str = "rail", count: int = 3
) -> dict[str, Any]:
    """Plan + {host: [ping result, ...]} -> the fleet's ping matrix."""
    with needs_package("device_ping_report"):
        from ascend_serve.network import netcheck, netplan
    try:
        matrix: dict[str, Any] = netcheck.report(plain(plan), plain(results), str(plane),
                                                 int(count))
    except netplan.NetPlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return matrix


def device_ping_text(matrix: Any) -> str:
    """The ping matrix as a table."""
    with needs_package("device_ping_text"):
        from ascend_serve.network import netcheck
    text: str = netcheck.render(plain(matrix))
    return text


def device_ping_failures(matrix: Any, host: Any = None) -> list[str]:
    """One line per failed pair (of pings sent by ``host``, if given), naming device and peer."""
    with needs_package("device_ping_failures"):
        from ascend_serve.network import netcheck
    return [
        netcheck.describe_failure(e) for e in plain(matrix)["entries"]
        if not e["ok"] and (host is None or e["host"] == str(host))
    ]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(device_ip_plan, hccn_conf, device_ping_pairs, device_ping_report,
                               device_ping_text, device_ping_failures, ranktable)
