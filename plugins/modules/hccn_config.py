#!/usr/bin/python
"""Configure NPU device NICs (address, netmask, netdetect, gateway, TLS) with hccn_tool."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hccn_config
short_description: Configure the device NICs of Huawei Ascend NPUs with hccn_tool
description:
  - Reads every listed device's NIC settings with the C(hccn_tool) getters (C(-ip -g),
    C(-netdetect -g), C(-gateway -g), C(-tls -g)), concurrently, and runs only the setters whose
    values differ, per device in this order C(-ip -s address A netmask M),
    C(-netdetect -s address D), C(-gateway -s gateway G), C(-tls -s enable 0|1).
  - Setters run one at a time, since C(hccn_tool) persists what it sets in C(/etc/hccn.conf).
  - After setting, every changed device is read back; a value that does not read back as set
    fails the task, naming the device and the field.
  - An answer of C(hccn_tool) that cannot be parsed counts as unknown, never as the wanted value,
    so the setting is applied and then verified.
version_added: 0.1.0
options:
  devices:
    description: The settings of each device NIC. Each device may appear once.
    type: list
    elements: dict
    required: true
    suboptions:
      device:
        description: Device (chip) id, as C(hccn_tool -i) takes it (A2 0-7, A3 0-15).
        type: int
        required: true
      address:
        description: The device NIC's IP address.
        type: str
        required: true
      netmask:
        description: Dotted netmask of O(devices[].address).
        type: str
        required: true
      gateway:
        description: Default gateway of the device NIC. Not managed when omitted.
        type: str
      netdetect:
        description:
          - Address the device probes to judge its network health (C(-net_health -g)). Not
            managed when omitted.
        type: str
      tls:
        description: Whether the device NIC uses TLS (C(-tls -s enable 1)).
        type: bool
        default: false
  conf_path:
    description:
      - A file whose state is returned as RV(conf), read after the setters ran (C(hccn_tool)
        rewrites the vendor's C(/etc/hccn.conf) when it sets a value), so that the caller
        rewrites its own copy of the file only where it differs. Nothing is read without it.
    type: path
    version_added: 0.4.0
attributes:
  check_mode:
    support: full
    details: Without C(hccn_tool) (the driver is not installed yet) every device is reported as
      one that would be configured; otherwise a missing tool fails the task.
  diff_mode:
    support: full
    details: The diff is written in the C(/etc/hccn.conf) style, C(address_0=...).
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.hccn
"""

EXAMPLES = r"""
- name: Address the 8 device NICs of an A2 node in one subnet
  ascend_serve.fleet.hccn_config:
    devices:
      - device: 0
        address: 192.168.100.101
        netmask: 255.255.255.0
        netdetect: 192.168.100.1
      - device: 1
        address: 192.168.100.102
        netmask: 255.255.255.0
        netdetect: 192.168.100.1
        tls: false
  diff: true
"""

RETURN = r"""
devices:
  description:
    - One entry per device, sorted by device id.
    - When a setter fails, only the devices whose settings were (at least partly) applied, with
      the fields actually set.
  returned: always
  type: list
  elements: dict
  contains:
    device:
      description: Device id.
      type: int
    changes:
      description: Fields that changed (would change in check mode).
      type: list
      elements: str
      sample: [netmask]
    before:
      description: Settings read before (None where not configured or unreadable).
      type: dict
      sample: {address: 192.168.100.101, netmask: 255.255.0.0, netdetect: null, gateway: null,
               tls: false}
    after:
      description: Settings after (read back), or those that would be set in check mode.
      type: dict
      sample: {address: 192.168.100.101, netmask: 255.255.255.0, netdetect: null, gateway: null,
               tls: false}
diff:
  description: Settings before and after, one C(key_device=value) line each.
  returned: when diff mode is on
  type: dict
  sample: {before: "address_0=192.168.100.101\nnetmask_0=255.255.0.0\ntls_enable_0=0\n",
           after: "address_0=192.168.100.101\nnetmask_0=255.255.255.0\ntls_enable_0=0\n"}
conf:
  description:
    - State of O(conf_path) after the run; null when it does not exist.
    - Its C(sha1), C(mode) (such as C(0644)), C(owner), C(group), C(isdir) and C(islnk).
  returned: when O(conf_path) is given
  type: dict
  sample: {sha1: 0b2e81d5bbd2e8a1b8c0a6e1fa1e7c4b58a5e2f7, mode: "0644", owner: root,
           group: root, isdir: false, islnk: false}
msg:
  description: Why the devices were not read (check mode without hccn_tool).
  returned: when hccn_tool is missing in check mode
  type: str
"""

from typing import TYPE_CHECKING, Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn import (
    COMMON_ARGS,
    HccnError,
    check_address,
    check_device,
    check_netmask,
    command,
    command_text,
    common_options,
    missing_tool_message,
    module_runner,
    read_states,
    run_tool,
    tool_usable,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main

if TYPE_CHECKING:
    from ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn import Runner

#: Managed fields, in setter order.
FIELDS = ("address", "netmask", "netdetect", "gateway", "tls")
#: The /etc/hccn.conf key of each field.
CONF_KEYS = {"address": "address", "netmask": "netmask", "netdetect": "netdetect",
             "gateway": "gateway", "tls": "tls_enable"}
GETTERS = ("ip", "netdetect", "gateway", "tls")


def wanted_settings(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checked, normalised settings sorted by device; only managed fields (None = unmanaged)."""
    wanted: dict[int, dict[str, Any]] = {}
    for index, entry in enumerate(devices or []):
        where = f"devices[{index}]"
        device = check_device(entry.get("device"), where)
        if device in wanted:
            raise ValueError(f"{where}: device {device} is listed twice")
        want: dict[str, Any] = {
            "device": device,
            "address": check_address(entry.get("address"), f"{where}.address"),
            "netmask": check_netmask(entry.get("netmask"), f"{where}.netmask"),
        }
        for key in ("netdetect", "gateway"):
            if entry.get(key) not in (None, ""):
                want[key] = check_address(entry[key], f"{where}.{key}")
        want["tls"] = bool(entry.get("tls", False))
        wanted[device] = want
    if not wanted:
        raise ValueError("devices: at least one device is needed")
    return [wanted[device] for device in sorted(wanted)]


def differences(want: dict[str, Any], current: dict[str, Any]) -> list[str]:
    return [f for f in FIELDS if f in want and want[f] != current.get(f)]


def setters(want: dict[str, Any], changes: list[str]) -> list[tuple[list[str], list[str]]]:
    """(fields it sets, hccn_tool arguments) for each setter needed, in the vendor's order."""
    steps: list[tuple[list[str], list[str]]] = []
    ip_fields: list[str] = [f for f in ("address", "netmask") if f in changes]
    if ip_fields:
        steps.append((ip_fields, ["-ip", "-s", "address", want["address"],
                                  "netmask", want["netmask"]]))
    if "netdetect" in changes:
        steps.append((["netdetect"], ["-netdetect", "-s", "address", want["netdetect"]]))
    if "gateway" in changes:
        steps.append((["gateway"], ["-gateway", "-s", "gateway", want["gateway"]]))
    if "tls" in changes:
        steps.append((["tls"], ["-tls", "-s", "enable", "1" if want["tls"] else "0"]))
    return steps


def render_conf(settings: list[dict[str, Any]]) -> str:
    """``key_device=value`` lines, as in /etc/hccn.conf; unset values are left out."""
    lines = []
    for entry in settings:
        for field in FIELDS:
            value = entry.get(field)
            if value is None:
                continue
            if field == "tls":
                value = "1" if value else "0"
            lines.append(f"{CONF_KEYS[field]}_{entry['device']}={value}")
    return "".join(line + "\n" for line in lines)


def _settings(state: dict[str, Any]) -> dict[str, Any]:
    return {field: state.get(field) for field in FIELDS}


def run(params: dict[str, Any], check_mode: bool, runner: Runner) -> dict[str, Any]:
    """The module's work, with the state of O(conf_path) when given."""
    result = configure(params, check_mode, runner)
    if params.get("conf_path"):
        result["conf"] = file_state(params["conf_path"])
    return result


def configure(params: dict[str, Any], check_mode: bool, runner: Runner) -> dict[str, Any]:
    """Read and set the devices; raises HccnError (message and partial result) to fail."""
    try:
        tool, workers = common_options(params)
        wanted = wanted_settings(params.get("devices") or [])
    except ValueError as exc:
        raise HccnError(str(exc)) from None

    if not tool_usable(tool):
        if not check_mode:
            raise HccnError(missing_tool_message(tool))
        plans = [{"device": w["device"], "changes": differences(w, {}), "before": {},
                  "after": {f: w.get(f) for f in FIELDS}} for w in wanted]
        return {
            "changed": True,
            "msg": (f"hccn_tool is not at {tool} yet: every device would be configured once the "
                    "NPU driver provides hccn_tool"),
            "devices": plans,
            "diff": {"before": "", "after": render_conf(wanted)},
        }

    devices = [w["device"] for w in wanted]
    states = read_states(runner, tool, devices, workers, GETTERS)
    plans = []
    for i, want in enumerate(wanted):
        before = _settings(states[i][0])
        after = dict(before)
        after.update((f, want[f]) for f in FIELDS if f in want)
        plans.append({"device": want["device"], "changes": differences(want, before),
                      "before": before, "after": after})
    changed = any(plan["changes"] for plan in plans)

    if not check_mode and changed:
        _apply(runner, tool, wanted, plans)
        _verify(runner, tool, wanted, plans, workers)

    return {
        "changed": changed,
        "devices": plans,
        "diff": {"before": render_conf([{"device": p["device"], **p["before"]} for p in plans]),
                 "after": render_conf([{"device": p["device"], **p["after"]} for p in plans])},
    }


def _apply(runner: Runner, tool: str, wanted: list[dict[str, Any]],
           plans: list[dict[str, Any]]) -> None:
    """Run the setters one at a time; on a failure, fail with the devices already changed."""
    applied: list[dict[str, Any]] = []
    for i, want in enumerate(wanted):
        plan = plans[i]
        done: list[str] = []
        for fields, args in setters(want, plan["changes"]):
            rc, out, err = run_tool(runner, tool, want["device"], args)
            if rc != 0:
                if done:
                    applied.append(dict(plan, changes=done))
                why = (err.strip() or out.strip() or "no output")
                raise HccnError(
                    f"device {want['device']}: {command_text(command(tool, want['device'], args))}"
                    f" failed (rc {rc}): {why}",
                    {"changed": bool(applied), "devices": applied},
                )
            done.extend(fields)
        if done:
            applied.append(plan)


def _verify(runner: Runner, tool: str, wanted: list[dict[str, Any]],
            plans: list[dict[str, Any]], workers: int) -> None:
    """Read the changed devices back; fail naming the device and field that differ."""
    changed = [(want, plans[i]) for i, want in enumerate(wanted) if plans[i]["changes"]]
    states = read_states(runner, tool, [want["device"] for want, _ in changed], workers, GETTERS)
    problems = []
    for i, (want, plan) in enumerate(changed):
        state, errors = states[i]
        plan["after"] = _settings(state)
        problems.extend(errors)
        for field in FIELDS:
            if field in want and state.get(field) != want[field]:
                problems.append(f"device {want['device']}: {field} reads back as "
                                f"{state.get(field)!r}, expected {want[field]!r}")
    if problems:
        raise HccnError("settings did not read back as set: " + "; ".join(problems),
                        {"changed": True, "devices": [plan for _, plan in changed]})


def main() -> None:
    result_main(
        {
            "devices": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "device": {"type": "int", "required": True},
                    "address": {"type": "str", "required": True},
                    "netmask": {"type": "str", "required": True},
                    "gateway": {"type": "str"},
                    "netdetect": {"type": "str"},
                    "tls": {"type": "bool", "default": False},
                },
            },
            "conf_path": {"type": "path"},
            **COMMON_ARGS,
        },
        lambda module: run(module.params, module.check_mode, module_runner(module)),
        (HccnError,),
    )


if __name__ == "__main__":
    main()
