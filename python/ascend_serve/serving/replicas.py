"""Which replica an inventory host is behind the router: one home for the rule that the router
role's filter (``plugins/filter/router.py``) and ``fleet scale``'s standby list both follow.

A host's ports are its ``router_worker_ports`` (one per ``vllm serve`` rank), else the port of
its ``vllm_service_profile`` (with its ``vllm_service_overrides`` and extra profile files), else
none; its address is ``router_worker_address``, else ``ansible_host``, else its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ascend_serve.serving import profiles
from ascend_serve.serving.router import RouterPlanError, WorkerHost

Getter = Callable[[str], Any]


def worker_ports(name: str, get: Getter) -> list[int]:
    """The ports a host serves the router on (empty: it serves nothing)."""
    given = get("router_worker_ports")
    if given:
        try:
            return [int(p) for p in given]
        except (TypeError, ValueError) as exc:
            raise RouterPlanError(f"host {name}: router_worker_ports {given!r} is not a list of "
                                  "port numbers") from exc
    profile = get("vllm_service_profile") or ""
    if not profile:
        return []
    try:
        resolved = profiles.resolve(str(profile), get("vllm_service_overrides") or {},
                                    profiles.with_extra_files(
                                        get("vllm_service_profile_files") or []))
    except profiles.ProfileError as exc:
        raise RouterPlanError(f"host {name}: {exc}") from exc
    return [int(resolved.port)]


def worker_host(name: str, get: Getter) -> WorkerHost:
    """The host as the router reaches it: its address and ports (see the module's rule)."""
    address = get("router_worker_address") or get("ansible_host") or name
    return WorkerHost(name, str(address), tuple(worker_ports(name, get)))
