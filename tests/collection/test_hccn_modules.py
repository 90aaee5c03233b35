"""The hccn_config, hccn_facts and hccn_ping modules against the simulator's real hccn_tool.

The tool is the simulator's ``hccn_tool`` run as a program (a small wrapper script in tmp_path)
on a node description of this test, in store-only mode (``ASCEND_SIM_NET=off``: no interfaces).
The modules' ``run`` functions are called directly with a subprocess runner; each module's
``main`` is run once as Ansible runs it (a process with a JSON argument file). One test pings
through real device NICs between two network namespaces, reusing tests/simnet.py.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simnet
from ansible_run import module_result

from ascend_sim import models

MODULES = "ansible_collections.ascend_serve.fleet.plugins.modules"
hccn = importlib.import_module("ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn")
hccn_config = importlib.import_module(f"{MODULES}.hccn_config")
hccn_facts = importlib.import_module(f"{MODULES}.hccn_facts")
hccn_ping = importlib.import_module(f"{MODULES}.hccn_ping")
# The simulator's network tests (tests/ is on sys.path as the conftest's directory).

HccnError = hccn.HccnError
HccnParseError = hccn.HccnParseError
Runner = Callable[[list[str]], tuple[int, str, str]]
MASK = "255.255.255.0"

# The two-namespace fixtures of the simulator's own network tests (skipped without root).
make_node = simnet.make_node
pair = simnet.pair


def subprocess_runner(argv: list[str]) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def write_tool(path: Path, node_file: Path, root: Path, net: bool = False,
               netns: str | None = None) -> str:
    """An executable hccn_tool: the simulator's, on ``node_file``, optionally inside ``netns``."""
    env = {
        "PYTHONDONTWRITEBYTECODE": "1",
        "ASCEND_SIM_NODE": str(node_file),
        "ASCEND_SIM_ROOT": str(root),
        "ASCEND_SIM_NET": "on" if net else "off",
    }
    prefix = ["ip", "netns", "exec", netns] if netns else []
    argv = [*prefix, sys.executable, "-m", "ascend_sim.devtools.hccn_tool"]
    path.write_text(
        "#!/bin/sh\n"
        + "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())
        + "exec " + " ".join(shlex.quote(arg) for arg in argv) + ' "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def node(node_file: Path) -> Path:
    """An 8-chip A2 node description (device ids 0-7)."""
    models.make_node("atlas800-a2").save(node_file)
    return node_file


@pytest.fixture
def tool(tmp_path: Path, node: Path, sim_root: Path) -> str:
    return write_tool(tmp_path / "hccn_tool", node, sim_root)


def device_net(node_file: Path) -> dict[str, dict[str, str]]:
    net: dict[str, dict[str, str]] = json.loads(node_file.read_text()).get("device_net", {})
    return net


def set_link(node_file: Path, device: int, state: str) -> None:
    data = json.loads(node_file.read_text())
    data.setdefault("device_net", {}).setdefault(str(device), {})["link"] = state
    node_file.write_text(json.dumps(data))


def plan(*devices: int, **overrides: Any) -> list[dict[str, Any]]:
    return [{"device": d, "address": f"198.51.100.{d + 1}", "netmask": MASK,
             "netdetect": "198.51.100.254", "gateway": None, "tls": False, **overrides}
            for d in devices]


def apply(tool: str, devices: list[dict[str, Any]], check_mode: bool = False,
          runner: Runner = subprocess_runner) -> dict[str, Any]:
    result: dict[str, Any] = hccn_config.run(
        {"devices": devices, "tool": tool, "workers": 8}, check_mode, runner)
    return result


def facts(tool: str, devices: list[int], runner: Runner = subprocess_runner) -> dict[str, Any]:
    result: dict[str, Any] = hccn_facts.run(
        {"devices": devices, "tool": tool, "workers": 8}, runner)
    return result


class Recorder:
    """A runner that records every argument list (and can drop some calls)."""

    def __init__(self, drop: Callable[[list[str]], bool] = lambda argv: False) -> None:
        self.calls: list[list[str]] = []
        self.drop = drop

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        if self.drop(argv):
            return 0, "", ""
        return subprocess_runner(argv)

    def setters(self) -> list[list[str]]:
        return [argv[1:] for argv in self.calls if "-s" in argv]


# --- hccn_config ---------------------------------------------------------------------------------


def test_first_apply_sets_everything_and_the_second_changes_nothing(
    tool: str, node: Path
) -> None:
    wanted = plan(0, 1, 2, 3)
    wanted[0]["gateway"] = "198.51.100.254"
    wanted[3]["tls"] = True

    first = apply(tool, wanted)

    assert first["changed"] is True
    assert [d["device"] for d in first["devices"]] == [0, 1, 2, 3]
    assert [d["changes"] for d in first["devices"]] == [
        ["address", "netmask", "netdetect", "gateway"],
        ["address", "netmask", "netdetect"],
        ["address", "netmask", "netdetect"],
        ["address", "netmask", "netdetect", "tls"],
    ]
    assert first["devices"][0]["before"] == {
        "address": None, "netmask": None, "netdetect": None, "gateway": None, "tls": False}
    assert first["devices"][0]["after"] == {
        "address": "198.51.100.1", "netmask": MASK, "netdetect": "198.51.100.254",
        "gateway": "198.51.100.254", "tls": False}
    net = device_net(node)
    assert net["0"] == {"address": "198.51.100.1", "netmask": MASK,
                        "netdetect": "198.51.100.254", "gateway": "198.51.100.254"}
    assert net["3"]["tls"] == "1"
    assert "4" not in net

    recorder = Recorder()
    second = apply(tool, wanted, runner=recorder)

    assert second["changed"] is False
    assert [d["changes"] for d in second["devices"]] == [[], [], [], []]
    assert recorder.setters() == []
    assert device_net(node) == net


def test_setters_run_in_vendor_order_with_an_argument_list(tool: str) -> None:
    recorder = Recorder()
    apply(tool, plan(5, gateway="198.51.100.253", tls=True), runner=recorder)

    assert recorder.setters() == [
        ["-i", "5", "-ip", "-s", "address", "198.51.100.6", "netmask", MASK],
        ["-i", "5", "-netdetect", "-s", "address", "198.51.100.254"],
        ["-i", "5", "-gateway", "-s", "gateway", "198.51.100.253"],
        ["-i", "5", "-tls", "-s", "enable", "1"],
    ]
    assert all(argv[0] == tool for argv in recorder.calls)


def test_a_changed_netmask_changes_only_that_device_and_field(tool: str, node: Path) -> None:
    wanted = plan(0, 1, 2)
    apply(tool, wanted)
    wanted[2]["netmask"] = "255.255.0.0"

    recorder = Recorder()
    result = apply(tool, wanted, runner=recorder)

    assert result["changed"] is True
    assert [d["changes"] for d in result["devices"]] == [[], [], ["netmask"]]
    assert recorder.setters() == [
        ["-i", "2", "-ip", "-s", "address", "198.51.100.3", "netmask", "255.255.0.0"]]
    assert result["devices"][2]["after"]["netmask"] == "255.255.0.0"
    assert device_net(node)["2"]["netmask"] == "255.255.0.0"
    assert device_net(node)["1"]["netmask"] == MASK


def test_check_mode_reports_and_changes_nothing(tool: str, node: Path) -> None:
    before = node.read_bytes()
    recorder = Recorder()

    result = apply(tool, plan(0, 1), check_mode=True, runner=recorder)

    assert result["changed"] is True
    assert [d["changes"] for d in result["devices"]] == [["address", "netmask", "netdetect"]] * 2
    assert recorder.setters() == []
    assert node.read_bytes() == before


def test_diff_is_in_hccn_conf_style(tool: str) -> None:
    apply(tool, plan(0, 1))

    result = apply(tool, plan(0, 1, netmask="255.255.0.0", netdetect=None), check_mode=True)

    assert result["diff"] == {
        "before": (
            "address_0=198.51.100.1\nnetmask_0=255.255.255.0\nnetdetect_0=198.51.100.254\n"
            "tls_enable_0=0\n"
            "address_1=198.51.100.2\nnetmask_1=255.255.255.0\nnetdetect_1=198.51.100.254\n"
            "tls_enable_1=0\n"
        ),
        "after": (
            "address_0=198.51.100.1\nnetmask_0=255.255.0.0\nnetdetect_0=198.51.100.254\n"
            "tls_enable_0=0\n"
            "address_1=198.51.100.2\nnetmask_1=255.255.0.0\nnetdetect_1=198.51.100.254\n"
            "tls_enable_1=0\n"
        ),
    }
    # netdetect: None leaves the configured address alone
    assert [d["changes"] for d in result["devices"]] == [["netmask"], ["netmask"]]


def test_a_failing_setter_names_device_command_and_error(tool: str, node: Path) -> None:
    with pytest.raises(HccnError) as caught:
        apply(tool, plan(0, 9))  # the node has devices 0-7

    error = caught.value
    assert error.msg.startswith(
        f"device 9: {tool} -i 9 -ip -s address 198.51.100.10 netmask 255.255.255.0 failed (rc 1):")
    assert "hccn_tool: device id 9 is invalid" in error.msg
    assert error.result["changed"] is True
    assert [(d["device"], d["changes"]) for d in error.result["devices"]] == [
        (0, ["address", "netmask", "netdetect"])]
    assert device_net(node)["0"]["address"] == "198.51.100.1"


def test_a_setting_that_does_not_read_back_fails(tool: str) -> None:
    recorder = Recorder(drop=lambda argv: argv[3:5] == ["-tls", "-s"])

    with pytest.raises(HccnError) as caught:
        apply(tool, plan(1, tls=True), runner=recorder)

    assert "device 1: tls reads back as False, expected True" in caught.value.msg
    assert caught.value.result["changed"] is True


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"address": "198.51.100.300"}, "devices[0].address: '198.51.100.300' is not an IP"),
        ({"netmask": "255.0.255.0"}, "devices[0].netmask: '255.0.255.0' is not a dotted"),
        ({"netmask": "24"}, "devices[0].netmask: '24' is not a dotted"),
        ({"gateway": "gw"}, "devices[0].gateway: 'gw' is not an IP"),
        ({"device": -1}, "devices[0]: device must be a non-negative integer"),
    ],
)
def test_bad_options_fail_before_any_call(
    tool: str, entry: dict[str, Any], message: str
) -> None:
    recorder = Recorder()
    with pytest.raises(HccnError, match=message.replace("[", r"\[").replace(".", r"\.")):
        apply(tool, [{**plan(0)[0], **entry}], runner=recorder)
    assert recorder.calls == []


def test_a_device_listed_twice_is_an_error(tool: str) -> None:
    with pytest.raises(HccnError, match="device 0 is listed twice"):
        apply(tool, plan(0) + plan(0))


def test_missing_tool_check_mode_would_configure_normal_mode_fails(tmp_path: Path) -> None:
    missing = str(tmp_path / "driver/tools/hccn_tool")

    result = apply(missing, plan(0, 1), check_mode=True)

    assert result["changed"] is True
    assert "every device would be configured once the NPU driver provides hccn_tool" in (
        result["msg"])
    assert [d["changes"] for d in result["devices"]] == [["address", "netmask", "netdetect",
                                                          "tls"]] * 2
    with pytest.raises(HccnError) as caught:
        apply(missing, plan(0, 1))
    assert missing in caught.value.msg
    assert "install the NPU driver first" in caught.value.msg
    with pytest.raises(HccnError, match="install the NPU driver first"):
        facts(missing, [0])
    with pytest.raises(HccnError, match="install the NPU driver first"):
        hccn_ping.run({"pairs": [{"device": 0, "address": "198.51.100.2"}], "tool": missing},
                      subprocess_runner)


# --- hccn_facts ----------------------------------------------------------------------------------


def test_facts_of_a_configured_node(tool: str) -> None:
    apply(tool, plan(0, 1, gateway="198.51.100.254"))

    result = facts(tool, [1, 0, 2])

    assert result["changed"] is False
    assert result["problems"] == []
    assert result["devices"] == [
        {"device": 0, "address": "198.51.100.1", "netmask": MASK, "link": "UP",
         "net_health": "success", "netdetect": "198.51.100.254", "gateway": "198.51.100.254",
         "tls": False},
        {"device": 1, "address": "198.51.100.2", "netmask": MASK, "link": "UP",
         "net_health": "success", "netdetect": "198.51.100.254", "gateway": "198.51.100.254",
         "tls": False},
        {"device": 2, "address": None, "netmask": None, "link": "UP", "net_health": "init",
         "netdetect": None, "gateway": None, "tls": False},
    ]


def test_facts_link_fault_and_net_health_only_judged_with_netdetect(
    tool: str, node: Path
) -> None:
    apply(tool, plan(3, netdetect=None))
    set_link(node, 3, "DOWN")

    result = facts(tool, [2, 3])

    assert result["problems"] == ["device 3: link DOWN"]  # net_health "init" is not judged
    assert result["devices"][1]["link"] == "DOWN"
    assert result["devices"][1]["net_health"] == "init"

    apply(tool, plan(3))  # now with a netdetect address

    result = facts(tool, [3])

    assert result["problems"] == ["device 3: link DOWN", "device 3: net_health fault"]
    assert result["devices"][0]["net_health"] == "fault"


def test_facts_report_unreadable_devices_and_answers(tool: str) -> None:
    result = facts(tool, [9])

    assert result["devices"] == [{"device": 9, "address": None, "netmask": None, "link": None,
                                  "net_health": None, "netdetect": None, "gateway": None,
                                  "tls": None}]
    assert len(result["problems"]) == 6
    assert result["problems"][1] == (
        "device 9: link: -link -g failed (rc 1): hccn_tool: device id 9 is invalid")

    def garbage(argv: list[str]) -> tuple[int, str, str]:
        return 0, "Segmentation fault (core dumped)\n", ""

    result = facts(tool, [0], runner=garbage)

    assert set(result["devices"][0].values()) == {0, None}
    assert [p.split(": ")[1] for p in result["problems"]] == [
        "ip", "link", "net_health", "netdetect", "gateway", "tls"]
    assert all("unreadable answer" in p for p in result["problems"])


# --- parsers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ipaddr:198.51.100.1\nnetmask:255.255.255.0\n", ("198.51.100.1", MASK)),
        ("ip addr: 198.51.100.1\r\nNetMask : 255.255.255.0\r\n", ("198.51.100.1", MASK)),
        ("  IPADDR:198.51.100.1  \n  net_mask:255.255.0.0\n", ("198.51.100.1", "255.255.0.0")),
        ("ip address = 198.51.100.1\nnetmask = 255.255.255.0", ("198.51.100.1", MASK)),
        ("hccn_tool: get ip failed, ip is not configured\n", (None, None)),
        ("ipaddr:\nnetmask:\n", (None, None)),
        ("", (None, None)),  # the corpus's ip-g-dev2-empty-fixture: no address, no output
        ("\n", (None, None)),
    ],
)
def test_parse_ip(text: str, expected: tuple[str | None, str | None]) -> None:
    assert hccn.parse_ip(text) == expected


@pytest.mark.parametrize(
    "text",
    ["Segmentation fault\n", "hccn_tool: get ip failed\n", "ipaddr:198.51.100.1\n",
     "ipaddr:not-an-ip\nnetmask:255.255.255.0\n", "ipaddr:198.51.100.1\nnetmask:255.0.255.0\n",
     "usage: hccn_tool -i <device_id> ...\n"],
)
def test_parse_ip_garbage_raises(text: str) -> None:
    with pytest.raises(HccnParseError):
        hccn.parse_ip(text)


@pytest.mark.parametrize(
    ("parser", "text", "expected"),
    [
        ("parse_link", "link status: UP\n", "UP"),
        ("parse_link", "Link Status : down\r\n", "DOWN"),
        ("parse_link", "link_status:Up", "UP"),
        ("parse_net_health", "net health status: Success\n", "success"),
        ("parse_net_health", "Net_Health Status : Fault\n", "fault"),
        ("parse_net_health", "net health status: Init\n", "init"),
        ("parse_net_health", "net health status: Receive  timeout\n", "receive timeout"),
        ("parse_netdetect", "netdetect address: 198.51.100.254\n", "198.51.100.254"),
        ("parse_netdetect", "Net Detect Addr:198.51.100.254", "198.51.100.254"),
        ("parse_netdetect", "netdetect address: \n", None),
        ("parse_netdetect", "hccn_tool: netdetect is not configured\n", None),
        ("parse_gateway", "default gateway:198.51.100.254, Iface:eth0\n", "198.51.100.254"),
        ("parse_gateway", "Default Gateway : 198.51.100.254 , Iface:eth1\n", "198.51.100.254"),
        ("parse_gateway", "default gateway:, Iface:eth0\n", None),
        ("parse_gateway", "gateway address: 198.51.100.9\n", "198.51.100.9"),
        ("parse_tls", "dev_id:0, tls switch[1](0:disable, 1:enable)\n", True),
        ("parse_tls", "dev_id:0, tls switch[0](0:disable, 1:enable)\n", False),
        ("parse_tls", "DEV_ID:3, TLS Switch [ 1 ] (0:disable, 1:enable), tls preconfigured[1]",
         True),
        ("parse_tls", "tls_enable: 0\n", False),
    ],
)
def test_getter_parsers_read_vendor_variants(parser: str, text: str, expected: Any) -> None:
    assert getattr(hccn, parser)(text) == expected


@pytest.mark.parametrize(
    "parser", ["parse_link", "parse_net_health", "parse_netdetect", "parse_gateway", "parse_tls"]
)
@pytest.mark.parametrize(
    "text",
    ["", "garbage\n", "hccn_tool: get failed, unknown error\n",
     "usage: hccn_tool -i <device_id> -<ip|link|net_health|netdetect|gateway|tls> -g|-s ...\n"],
)
def test_getter_parsers_never_read_garbage_as_a_value(parser: str, text: str) -> None:
    with pytest.raises(HccnParseError):
        getattr(hccn, parser)(text)


@pytest.mark.parametrize(
    ("parser", "text"),
    [("parse_netdetect", "netdetect address: nowhere\n"),
     ("parse_gateway", "default gateway:fe80::zz, Iface:eth0\n"),
     ("parse_tls", "dev_id:0, tls switch[](0:disable, 1:enable)\n"),
     ("parse_link", "link status: \n")],
)
def test_getter_parsers_reject_bad_values(parser: str, text: str) -> None:
    with pytest.raises(HccnParseError):
        getattr(hccn, parser)(text)


SIM_PING = (  # the layout of tests/data/corpus/hccn_tool/ping-g-loop-8dev-ok-a2-mindie.txt
    "device 0 PING 198.51.100.2\n"
    "recv seq=0,time=0.081000ms\n"
    "recv seq=1,time=0.047000ms\n"
    "recv seq=2,time=0.044000ms\n"
    "3 packets transmitted, 3 received, 0.00% packet loss\n"
)


def test_parse_ping() -> None:
    assert hccn.parse_ping(SIM_PING) == {
        "sent": 3, "received": 3, "loss": 0.0, "rtt_ms": [0.081, 0.047, 0.044]}
    variant = ("Recv seq = 0, time = 1.5 ms\nrecv seq=1 time=2ms\n"
               "2 packets transmitted, 2 packets received, 0% packet loss")
    assert hccn.parse_ping(variant) == {
        "sent": 2, "received": 2, "loss": 0.0, "rtt_ms": [1.5, 2.0]}
    with pytest.raises(HccnParseError):
        hccn.parse_ping("device 0 PING 198.51.100.2\nrecv seq=0,time=0.081ms\n")


@pytest.mark.parametrize(
    ("rc", "out", "err", "ok", "error"),
    [
        (0, SIM_PING, "", True, None),
        (1, "device 0 PING 198.51.100.9\nrecv time out seq=0\nrecv time out seq=1\n"
            "recv time out seq=2\n3 packets transmitted, 0 received, 100.00% packet loss\n",
         "", False, "no reply (0 of 3 received)"),
        (0, "3 packets transmitted, 0 received, 100% packet loss\n", "", False,
         "no reply (0 of 3 received)"),
        (1, "", "hccn_tool: ping failed, device 0 link status is DOWN\n", False,
         "hccn_tool: ping failed, device 0 link status is DOWN"),
        (0, "garbage\n", "", False, "no ping summary in answer 'garbage'"),
        (-9, "", "", False, "hccn_tool gave no answer (rc -9)"),
        (1, SIM_PING, "", False, "hccn_tool exited with rc 1"),
    ],
)
def test_ping_judgement(rc: int, out: str, err: str, ok: bool, error: str | None) -> None:
    result = hccn_ping.judge(rc, out, err)
    assert result["ok"] is ok
    assert result["error"] == error


def test_ping_runs_every_pair_in_order_with_labels(tool: str) -> None:
    seen: list[list[str]] = []

    def runner(argv: list[str]) -> tuple[int, str, str]:
        seen.append(argv)
        if argv[2] == "1":
            return 1, "", "hccn_tool: ping failed, device 1 ip is not configured\n"
        return 0, SIM_PING.replace("198.51.100.2", argv[6]), ""

    pairs = [{"device": d, "address": f"198.51.100.{100 + d}", "peer_host": f"node{d}",
              "peer_device": d} for d in (3, 1, 0)]
    result = hccn_ping.run({"pairs": pairs, "count": 2, "tool": tool, "workers": 2}, runner)

    assert result["changed"] is False
    assert [(r["device"], r["peer_host"], r["ok"]) for r in result["results"]] == [
        (3, "node3", True), (1, "node1", False), (0, "node0", True)]
    assert result["results"][0] == {
        "device": 3, "address": "198.51.100.103", "peer_host": "node3", "peer_device": 3,
        "ok": True, "sent": 3, "received": 3, "loss": 0.0, "rtt_ms": [0.081, 0.047, 0.044],
        "error": None}
    assert result["results"][1]["error"] == "hccn_tool: ping failed, device 1 ip is not configured"
    assert sorted(seen) == sorted(
        [tool, "-i", str(d), "-ping", "-g", "address", f"198.51.100.{100 + d}", "pkt", "2"]
        for d in (3, 1, 0))


@pytest.mark.parametrize(("answers", "ok", "error"), [
    ([(-9, "", ""), (0, SIM_PING, "")], True, None),
    ([(-9, "", ""), (-9, "", "")], False, "hccn_tool gave no answer (rc -9)"),
])
def test_ping_asks_once_more_only_when_the_tool_gave_no_answer(
        tool: str, answers: list[tuple[int, str, str]], ok: bool, error: str | None) -> None:
    calls: list[list[str]] = []

    def runner(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        return answers[len(calls) - 1]

    pair = {"device": 0, "address": "198.51.100.2"}
    (result,) = hccn_ping.run({"pairs": [pair], "tool": tool}, runner)["results"]
    assert (result["ok"], result["error"]) == (ok, error)
    assert len(calls) == 2 and calls[0] == calls[1]


def test_ping_never_retries_an_answer(tool: str) -> None:
    calls: list[list[str]] = []
    lost = "device 0 PING 198.51.100.9\n3 packets transmitted, 0 received, 100.00% packet loss\n"

    def runner(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        return 1, lost, ""

    (result,) = hccn_ping.run({"pairs": [{"device": 0, "address": "198.51.100.9"}],
                               "tool": tool}, runner)["results"]
    assert (result["ok"], result["error"], len(calls)) == (False, "no reply (0 of 3 received)", 1)


def test_ping_through_the_simulator_without_nics(tool: str) -> None:
    apply(tool, plan(0))
    pairs = [{"device": 0, "address": "198.51.100.2"}, {"device": 1, "address": "198.51.100.1"}]

    result = hccn_ping.run({"pairs": pairs, "count": 1, "tool": tool}, subprocess_runner)

    assert [(r["ok"], r["error"]) for r in result["results"]] == [
        (False, "hccn_tool: ping failed, device 0 NIC npu0 is not present"),
        (False, "hccn_tool: ping failed, device 1 ip is not configured"),
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [({"pairs": [{"device": 0, "address": "peer"}]}, r"pairs\[0\]\.address"),
     ({"pairs": [{"device": 0, "address": "198.51.100.2"}], "count": 0}, "count must be")],
)
def test_ping_bad_options(tool: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(HccnError, match=message):
        hccn_ping.run({"tool": tool, **params}, subprocess_runner)


def test_ping_without_pairs_sends_nothing(tool: str) -> None:
    """A host without peers in its plane (a single-node fleet) has nothing to ping."""
    calls: list[list[str]] = []

    def runner(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        return subprocess_runner(argv)

    assert hccn_ping.run({"tool": tool, "pairs": []}, runner) == {"changed": False, "results": []}
    assert calls == []


@pytest.mark.skipif(simnet._netns_usable() is not None, reason=str(simnet._netns_usable()))
def test_config_and_ping_over_real_device_nics(
    tmp_path: Path, pair: tuple[Any, Any]
) -> None:
    a, b = pair
    tool_a = write_tool(tmp_path / "hccn_a", a.node_file, a.root, net=True, netns=a.ns)
    tool_b = write_tool(tmp_path / "hccn_b", b.node_file, b.root, net=True, netns=b.ns)
    assert apply(tool_a, plan(0, address="198.51.100.1"))["changed"] is True
    assert apply(tool_b, plan(0, address="198.51.100.2"))["changed"] is True
    assert apply(tool_b, plan(0, address="198.51.100.2"))["changed"] is False
    assert a.addrs() == ["198.51.100.1/24"]

    pairs = [{"device": 0, "address": "198.51.100.2", "peer_host": "b", "peer_device": 0},
             {"device": 0, "address": "198.51.100.99", "peer_host": "nobody"}]
    result = hccn_ping.run({"pairs": pairs, "count": 2, "tool": tool_a}, subprocess_runner)

    good, bad = result["results"]
    assert (good["ok"], good["sent"], good["received"], good["loss"]) == (True, 2, 2, 0.0)
    assert len(good["rtt_ms"]) == 2
    assert (bad["ok"], bad["received"], bad["loss"]) == (False, 0, 100.0)
    assert bad["error"] == "no reply (0 of 2 received)"
    assert facts(tool_b, [0])["problems"] == []


# --- the modules as Ansible runs them ------------------------------------------------------------


def test_modules_run_as_ansible_runs_them(tmp_path: Path, tool: str, node: Path) -> None:
    devices = [{"device": 0, "address": "198.51.100.1", "netmask": MASK}]

    checked = module_result("hccn_config", {"devices": devices, "tool": tool,
                                            "_ansible_diff": True}, tmp_path, check_mode=True)
    assert checked["changed"] is True
    assert checked["diff"]["after"] == (
        "address_0=198.51.100.1\nnetmask_0=255.255.255.0\ntls_enable_0=0\n")
    assert "0" not in device_net(node)

    applied = module_result("hccn_config", {"devices": devices, "tool": tool}, tmp_path)
    assert applied["changed"] is True
    assert "diff" not in applied
    assert device_net(node)["0"] == {"address": "198.51.100.1", "netmask": MASK}

    read = module_result("hccn_facts", {"devices": [0], "tool": tool}, tmp_path)
    assert read["changed"] is False
    assert read["devices"][0]["address"] == "198.51.100.1"

    pinged = module_result("hccn_ping", {
        "pairs": [{"device": 0, "address": "198.51.100.2"}], "tool": tool, "count": 1}, tmp_path)
    assert pinged["results"][0]["ok"] is False

    bad = module_result("hccn_config", {"devices": [{"device": 0}], "tool": tool}, tmp_path)
    assert bad["failed"] is True
    assert "address" in bad["msg"]

    missing = module_result("hccn_facts", {"devices": [0], "tool": str(tmp_path / "nope")},
                            tmp_path)
    assert missing["failed"] is True
    assert "install the NPU driver first" in missing["msg"]


def test_apply_reports_the_conf_file_it_was_asked_about(tool: str, tmp_path: Path) -> None:
    """conf_path: the state of the vendor's file after the setters, for the role to compare."""
    conf = tmp_path / "hccn.conf"
    conf.write_text("address_0=198.51.100.1\n")
    params = {"devices": plan(0), "tool": tool, "workers": 8, "conf_path": str(conf)}
    result: dict[str, Any] = hccn_config.run(params, False, subprocess_runner)
    assert result["conf"]["sha1"] == hashlib.sha1(conf.read_bytes()).hexdigest()  # noqa: S324
    assert result["conf"]["mode"] == f"{conf.stat().st_mode & 0o7777:04o}"
    missing = hccn_config.run({**params, "conf_path": str(tmp_path / "none")}, True,
                              subprocess_runner)
    assert missing["conf"] is None
    assert "conf" not in apply(tool, plan(0))
