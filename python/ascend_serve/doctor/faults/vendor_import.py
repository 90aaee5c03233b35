"""Regenerate ``vendor_codes.json`` from the vendor's fault tables (Ascend/mind-cluster).

The codes and their classes are facts read as data: MindCluster's device plugin ships
``component/ascend-device-plugin/build/faultCode.json`` (chip fault codes in 8 classes) and
``SwitchFaultCode.json`` (switch fault codes). This program reads both from a mind-cluster git
directory at a commit (``git show COMMIT:PATH``, so a bare mirror works) and writes the project's
data file with the source's repository, paths and commit::

    python -m ascend_serve.doctor.faults.vendor_import --git-dir /path/to/mind-cluster.git \\
        --commit 22bb3d987bc0208c3eb7395e222b661276133c58

Where a code is listed under two classes, the worse class wins (the vendor's rule: "handled
according to the highest severity level", docs/en/scheduling/usage/appliance/
01_npu_hardware_fault_detection_and_rectification.md; the order is the device plugin's
``getMostSeriousFaultType``, component/ascend-device-plugin/pkg/common/fault_code.go). Codes are
kept as the vendor spells them and looked up case-insensitively.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils import fault_codes
from ascend_serve.resources import data_path

REPO = "Ascend/mind-cluster"
CHIP_PATH = "component/ascend-device-plugin/build/faultCode.json"
SWITCH_PATH = "component/ascend-device-plugin/build/SwitchFaultCode.json"

# The vendor's list names -> the fault level (class) names the device plugin reports.
CHIP_LISTS = {
    "NotHandleFaultCodes": "NotHandleFault",
    "RestartRequestCodes": "RestartRequest",
    "RestartBusinessCodes": "RestartBusiness",
    "FreeRestartNPUCodes": "FreeRestartNPU",
    "RestartNPUCodes": "RestartNPU",
    "SeparateNPUCodes": "SeparateNPU",
    "PreSeparateNPUCodes": "PreSeparateNPU",
    "SubHealthFaultCodes": "SubHealthFault",
}
SWITCH_LISTS = {
    "NotHandleFaultCodes": "NotHandleFault",
    "SubHealthFaultCodes": "SubHealthFault",
    # No class is documented for the switch's reset list; it is empty at the commit read. A
    # list mapped to "" must stay empty: the import stops when the vendor fills it.
    "ResetFaultCodes": "",
    "RestartRequestFaultCodes": "RestartRequest",
    "SeparateFaultCodes": "SeparateNPU",
}
# Worst first: the device plugin's getMostSeriousFaultType (fault_code.go); one home, fault_codes.
VENDOR_ORDER = fault_codes.VENDOR_ORDER


class VendorImportError(RuntimeError):
    """The vendor file is not what this importer knows how to read."""


def _table(raw: Any, lists: dict[str, str], path: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise VendorImportError(f"{path}: not a JSON object")
    unknown = sorted(set(raw) - set(lists))
    if unknown:
        raise VendorImportError(f"{path}: unknown lists {unknown}: map them to a class first")
    entries = 0
    classes: dict[str, list[str]] = {}
    for key, level in lists.items():
        codes = raw.get(key, [])
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise VendorImportError(f"{path}: {key} is not a list of strings")
        if not level:
            if codes:
                raise VendorImportError(f"{path}: {key} now lists codes: decide their class first")
            continue
        entries += len(codes)
        for code in codes:
            classes.setdefault(code.strip(), []).append(level)
    rank = {name: i for i, name in enumerate(VENDOR_ORDER)}
    codes_out: dict[str, str] = {}
    in_two: dict[str, list[str]] = {}
    repeated: dict[str, str] = {}
    for code, levels in sorted(classes.items()):
        distinct = sorted(set(levels), key=rank.__getitem__)
        codes_out[code] = distinct[0]
        if len(distinct) > 1:
            in_two[code] = distinct
        elif len(levels) > 1:
            repeated[code] = levels[0]
    return {"path": path, "entries": entries, "unique": len(codes_out),
            "in_several_classes": in_two, "repeated_in_one_class": repeated,
            "codes": codes_out}


def git_show(git_dir: Path, commit: str, path: str) -> Any:
    done = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise VendorImportError(f"git show {commit}:{path}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def build(chip: Any, switch: Any, commit: str) -> dict[str, Any]:
    return {
        "generated_by": "python -m ascend_serve.doctor.faults.vendor_import",
        "repository": REPO,
        "commit": commit,
        "license": "Apache-2.0 (codes and classes read as data)",
        "chip": _table(chip, CHIP_LISTS, CHIP_PATH),
        "switch": _table(switch, SWITCH_LISTS, SWITCH_PATH),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--git-dir", type=Path, required=True,
                        help="a mind-cluster git directory (a bare mirror is enough)")
    parser.add_argument("--commit", required=True, help="the commit to read (40 hex digits)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: the collection's data/faults/vendor_codes.json")
    args = parser.parse_args(argv)
    try:
        data = build(git_show(args.git_dir, args.commit, CHIP_PATH),
                     git_show(args.git_dir, args.commit, SWITCH_PATH), args.commit)
    except (VendorImportError, ValueError) as exc:
        print(f"vendor_import: {exc}", file=sys.stderr)
        return 2
    out = args.out or data_path("faults", "vendor_codes.json")
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}: {data['chip']['unique']} chip codes, "
          f"{data['switch']['unique']} switch codes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
