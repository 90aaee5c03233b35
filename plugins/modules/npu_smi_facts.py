#!/usr/bin/python
"""Run npu-smi once per page and parse it: chips, health, driver version, board pages."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: npu_smi_facts
short_description: Chips, health and board information from npu-smi
description:
  - Runs C(npu-smi info) and C(npu-smi info -t board -i N) for every NPU and reads them with the
    collection's one npu-smi reader (module_utils/npu_smi.py; every layout it reads comes from a
    real sample), so the chip table of every layout (A2, A3, 310/310P, old 910, 26.x wide) gives
    the same chip fields, and a table it cannot read fails the task naming the line.
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
  missing_ok:
    description:
      - Where O(npu_smi) does not exist (a fresh host, before the NPU driver installs it), set
        C(present) false and no chips instead of failing. npu-smi that exists and fails still
        fails the task.
    type: bool
    default: false
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Read npu-smi
  ascend_serve.fleet.npu_smi_facts:

- name: List the chips npu-smi does not report healthy
  ansible.builtin.debug:
    msg: "{{ ansible_facts['ascend_npu_smi'].chips | rejectattr('health', 'eq', 'OK') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_npu_smi), what C(npu-smi info) and its board pages report.
  returned: always
  type: dict
  contains:
    ascend_npu_smi:
      description:
        - C(version), the driver version, and C(tool_version), npu-smi's own (each C('') where
          the table does not print it); C(layout), the table layout read.
        - C(chips) and C(processes), the rows of the chip and process tables.
        - C(hbm_total_mb), the HBM of one chip in MB as the C(HBM-Usage(MB)) column prints its
          total, the smallest over the chips; null where no chip prints one (310/310P, or
          npu-smi absent).
        - C(present), false only with O(missing_ok) where npu-smi does not exist (then
          everything else is empty).
        - C(boards), the board page of every NPU by NPU id, key to value as printed (null for
          C(NA)); empty when O(boards) is false.
      type: dict
      sample:
        version: 25.0.rc1.1
        tool_version: 25.0.rc1.1
        layout: a2
        present: true
        hbm_total_mb: 32768
        chips: [{npu: 0, chip: 0, name: 910B4, family: 910B, health: OK, bus_id: "0000:C1:00.0"}]
        processes: [{npu: 0, chip: 0, pid: 472206, name: python3.9, memory_mb: 113}]
        boards: {"0": {"Firmware Version": 7.7.0.1.231, "Compatibility": OK}}
"""

import os
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import facts_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_smi import (
    NpuSmiParseError,
    info_facts,
    read_page,
)


def parse_info(text: str) -> dict[str, Any]:
    """The facts of one ``npu-smi info`` output (raises NpuSmiParseError naming the line)."""
    return info_facts(text)


# What a host without npu-smi reports with missing_ok (the driver is not installed yet).
ABSENT: dict[str, Any] = {
    "present": False, "version": "", "tool_version": "", "layout": "", "chips": [],
    "hbm_total_mb": None, "processes": [], "boards": {},
}


def parse_kv(text: str) -> dict[str, str | None]:
    """A ``npu-smi info -t <page>`` page: key -> value as printed (None for NA)."""
    return read_page(text)


def read(module: Any) -> dict[str, Any]:
    tool = module.params["npu_smi"]
    if module.params["missing_ok"] and not os.path.exists(tool):
        return dict(ABSENT)
    rc, out, err = module.run_command([tool, "info"])
    if rc != 0:
        module.fail_json(msg=f"{tool} info failed with rc {rc}: {(err or out).strip()}")
    try:
        facts = parse_info(out)
    except NpuSmiParseError as exc:
        module.fail_json(msg=f"cannot read the output of {tool} info: {exc}")
    boards: dict[str, dict[str, str | None]] = {}
    if module.params["boards"]:
        for npu in sorted({int(c["npu"]) for c in facts["chips"]}):
            rc, page, err = module.run_command([tool, "info", "-t", "board", "-i", str(npu)])
            if rc != 0:
                module.fail_json(msg=f"{tool} info -t board -i {npu} failed: {err.strip()}")
            try:
                boards[str(npu)] = parse_kv(page)
            except NpuSmiParseError as exc:
                module.fail_json(msg=f"cannot read {tool} info -t board -i {npu}: {exc}")
    facts["boards"] = boards
    return facts


def main() -> None:
    facts_main("ascend_npu_smi", read, {
        "npu_smi": {"type": "path", "default": "/usr/local/sbin/npu-smi"},
        "boards": {"type": "bool", "default": True},
        "missing_ok": {"type": "bool", "default": False},
    })


if __name__ == "__main__":
    main()
