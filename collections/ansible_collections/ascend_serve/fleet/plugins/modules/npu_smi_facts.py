#!/usr/bin/python
"""Run npu-smi once per page and parse it: chips, health, driver version, board pages."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: npu_smi_facts
short_description: Chips, health and board information from npu-smi
description:
  - Runs C(npu-smi info) and C(npu-smi info -t board -i N) for every NPU, in one round trip, and
    parses them. The chip table is read by the first row of each chip (NPU id, name, health),
    which the A2, A3 and 310P layouts share.
version_added: 0.1.0
options:
  npu_smi:
    description: Path of npu-smi.
    type: path
    default: /usr/local/sbin/npu-smi
  boards:
    description: Also read the board page of every NPU.
    type: bool
    default: true
author:
  - ascend-serve developers
"""

EXAMPLES = r"""
- name: Read npu-smi
  ascend_serve.fleet.npu_smi_facts:
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    ascend_npu_smi:
      description: Parsed npu-smi output.
      type: dict
      sample:
        version: 25.5.0
        chips: [{npu: 0, name: 910B1, health: OK}]
        boards: {"0": {"Firmware Version": 7.8.0.2.212, "Compatibility": OK}}
"""

import re

from ansible.module_utils.basic import AnsibleModule

HEADER_RE = re.compile(r"npu-smi (\S+)\s+Version:\s*(\S+)")
CHIP_ROW_RE = re.compile(
    r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(OK|Warning|Alarm|Critical|UNKNOWN)\s*\|", re.MULTILINE
)
KV_RE = re.compile(r"^\s*([^:\n]+?)\s*:\s*(.*?)\s*$", re.MULTILINE)


def parse_info(text: str) -> dict[str, object]:
    header = HEADER_RE.search(text)
    chips = [
        {"npu": int(npu), "name": name, "health": health}
        for npu, name, health in CHIP_ROW_RE.findall(text)
    ]
    return {"version": header.group(2) if header else "", "chips": chips}


def parse_kv(text: str) -> dict[str, str]:
    return {key: value for key, value in KV_RE.findall(text)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "npu_smi": {"type": "path", "default": "/usr/local/sbin/npu-smi"},
            "boards": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    tool = module.params["npu_smi"]
    rc, out, err = module.run_command([tool, "info"])
    if rc != 0:
        module.fail_json(msg=f"{tool} info failed with rc {rc}: {(err or out).strip()}")
    facts = parse_info(out)
    boards: dict[str, dict[str, str]] = {}
    if module.params["boards"]:
        for npu in sorted({int(c["npu"]) for c in facts["chips"]}):  # type: ignore[attr-defined]
            rc, page, err = module.run_command([tool, "info", "-t", "board", "-i", str(npu)])
            if rc != 0:
                module.fail_json(msg=f"{tool} info -t board -i {npu} failed: {err.strip()}")
            boards[str(npu)] = parse_kv(page)
    facts["boards"] = boards
    module.exit_json(changed=False, ansible_facts={"ascend_npu_smi": facts})


if __name__ == "__main__":
    main()
