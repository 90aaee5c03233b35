"""Real network interfaces for the simulated device NICs (used by ``hccn_tool``).

Each device ``N`` that is given an address gets an interface ``npuN`` in the network namespace the
tool runs in (the node container's): a macvlan in bridge mode on the node's uplink, so devices of
nodes on one podman network share an L2 segment and really reach (or fail to reach) each other.

* Uplink: the interface of the default route, or ``ASCEND_SIM_NIC_PARENT``.
* Fallback: where no uplink exists or the kernel refuses a macvlan, a ``dummy`` interface (or, in
  a kernel without the dummy driver, one end of a veth pair) carries the address instead; it is
  local only, so pings to other nodes from it fail.
* ``ASCEND_SIM_NET=off`` turns all of this off (settings are only stored, as before).

Everything goes through the ``ip`` program (iproute2) with argument lists, never a shell. The echo
check is done here too (ICMP over a datagram socket, else a raw socket, bound to ``npuN`` and the
device address), so a node image needs no ``ping`` program.
"""

from __future__ import annotations

import os
import re
import select
import socket
import struct
import subprocess
import time
from typing import NamedTuple

CAP_NET_ADMIN = 12
# Marks an interface that hccn_tool itself took down for a node.json link fault, so clearing the
# fault brings it back up while a down set by hand is left alone.
FAULT_ALIAS = "ascend-sim: link fault"


class NetError(Exception):
    """A network operation failed; the text is the reason shown to the user."""


def enabled() -> bool:
    return os.environ.get("ASCEND_SIM_NET", "on").lower() not in ("off", "0", "no", "false")


def ifname(dev: int) -> str:
    return f"npu{dev}"


def has_net_admin() -> bool:
    try:
        with open("/proc/self/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return False


def _ip(*args: str, check: bool = True) -> str:
    try:
        proc = subprocess.run(
            ["ip", *args],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise NetError("the ip command (iproute2) is not installed") from None
    if check and proc.returncode != 0:
        raise NetError(f"ip {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


class Link(NamedTuple):
    flags: list[str]
    state: str
    alias: str


def link_info(name: str) -> Link | None:
    """Flags, operstate and alias of an interface; None when it does not exist."""
    try:
        out = _ip("-o", "link", "show", "dev", name, check=False)
    except NetError:
        return None
    if not out.strip():
        return None
    flags = re.search(r"<([^>]*)>", out)
    state = re.search(r"\bstate (\S+)", out)
    alias = re.search(r"\balias (.*?)(?:\\|$)", out)
    return Link(
        flags.group(1).split(",") if flags else [],
        state.group(1) if state else "UNKNOWN",
        alias.group(1).strip() if alias else "",
    )


def link_up(name: str) -> bool | None:
    """Whether the interface's link is up (operstate UP; a dummy says UNKNOWN but LOWER_UP)."""
    info = link_info(name)
    if info is None:
        return None
    if info.state == "UP":
        return True
    return info.state == "UNKNOWN" and "UP" in info.flags and "LOWER_UP" in info.flags


def _parent() -> str | None:
    forced = os.environ.get("ASCEND_SIM_NIC_PARENT")
    if forced:
        return forced
    out = _ip("-o", "-4", "route", "show", "default", check=False)
    match = re.search(r"\bdev (\S+)", out)
    return match.group(1) if match else None


def _create(name: str) -> str:
    """Create ``name``; returns its kind ("macvlan", "dummy" or "veth")."""
    parent = _parent()
    if parent:
        try:
            _ip("link", "add", "link", parent, "name", name, "type", "macvlan", "mode", "bridge")
            return "macvlan"
        except NetError:
            pass
    # No uplink, or no macvlan in this kernel/container: a dummy still holds the address (and
    # answers local checks), but it reaches no other node. Kernels built without the dummy
    # driver get a veth pair instead, its peer ("npuN-peer") up and left unused: just as local.
    try:
        _ip("link", "add", name, "type", "dummy")
        return "dummy"
    except NetError:
        pass
    _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}-peer")
    _ip("link", "set", "dev", f"{name}-peer", "up")
    return "veth"


def _addresses(name: str) -> list[str]:
    out = _ip("-o", "-4", "addr", "show", "dev", name)
    return re.findall(r"\binet (\S+)", out)


def _sysctl_quiet(name: str, key: str, value: str) -> None:
    # Several npuN share one L2 and often one subnet: answer ARP only on the interface that owns
    # the address, so a downed device really stops answering. Best effort (read-only /proc/sys).
    try:
        with open(f"/proc/sys/net/ipv4/conf/{name}/{key}", "w", encoding="utf-8") as fh:
            fh.write(value)
    except OSError:
        pass


def configure(dev: int, address: str, prefix: int, down: bool) -> None:
    """Make ``npuN`` exist with exactly ``address/prefix``; up unless ``down`` (a link fault)."""
    name = ifname(dev)
    if link_info(name) is None:
        kind = _create(name)
        _sysctl_quiet(name, "arp_ignore", "1")
        _sysctl_quiet(name, "arp_announce", "2")
        if kind == "macvlan":
            _sysctl_quiet(parent_of(name), "arp_ignore", "1")
    want = f"{address}/{prefix}"
    have = _addresses(name)
    for cidr in have:
        if cidr != want:
            _ip("addr", "del", cidr, "dev", name)
    if want not in have:
        _ip("addr", "add", want, "brd", "+", "dev", name)
    apply_link(dev, down, setting=True)


def apply_link(dev: int, down: bool, setting: bool = False) -> None:
    """Bring the interface to the node description's link state (nothing when it is absent).

    A fault (``down``) takes it down and marks it; without one, only a NIC that hccn_tool itself
    took down comes back up, unless ``setting`` (the address setter brings the NIC up anyway).
    """
    name = ifname(dev)
    info = link_info(name)
    if info is None:
        return
    admin_up = "UP" in info.flags
    if down and admin_up:
        _ip("link", "set", "dev", name, "down")
        _ip("link", "set", "dev", name, "alias", FAULT_ALIAS)
    elif not down and (info.alias == FAULT_ALIAS or (setting and not admin_up)):
        if info.alias == FAULT_ALIAS:
            _ip("link", "set", "dev", name, "alias", "")
        _ip("link", "set", "dev", name, "up")


# --- ICMP echo ---------------------------------------------------------------------------------


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _icmp_socket() -> tuple[socket.socket, bool]:
    """A datagram ICMP socket (ping_group_range) if allowed, else a raw one (CAP_NET_RAW)."""
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP), False
    except OSError:
        pass
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), True
    except OSError as exc:
        raise NetError(f"cannot open an ICMP socket: {exc.strerror}") from None


def parent_of(name: str) -> str:
    out = _ip("-o", "link", "show", "dev", name, check=False)
    match = re.search(r"^\d+: [^@:]+@([^:]+):", out)
    return match.group(1) if match else ""


def echo(
    name: str, source: str, target: str, count: int, wait: float = 1.0
) -> list[float | None]:
    """Send ``count`` echo requests from ``name``/``source``; per request (seq 0 first) the
    round-trip time in ms, or None when no reply came within ``wait`` seconds."""
    sock, raw = _icmp_socket()
    ident = os.getpid() & 0xFFFF
    times: list[float | None] = []
    try:
        # Bound to the device address (``ping -I <address>``), not to the interface: where ARP
        # answers come from the uplink too (no arp_ignore in a container with a read-only
        # /proc/sys), replies may arrive there, and the host (weak host model) still takes them.
        sock.bind((source, 0))
        for seq in range(count):
            payload = struct.pack("!d", time.time()) + bytes(range(48))
            header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload
            sent = time.monotonic()
            try:
                sock.sendto(packet, (target, 0))
            except OSError:
                time.sleep(min(wait, 0.2))
                times.append(None)
                continue
            times.append(None)
            deadline = sent + wait
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([sock], [], [], left)[0]:
                    break
                data, addr = sock.recvfrom(2048)
                if raw:  # a raw socket sees the IP header and every ICMP packet
                    data = data[(data[0] & 0x0F) * 4 :]
                if len(data) < 8 or addr[0] != target:
                    continue
                kind, _code, _sum, rid, rseq = struct.unpack("!BBHHH", data[:8])
                # The kernel rewrites the id of a datagram socket; match it on raw ones only.
                if kind == 0 and rseq == seq and (rid == ident or not raw):
                    times[seq] = (time.monotonic() - sent) * 1000.0
                    break
    except OSError as exc:
        raise NetError(f"ping from {name} ({source}): {exc.strerror or exc}") from None
    finally:
        sock.close()
    return times
