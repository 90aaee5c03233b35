"""``hccn_tool``: the NPU device-NIC tool, answering and storing per-device network settings.

Getters print the vendor's ``key:value`` lines; setters store into the node description, which
stands for the device NIC's own configuration (it survives a reboot of the host, as on a card).
"""

from __future__ import annotations

import sys
from typing import Any

from . import hw

USAGE = "usage: hccn_tool -i <device_id> -<ip|link|net_health|netdetect|gateway|tls> -g|-s ...\n"


def _net(node: dict[str, Any], dev: int) -> dict[str, str]:
    nets: dict[str, dict[str, str]] = node.setdefault("device_net", {})
    return nets.setdefault(str(dev), {})


def _get(node: dict[str, Any], dev: int, what: str) -> str:
    net = _net(node, dev)
    chip = next(c for c in node["chips"] if c["phy_id"] == dev)
    if what == "ip":
        if "address" not in net:
            return "hccn_tool: get ip failed, ip is not configured\n"
        return f"ipaddr:{net['address']}\nnetmask:{net.get('netmask', '')}\n"
    if what == "link":
        up = net.get("link", "UP" if chip["health"] == "OK" else "DOWN")
        return f"link status: {up}\n"
    if what == "net_health":
        if "address" not in net or "netdetect" not in net:
            return "net health status: Init\n"
        return f"net health status: {'Success' if chip['health'] == 'OK' else 'Fault'}\n"
    if what == "netdetect":
        return f"netdetect address: {net.get('netdetect', '')}\n"
    if what == "gateway":
        return f"default gateway:{net.get('gateway', '')}, Iface:eth{dev}\n"
    if what == "tls":
        return f"dev_id:{dev}, tls switch[{net.get('tls', '0')}](0:disable, 1:enable)\n"
    raise KeyError(what)


SETTERS = {
    "ip": ("address", "netmask"),
    "netdetect": ("address",),
    "gateway": ("gateway",),
    "tls": ("enable",),
}
STORE_AS = {"netdetect": {"address": "netdetect"}, "tls": {"enable": "tls"}}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "-i" or not args[2].startswith("-"):
        sys.stderr.write(USAGE)
        return 1
    node = hw.load_node()
    try:
        dev = int(args[1])
    except ValueError:
        sys.stderr.write(USAGE)
        return 1
    if dev not in [c["phy_id"] for c in node["chips"]]:
        sys.stderr.write(f"hccn_tool: device id {dev} is invalid\n")
        return 1
    what, mode, rest = args[2][1:], args[3], args[4:]
    try:
        if mode == "-g":
            sys.stdout.write(_get(node, dev, what))
            return 0
        if mode == "-s" and what in SETTERS:
            pairs = dict(zip(rest[::2], rest[1::2]))
            missing = [k for k in SETTERS[what] if k not in pairs]
            if missing:
                raise KeyError(", ".join(missing))
            net = _net(node, dev)
            for key in SETTERS[what]:
                net[STORE_AS.get(what, {}).get(key, key)] = pairs[key]
            hw.save_node(node)
            return 0
    except KeyError as exc:
        sys.stderr.write(f"hccn_tool: bad parameter {exc}\n{USAGE}")
        return 1
    sys.stderr.write(USAGE)
    return 1
