"""The simulated ``hccn_tool`` with real device NICs, between two network namespaces
(``tests/simnet.py``: the namespaces, deleted by name afterwards)."""

from __future__ import annotations

import re
import shutil

import pytest
from simnet import NETMASK, MakeNode, SimNode, ip, make_node, pair, summary

__all__ = ["make_node", "pair"]  # fixtures, used by name


@pytest.fixture
def addressed(pair: tuple[SimNode, SimNode]) -> tuple[SimNode, SimNode]:
    """The pair with device 0 of A at 198.51.100.1 and device 0 of B at 198.51.100.2."""
    a, b = pair
    a.set_ip(0, "198.51.100.1")
    b.set_ip(0, "198.51.100.2")
    return a, b


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
    addressed: tuple[SimNode, SimNode],
) -> None:
    a, b = addressed
    before = a.link_details(), a.addrs()

    a.set_ip(0, "198.51.100.1")

    assert (a.link_details(), a.addrs()) == before  # same interface (ifindex, MAC), same address

    a.set_ip(0, "198.51.100.11")

    assert a.addrs() == ["198.51.100.11/24"]
    assert a.link_details().split(":")[0] == before[0].split(":")[0]  # same ifindex
    assert a.ok("-i", "0", "-ip", "-g").startswith("ipaddr:198.51.100.11\n")
    assert b.ping(0, "198.51.100.11", "pkt", "1").returncode == 0


def test_link_fault_takes_the_nic_down_and_breaks_the_peer_ping(
    addressed: tuple[SimNode, SimNode],
) -> None:
    a, b = addressed
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
