"""Two simulated nodes in network namespaces, for the ``hccn_tool`` tests (sim and collection).

Each "node" is a network namespace of its own with an uplink (one end of a veth pair joining the
two) and a default route over it, as a podman container on a network has; ``hccn_tool`` runs in
it through ``ip netns exec`` against the node's own ``node.json`` (``ASCEND_SIM_NODE``). Device
addresses are in 198.51.100.0/24, the uplinks in 192.0.2.0/24; both exist only in the namespaces
made here, which are deleted by name afterwards.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ascend_sim import models

NETMASK = "255.255.255.0"
SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received, ([\d.]+)% packet loss$", re.M)


def _netns_usable() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (creates network namespaces and interfaces)"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"ip netns is unavailable: {probe.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_netns_usable() is not None, reason=str(_netns_usable()))


def ip(*args: str) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"ip {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@dataclass
class SimNode:
    ns: str
    node_file: Path
    root: Path

    def hccn(
        self, *args: str, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "ASCEND_SIM_NODE": str(self.node_file),
            "ASCEND_SIM_ROOT": str(self.root),
            **(env or {}),
        }
        command = ["ip", "netns", "exec", self.ns, *prefix, sys.executable, "-m",
                   "ascend_sim.devtools.hccn_tool", *args]
        return subprocess.run(command, capture_output=True, text=True, env=full_env,
                              check=False, timeout=60)

    def ok(self, *args: str) -> str:
        proc = self.hccn(*args)
        assert proc.returncode == 0, f"hccn_tool {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def set_ip(self, dev: int, address: str) -> None:
        self.ok("-i", str(dev), "-ip", "-s", "address", address, "netmask", NETMASK)

    def ping(self, dev: int, address: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.hccn("-i", str(dev), "-ping", "-g", "address", address, *extra)

    def link(self, dev: int = 0) -> str:
        return self.ok("-i", str(dev), "-link", "-g").strip()

    def set_link_fault(self, dev: int, state: str | None) -> None:
        data = json.loads(self.node_file.read_text())
        net = data.setdefault("device_net", {}).setdefault(str(dev), {})
        if state is None:
            net.pop("link", None)
        else:
            net["link"] = state
        self.node_file.write_text(json.dumps(data))

    def addrs(self, name: str = "npu0") -> list[str]:
        return re.findall(r"\binet (\S+)", ip("-n", self.ns, "-o", "-4", "addr", "show", "dev",
                                              name))

    def link_details(self, name: str = "npu0") -> str:
        return ip("-n", self.ns, "-d", "-o", "link", "show", "dev", name)

    def flags(self, name: str = "npu0") -> list[str]:
        match = re.search(r"<([^>]*)>", self.link_details(name))
        assert match
        return match.group(1).split(",")


MakeNode = Callable[..., SimNode]


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[MakeNode]:
    """Creates namespaces ("nodes"); deletes exactly those afterwards."""
    suffix = secrets.token_hex(3)
    created: list[str] = []

    def make(tag: str, uplink: str | None = None, peer: SimNode | None = None) -> SimNode:
        ns = f"hccn-{suffix}-{tag}"
        ip("netns", "add", ns)
        created.append(ns)
        ip("-n", ns, "link", "set", "lo", "up")
        node_file = tmp_path / f"{tag}.json"
        models.make_node("atlas800-a2", 2).save(node_file)
        root = tmp_path / f"root-{tag}"
        root.mkdir()
        node = SimNode(ns, node_file, root)
        if peer is not None and uplink is not None:
            mine, theirs = f"hv{suffix}{tag}", f"hv{suffix}{peer.ns[-1]}"
            ip("-n", ns, "link", "add", mine, "type", "veth", "peer", "name", theirs, "netns",
               peer.ns)
            for space, dev in ((ns, mine), (peer.ns, theirs)):
                ip("-n", space, "link", "set", dev, "up")
            peer_uplink = uplink.rsplit(".", 1)[0] + ".1"
            ip("-n", peer.ns, "addr", "add", f"{peer_uplink}/24", "dev", theirs)
            ip("-n", peer.ns, "route", "add", "default", "via", uplink, "dev", theirs)
            ip("-n", ns, "addr", "add", f"{uplink}/24", "dev", mine)
            ip("-n", ns, "route", "add", "default", "via", peer_uplink, "dev", mine)
        return node

    yield make
    for ns in reversed(created):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture
def pair(make_node: MakeNode) -> tuple[SimNode, SimNode]:
    """Nodes A and B on one L2 segment (a veth pair), each with a default route over it."""
    a = make_node("a")
    b = make_node("b", uplink="192.0.2.2", peer=a)
    return a, b


def summary(out: str) -> tuple[int, int, str]:
    match = SUMMARY.search(out)
    assert match, out
    return int(match.group(1)), int(match.group(2)), match.group(3)


# --- tests -------------------------------------------------------------------------------------
