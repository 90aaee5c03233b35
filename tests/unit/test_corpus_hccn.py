"""The hccn_tool reader (module_utils/hccn.py, used by hccn_facts/hccn_config/hccn_ping) reads
every real ``hccn_tool`` output of ``tests/data/corpus/hccn_tool`` as its ``.expected.json``
says, and the simulator's hccn_tool prints the same layouts.

Loop transcripts (``for i in ...; do hccn_tool -i $i ...; done``) are cut into one answer per
device before reading, as the modules get them (one call per device). Verbs no module reads
(``-lldp``, ``-optical``, ``-link_stat``, ``-route``) are listed in ``NOT_READ``.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paths
import pytest
from corpus import reading

from ascend_serve.network.netplan import hccn_conf
from ascend_sim import models
from ascend_sim.devtools import hccn_tool

CORPUS = paths.CORPUS / "hccn_tool"
hccn = importlib.import_module("ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn")
hccn_ping = importlib.import_module(
    "ansible_collections.ascend_serve.fleet.plugins.modules.hccn_ping")

SAMPLES = sorted(p for p in CORPUS.iterdir()
                 if p.suffix in (".txt", ".conf") and not p.name.endswith(".expected.json"))
NOT_READ = {"lldp-g-dev3-full-elided-blog.txt", "lldp-g-grep-ifname-8dev-a2-mindie.txt",
            "optical-g-dev0-fixture.txt", "link-stat-g-dev0-fixture.txt",
            "link-stat-g-dev0-linkdown-count-hccl-doc.txt", "route-g-dev3-blog.txt"}


def _answers(text: str, start: str) -> list[str]:
    """One answer per device: the text from each line matching ``start`` to the next one."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if re.match(start, line)]
    return ["".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]


def _lines(text: str) -> list[str]:
    """The answer lines of an elided loop ('...' is the author's elision)."""
    return [line for line in text.splitlines() if line.strip() and line.strip() != "..."]


def _ip(text: str, expected: dict[str, Any]) -> None:
    if "devices" not in expected:
        assert hccn.parse_ip(text) == (expected["ipaddr"], expected["netmask"])
        return
    answers = _answers(text, r"ipaddr:")
    assert [hccn.parse_ip(a) for a in answers] == [
        (d["ipaddr"], d["netmask"]) for d in expected["devices"]]


def _ping_one(text: str, expected: dict[str, Any]) -> None:
    found = hccn.parse_ping(text)
    assert (found["sent"], found["received"], found["loss"]) == (
        expected["sent"], expected["received"], expected["loss_pct"])
    if "rtt_ms" in expected:
        assert found["rtt_ms"] == expected["rtt_ms"]
    assert hccn.ping_timeouts(text) == expected.get("timeouts", 0)
    # hccn_ping's judgement: a pair is good when a reply came back
    assert hccn_ping.judge(0, text, "")["ok"] is expected["reachable"]


def _ping(text: str, expected: dict[str, Any]) -> None:
    if "results" not in expected:
        _ping_one(text, expected)
        return
    answers = _answers(text, r"device \d+ PING ")
    assert len(answers) == len(expected["results"])
    for answer, result in zip(answers, expected["results"], strict=True):
        assert answer.startswith(f"device {result['device']} PING {result['target']}\n")
        _ping_one(answer, result)


def _tls(text: str, expected: dict[str, Any]) -> None:
    if "devices" not in expected:  # a setter: nothing to read, the modules check its rc
        assert _lines(text) == [expected["success_line"]] * len(_lines(text))
        return
    answers = _answers(text, r"dev_id:\d+, tls switch")
    assert [hccn.parse_tls(a) for a in answers] == [d["tls_enabled"] for d in expected["devices"]]


def _per_line(parse: Callable[[str], Any], value: Callable[[dict[str, Any]], Any],
              ) -> Callable[[str, dict[str, Any]], None]:
    def check(text: str, expected: dict[str, Any]) -> None:
        lines = _lines(text)
        assert lines
        if "devices" in expected:
            assert [parse(line) for line in lines] == [value(d) for d in expected["devices"]]
        else:
            assert {parse(line) for line in lines} == {value(expected)}
    return check


def _conf(text: str, expected: dict[str, Any]) -> None:
    """/etc/hccn.conf: netplan writes the same key_N=value lines, in the sample's order."""
    for device, values in expected["devices"].items():
        host = {"name": "h", "chip": "910B", "index": 0, "tls": False, "devices": [
            {"device": int(device), "address": values["address"], "netmask": values["netmask"],
             "gateway": values["gateway"], "netdetect": values["netdetect"]}]}
        written = [line for line in hccn_conf(host).splitlines()
                   if not line.startswith("tls_enable_")]  # tls_enable_N: no sample shows it
        assert "\n".join(written) in text, device


READERS: dict[str, Callable[[str, dict[str, Any]], None]] = {
    "ip-g": _ip,
    "ping-g": _ping,
    "tls-g": _tls,
    "tls-s": _tls,
    "link-g": _per_line(hccn.parse_link, lambda e: e["status_per_line"]),
    "net-health": _per_line(hccn.parse_net_health,
                            lambda e: (e.get("status") or e["status_per_line"]).lower()),
    "netdetect-g": _per_line(hccn.parse_netdetect, lambda e: e["netdetect_address"]),
    "gateway-g": _per_line(hccn.parse_gateway, lambda e: e["gateway"]),
    "hccn-conf": _conf,
}


def _reader(sample: Path) -> Callable[[str, dict[str, Any]], None]:
    return next(check for prefix, check in READERS.items() if sample.name.startswith(prefix))


READ = [p for p in SAMPLES if p.name not in NOT_READ]


def test_every_sample_is_read_or_listed_as_unread() -> None:
    assert len(SAMPLES) == 30
    assert {p.name for p in SAMPLES} >= NOT_READ
    for sample in READ:
        assert any(sample.name.startswith(prefix) for prefix in READERS), sample.name


@pytest.mark.parametrize("sample", READ, ids=[p.name for p in READ])
def test_corpus_sample_is_read_as_expected(sample: Path) -> None:
    _reader(sample)(sample.read_text(encoding="utf-8"), reading(sample))


def test_health_values_other_than_success_are_faults() -> None:
    for name in ("net-health-fault-doc.txt", "net-health-socket-failed-fixture.txt"):
        status = hccn.parse_net_health((CORPUS / name).read_text(encoding="utf-8"))
        assert status != "success" and not reading(CORPUS / name)["healthy"]


# --- the simulator prints the corpus's layouts ---------------------------------------------------


@pytest.fixture
def sim(tmp_path: Path, node_file: Path, sim_root: Path) -> Callable[..., str]:
    models.make_node("atlas800-a2").save(node_file)
    env = {**os.environ, "ASCEND_SIM_NODE": str(node_file),
           "ASCEND_SIM_ROOT": str(sim_root), "ASCEND_SIM_NET": "off"}

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "ascend_sim.devtools.hccn_tool", *args],
                              capture_output=True, text=True, env=env, check=False, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    return run


def test_simulator_answers_in_the_corpus_layouts(sim: Callable[..., str]) -> None:
    def sample_line(name: str, index: int = 0) -> str:
        return _lines((CORPUS / name).read_text(encoding="utf-8"))[index]

    assert sim("-i", "2", "-ip", "-g") == ""  # ip-g-dev2-empty-fixture
    sim("-i", "3", "-ip", "-s", "address", "29.1.112.213", "netmask", "255.255.0.0")
    assert sim("-i", "3", "-ip", "-g") == (CORPUS / "ip-g-dev3-910b-huaweicloud-blog.txt"
                                           ).read_text(encoding="utf-8")
    assert sim("-i", "0", "-link", "-g") == sample_line("link-g-loop-elided-a2-mindie.txt") + "\n"
    sim("-i", "0", "-netdetect", "-s", "address", "11.12.165.1")
    assert sim("-i", "0", "-netdetect", "-g") == sample_line(
        "netdetect-g-loop-elided-a2-mindie.txt") + "\n"
    sim("-i", "7", "-gateway", "-s", "gateway", "11.12.165.1")
    assert sim("-i", "7", "-gateway", "-g") == sample_line(
        "gateway-g-loop-8dev-a2-mindie.txt", 7) + "\n"
    assert sim("-i", "1", "-tls", "-g") == sample_line(
        "tls-g-grep-switch-8dev-all-off-a2-mindie.txt", 1) + "\n"
    assert sim("-i", "0", "-tls", "-s", "enable", "0") == sample_line(
        "tls-s-enable0-loop-elided-a2-mindie.txt") + "\n"
    sim("-i", "0", "-ip", "-s", "address", "11.12.165.80", "netmask", "255.255.255.0")
    assert sim("-i", "0", "-net_health", "-g") == (
        CORPUS / "net-health-success-doc.txt").read_text(encoding="utf-8")


def test_simulator_ping_answers_follow_the_corpus() -> None:
    """The sim's ping answer (a live ping needs root and two network namespaces, see
    tests/sim/test_sim_hccn_net.py) against the samples, read back by the modules' reader."""
    ok = (CORPUS / "ping-g-dev3-ok-blog.txt").read_text(encoding="utf-8")
    assert hccn_tool.ping_answer(3, "29.1.137.205", [1.418, 0.034, 0.040]) == ok
    lost = (CORPUS / "ping-g-partial-loss-33pct-mindie-doc.txt").read_text(encoding="utf-8")
    answer = hccn_tool.ping_answer(0, "10.10.100.10", [None, 0.097, 0.066])
    # The sample is an excerpt without its header line, and the doc's OCR reads seq=0 as seq=O.
    assert answer.splitlines()[1:] == lost.replace("seq=O", "seq=0").splitlines()
    # 100% loss: no sample; the 33.33% sample's layout with every request lost.
    none = hccn_tool.ping_answer(1, "10.10.100.11", [None, None, None])
    assert none == ("device 1 PING 10.10.100.11\nrecv time out seq=0\nrecv time out seq=1\n"
                    "recv time out seq=2\n3 packets transmitted, 0 received, 100.00% packet loss\n")
    assert hccn.parse_ping(none) == {"sent": 3, "received": 0, "loss": 100.0, "rtt_ms": []}
    assert hccn.ping_timeouts(none) == 3
    assert hccn_ping.judge(1, none, "")["error"] == "no reply (0 of 3 received)"
