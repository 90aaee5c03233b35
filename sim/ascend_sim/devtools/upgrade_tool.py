"""``upgrade-tool``: the driver's firmware query tool (``--device_index -1 --system_version``)."""

from __future__ import annotations

import sys

from . import hw


def render_system_version(index: int) -> str:
    node = hw.load_node()
    chips = node["chips"] if index < 0 else [c for c in node["chips"] if c["phy_id"] == index]
    lines = ["{"]
    for chip in chips:
        version = chip.get("firmware_version") or ""
        if version:
            lines.append(f"Get system version({version}) succeed, deviceId({chip['phy_id']})")
            lines.append(f'\t{{"device_id":{chip["phy_id"]}, "version":"{version}"}}')
        else:
            lines.append(f"Get system version failed, deviceId({chip['phy_id']})")
            lines.append(f'\t{{"device_id":{chip["phy_id"]}, "version":"NA"}}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--device_index" not in args or "--system_version" not in args:
        sys.stderr.write("usage: upgrade-tool --device_index <id|-1> --system_version\n")
        return 1
    try:
        index = int(args[args.index("--device_index") + 1])
    except (IndexError, ValueError):
        sys.stderr.write("upgrade-tool: --device_index needs a number\n")
        return 1
    sys.stdout.write(render_system_version(index))
    return 0
