"""The simulated ``hccn_tool`` with real device NICs, between two network namespaces.

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

MOLECULE_DIR = Path(__file__).resolve().parent.parent / "molecule"
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
            "PYTHONPATH": str(MOLECULE_DIR),
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


def test_set_ip_makes_a_real_nic_and_ping_crosses_nodes(pair: tuple[SimNode, SimNode]) -> None:
    a, b = pair
    a.set_ip(0, "198.51.100.1")
    b.set_ip(0, "198.51.100.2")

    assert a.ok("-i", "0", "-ip", "-g") == f"ipaddr:198.51.100.1\nnetmask:{NETMASK}\n"
    assert a.addrs() == ["198.51.100.1/24"]
    assert b.addrs() == ["198.51.100.2/24"]
    details = a.link_details()
    assert "macvlan mode bridge" in details
    assert re.search(r"npu0@hv\w+:", details), details  # on the uplink of the default route
    assert a.link() == b.link() == "link status: UP"

    proc = a.ping(0, "198.51.100.2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "device 0 PING 198.51.100.2"
    # as the real tool (tests/data/corpus/hccn_tool/ping-g-loop-8dev-ok-a2-mindie.txt)
    assert all(re.fullmatch(r"recv seq=\d+,time=\d+\.\d{6}ms", line) for line in lines[1:-1])
    assert summary(proc.stdout) == (3, 3, "0.00")

    proc = b.ping(0, "198.51.100.1", "pkt", "2")
    assert proc.returncode == 0, proc.stderr
    assert summary(proc.stdout) == (2, 2, "0.00")


def test_ping_to_an_absent_peer_fails(pair: tuple[SimNode, SimNode]) -> None:
    a, _ = pair
    a.set_ip(0, "198.51.100.1")

    proc = a.ping(0, "198.51.100.99", "pkt", "2")

    assert proc.returncode == 1
    # each lost request as the real tool prints it (ping-g-partial-loss-33pct-mindie-doc.txt)
    assert proc.stdout.splitlines()[1:3] == ["recv time out seq=0", "recv time out seq=1"]
    assert summary(proc.stdout) == (2, 0, "100.00")


def test_set_ip_is_idempotent_and_a_new_address_replaces_the_old(
    pair: tuple[SimNode, SimNode],
) -> None:
    a, b = pair
    a.set_ip(0, "198.51.100.1")
    b.set_ip(0, "198.51.100.2")
    before = a.link_details(), a.addrs()

    a.set_ip(0, "198.51.100.1")

    assert (a.link_details(), a.addrs()) == before  # same interface (ifindex, MAC), same address

    a.set_ip(0, "198.51.100.11")

    assert a.addrs() == ["198.51.100.11/24"]
    assert a.link_details().split(":")[0] == before[0].split(":")[0]  # same ifindex
    assert a.ok("-i", "0", "-ip", "-g").startswith("ipaddr:198.51.100.11\n")
    assert b.ping(0, "198.51.100.11", "pkt", "1").returncode == 0


def test_link_fault_takes_the_nic_down_and_breaks_the_peer_ping(
    pair: tuple[SimNode, SimNode],
) -> None:
    a, b = pair
    a.set_ip(0, "198.51.100.1")
    b.set_ip(0, "198.51.100.2")
    b.ok("-i", "0", "-netdetect", "-s", "address", "198.51.100.1")
    assert b.ok("-i", "0", "-net_health", "-g") == "net health status: Success\n"
    assert a.ping(0, "198.51.100.2", "pkt", "1").returncode == 0

    b.set_link_fault(0, "DOWN")

    assert b.link() == "link status: DOWN"
    assert "UP" not in b.flags()
    assert b.ok("-i", "0", "-net_health", "-g") == "net health status: Fault\n"
    proc = a.ping(0, "198.51.100.2")
    assert proc.returncode == 1
    assert summary(proc.stdout) == (3, 0, "100.00")
    own = b.ping(0, "198.51.100.1")
    assert own.returncode == 1
    assert "link status is DOWN" in own.stderr
    assert a.link() == "link status: UP"  # the other node is untouched

    b.set_link_fault(0, None)

    assert b.link() == "link status: UP"
    assert a.ping(0, "198.51.100.2", "pkt", "1").returncode == 0


def test_a_nic_downed_by_hand_reports_down_and_stays_down(pair: tuple[SimNode, SimNode]) -> None:
    a, _ = pair
    a.set_ip(0, "198.51.100.1")

    ip("-n", a.ns, "link", "set", "dev", "npu0", "down")

    assert a.link() == "link status: DOWN"
    assert a.link() == "link status: DOWN"  # only hccn_tool's own fault downs are undone
    a.set_ip(0, "198.51.100.1")  # the setter brings the device NIC up
    assert a.link() == "link status: UP"


def test_net_health_needs_address_and_netdetect(pair: tuple[SimNode, SimNode]) -> None:
    a, _ = pair
    assert a.ok("-i", "1", "-net_health", "-g") == "net health status: Init\n"
    a.set_ip(1, "198.51.100.21")
    assert a.ok("-i", "1", "-net_health", "-g") == "net health status: Init\n"
    a.ok("-i", "1", "-netdetect", "-s", "address", "198.51.100.254")
    assert a.ok("-i", "1", "-net_health", "-g") == "net health status: Success\n"
    assert a.addrs("npu1") == ["198.51.100.21/24"]


def test_ping_without_address_fails(pair: tuple[SimNode, SimNode]) -> None:
    a, _ = pair
    proc = a.ping(0, "198.51.100.2")
    assert proc.returncode == 1
    assert proc.stderr == "hccn_tool: ping failed, device 0 ip is not configured\n"


def test_no_uplink_falls_back_to_a_local_nic(make_node: MakeNode) -> None:
    alone = make_node("c")  # no default route

    alone.set_ip(0, "198.51.100.5")

    # a dummy; a veth pair where the kernel has no dummy driver (as on the CI host)
    assert re.search(r"\b(dummy|veth) ", alone.link_details())
    assert alone.addrs() == ["198.51.100.5/24"]
    assert alone.link() == "link status: UP"


def test_store_only_when_the_network_is_off(pair: tuple[SimNode, SimNode]) -> None:
    a, _ = pair
    proc = a.hccn("-i", "0", "-ip", "-s", "address", "198.51.100.1", "netmask", NETMASK,
                  env={"ASCEND_SIM_NET": "off"})
    assert proc.returncode == 0, proc.stderr
    assert a.ok("-i", "0", "-ip", "-g").startswith("ipaddr:198.51.100.1\n")
    assert "npu0" not in ip("-n", a.ns, "-o", "link", "show")


def test_set_ip_without_cap_net_admin_fails(pair: tuple[SimNode, SimNode]) -> None:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop CAP_NET_ADMIN")
    a, _ = pair
    drop = (setpriv, "--bounding-set=-net_admin", "--inh-caps=-net_admin", "--")

    proc = a.hccn("-i", "0", "-ip", "-s", "address", "198.51.100.1", "netmask", NETMASK,
                  prefix=drop)

    assert proc.returncode == 1
    assert proc.stderr == (
        "hccn_tool: set ip failed, operation not permitted (CAP_NET_ADMIN is needed)\n"
    )
    assert a.ok("-i", "0", "-ip", "-g") == ""  # no address: no output, as the real tool
    assert "npu0" not in ip("-n", a.ns, "-o", "link", "show")


def test_bad_netmask_is_a_parameter_error(pair: tuple[SimNode, SimNode]) -> None:
    a, _ = pair
    proc = a.hccn("-i", "0", "-ip", "-s", "address", "198.51.100.1", "netmask", "255.0.255.0")
    assert proc.returncode == 1
    assert proc.stderr.startswith("hccn_tool: bad parameter")
