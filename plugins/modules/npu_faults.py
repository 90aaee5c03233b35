#!/usr/bin/python
"""Every chip's fault codes from npu-smi, their class, the host's worst, each fault's lifetime."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: npu_faults
short_description: Chip fault codes, their action class and lifetime, from npu-smi
description:
  - Runs C(npu-smi info) (the chips and the process table) and C(npu-smi info -t health -i N -c C)
    for every chip, and classifies each C(Error Code) with the vendor's table (the collection's
    C(data/faults/vendor_codes.json), generated from Ascend/mind-cluster's C(faultCode.json))
    through the collection's one home for fault classes, C(module_utils/fault_codes.py).
  - Keeps each fault's lifetime (present, or cleared and when) from O(previous), the last record,
    so that a fault that cleared keeps blocking for the policy window (filter
    C(ascend_serve.fleet.fault_blocks)). Reads only; the caller records the result in the ledger
    C(ascend_faults).
  - Also sets C(ascend_npu_smi) from the same C(npu-smi info) output, as
    C(ascend_serve.fleet.npu_smi_facts) with C(boards=false) sets it (chips, processes,
    versions, HBM per chip; C(boards) empty), so a play that reads the faults first runs
    C(npu-smi info) once (the serving profile's HBM fit in C(playbooks/preflight.yml) reuses
    it). Not set where npu-smi does not exist.
version_added: 0.2.0
options:
  npu_smi:
    description: Path of npu-smi.
    type: path
    default: /usr/local/sbin/npu-smi
  table:
    description:
      - Chip code to class, C(chip.codes) of the collection's C(data/faults/vendor_codes.json).
    type: dict
    required: true
  previous:
    description: The C(faults) of the last record (C(ansible_local.ascend_faults.faults)).
    type: dict
    default: {}
  missing_ok:
    description: Where O(npu_smi) does not exist (before the driver), report no chips.
    type: bool
    default: false
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Read the chips' fault codes
  ascend_serve.fleet.npu_faults:
    table: >-
      {{ (lookup('ansible.builtin.file', 'data/faults/vendor_codes.json')
          | from_json).chip.codes }}
    previous: "{{ ansible_local.ascend_faults.faults | default({}) }}"
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_npu_faults), and C(ascend_npu_smi) where npu-smi ran.
  returned: always
  type: dict
  contains:
    ascend_npu_faults:
      description:
        - C(chips), per chip C(npu), C(chip), C(health), C(codes) (C([{code, class}]), C(Unknown)
          for a code the table lacks), C(worst) (its worst class or null) and C(idle) (no row of
          npu-smi's process table uses it).
        - C(worst), the host's worst class now (null for none).
        - C(faults), each fault's lifetime by C(npu/chip/code) (C(npu), C(chip), C(code),
          C(class), C(state) present or cleared, C(first_seen), C(cleared_at), UTC).
        - C(present), false only with O(missing_ok) where npu-smi does not exist.
      type: dict
      sample:
        present: true
        worst: RestartNPU
        chips: [{npu: 0, chip: 0, health: Alarm, worst: RestartNPU, idle: true,
                 codes: [{code: 8C03A000, class: RestartNPU}]}]
        faults: {"0/0/8C03A000": {npu: 0, chip: 0, code: 8C03A000, class: RestartNPU,
                                  state: present, first_seen: "2026-12-06T09:00:00Z",
                                  cleared_at: ""}}
"""

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend_serve.fleet.plugins.module_utils import fault_codes
from ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_smi import (
    NpuSmiParseError,
    info_facts,
    read_health,
)


def read_health_page(text: str) -> dict[str, Any]:
    """A ``-t health`` page. Error Information may go on over lines with an empty key
    (``\t   : node type=...``, the MindCluster fixture in the corpus): they are left out, the
    codes are on the ``Error Code`` line."""
    kept = [line for line in text.splitlines() if not line.strip().startswith(":")]
    return read_health("\n".join(kept) + "\n")


def chip_faults(page: dict[str, Any], table: dict[str, str]) -> list[dict[str, str]]:
    """The classified codes of one chip's health page."""
    return [{"code": code, "class": fault_codes.classify(code, table)}
            for code in fault_codes.health_codes(page.get("error_code"))]


def build(chips: list[dict[str, Any]], processes: list[dict[str, Any]],
          pages: dict[tuple[int, int], dict[str, Any]], table: dict[str, str],
          previous: dict[str, Any], now: str) -> dict[str, Any]:
    """The fact from the chip table, the process table and each chip's health page."""
    busy = {(int(p["npu"]), int(p["chip"])) for p in processes}
    out = []
    for chip in chips:
        ident = (int(chip["npu"]), int(chip["chip"]))
        page = pages[ident]
        codes = chip_faults(page, table)
        out.append({"npu": ident[0], "chip": ident[1],
                    "health": page.get("health_status") or chip.get("health"),
                    "codes": codes, "worst": fault_codes.worst(c["class"] for c in codes),
                    "idle": ident not in busy})
    return {"present": True, "chips": out,
            "worst": fault_codes.worst(c["worst"] for c in out),
            "faults": fault_codes.lifetime(previous, out, now)}


def read(module: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the ``ascend_npu_faults`` fact, the ``ascend_npu_smi`` fact or None where npu-smi does
    not exist)."""
    tool = module.params["npu_smi"]
    if module.params["missing_ok"] and not os.path.exists(tool):
        return {"present": False, "chips": [], "worst": None,
                "faults": dict(module.params["previous"] or {})}, None
    table = {str(k).upper(): str(v) for k, v in (module.params["table"] or {}).items()}
    if not table:
        module.fail_json(msg="npu_faults: the code table is empty: pass chip.codes of the "
                             "collection's data/faults/vendor_codes.json")
    rc, out, err = module.run_command([tool, "info"])
    if rc != 0:
        module.fail_json(msg=f"{tool} info failed with rc {rc}: {(err or out).strip()}")
    try:
        info = info_facts(out)
    except NpuSmiParseError as exc:
        module.fail_json(msg=f"cannot read the output of {tool} info: {exc}")
    pages: dict[tuple[int, int], dict[str, Any]] = {}
    for chip in info["chips"]:
        npu, index = str(chip["npu"]), str(chip["chip"])
        argv = [tool, "info", "-t", "health", "-i", npu, "-c", index]
        rc, page, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(argv)} failed with rc {rc}: {(err or page).strip()}")
        try:
            pages[(int(chip["npu"]), int(chip["chip"]))] = read_health_page(page)
        except NpuSmiParseError as exc:
            module.fail_json(msg=f"cannot read {' '.join(argv)}: {exc}")
    try:
        faults = build(info["chips"], info["processes"], pages, table,
                       module.params["previous"] or {}, fault_codes.utc_now())
    except fault_codes.FaultCodeError as exc:
        module.fail_json(msg=f"npu_faults: {exc}")
    return faults, {**info, "boards": {}}


def main() -> None:
    module = AnsibleModule(argument_spec={
        "npu_smi": {"type": "path", "default": "/usr/local/sbin/npu-smi"},
        "table": {"type": "dict", "required": True},
        "previous": {"type": "dict", "default": {}},
        "missing_ok": {"type": "bool", "default": False},
    }, supports_check_mode=True)
    faults, smi = read(module)
    facts = {"ascend_npu_faults": faults}
    if smi is not None:
        facts["ascend_npu_smi"] = smi
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
