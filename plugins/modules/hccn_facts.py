#!/usr/bin/python
"""Read the device NIC state of Ascend NPUs with hccn_tool's getters, and judge it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hccn_facts
short_description: Read the device NIC state of Huawei Ascend NPUs with hccn_tool
description:
  - Runs the C(hccn_tool) getters C(-ip -g), C(-link -g), C(-net_health -g), C(-netdetect -g),
    C(-gateway -g) and C(-tls -g) for every listed device, concurrently, and returns what they
    say. Nothing is changed.
  - The result is returned as plain module output (register it), not as C(ansible_facts).
  - O(problems) lists every device whose link is not C(UP), every answer that could not be read,
    and a C(net_health) other than C(success), but the latter only for devices with a netdetect
    address. Without a netdetect address the device has nothing to probe and reports C(init),
    so its net_health is not judged.
version_added: 0.1.0
options:
  devices:
    description: Device (chip) ids to read, as C(hccn_tool -i) takes them.
    type: list
    elements: int
    required: true
notes:
  - A missing C(hccn_tool) fails the task.
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
  - ascend_serve.fleet.hccn
"""

EXAMPLES = r"""
- name: Read the device NICs
  ascend_serve.fleet.hccn_facts:
    devices: "{{ range(8) | list }}"
  register: hccn

- name: Stop on a bad device network
  ansible.builtin.assert:
    that: hccn.problems | length == 0
    fail_msg: "{{ hccn.problems | join('; ') }}"
"""

RETURN = r"""
devices:
  description: State of each device, sorted by device id; None where not configured or unreadable.
  returned: always
  type: list
  elements: dict
  contains:
    device:
      description: Device id.
      type: int
    address:
      description: Device NIC address.
      type: str
    netmask:
      description: Its netmask.
      type: str
    link:
      description: Link state, uppercased (C(UP), C(DOWN)).
      type: str
    net_health:
      description: Network health, lowercased (C(success), C(fault), C(init), ...).
      type: str
    netdetect:
      description: Address probed for net_health.
      type: str
    gateway:
      description: Default gateway.
      type: str
    tls:
      description: Whether TLS is enabled.
      type: bool
  sample:
    - {device: 0, address: 192.168.100.101, netmask: 255.255.255.0, link: UP,
       net_health: success, netdetect: 192.168.100.1, gateway: null, tls: false}
problems:
  description: What is wrong, one line per device and finding.
  returned: always
  type: list
  elements: str
  sample: ["device 3: link DOWN", "device 3: net_health fault"]
"""

from typing import TYPE_CHECKING, Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn import (
    COMMON_ARGS,
    HccnError,
    check_device,
    common_options,
    missing_tool_message,
    module_runner,
    read_states,
    tool_usable,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main

if TYPE_CHECKING:
    from ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn import Runner


def judge(state: dict[str, Any]) -> list[str]:
    """Problems of one device's state: link not UP; net_health not success (netdetect set)."""
    device = state["device"]
    problems = []
    if state.get("link") is not None and state["link"] != "UP":
        problems.append(f"device {device}: link {state['link']}")
    health = state.get("net_health")
    if state.get("netdetect") is not None and health is not None and health != "success":
        problems.append(f"device {device}: net_health {health}")
    return problems


def run(params: dict[str, Any], runner: Runner) -> dict[str, Any]:
    """The module's work; raises HccnError to fail."""
    try:
        tool, workers = common_options(params)
        listed = params.get("devices") or []
        devices = sorted({check_device(d, f"devices[{i}]") for i, d in enumerate(listed)})
        if not devices:
            raise ValueError("devices: at least one device is needed")
    except ValueError as exc:
        raise HccnError(str(exc)) from None
    if not tool_usable(tool):
        raise HccnError(missing_tool_message(tool))

    states = []
    problems: list[str] = []
    for state, errors in read_states(runner, tool, devices, workers):
        states.append(state)
        problems.extend(errors)
        problems.extend(judge(state))
    return {"changed": False, "devices": states, "problems": problems}


def main() -> None:
    result_main(
        {"devices": {"type": "list", "elements": "int", "required": True}, **COMMON_ARGS},
        lambda module: run(module.params, module_runner(module)),
        (HccnError,),
    )


if __name__ == "__main__":
    main()
