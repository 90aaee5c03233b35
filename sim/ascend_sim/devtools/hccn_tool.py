r"""``hccn_tool``: the NPU device-NIC tool, answering and storing per-device network settings.

Getters print the layouts of real ``hccn_tool`` output (``tests/data/corpus/hccn_tool``);
setters store into the node description, which stands for the device NIC's own configuration (it
survives a reboot of the host, as on a card).

Output per verb, and its corpus sample:

* ``-ip -g``: ``ipaddr:A`` / ``netmask:M`` (``ip-g-*``); nothing at all for a device without an
  address (``ip-g-dev2-empty-fixture``).
* ``-link -g``: ``link status: UP`` (``link-g-loop-elided-a2-mindie``).
* ``-net_health -g``: ``net health status: Success`` / ``Fault`` (``net-health-*``); ``Init``
  for a device without address or netdetect address is this simulator's (no sample).
* ``-netdetect -g``: ``netdetect address: A`` (``netdetect-g-loop-elided-a2-mindie``); the
  value is empty when none is set (no sample of that case).
* ``-gateway -g``: ``default gateway:A, Iface:ethN`` (``gateway-g-loop-8dev-a2-mindie``).
* ``-tls -g``: ``dev_id:N, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset,
  1:preset), tls alarm time threshold[60]days`` (``tls-g-grep-switch-*``; the certificate lines a
  full answer also prints are not simulated).
* ``-tls -s enable X``: ``Cmd executed successfully!`` (``tls-s-enable0-loop-elided-a2-mindie``).
  The other setters print nothing: no sample of their output was found.

Device NICs are real (see :mod:`.devnet`): ``-ip -s address A netmask M`` also gives device N an
interface ``npuN`` in the current network namespace with ``A/prefix(M)``, up (a macvlan on the
uplink, else a local-only dummy or veth). It needs CAP_NET_ADMIN; without it the setter fails
(exit 1, nothing stored). ``ASCEND_SIM_NET=off`` keeps the old store-only behaviour.

Link state: a fault in node.json, ``device_net[N]["link"] = "DOWN"`` (or an unhealthy chip), says
DOWN and is applied to ``npuN`` (``ip link set npuN down``) whenever hccn_tool runs for device N
on that node; clearing it brings the interface back up on the next run. Without a fault,
``-link -g`` reports the interface's real state; a device without an interface reports UP, as
before.

``-ping -g address X [pkt K]`` sends K (default 3) ICMP echo requests from ``npuN`` and its
address, one second's wait each. Output (stdout), as the real tool prints it
(``ping-g-loop-8dev-ok-a2-mindie``, ``ping-g-partial-loss-33pct-mindie-doc``)::

    device 0 PING 198.51.100.2
    recv time out seq=0
    recv seq=1,time=0.097000ms
    recv seq=2,time=0.066000ms
    3 packets transmitted, 2 received, 33.33% packet loss

One line per request: ``recv seq=N,time=T.TTTTTTms`` for a reply, ``recv time out seq=N`` for a
lost one; the last line always matches
``(\d+) packets transmitted, (\d+) received, ([\d.]+)% packet loss``. A 100% loss answer was not
found verbatim: it follows the 33.33% sample's layout (every request ``recv time out``, then
``3 packets transmitted, 0 received, 100.00% packet loss``). Exit 0 when at least one reply came
back, 1 when none did. A device whose link is DOWN, or without an address, does not send:
``hccn_tool: ping failed, ...`` on stderr, exit 1.
"""

from __future__ import annotations

import contextlib
import ipaddress
import sys
from typing import Any

from . import devnet, hw

USAGE = (
    "usage: hccn_tool -i <device_id> -<ip|link|net_health|netdetect|gateway|tls> -g|-s ...\n"
    "       hccn_tool -i <device_id> -ping -g address <ip> [pkt <count>]\n"
)


def _net(node: dict[str, Any], dev: int) -> dict[str, str]:
    nets: dict[str, dict[str, str]] = node.setdefault("device_net", {})
    return nets.setdefault(str(dev), {})


def _chip(node: dict[str, Any], dev: int) -> dict[str, Any]:
    return next(c for c in node["chips"] if c["phy_id"] == dev)


def _stored_link(node: dict[str, Any], dev: int) -> str:
    """The node description's link: the fault knob ``device_net[N]["link"]``, else chip health."""
    return str(_net(node, dev).get("link", "UP" if _chip(node, dev)["health"] == "OK" else "DOWN"))


def _link_faulted(node: dict[str, Any], dev: int) -> bool:
    return _stored_link(node, dev).upper() != "UP"


def _link(node: dict[str, Any], dev: int) -> str:
    stored = _stored_link(node, dev)
    if stored.upper() != "UP":
        return stored
    if devnet.enabled():
        real = devnet.link_up(devnet.ifname(dev))
        if real is not None:
            return "UP" if real else "DOWN"
    return stored


def _get(node: dict[str, Any], dev: int, what: str) -> str:
    net = _net(node, dev)
    chip = _chip(node, dev)
    if what == "ip":
        if "address" not in net:
            return ""  # as ip-g-dev2-empty-fixture: no address, no output
        return f"ipaddr:{net['address']}\nnetmask:{net.get('netmask', '')}\n"
    if what == "link":
        return f"link status: {_link(node, dev)}\n"
    if what == "net_health":
        if "address" not in net or "netdetect" not in net:
            return "net health status: Init\n"
        ok = chip["health"] == "OK" and _link(node, dev) == "UP"
        return f"net health status: {'Success' if ok else 'Fault'}\n"
    if what == "netdetect":
        return f"netdetect address: {net.get('netdetect', '')}\n"
    if what == "gateway":
        return f"default gateway:{net.get('gateway', '')}, Iface:eth{dev}\n"
    if what == "tls":
        return (f"dev_id:{dev}, tls switch[{net.get('tls', '0')}](0:disable, 1:enable), "
                "tls preconfigured[1](0:non-preset, 1:preset), tls alarm time threshold[60]days\n")
    raise KeyError(what)


SETTERS = {
    "ip": ("address", "netmask"),
    "netdetect": ("address",),
    "gateway": ("gateway",),
    "tls": ("enable",),
}
STORE_AS = {"netdetect": {"address": "netdetect"}, "tls": {"enable": "tls"}}


def _set_ip(node: dict[str, Any], dev: int, address: str, netmask: str) -> str | None:
    """Bring up device N's real NIC; the error text when it cannot be done."""
    try:
        iface = ipaddress.IPv4Interface(f"{address}/{netmask}")
    except ValueError:
        raise KeyError(f"address {address} netmask {netmask}") from None
    if not devnet.enabled():
        return None
    if not devnet.has_net_admin():
        return "hccn_tool: set ip failed, operation not permitted (CAP_NET_ADMIN is needed)\n"
    try:
        devnet.configure(dev, address, iface.network.prefixlen, _link_faulted(node, dev))
    except devnet.NetError as exc:
        return f"hccn_tool: set ip failed, {exc}\n"
    return None


def ping_answer(dev: int, target: str, times: list[float | None]) -> str:
    """The ``-ping -g`` answer for one round-trip time (ms) or None (lost) per request."""
    count = len(times)
    lines = [f"device {dev} PING {target}"]
    lines += [f"recv time out seq={seq}" if ms is None else f"recv seq={seq},time={ms:.6f}ms"
              for seq, ms in enumerate(times)]
    received = sum(ms is not None for ms in times)
    loss = 100.0 * (count - received) / count if count else 100.0
    lines.append(f"{count} packets transmitted, {received} received, {loss:.2f}% packet loss")
    return "\n".join(lines) + "\n"


def _ping(node: dict[str, Any], dev: int, rest: list[str]) -> int:
    pairs = dict(zip(rest[::2], rest[1::2]))
    if "address" not in pairs:
        raise KeyError("address")
    target = pairs["address"]
    try:
        ipaddress.IPv4Address(target)
        count = int(pairs.get("pkt", "3"))
    except ValueError:
        raise KeyError(f"address {target} pkt {pairs.get('pkt')}") from None
    net = _net(node, dev)
    name = devnet.ifname(dev)
    if "address" not in net:
        sys.stderr.write(f"hccn_tool: ping failed, device {dev} ip is not configured\n")
        return 1
    if _link(node, dev) != "UP":
        sys.stderr.write(f"hccn_tool: ping failed, device {dev} link status is DOWN\n")
        return 1
    if not devnet.enabled() or devnet.link_info(name) is None:
        sys.stderr.write(f"hccn_tool: ping failed, device {dev} NIC {name} is not present\n")
        return 1
    try:
        times = devnet.echo(name, net["address"], target, count)
    except devnet.NetError as exc:
        sys.stderr.write(f"hccn_tool: ping failed, {exc}\n")
        return 1
    sys.stdout.write(ping_answer(dev, target, times))
    return 0 if any(ms is not None for ms in times) else 1


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
    if devnet.enabled() and devnet.has_net_admin():
        # A link fault written into node.json takes effect on the device's real NIC.
        with contextlib.suppress(devnet.NetError):
            devnet.apply_link(dev, _link_faulted(node, dev))
    try:
        if mode == "-g" and what == "ping":
            return _ping(node, dev, rest)
        if mode == "-g":
            sys.stdout.write(_get(node, dev, what))
            return 0
        if mode == "-s" and what in SETTERS:
            pairs = dict(zip(rest[::2], rest[1::2]))
            missing = [k for k in SETTERS[what] if k not in pairs]
            if missing:
                raise KeyError(", ".join(missing))
            if what == "ip":
                error = _set_ip(node, dev, pairs["address"], pairs["netmask"])
                if error:
                    sys.stderr.write(error)
                    return 1
            net = _net(node, dev)
            for key in SETTERS[what]:
                net[STORE_AS.get(what, {}).get(key, key)] = pairs[key]
            hw.save_node(node)
            if what == "tls":  # tls-s-enable0-loop-elided-a2-mindie; other setters: no sample
                sys.stdout.write("Cmd executed successfully!\n")
            return 0
    except KeyError as exc:
        sys.stderr.write(f"hccn_tool: bad parameter {exc}\n{USAGE}")
        return 1
    sys.stderr.write(USAGE)
    return 1


if __name__ == "__main__":
    sys.exit(main())
