"""``ascend-serve fleet status``: what every host of an inventory has, from the roles' own records.

The collection's ``fleet_status`` playbook (read-only) is run through
:mod:`ascend_serve.fleet.deploy`, whose
runner events give per host the roles' local facts (the version set
and versions the driver, CANN and python_env roles installed, whether a reboot is pending, the
serving profile) and the ``systemctl show`` of the vLLM unit. :func:`host_state` turns them into
a :class:`HostState`; :func:`fleet_problems` adds what only the whole fleet shows (hosts on
different version sets). Problems make ``fleet status`` exit 1: a host unreachable or not read,
a configured vLLM unit that is not active, a model marked incomplete, a host an unfinished
the ``upgrade`` playbook left drained (the rollout role's phase), a fleet of mixed sets.
A pending reboot is reported, not a problem (the driver's policy may leave it to the operator).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ascend_serve.fleet.deploy import DeployResult, run
from ascend_serve.fleet.request import DeployRequest

FACTS_TASK = "Read the roles' local facts"
UNIT_TASK = "Read the state of the vLLM unit"


@dataclass
class HostState:
    host: str
    reachable: bool = True
    error: str | None = None
    stack_set: str | None = None
    driver: str | None = None
    firmware: str | None = None
    cann: str | None = None
    env_set: str | None = None
    env_packages: dict[str, str] = field(default_factory=dict)
    reboot_pending: bool | None = None
    profile: str | None = None
    role: str | None = None
    url: str | None = None
    runtime: str | None = None  # venv, or container (vllm_service_runtime)
    image: str | None = None  # the image a container runtime serves
    unit: str | None = None
    unit_state: str | None = None  # ActiveState/SubState, e.g. active/running
    restarts: int | None = None
    models_incomplete: list[str] = field(default_factory=list)
    rollout_phase: str | None = None  # upgrade.yml: draining, upgrading, done
    rollout_set: str | None = None
    rollout_image: str | None = None  # the image an unfinished upgrade rolls out
    fault_class: str | None = None  # the worst chip fault class (ledger ascend_faults)
    fault_blocking: list[str] = field(default_factory=list)  # npu/chip/code refused for
    problems: list[str] = field(default_factory=list)

    @property
    def serving(self) -> bool:
        return bool(self.profile) and (self.unit_state or "").startswith("active/")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "serving": self.serving}


def _fact(local: dict[str, Any], name: str) -> dict[str, Any]:
    value = local.get(name)
    return value if isinstance(value, dict) else {}


def _show(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def host_state(host: str, local: dict[str, Any], unit: dict[str, Any] | None) -> HostState:
    """One host's state from its ``ansible_local`` and the unit task's result."""
    driver, cann, env = (_fact(local, n) for n in
                         ("ascend_npu_driver", "ascend_cann", "ascend_python_env"))
    service, models = _fact(local, "ascend_vllm_service"), _fact(local, "ascend_model_store")
    rollout = _fact(local, "ascend_rollout")
    faults = _fact(local, "ascend_faults")
    state = HostState(
        host=host,
        stack_set=driver.get("stack_set") or cann.get("stack_set"),
        driver=driver.get("driver_version"), firmware=driver.get("firmware_version"),
        cann=cann.get("version"), env_set=env.get("stack_set"),
        env_packages=dict(env.get("packages") or {}),
        reboot_pending=driver.get("reboot_pending"),
        profile=service.get("profile"), role=service.get("role"), url=service.get("url"),
        runtime=service.get("runtime"), image=service.get("image") or None,
        unit=service.get("unit"),
        models_incomplete=sorted(name for name, m in models.items()
                                 if isinstance(m, dict) and not m.get("complete", False)),
        rollout_phase=rollout.get("phase"),
        rollout_set=rollout.get("set") or rollout.get("to_set"),
        rollout_image=rollout.get("to_image") or None,
        fault_class=faults.get("worst") or None,
        fault_blocking=[str(c) for c in faults.get("blocking") or []],
    )
    if not local:
        state.problems.append("no ascend-serve facts: site.yml has not run on this host")
    if cann and driver and cann.get("stack_set") != driver.get("stack_set"):
        state.problems.append(f"driver installed for set {driver.get('stack_set')}, CANN for "
                              f"{cann.get('stack_set')}")
    if state.rollout_phase in ("draining", "upgrading"):
        target = str(state.rollout_set) + (f", image {state.rollout_image}"
                                           if state.rollout_image else "")
        state.problems.append(f"left {state.rollout_phase} by an unfinished upgrade to "
                              f"{target} (out of the load balancer): re-run "
                              "ascend_serve.fleet.upgrade")
    if state.fault_blocking:
        state.problems.append(f"refused for chip fault(s) {', '.join(state.fault_blocking)} "
                              f"(worst class {state.fault_class}): ascend-serve doctor explain "
                              "on npu-smi info -t health shows the fix")
    if state.models_incomplete:
        state.problems.append("model(s) not completely staged: "
                              + ", ".join(state.models_incomplete))
    if unit is not None and unit.get("rc") == 0:
        show = _show(str(unit.get("stdout", "")))
        if show.get("LoadState") == "loaded":
            state.unit_state = f"{show.get('ActiveState')}/{show.get('SubState')}"
            state.restarts = int(show["NRestarts"]) if show.get("NRestarts", "").isdigit() else None
        else:
            state.unit_state = show.get("LoadState", "unknown")
    elif unit is not None:
        state.unit_state = "unknown"
    if state.profile and not state.serving:
        state.problems.append(f"profile {state.profile} is configured but unit "
                              f"{state.unit or 'ascend-vllm'} is {state.unit_state or 'unknown'}")
    return state


def fleet_problems(states: list[HostState]) -> list[str]:
    """What is wrong with the fleet as a whole."""
    out = []
    for what, attr in (("accelerator version set", "stack_set"),
                       ("serving environment set", "env_set"), ("serving image", "image")):
        groups: dict[str, list[str]] = {}
        for s in states:
            value = getattr(s, attr)
            if s.reachable and value:
                groups.setdefault(value, []).append(s.host)
        if len(groups) > 1:
            parts = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(groups.items()))
            out.append(f"the fleet is on more than one {what} ({parts})")
    return out


def states_from_events(events: list[dict[str, Any]]) -> list[HostState]:
    """Per host: the facts task's ansible_local and the unit task's result, or why not."""
    local: dict[str, dict[str, Any]] = {}
    unit: dict[str, dict[str, Any]] = {}
    broken: dict[str, tuple[bool, str]] = {}
    for event in events:
        data = event.get("event_data") or {}
        host, task = data.get("host"), data.get("task")
        if not host:
            continue
        res = data.get("res") or {}
        kind = event.get("event")
        if kind == "runner_on_ok" and task == FACTS_TASK:
            local[host] = dict((res.get("ansible_facts") or {}).get("ansible_local") or {})
        elif kind == "runner_on_ok" and task == UNIT_TASK:
            unit[host] = res
        elif kind == "runner_on_unreachable":
            broken[host] = (False, str(res.get("msg") or "unreachable"))
        elif kind == "runner_on_failed":
            broken[host] = (True, f"{task}: {res.get('msg') or 'failed'}")
    states = []
    for host in sorted(set(local) | set(unit) | set(broken)):
        if host in broken and host not in local:
            reachable, error = broken[host]
            states.append(HostState(host=host, reachable=reachable, error=error,
                                    problems=[error if reachable else f"unreachable: {error}"]))
        else:
            states.append(host_state(host, local.get(host, {}), unit.get(host)))
    return states


def collect(request: DeployRequest, run_dir: Path) -> tuple[DeployResult, list[HostState]]:
    """Run the read-only status playbook and read each host's state from its events."""
    events: list[dict[str, Any]] = []
    result = run(request, run_dir, on_event=events.append)
    return result, states_from_events(events)
