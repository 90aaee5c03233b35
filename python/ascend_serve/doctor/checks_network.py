"""``ascend-serve doctor`` checks of the NPU device network (``hccn_tool``) and HCCL settings."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from ansible_collections.ascend_serve.fleet.plugins.module_utils import hccn as hccn_reader
from ascend_serve.doctor.collected import Collected, kv_lines, parse_kv
from ascend_serve.doctor.findings import Context, Finding, new_finding

_T = TypeVar("_T")


def _or_none(read: Callable[[str], _T], text: str) -> _T | None:
    try:
        return read(text)
    except hccn_reader.HccnParseError:
        return None


def parse_link(text: str) -> str | None:
    """``hccn_tool -i N -link -g``: UP, DOWN, ... (None: not an answer); the roles' reader."""
    return _or_none(hccn_reader.parse_link, text)


def parse_net_health(text: str) -> str | None:
    """``-net_health -g``: success, fault, ... lower-cased (None: not an answer)."""
    return _or_none(hccn_reader.parse_net_health, text)


def parse_tls(text: str) -> bool | None:
    """``-tls -g``: whether TLS is on (None: not an answer)."""
    return _or_none(hccn_reader.parse_tls, text)


def check_device_network(c: Collected, ctx: Context) -> list[Finding]:
    info = c.value("hccn.devices") or {}
    devices = [int(d) for d in info.get("devices") or []]
    if not devices:
        return []
    tool = str(info.get("tool", "hccn_tool"))
    # hccn_tool getter -> (reader, the healthy answer, the finding and its title for the devices
    # that answer otherwise)
    bad_states: dict[str, tuple[Callable[[str], str | None], str, str, str]] = {
        "link": (parse_link, "UP", "hccn-link-down", "link down"),
        "net_health": (parse_net_health, "success", "hccn-net-health", "net_health not success"),
    }
    bad: dict[str, list[str]] = {getter: [] for getter in bad_states}
    unreadable: list[str] = []
    tls: dict[int, str] = {}
    if not info.get("usable"):
        return [new_finding("hccn-unreadable", c.host, f"{tool} is missing",
                            [f"{tool}: not found or not executable; devices {devices}"])]
    for dev in devices:
        for getter in ("link", "net_health", "tls"):
            result = c.cmd(f"hccn:{dev}:{getter}")
            if result is None:
                continue
            rc, out, err = result
            call = f"hccn_tool -i {dev} -{getter} -g"
            text = out.strip().replace("\n", " | ")
            if rc != 0:
                unreadable.append(f"{call} -> exit {rc}: {(err or out).strip()[:160]}")
            elif getter in bad_states:
                read, good, _, _ = bad_states[getter]
                state = read(out)
                if state is None:
                    unreadable.append(f"{call}: {text[:160]}")
                elif state != good:
                    bad[getter].append(f"device {dev}: {call}: {text}")
            else:
                enabled = parse_tls(out)
                if enabled is not None:
                    tls[dev] = "1" if enabled else "0"
    findings: list[Finding] = []
    for getter, (_, _, name, title) in bad_states.items():
        if bad[getter]:
            ids = [line.split(":", 1)[0].removeprefix("device ") for line in bad[getter]]
            findings.append(new_finding(name, c.host, f"{title} on device {', '.join(ids)}",
                                        bad[getter]))
    if len(set(tls.values())) > 1:
        findings.append(new_finding("hccn-tls-mixed", c.host,
                                    "TLS on on some devices, off on others",
                                    [f"device {d}: tls {v}" for d, v in sorted(tls.items())]))
    if unreadable:
        findings.append(new_finding("hccn-unreadable", c.host,
                                    f"{len(unreadable)} hccn_tool answer(s) unreadable",
                                    unreadable))
    return findings


def _host_interfaces(c: Collected) -> tuple[dict[str, list[str]], list[str]]:
    """Interface -> IPv4 addresses (``ip -o -4 addr``), and every interface (``ip -o link``)."""
    addresses: dict[str, list[str]] = {}
    result = c.cmd("ip.addr")
    for line in (result[1] if result and result[0] == 0 else "").splitlines():
        match = re.match(r"^\d+:\s+(\S+)\s+inet\s+([0-9.]+)/", line)
        if match:
            addresses.setdefault(match.group(1), []).append(match.group(2))
    links: list[str] = []
    result = c.cmd("ip.link")
    for line in (result[1] if result and result[0] == 0 else "").splitlines():
        match = re.match(r"^\d+:\s+([^:@\s]+)", line)
        if match:
            links.append(match.group(1))
    return addresses, sorted(set(links) | set(addresses))


def check_hccl(c: Collected, ctx: Context) -> list[Finding]:
    fact = c.fact("ascend_hccl")
    section = c.sections.get("hccl.env") or {}
    text = c.text("hccl.env")
    path = str(section.get("path", "/etc/ascend-serve/hccl.env"))
    if text is None:
        if fact:
            return [new_finding("hccl-env-missing", c.host, f"{path}: {c.file_error('hccl.env')}",
                                [f"ascend_hccl.fact: env_file {fact.get('env_file', path)}",
                                 f"{path}: {c.file_error('hccl.env') or 'missing'}"])]
        return []
    env = parse_kv(text)
    findings: list[Finding] = []
    timeout = env.get("HCCL_CONNECT_TIMEOUT")
    if timeout is not None and (not timeout.isdigit() or not 120 <= int(timeout) <= 7200):
        findings.append(new_finding(
            "hccl-timeout-invalid", c.host,
            f"HCCL_CONNECT_TIMEOUT={timeout} (HCCL accepts 120-7200 s)",
            [f"{path}: " + line.strip() for line in
             kv_lines(text, ["HCCL_CONNECT_TIMEOUT"])]))
    exec_timeout = env.get("HCCL_EXEC_TIMEOUT")
    if exec_timeout is not None and (not exec_timeout.isdigit() or int(exec_timeout) <= 0):
        findings.append(new_finding("hccl-timeout-invalid", c.host,
                                    f"HCCL_EXEC_TIMEOUT={exec_timeout} must be a positive number",
                                    [f"{path}: HCCL_EXEC_TIMEOUT={exec_timeout}"]))
    addresses, links = _host_interfaces(c)
    if_ip = env.get("HCCL_IF_IP")
    if if_ip is not None and addresses:
        mine = sorted(a for values in addresses.values() for a in values)
        if if_ip not in mine:
            findings.append(new_finding(
                "hccl-if-ip-absent", c.host, f"HCCL_IF_IP={if_ip} is not on this host",
                [f"{path}: HCCL_IF_IP={if_ip}",
                 "this host's IPv4 addresses: " + ", ".join(
                     f"{a} ({i})" for i, values in sorted(addresses.items()) for a in values)]))
    if links:
        absent = []
        for key in ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
            value = env.get(key)
            if not value:
                continue
            for name in value.split(","):
                name = name.strip()
                if not name or name.startswith("^"):
                    continue  # an exclusion
                exact = name.startswith("=")
                name = name.lstrip("=")
                if not any(link == name or (not exact and link.startswith(name))
                           for link in links):
                    absent.append(f"{path}: {key}={value}")
        if absent:
            findings.append(new_finding("hccl-ifname-absent", c.host,
                                        "no such interface on this host",
                                        [*absent, "interfaces: " + ", ".join(links)]))
    if env.get("HCCL_INTRA_PCIE_ENABLE") == "1" and env.get("HCCL_INTRA_ROCE_ENABLE") == "1":
        both = kv_lines(text, ["HCCL_INTRA_PCIE_ENABLE", "HCCL_INTRA_ROCE_ENABLE"])
        findings.append(new_finding("hccl-intra-both", c.host,
                                    "both intra-node transports enabled",
                                    [f"{path}: " + line.strip() for line in both]))
    return findings
