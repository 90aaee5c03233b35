"""The simulated hardware and the node's filesystem, as seen from inside a node.

``node.json`` stands for the devices themselves (what a real driver reads from the chips). Its
location is fixed on a simulated node and can be moved for unit tests with ``ASCEND_SIM_NODE``.
``ASCEND_SIM_ROOT`` prefixes every absolute path the tools and installers touch, so the same
code installs into a scratch directory in pytest and into ``/`` on a simulated node.
"""

from __future__ import annotations

import json
import os
from typing import Any

DEFAULT_NODE_FILE = "/opt/ascend-sim/node.json"
DEFAULT_INSTALL_PATH = "/usr/local/Ascend"


def root_path(path: str) -> str:
    """Map an absolute node path into the (optional) test root."""
    root = os.environ.get("ASCEND_SIM_ROOT", "")
    return root.rstrip("/") + path if root else path


def node_file() -> str:
    return os.environ.get("ASCEND_SIM_NODE", DEFAULT_NODE_FILE)


def load_node() -> dict[str, Any]:
    with open(node_file(), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def save_node(node: dict[str, Any]) -> None:
    path = node_file()
    # Bind-mounted files cannot be replaced by rename; rewrite in place.
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(node, fh, indent=2, sort_keys=True)
        fh.write("\n")


def npus(node: dict[str, Any]) -> list[int]:
    return sorted({int(c["npu"]) for c in node["chips"]})


def chips_of(node: dict[str, Any], npu: int) -> list[dict[str, Any]]:
    return [c for c in node["chips"] if int(c["npu"]) == npu]


def chip_layout(node: dict[str, Any]) -> str:
    name = node["chip_type"]
    if name.startswith("910C"):
        return "a3"
    if name.startswith("310"):  # 310 and 310P share a layout (corpus 310-*, 310p3-*)
        return "310p"
    return "a2"


def read_kv(path: str, sep: str = "=") -> dict[str, str]:
    """Read a vendor ``key=value`` file; missing file gives an empty dict."""
    result: dict[str, str] = {}
    try:
        with open(root_path(path), encoding="utf-8") as fh:
            for line in fh:
                if sep in line:
                    key, value = line.split(sep, 1)
                    result[key.strip()] = value.strip()
    except FileNotFoundError:
        pass
    return result


def write_kv(path: str, values: dict[str, str]) -> None:
    full = root_path(path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as fh:
        for key, value in values.items():
            fh.write(f"{key}={value}\n")


def driver_install_path() -> str:
    info = read_kv("/etc/ascend_install.info")
    return info.get("Driver_Install_Path_Param", DEFAULT_INSTALL_PATH)


def driver_version() -> str | None:
    info = read_kv(driver_install_path() + "/driver/version.info")
    return info.get("Version")


def consume_fault(node: dict[str, Any], name: str, subject: str) -> bool:
    """One-shot fault knobs: ``faults[name][subject]`` counts how often it still fires."""
    faults = node.get("faults", {}).get(name, {})
    left = int(faults.get(subject, 0))
    if left <= 0:
        return False
    faults[subject] = left - 1
    save_node(node)
    return True
