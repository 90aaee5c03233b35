"""The device IP plan: computed and explicit addresses, fleet-wide checks, /etc/hccn.conf."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from ascend_serve.network.netplan import NetPlan, NetPlanError, hccn_conf, plan

FILTERS = "ansible_collections.ascend_serve.fleet.plugins.filter.netplan"
A2_SUBNET = {"cidr": "192.168.100.0/24", "gateway": "192.168.100.1",
             "netdetect": "192.168.100.254"}
OLD_910_SUBNETS = [f"192.168.{n}.0/24" for n in range(100, 104)]


def _fleet(*hosts: dict[str, Any], subnets: Any = None, **settings: Any) -> dict[str, Any]:
    return {"subnets": [A2_SUBNET] if subnets is None else subnets, "hosts": list(hosts),
            **settings}


def _addresses(result: NetPlan, host: str) -> list[str]:
    return [d.address for d in result.hosts[host].devices]


def _problems(fleet: dict[str, Any]) -> list[str]:
    """The problems plan refuses the fleet for."""
    with pytest.raises(NetPlanError) as caught:
        plan(fleet)
    return caught.value.problems


def test_a2_hosts_follow_each_other_in_one_subnet_skipping_the_gateway() -> None:
    result = plan(_fleet({"name": "node-a", "chip": "910B"}, {"name": "node-b", "chip": "A2"}))
    assert list(result.hosts) == ["node-a", "node-b"]
    assert _addresses(result, "node-a") == [f"192.168.100.{n}" for n in range(2, 10)]
    assert _addresses(result, "node-b") == [f"192.168.100.{n}" for n in range(10, 18)]
    last = result.hosts["node-b"].devices[7]
    assert last.model_dump() == {"device": 7, "address": "192.168.100.17",
                                 "netmask": "255.255.255.0", "gateway": "192.168.100.1",
                                 "netdetect": "192.168.100.254"}
    assert result.hosts["node-b"].index == 1
    assert result.hosts["node-b"].chip == "910B"


def test_a3_hosts_have_16_devices_and_honour_offset_and_index() -> None:
    # An A3 fleet's default layout is dual_plane: the two dies of one NPU on two subnets.
    result = plan(_fleet({"name": "a3-0", "chip": "910C"}, {"name": "a3-1", "chip": "A3"},
                         {"name": "a3-7", "chip": "910C", "index": 7},
                         subnets=["10.20.0.0/23", "10.22.0.0/23"], offset=10))
    assert result.layout == "dual_plane"
    assert len(result.hosts["a3-0"].devices) == 16
    # ordinal = 10 + index * 8 + device // 2; usable address n is 10.2x.0.(n + 1)
    assert _addresses(result, "a3-0")[:2] == ["10.20.0.11", "10.22.0.11"]
    assert _addresses(result, "a3-1")[0] == "10.20.0.19"
    assert _addresses(result, "a3-1")[15] == "10.22.0.26"
    assert _addresses(result, "a3-7")[15] == "10.22.0.74"
    assert result.hosts["a3-1"].devices[0].netmask == "255.255.254.0"
    assert result.hosts["a3-1"].devices[0].gateway is None


def test_a3_hosts_never_share_one_subnet() -> None:
    with pytest.raises(NetPlanError, match=r"910C \(A3\) hosts cannot share one subnet: the "
                       r"two dies of one NPU must be on different subnets"):
        plan(_fleet({"name": "a3-0", "chip": "910C"}, subnets="10.20.0.0/23", layout="single"))
    with pytest.raises(NetPlanError, match="layout dual_plane needs 2 subnets"):
        plan(_fleet({"name": "a3-0", "chip": "910C"}, subnets="10.20.0.0/23"))


def test_old_910_pairs_devices_0_4_1_5_2_6_3_7_into_four_subnets() -> None:
    result = plan(_fleet({"name": "old-0", "chip": 910}, {"name": "old-1", "chip": "910"},
                         subnets=OLD_910_SUBNETS))
    old0, old1 = _addresses(result, "old-0"), _addresses(result, "old-1")
    assert old0 == ["192.168.100.1", "192.168.101.1", "192.168.102.1", "192.168.103.1",
                    "192.168.100.2", "192.168.101.2", "192.168.102.2", "192.168.103.2"]
    assert old1[0] == "192.168.100.3" and old1[4] == "192.168.100.4"
    assert old1[3] == "192.168.103.3" and old1[7] == "192.168.103.4"
    for device in range(4):  # device d and d + 4 share a subnet; 0-3 are in four subnets
        assert old0[device].rsplit(".", 1)[0] == old0[device + 4].rsplit(".", 1)[0]
    assert len({a.rsplit(".", 1)[0] for a in old0[:4]}) == 4


A3_PLANES = [{"cidr": "10.20.0.0/24", "gateway": "10.20.0.254"}, "10.21.0.0/24"]
RAILS = [f"192.168.{n}.0/24" for n in range(100, 108)]


def test_a3_dual_plane_puts_the_two_dies_of_an_npu_in_different_subnets() -> None:
    result = plan(_fleet({"name": "a3-0", "chip": "A3"}, {"name": "a3-1", "chip": "910C"},
                         subnets=A3_PLANES, layout="dual_plane"))
    a3_0, a3_1 = _addresses(result, "a3-0"), _addresses(result, "a3-1")
    # even devices (die 0) in the first subnet, odd devices (die 1) in the second
    assert a3_0[:4] == ["10.20.0.1", "10.21.0.1", "10.20.0.2", "10.21.0.2"]
    assert a3_0[14:] == ["10.20.0.8", "10.21.0.8"]
    assert a3_1[0] == "10.20.0.9" and a3_1[15] == "10.21.0.16"
    for npu in range(8):  # die 0 and die 1 of every NPU: different subnets
        assert a3_0[2 * npu].split(".")[1] != a3_0[2 * npu + 1].split(".")[1]
    assert result.layout == "dual_plane"
    dev1 = result.hosts["a3-1"].devices[1]
    assert (dev1.netmask, dev1.gateway) == ("255.255.255.0", None)
    assert result.hosts["a3-1"].devices[0].gateway == "10.20.0.254"


def test_rail_gives_each_device_position_its_own_subnet() -> None:
    result = plan(_fleet({"name": "n0", "chip": "910B"}, {"name": "n1", "chip": "910B"},
                         subnets=RAILS, layout="rail", offset=9))
    assert _addresses(result, "n0") == [f"192.168.{100 + d}.10" for d in range(8)]
    assert _addresses(result, "n1") == [f"192.168.{100 + d}.11" for d in range(8)]
    a3 = plan(_fleet({"name": "a3", "chip": "910C"}, layout="rail",
                     subnets=[f"10.{n}.0.0/24" for n in range(16)]))
    assert _addresses(a3, "a3")[15] == "10.15.0.1"


def test_explicit_four_plane_is_the_old_910_default() -> None:
    fleet = _fleet({"name": "old-0", "chip": "910"}, subnets=OLD_910_SUBNETS)
    assert plan({**fleet, "layout": "four_plane"}) == plan(fleet)
    assert plan(fleet).layout == "four_plane"


def test_real_address_plans_of_the_corpus_fit_the_layouts() -> None:
    """Explicit addresses read from real ``hccn_tool -ip -g`` loops (tests/data/corpus)."""
    four_planes = ["192.1.45.172", "192.2.167.33", "192.3.103.252", "192.4.166.202",
                   "192.1.157.81", "192.2.8.198", "192.3.26.213", "192.4.32.120"]
    planned = plan(_fleet({"name": "worker-9", "chip": "910", "addresses": four_planes},
                          subnets=[f"192.{n}.0.0/16" for n in range(1, 5)]))
    assert _addresses(planned, "worker-9") == four_planes
    one_subnet = [f"11.12.165.{n}" for n in range(80, 88)]
    planned = plan(_fleet({"name": "a2", "chip": "910B", "addresses": one_subnet},
                          subnets=[{"cidr": "11.12.165.0/24", "gateway": "11.12.165.1",
                                    "netdetect": "11.12.165.1"}]))
    assert _addresses(planned, "a2") == one_subnet


def test_rail_duplicates_and_overlaps_name_both() -> None:
    explicit = [f"192.168.{100 + d}.{2 if d == 5 else 40}" for d in range(8)]
    assert _problems(_fleet({"name": "node-a", "chip": "910B"}, {"name": "node-b", "chip": "910B"},
                            {"name": "node-c", "chip": "910B", "addresses": explicit},
                            subnets=RAILS, layout="rail")) == [
        "192.168.105.2 is assigned to both host node-b device 5 and host node-c device 5"]
    assert _problems(_fleet({"name": "a", "chip": "910B"}, layout="rail",
                            subnets=[*RAILS[:7], "192.168.100.0/23"])) == [
        "subnets 192.168.100.0/24 and 192.168.100.0/23 overlap",
        "subnets 192.168.101.0/24 and 192.168.100.0/23 overlap"]


def test_hccn_conf_of_a_dual_plane_host_has_each_subnet_mask() -> None:
    result = plan(_fleet({"name": "a3", "chip": "910C"}, layout="dual_plane",
                         subnets=["10.20.0.0/24", "10.21.0.0/16"]))
    text = hccn_conf(result.hosts["a3"])
    assert "address_0=10.20.0.1\nnetmask_0=255.255.255.0\n" in text
    assert "address_1=10.21.0.1\nnetmask_1=255.255.0.0\n" in text


@pytest.mark.parametrize(
    ("fleet", "message"),
    [
        (_fleet({"name": "a", "chip": "910B"}, layout="dual_plane", subnets=A3_PLANES),
         "layout dual_plane is for 910C (A3: the two dies of one NPU on different subnets); "
         "this plan has 910B hosts"),
        (_fleet({"name": "a", "chip": "910C"}, layout="dual_plane", subnets=RAILS[:3]),
         "layout dual_plane needs 2 subnets (even devices, die 0 of each NPU, in the first; odd "
         "devices, die 1, in the second); got 3"),
        (_fleet({"name": "a", "chip": "910C"}, layout="rail", subnets=RAILS),
         "layout rail needs one subnet per device position: 16 for 910C; got 8"),
        (_fleet({"name": "a", "chip": "910B"}, {"name": "b", "chip": "910C"}, layout="rail",
                subnets=RAILS),
         "layout rail needs the same number of devices on every host; this plan mixes 910B (8) "
         "and 910C (16)"),
        (_fleet({"name": "a", "chip": "910B"}, layout="four_plane", subnets=OLD_910_SUBNETS),
         "layout four_plane is the old 910's; this plan has 910B hosts (use single, dual_plane "
         "or rail)"),
        (_fleet({"name": "a", "chip": "910"}, layout="single"),
         "the old 910 uses four_plane or rail, not a single subnet"),
        (_fleet({"name": "a", "chip": "910B"}, layout="planes"),
         "layout: Input should be 'single', 'four_plane', 'dual_plane' or 'rail'"),
    ],
    ids=["dual-a2", "dual-3", "rail-count", "rail-mixed", "four-a2", "single-910", "unknown"],
)
def test_layout_problems(fleet: dict[str, Any], message: str) -> None:
    assert message in _problems(fleet)


def test_gateway_and_netdetect_are_skipped_inside_the_range() -> None:
    subnet = {"cidr": "10.0.0.0/28", "gateway": "10.0.0.3", "netdetect": "10.0.0.5"}
    result = plan(_fleet({"name": "a", "chip": "910B"}, subnets=[subnet]))
    assert _addresses(result, "a") == [f"10.0.0.{n}" for n in (1, 2, 4, 6, 7, 8, 9, 10)]


def test_subnet_too_small_names_host_and_device() -> None:
    subnet = {"cidr": "10.0.0.0/28", "gateway": "10.0.0.3", "netdetect": "10.0.0.5"}
    with pytest.raises(NetPlanError) as caught:
        plan(_fleet({"name": "a", "chip": "910B"}, {"name": "b", "chip": "910B"},
                    subnets=[subnet]))
    assert str(caught.value) == (
        "device IP plan: host b device 4: subnet 10.0.0.0/28 is too small; the device needs "
        "usable address #12 (offset 0 + index 1 x 8 + 4) and the subnet has 12; use a larger "
        "subnet or explicit addresses"
    )


def test_explicit_addresses_are_used_as_given() -> None:
    explicit = [f"192.168.100.{n}" for n in (50, 51, 52, 53, 60, 61, 62, 63)]
    result = plan(_fleet({"name": "a", "chip": "910B"},
                         {"name": "b", "chip": "910B", "addresses": explicit}))
    assert _addresses(result, "b") == explicit
    assert result.hosts["b"].devices[4].netmask == "255.255.255.0"


def test_duplicate_across_two_hosts_names_both_hosts_and_devices() -> None:
    explicit = [f"192.168.100.{n}" for n in (20, 21, 5, 23, 24, 25, 26, 27)]
    assert _problems(_fleet({"name": "node-a", "chip": "910B"},
                            {"name": "node-b", "chip": "910B", "addresses": explicit})) == [
        "192.168.100.5 is assigned to both host node-a device 3 and host node-b device 2"
    ]


def test_same_index_twice_collides_on_every_device() -> None:
    with pytest.raises(NetPlanError) as caught:
        plan(_fleet({"name": "a", "chip": "910B"}, {"name": "b", "chip": "910B", "index": 0}))
    assert len(caught.value.problems) == 8
    assert "192.168.100.2 is assigned to both host a device 0 and host b device 0" in str(
        caught.value)


@pytest.mark.parametrize(
    ("fleet", "message"),
    [
        (_fleet({"name": "a", "chip": "910B", "addresses": ["192.168.100.9"] * 7}),
         "host a (910B) lists 7 addresses; a 910B host has 8 devices (0-7)"),
        (_fleet({"name": "a", "chip": "910B",
                 "addresses": [f"192.168.100.{n}" for n in range(10, 17)] + ["10.0.0.1"]}),
         "host a device 7: 10.0.0.1 is outside its subnet 192.168.100.0/24"),
        (_fleet({"name": "a", "chip": "910", "addresses": [f"192.168.100.{n}" for n in range(8)]},
                subnets=OLD_910_SUBNETS),
         "host a device 1: 192.168.100.1 is outside its subnet 192.168.101.0/24"),
        (_fleet({"name": "a", "chip": "910B",
                 "addresses": [f"192.168.100.{n}" for n in range(0, 8)]}),
         "host a device 0: 192.168.100.0 is the network or broadcast address of 192.168.100.0/24"),
        (_fleet({"name": "a", "chip": "910B",
                 "addresses": [f"192.168.100.{n}" for n in (250, 251, 252, 253, 254, 2, 3, 4)]}),
         "host a device 4: 192.168.100.254 is the netdetect of 192.168.100.0/24"),
        (_fleet({"name": "a", "chip": "910B",
                 "addresses": [f"192.168.100.{n}" for n in range(1, 9)]}),
         "host a device 0: 192.168.100.1 is the gateway of 192.168.100.0/24"),
    ],
    ids=["count", "outside", "old-910-subnet", "network", "netdetect", "gateway"],
)
def test_explicit_address_problems(fleet: dict[str, Any], message: str) -> None:
    assert message in _problems(fleet)


@pytest.mark.parametrize(
    ("fleet", "message"),
    [
        (_fleet({"name": "a", "chip": "910"}, {"name": "b", "chip": "910B"},
                subnets=OLD_910_SUBNETS),
         "old 910 hosts (four subnets) cannot share a plan with 910B hosts (one subnet); "
         "plan them separately"),
        (_fleet({"name": "a", "chip": "910"}),
         "old 910 needs 4 subnets (devices 0/4, 1/5, 2/6, 3/7 share one each)"),
        (_fleet({"name": "a", "chip": "910B"}, subnets=OLD_910_SUBNETS),
         "910B puts all devices of a host in one subnet; got 4"),
        (_fleet({"name": "a", "chip": "910"},
                subnets=[*OLD_910_SUBNETS[:3], "192.168.100.128/25"]),
         "subnets 192.168.100.0/24 and 192.168.100.128/25 overlap"),
        (_fleet({"name": "a", "chip": "910B"}, subnets=[{"cidr": "10.0.0.0/24",
                                                          "gateway": "10.0.1.1"}]),
         "gateway 10.0.1.1 is outside its subnet 10.0.0.0/24"),
        (_fleet({"name": "a", "chip": "910B"}, subnets=[{"cidr": "10.0.0.0/24",
                                                          "netdetect": "10.0.0.255"}]),
         "netdetect 10.0.0.255 is the network or broadcast address of 10.0.0.0/24"),
        (_fleet({"name": "a", "chip": "910B"}, {"name": "a", "chip": "910B"}),
         "host a is listed twice"),
        (_fleet({"name": "a", "chip": "310P"}), "hosts.0.chip: Input should be '910', '910B' or "
         "'910C'"),
        (_fleet({"name": "a", "chip": "910B", "adresses": []}),
         "hosts.0.adresses: Extra inputs are not permitted"),
        (_fleet({"name": "a", "chip": "910B"}, subnets=["10.0.0.0/31"]),
         "subnets.0.cidr: Value error, 10.0.0.0/31 is too small for device addresses "
         "(at most /30)"),
        (_fleet({"name": "a", "chip": "910B"}, subnets=["10.0.0.1/24"]),
         "subnets.0.cidr: Input is not a valid IPv4 network"),
    ],
    ids=["mixed-910", "910-one-subnet", "a2-four-subnets", "overlap", "gateway-outside",
         "netdetect-broadcast", "duplicate-name", "chip", "typo", "slash-31", "host-bits"],
)
def test_fleet_problems(fleet: dict[str, Any], message: str) -> None:
    assert message in _problems(fleet)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(NetPlanError) as caught:
        plan(_fleet({"name": "a", "chip": "910B", "addresses": []},
                    {"name": "b", "chip": "910C", "addresses": ["10.9.9.9"] * 16}))
    assert len(caught.value.problems) == 17
    assert str(caught.value).startswith("device IP plan has 17 problems:\n- host a (910B) lists")


HOST = {"name": "node-a", "chip": "910B", "index": 0, "tls": False, "devices": [
    {"device": 0, "address": "192.168.100.2", "netmask": "255.255.255.0",
     "gateway": "192.168.100.1", "netdetect": "192.168.100.254"},
    {"device": 1, "address": "192.168.100.3", "netmask": "255.255.255.0"},
]}


def test_hccn_conf_text() -> None:
    assert hccn_conf(HOST) == (
        "address_0=192.168.100.2\n"
        "netmask_0=255.255.255.0\n"
        "netdetect_0=192.168.100.254\n"
        "gateway_0=192.168.100.1\n"
        "send_arp_status_0=1\n"
        "tls_enable_0=0\n"
        "address_1=192.168.100.3\n"
        "netmask_1=255.255.255.0\n"
        "send_arp_status_1=1\n"
        "tls_enable_1=0\n"
    )


def test_hccn_conf_of_a_planned_host_with_tls() -> None:
    result = plan(_fleet({"name": "a", "chip": "910B"}, {"name": "b", "chip": "910B", "tls": False},
                         tls=True))
    text = hccn_conf(result.hosts["a"])
    assert len(text.splitlines()) == 8 * 6
    assert text.endswith(
        "address_7=192.168.100.9\nnetmask_7=255.255.255.0\nnetdetect_7=192.168.100.254\n"
        "gateway_7=192.168.100.1\nsend_arp_status_7=1\ntls_enable_7=1\n"
    )
    assert "tls_enable_0=0\n" in hccn_conf(result.hosts["b"])


def test_filters_match_the_package_and_raise_ansible_errors() -> None:
    module = importlib.import_module(FILTERS)
    filters = module.FilterModule().filters()
    fleet = _fleet({"name": "a", "chip": "910B"}, {"name": "b", "chip": "910B"})
    planned = filters["device_ip_plan"](fleet)
    assert planned == plan(fleet).model_dump()
    assert planned["hosts"]["b"]["devices"][0]["address"] == "192.168.100.10"
    assert filters["hccn_conf"](planned["hosts"]["a"]) == hccn_conf(plan(fleet).hosts["a"])
    dual = _fleet({"name": "a3", "chip": "910C"}, layout="dual_plane", subnets=A3_PLANES)
    assert filters["device_ip_plan"](dual) == plan(dual).model_dump()
    assert filters["device_ip_plan"](dual)["layout"] == "dual_plane"
    errors = importlib.import_module("ansible.errors")
    with pytest.raises(errors.AnsibleFilterError, match="host a device 0 and host b device 0"):
        filters["device_ip_plan"](
            _fleet({"name": "a", "chip": "910B"}, {"name": "b", "chip": "910B", "index": 0}))
    with pytest.raises(errors.AnsibleFilterError, match="devices"):
        filters["hccn_conf"]({"name": "a"})
