"""Router filter: the vllm-router service of a router host, from the inventory's groups.

The logic lives in ``ascend_serve.serving.router`` (``service_plan``) on the controller, so the
``router`` role and the rollout's drain and resume render the same worker list::

    plan: "{{ inventory_hostname | ascend_serve.fleet.router_service_plan(
                mode=router_mode, executable=..., settings={...},
                hosts=groups[router_worker_group] | map('extract', hostvars) | list,
                drained=[...]) }}"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    needs_package,
    plain,
)

# The RouterSettings fields a role may set; the rest keep vllm-router's defaults.
SETTINGS = ("host", "port", "policy", "prometheus_host", "prometheus_port", "retry_max_retries",
            "cb_failure_threshold", "cb_success_threshold", "cb_timeout_duration_secs",
            "health_check_interval_secs", "health_failure_threshold", "request_timeout_secs")


def _get(hostvars: Any, key: str, default: Any = None) -> Any:
    """One variable of a host (``hostvars[name]`` is templated lazily, key by key)."""
    return plain(hostvars[key]) if key in hostvars else default


def _hosts(entries: Any, what: str) -> list[Any]:
    """Worker hosts from ``groups[G] | map('extract', hostvars)``; in ``hosts`` (replicas), a
    host with neither a serving profile nor ``router_worker_ports`` serves nothing: left out."""
    with needs_package("router_service_plan"):
        from ascend_serve.serving import replicas
        from ascend_serve.serving import router as router_mod
    hosts = []
    for hostvars in entries or []:
        if not isinstance(hostvars, Mapping):
            raise AnsibleFilterError(f"router_service_plan: {what}: expected hostvars of each "
                                     f"host (map('extract', hostvars)), got {hostvars!r}")
        name = str(_get(hostvars, "inventory_hostname"))
        try:
            host = replicas.worker_host(name, lambda key, hv=hostvars: _get(hv, key))
        except router_mod.RouterPlanError as exc:
            raise AnsibleFilterError(f"router_service_plan: {exc}") from exc
        if what == "hosts" and not host.ports:
            continue
        hosts.append(host)
    return hosts


def router_service_plan(router: Any, mode: Any = "regular", executable: Any = "vllm-router",
                        settings: Any = None, hosts: Any = None, prefill: Any = None,
                        decode: Any = None, drained: Any = None, groups: Any = None,
                        api_key_ref: Any = None) -> dict[str, Any]:
    """Router host name + its settings and worker hosts -> the unit's argv and worker list."""
    with needs_package("router_service_plan"):
        from ascend_serve.serving import router as router_mod
    given = plain(settings or {})
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise AnsibleFilterError(f"router_service_plan: unknown settings {unknown}; known: "
                                 f"{', '.join(SETTINGS)}")
    try:
        parsed = router_mod.RouterSettings(**{
            key: (None if value in (None, "") else
                  (str(value) if key in ("host", "policy", "prometheus_host") else int(value)))
            for key, value in given.items()})
        plan = router_mod.service_plan(
            str(router), str(mode), str(executable), parsed,
            hosts=_hosts(hosts, "hosts"), prefill=_hosts(prefill, "prefill"),
            decode=_hosts(decode, "decode"), drained=[str(d) for d in plain(drained or [])],
            groups={str(k): str(v) for k, v in plain(groups or {}).items()},
            api_key_ref=str(api_key_ref) if api_key_ref else None)
    except (router_mod.RouterPlanError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {"argv": plan.argv, "worker_args": plan.worker_args, "workers": plan.workers,
            "active": plan.active, "drained": plan.drained,
            "unknown_drained": plan.unknown_drained, "workers_env": plan.workers_env}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(router_service_plan)
