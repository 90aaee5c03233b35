"""``ascend-serve doctor`` checks of the host and its NPUs: provisioning, chips, driver install."""

from __future__ import annotations

import re

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import (
    read_driver_info,
)
from ascend_serve.doctor.collected import Collected, file_version
from ascend_serve.doctor.faults import classifier
from ascend_serve.doctor.findings import Context, Finding, new_finding
from ascend_serve.doctor.launcher import visible_devices
from ascend_serve.stack.npusmi import (
    Chip,
    NpuSmiParseError,
    parse_info,
    parse_processes,
    unhealthy,
)

# vllm-ascend serves on these PCI device ids (910B = A2, 910C = A3); 0x19e5 is Huawei.
SUPPORTED_PCI_DEVICES = {"0xd802": "910B (Atlas A2)", "0xd803": "910C (Atlas A3)"}
UNSUPPORTED_PCI_DEVICES = {"0xd801": "910 / 910 Pro B", "0xd500": "310P", "0xd100": "310"}
# Chip families vllm-ascend does not serve on, as the npu-smi reader derives them from the table
# (an old 910 on a 24.x driver names itself a bare "910B": tests/data/corpus/npu-smi).
_UNSUPPORTED_FAMILIES = frozenset({"910", "310", "310P"})


def read_chips(c: Collected) -> tuple[list[Chip] | None, str | None]:
    result = c.cmd("npu-smi.info")
    if result is None or result[0] != 0:
        return None, None
    try:
        return parse_info(result[1]), None
    except NpuSmiParseError as exc:
        return None, str(exc)


def check_provisioned(c: Collected, ctx: Context) -> list[Finding]:
    names = (c.value("facts_dir") or {}).get("names") or []
    if any(str(n).startswith("ascend_") for n in names) or c.value("npu-smi.path"):
        return []
    if c.text("driver.version_info") or c.value("pci.huawei"):
        return []
    facts_dir = (c.value("facts_dir") or {}).get("path", "/etc/ansible/facts.d")
    return [new_finding("not-provisioned", c.host,
                        f"no ascend_*.fact in {facts_dir}, no npu-smi, no NPU on the PCI bus",
                        [f"{facts_dir}: " + (", ".join(names) or "no facts")])]


def check_npus(c: Collected, ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    pci = c.value("pci.huawei") or []
    bad_pci = [d for d in pci if str(d.get("device", "")).lower() in UNSUPPORTED_PCI_DEVICES]
    if bad_pci:
        kinds = sorted({UNSUPPORTED_PCI_DEVICES[str(d["device"]).lower()] for d in bad_pci})
        findings.append(new_finding(
            "npu-unsupported", c.host, f"{len(bad_pci)} NPU(s) of model {', '.join(kinds)}",
            [f"PCI {d['address']}: vendor {d.get('vendor')} device {d.get('device')} class "
             f"{d.get('class')}" for d in bad_pci]))
    driver_installed = bool(file_version(c, "driver.version_info", read_driver_info)[0])
    result = c.cmd("npu-smi.info")
    if result is None:
        if driver_installed or c.fact("ascend_npu_driver"):
            findings.append(new_finding("npu-smi-failed", c.host,
                                        "npu-smi not found although the driver is installed",
                                        ["npu-smi: not on PATH, not at /usr/local/sbin/npu-smi"]))
        return findings
    rc, out, err = result
    if rc != 0:
        lines = (err + "\n" + out).strip().splitlines()
        clf = classifier()
        busy = [f for f in clf.scan(err + "\n" + out).faults
                if clf.problem_of(f) == "npu-device-busy"]
        if busy:
            findings.append(new_finding("npu-device-busy", c.host,
                                        f"npu-smi info failed (exit {rc}) with "
                                        f"{busy[0].code or 'device busy'}",
                                        [f"$ npu-smi info -> exit {rc}", *lines[-5:]]))
        else:
            findings.append(new_finding("npu-smi-failed", c.host,
                                        f"npu-smi info failed (exit {rc})",
                                        [f"$ npu-smi info -> exit {rc}", *lines[-5:]]))
        return findings
    chips, parse_error = read_chips(c)
    if chips is None:
        findings.append(new_finding("npu-smi-failed", c.host, "cannot read npu-smi info",
                                    [parse_error or "no chip table"]))
        return findings
    names = sorted({ch.name for ch in chips if ch.family in _UNSUPPORTED_FAMILIES})
    if names and not bad_pci:
        findings.append(new_finding("npu-unsupported", c.host, f"npu-smi shows {', '.join(names)}",
                                    [f"NPU {ch.npu} chip {ch.chip}: {ch.name}" for ch in chips
                                     if ch.name in names]))
    bad = unhealthy(chips)
    if bad:
        visible = visible_devices(c)
        evidence: list[str] = []
        lines = out.splitlines()
        for ch in bad:
            evidence.append(f"NPU {ch.npu} chip {ch.chip} ({ch.name}, {ch.bus_id}): health "
                            f"{ch.health}")
            for i, line in enumerate(lines):
                if ch.bus_id.lower() in line.lower() and i > 0:
                    evidence += [" ".join(lines[i - 1].split()), " ".join(line.split())]
                    break
        if visible is not None:
            logical = [i for i, ch in enumerate(chips) if not ch.ok and i in visible]
            if logical:
                evidence.append("in the service's ASCEND_RT_VISIBLE_DEVICES: "
                                + ",".join(map(str, logical)))
        findings.append(new_finding(
            "npu-unhealthy", c.host,
            "; ".join(f"NPU {ch.npu} chip {ch.chip}: {ch.health}" for ch in bad), evidence))
    try:
        processes = parse_processes(out)
    except NpuSmiParseError:
        processes = []
    service_pids = set(c.value("unit.pids") or [])
    others = [p for p in processes if p.pid not in service_pids]
    if others:
        findings.append(new_finding(
            "npu-held-by-other", c.host,
            f"{len(others)} process(es) outside the vLLM service hold NPU memory",
            [f"NPU {p.npu} chip {p.chip}: pid {p.pid} {p.name} ({p.memory_mb} MB)"
             for p in others]))
    return findings


_LOG_DRIVER = re.compile(r"\[\s*driver\s*\]", re.IGNORECASE)
_LOG_FAILED = re.compile(r"install(?:ation)? fail|\bfailed\b|\[ERROR\]|\berror\b", re.IGNORECASE)
_LOG_SUCCESS = re.compile(r"install(?:ation)? success|installed successfully|uninstall success",
                          re.IGNORECASE)


def check_driver_install(c: Collected, ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    log = c.text("install_log") or ""
    driver_lines = [line for line in log.splitlines() if _LOG_DRIVER.search(line)]
    outcome = [line for line in driver_lines if _LOG_FAILED.search(line)
               or _LOG_SUCCESS.search(line)]
    if outcome and _LOG_FAILED.search(outcome[-1]) and not _LOG_SUCCESS.search(outcome[-1]):
        last_ok = max((i for i, line in enumerate(driver_lines) if _LOG_SUCCESS.search(line)),
                      default=-1)
        failures = [line for line in driver_lines[last_ok + 1:] if _LOG_FAILED.search(line)]
        findings.append(new_finding(
            "driver-install-failed", c.host,
            "the driver's last install attempt in /var/log/ascend_seclog/ascend_install.log "
            "failed" + (" (kernel headers)" if re.search(r"header|kernel", failures[-1], re.I)
                        else ""),
            failures[-4:] + _headers_evidence(c)))
    build = c.value("kernel.build_dir") or {}
    npu_host = bool(c.fact("ascend_npu_driver") or c.value("pci.huawei")
                    or c.text("driver.version_info"))
    if npu_host and build and not build.get("exists"):
        findings.append(new_finding(
            "kernel-headers-missing", c.host,
            f"no headers for the running kernel {(c.value('uname') or {}).get('release', '?')}",
            _headers_evidence(c)))
    return findings


def _headers_evidence(c: Collected) -> list[str]:
    build = c.value("kernel.build_dir") or {}
    lines = [f"uname -r: {(c.value('uname') or {}).get('release', '?')}"]
    if build:
        lines.append(f"{build.get('path')}: {'present' if build.get('exists') else 'missing'}")
    for name in ("kernel.packages.dpkg", "kernel.packages.rpm"):
        result = c.cmd(name)
        if result is not None:
            text = (result[1] or result[2]).strip() or f"exit {result[0]}"
            lines += [f"{name.rsplit('.', 1)[-1]}: {line}" for line in text.splitlines()[:3]]
    return lines
