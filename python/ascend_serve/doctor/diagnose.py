"""``ascend-serve doctor``: collect a host's state and map it to known problems with remedies.

Collection (:func:`collect`) runs :mod:`ascend_serve.node.doctor_collect` on the host in one round
trip through a :class:`~ascend_serve.doctor.remote.Transport` and redacts every secret in what comes
back before anything else sees it. The checks (:func:`diagnose`) then read only that collected
data: what the vendor tools printed (``npu-smi``, ``hccn_tool``, ``upgrade-tool``), the vendor's
files (``version.info``, ``ascend_toolkit_install.info``, ``ascend_install.log``), what the roles
wrote (the local facts in ``/etc/ansible/facts.d``, the launcher, the HCCL env file) and what
systemd and the journal say. Each finding names a known problem
(:mod:`ascend_serve.doctor.known_problems`), the host, the evidence lines and the remedy.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from ascend_serve.doctor.known_problems import KNOWN_PROBLEMS, Severity
from ascend_serve.doctor.redact import redact
from ascend_serve.doctor.remote import Transport, TransportError
from ascend_serve.exitcodes import EXIT_CHECK_FAILED, EXIT_FAILED, EXIT_OK
from ascend_serve.node import doctor_collect
from ascend_serve.node import hccn as hccn_reader
from ascend_serve.node.ascend_files import (
    AscendFileError,
    read_component_version_info,
    read_driver_info,
    read_nnal_atb_info,
    read_toolkit_install_info,
)
from ascend_serve.stack.matrix import Matrix, MatrixError, StackSet, resolve
from ascend_serve.stack.npusmi import (
    Chip,
    NpuSmiParseError,
    parse_info,
    parse_processes,
    parse_version,
    unhealthy,
)

MAX_EVIDENCE = 12
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
# vllm-ascend serves on these PCI device ids (910B = A2, 910C = A3); 0x19e5 is Huawei.
SUPPORTED_PCI_DEVICES = {"0xd802": "910B (Atlas A2)", "0xd803": "910C (Atlas A3)"}
UNSUPPORTED_PCI_DEVICES = {"0xd801": "910 / 910 Pro B", "0xd500": "310P", "0xd100": "310"}
# Chip families vllm-ascend does not serve on, as the npu-smi reader derives them from the table
# (an old 910 on a 24.x driver names itself a bare "910B": tests/data/corpus/npu-smi).
_UNSUPPORTED_FAMILIES = frozenset({"910", "310", "310P"})


class Finding(BaseModel):
    id: str
    severity: Severity
    host: str
    title: str
    detail: str = ""
    evidence: list[str] = Field(default_factory=list)
    remedy: str
    source: str


class HostReport(BaseModel):
    host: str
    collected: bool
    error: str | None = None
    duration_s: float = 0.0
    findings: list[Finding] = Field(default_factory=list)

    @property
    def worst(self) -> str | None:
        if not self.findings:
            return None
        return min((f.severity for f in self.findings), key=SEVERITY_ORDER.__getitem__)


@dataclass
class Collected:
    """What the collector brought back from one host (already redacted)."""

    host: str
    sections: dict[str, dict[str, Any]]
    raw_error: str | None = None
    _facts: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        section = self.sections.get(name) or {}
        value = section.get("text")
        return value if isinstance(value, str) else None

    def file_error(self, name: str) -> str | None:
        section = self.sections.get(name) or {}
        value = section.get("error")
        return str(value) if value else None

    def cmd(self, name: str) -> tuple[int, str, str] | None:
        section = self.sections.get(name)
        if not section or "rc" not in section:
            return None
        return int(section["rc"]), str(section.get("out") or ""), str(section.get("err") or "")

    def value(self, name: str) -> Any:
        section = self.sections.get(name) or {}
        return section.get("value")

    def fact(self, name: str) -> dict[str, Any] | None:
        if name not in self._facts:
            text = self.text("fact:" + name)
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = None
            self._facts[name] = data if isinstance(data, dict) else None
        return self._facts[name]


# --- collection ----------------------------------------------------------------------------------


class CollectError(RuntimeError):
    """The host answered, but not with the collector's report."""


def collector_command(python: str = "python3", *, facts_dir: str = "/etc/ansible/facts.d",
                      journal_lines: int = 300, sudo: bool = False) -> list[str]:
    """The argument list that runs the collector on a host (``python3 -c SOURCE ARGS``)."""
    source = files("ascend_serve.node").joinpath("doctor_collect.py").read_text(encoding="utf-8")
    argv = [python, "-c", source, f"--facts-dir={facts_dir}",
            f"--journal-lines={journal_lines}"]
    return ["sudo", "-n", "--", *argv] if sudo else argv


def redact_sections(sections: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every string in the collected sections, redacted."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return {name: walk(section) for name, section in sections.items()}


def parse_collected(host: str, rc: int, out: str, err: str) -> Collected:
    """The collector's answer as :class:`Collected`; CollectError when it is not one."""
    text = out.strip()
    if rc != 0 or not text.startswith("{"):
        detail = (err.strip() or out.strip() or "no output").splitlines()[-3:]
        if rc == 127 or "not found" in " ".join(detail):
            hint = " (is python3 installed on the host? --remote-python names another)"
        elif "sudo" in " ".join(detail):
            hint = " (sudo needs a password: allow NOPASSWD for the collector, or connect as root)"
        else:
            hint = ""
        raise CollectError(f"the collector failed on {host} (exit {rc}): "
                           f"{redact(' | '.join(detail))}{hint}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CollectError(f"the collector's answer from {host} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != doctor_collect.FORMAT:
        raise CollectError(f"the collector's answer from {host} has an unknown format")
    sections = data.get("sections")
    if not isinstance(sections, dict):
        raise CollectError(f"the collector's answer from {host} has no sections")
    return Collected(host=host, sections=redact_sections(sections))


def collect(transport: Transport, command: Sequence[str], timeout: float = 300.0) -> Collected:
    rc, out, err = transport.run(command, timeout=timeout)
    return parse_collected(transport.name, rc, out, err)


# --- helpers -------------------------------------------------------------------------------


def _finding(pid: str, host: str, detail: str, evidence: Iterable[str] = (),
             severity: Severity | None = None) -> Finding:
    problem = KNOWN_PROBLEMS[pid]
    lines = [line.rstrip() for line in evidence if line and line.strip()]
    if len(lines) > MAX_EVIDENCE:
        lines = [*lines[: MAX_EVIDENCE - 1], f"... and {len(lines) - MAX_EVIDENCE + 1} more"]
    return Finding(id=pid, severity=severity or problem.severity, host=host, title=problem.title,
                   detail=detail, evidence=lines, remedy=problem.remedy, source=problem.source)


def parse_kv(text: str | None, sep: str = "=") -> dict[str, str]:
    """``key=value`` lines (env files); comments and blanks skipped.

    The vendor's version files are read by :mod:`ascend_serve.node.ascend_files` (one reader per
    format, shared with the collection's modules), never here.
    """
    result: dict[str, str] = {}
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or sep not in stripped:
            continue
        key, _, value = stripped.partition(sep)
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        result[key] = value
    return result


def _file_version(c: Collected, section: str,
                  reader: Callable[[str, str], dict[str, Any]]) -> tuple[str | None, str | None]:
    """(release, None) read from a collected version file; (None, why) when it cannot be read;
    (None, None) when the file was not there."""
    text = c.text(section)
    if not text:
        return None, None
    path = str(c.sections.get(section, {}).get("path") or section)
    try:
        return str(reader(text, path)["version"]) or None, None
    except AscendFileError as exc:
        return None, str(exc)


def _kv_lines(text: str | None, keys: Iterable[str]) -> list[str]:
    wanted = set(keys)
    return [line for line in (text or "").splitlines()
            if line.strip().partition("=")[0].strip().removeprefix("export ").strip() in wanted]


def _set_of(matrix: Matrix | None, name: Any) -> tuple[StackSet | None, str | None]:
    """The named set of the matrix; or None and why not."""
    if not name:
        return None, None
    if matrix is None:
        return None, "no version matrix could be read"
    try:
        return resolve(matrix, str(name)), None
    except MatrixError as exc:
        return None, str(exc)


def _versions_equal(installed: str, wanted: str) -> bool:
    if installed.strip().lower() == wanted.strip().lower():
        return True
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging comes with ansible-core
        return False
    try:
        return Version(installed) == Version(wanted)
    except InvalidVersion:
        return False


# --- journal -------------------------------------------------------------------------------------

_SYSTEMD_LINE = re.compile(r"\bsystemd\[1\]: ")
_RUN_START = re.compile(r"\bsystemd\[1\]: (?:Starting|Started) ")

# Line classes of the vLLM journal: known problem -> pattern (first match wins).
JOURNAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("host-oom-kill", re.compile(
        r"killed by the OOM killer|oom-kill|Out of memory: Killed process|oom_reaper",
        re.IGNORECASE)),
    ("service-oom", re.compile(
        r"(?:NPU|npu|device|HBM)\s+out of memory|OutOfMemoryError|out of memory|"
        r"ACL_ERROR_RT_MEMORY_ALLOCATION|\b207001\b|\bEL0004\b|Not enough memory|"
        r"No available memory for the cache blocks", re.IGNORECASE)),
    ("npu-device-busy", re.compile(
        r"-8005\b|device (?:or resource )?busy|is occupied by|EE1001", re.IGNORECASE)),
    ("hccl-timeout-in-log", re.compile(
        r"\bEI0006\b|Get_Socket_Timeout|\bEI0002\b|\bHCCL\b[^\n]*\btime(?:d)?[ -]?out\b|"
        r"notify wait timeout|hccl[^\n]*connect[^\n]*fail", re.IGNORECASE)),
    ("set-env-not-sourced", re.compile(
        r"Failed to infer device type|lib(?:hccl|atb|ascendcl|acl_op_compiler|opapi)\.so[^\n]*"
        r"(?:cannot open|No such file|not found)|ASCEND_HOME_PATH[^\n]*not set|"
        r"(?:source|run)[^\n]*set_env\.sh", re.IGNORECASE)),
    ("visible-devices-invalid", re.compile(
        r"ASCEND_RT_VISIBLE_DEVICES[^\n]*(?:invalid|error|out of range)|Invalid device ID|"
        r"invalid device ordinal|No NPU devices", re.IGNORECASE)),
    ("npu-unsupported", re.compile(
        r"Unsupported soc version|soc version[^\n]*not support|not supported on this device",
        re.IGNORECASE)),
    ("python-env-mismatch", re.compile(
        r"undefined symbol|No module named '(?:torch_npu|vllm_ascend|vllm)'|"
        r"version mismatch|is incompatible with|requires torch", re.IGNORECASE)),
)
_ERROR_LINE = re.compile(r"\bERROR\b|Traceback \(most recent call last\)|\bCRITICAL\b|"
                         r"\bFATAL\b|^\S+ \S+ \S+: \w*Error: ", re.MULTILINE)


def latest_run(journal: str) -> list[str]:
    """The journal lines of the unit's latest start (all of them when no start is logged)."""
    lines = journal.splitlines()
    starts = [i for i, line in enumerate(lines) if _RUN_START.search(line)]
    if not starts:
        return lines
    first = starts[-1]
    # "Starting ..." and "Started ..." of one start: begin at the first of the pair.
    while first > 0 and _RUN_START.search(lines[first - 1]):
        first -= 1
    if "Started " in lines[first] and first > 0:
        for i in range(first - 1, -1, -1):
            if _SYSTEMD_LINE.search(lines[i]):
                if "Starting " in lines[i]:
                    first = i
                break
    # journald orders lines by arrival: a process that fails at once can have its output logged
    # before systemd's "Starting" line, in the same second. Such lines belong to this run; an
    # earlier run's output is older, or separated by systemd's lines about its end.
    started = _stamp(lines[first])
    while (first > 0 and started and not _SYSTEMD_LINE.search(lines[first - 1])
           and _stamp(lines[first - 1]) >= started):
        first -= 1
    return lines[first:]


def _stamp(line: str) -> str:
    """The ``short-iso`` time stamp a journal line starts with ('' when it has none)."""
    head = line.split(" ", 1)[0]
    return head if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", head) else ""


def classify_journal(lines: Sequence[str]) -> dict[str, list[str]]:
    """Known problem id -> the journal lines that show it; ``service-errors`` for other errors."""
    found: dict[str, list[str]] = {}
    for line in lines:
        if _SYSTEMD_LINE.search(line) and not re.search(r"OOM killer", line):
            continue  # systemd's own lines about the unit: read from its state instead
        for pid, pattern in JOURNAL_PATTERNS:
            if pattern.search(line):
                found.setdefault(pid, []).append(line)
                break
        else:
            if _ERROR_LINE.search(line):
                found.setdefault("service-errors", []).append(line)
    return found


# --- the launcher ---------------------------------------------------------------------------------

_SOURCE = re.compile(r"^[ \t]*(?:source|\.)[ \t]+(\S+)[ \t]*$", re.MULTILINE)
_EXPORT = re.compile(r"^[ \t]*export[ \t]+([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.MULTILINE)


@dataclass
class Launcher:
    text: str
    set_env: list[str]  # sourced set_env.sh scripts
    env_files: list[str]  # other sourced files (KEY=value settings)
    exports: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> Launcher:
        sourced = [_unquote(m.group(1)) for m in _SOURCE.finditer(text)]
        exports = {m.group(1): _unquote(m.group(2).strip()) for m in _EXPORT.finditer(text)}
        return cls(text=text,
                   set_env=[p for p in sourced if p.endswith("/set_env.sh")],
                   env_files=[p for p in sourced if not p.endswith("/set_env.sh")],
                   exports=exports)

    def flag(self, name: str) -> str | None:
        match = re.search(rf"--{re.escape(name)}(?:=|[ \t]+)(\S+)", self.text)
        return _unquote(match.group(1)) if match else None

    def lines_matching(self, pattern: str) -> list[str]:
        return [line for line in self.text.splitlines() if re.search(pattern, line)]


def _unquote(text: str) -> str:
    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    return parts[0] if len(parts) == 1 else text


# --- the checks -----------------------------------------------------------------------------------


@dataclass
class Context:
    matrix: Matrix | None
    matrix_error: str | None = None


Check = Callable[[Collected, Context], list[Finding]]


def _chips(c: Collected) -> tuple[list[Chip] | None, str | None]:
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
    return [_finding("not-provisioned", c.host,
                     f"no ascend_*.fact in {facts_dir}, no npu-smi, no NPU on the PCI bus",
                     [f"{facts_dir}: " + (", ".join(names) or "no facts")])]


def check_npus(c: Collected, ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    pci = c.value("pci.huawei") or []
    bad_pci = [d for d in pci if str(d.get("device", "")).lower() in UNSUPPORTED_PCI_DEVICES]
    if bad_pci:
        kinds = sorted({UNSUPPORTED_PCI_DEVICES[str(d["device"]).lower()] for d in bad_pci})
        findings.append(_finding(
            "npu-unsupported", c.host, f"{len(bad_pci)} NPU(s) of model {', '.join(kinds)}",
            [f"PCI {d['address']}: vendor {d.get('vendor')} device {d.get('device')} class "
             f"{d.get('class')}" for d in bad_pci]))
    driver_installed = bool(_file_version(c, "driver.version_info", read_driver_info)[0])
    result = c.cmd("npu-smi.info")
    if result is None:
        if driver_installed or c.fact("ascend_npu_driver"):
            findings.append(_finding("npu-smi-failed", c.host,
                                     "npu-smi not found although the driver is installed",
                                     ["npu-smi: not on PATH, not at /usr/local/sbin/npu-smi"]))
        return findings
    rc, out, err = result
    if rc != 0:
        lines = (err + "\n" + out).strip().splitlines()
        if re.search(r"-8005\b", err + out):
            findings.append(_finding("npu-device-busy", c.host,
                                     f"npu-smi info failed (exit {rc}) with -8005",
                                     [f"$ npu-smi info -> exit {rc}", *lines[-5:]]))
        else:
            findings.append(_finding("npu-smi-failed", c.host, f"npu-smi info failed (exit {rc})",
                                     [f"$ npu-smi info -> exit {rc}", *lines[-5:]]))
        return findings
    chips, parse_error = _chips(c)
    if chips is None:
        findings.append(_finding("npu-smi-failed", c.host, "cannot read npu-smi info",
                                 [parse_error or "no chip table"]))
        return findings
    names = sorted({ch.name for ch in chips if ch.family in _UNSUPPORTED_FAMILIES})
    if names and not bad_pci:
        findings.append(_finding("npu-unsupported", c.host, f"npu-smi shows {', '.join(names)}",
                                 [f"NPU {ch.npu} chip {ch.chip}: {ch.name}" for ch in chips
                                  if ch.name in names]))
    bad = unhealthy(chips)
    if bad:
        visible = _visible_devices(c)
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
        findings.append(_finding(
            "npu-unhealthy", c.host,
            "; ".join(f"NPU {ch.npu} chip {ch.chip}: {ch.health}" for ch in bad), evidence))
    try:
        processes = parse_processes(out)
    except NpuSmiParseError:
        processes = []
    service_pids = set(c.value("unit.pids") or [])
    others = [p for p in processes if p.pid not in service_pids]
    if others:
        findings.append(_finding(
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
        findings.append(_finding(
            "driver-install-failed", c.host,
            "the driver's last install attempt in /var/log/ascend_seclog/ascend_install.log "
            "failed" + (" (kernel headers)" if re.search(r"header|kernel", failures[-1], re.I)
                        else ""),
            failures[-4:] + _headers_evidence(c)))
    build = c.value("kernel.build_dir") or {}
    npu_host = bool(c.fact("ascend_npu_driver") or c.value("pci.huawei")
                    or c.text("driver.version_info"))
    if npu_host and build and not build.get("exists"):
        findings.append(_finding(
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


def check_versions(c: Collected, ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    unknown: list[str] = []
    # The driver against its set (npu_driver's ledger names the set).
    ledger = c.fact("ascend_npu_driver") or {}
    chosen, why = _set_of(ctx.matrix, ledger.get("stack_set"))
    if why:
        unknown.append(f"npu_driver: set {ledger.get('stack_set')}: {why}")
    info_text = c.text("driver.version_info")
    installed, unreadable = _file_version(c, "driver.version_info", read_driver_info)
    smi = c.cmd("npu-smi.info")
    running = parse_version(smi[1]) if smi and smi[0] == 0 else None
    if chosen is not None and chosen.hdk:
        evidence = [f"{c.sections.get('driver.version_info', {}).get('path', 'version.info')}: "
                    + (" ".join(line.strip() for line in _kv_lines(info_text, ["Version"]))
                       or "missing")]
        if unreadable:
            evidence.append(unreadable)
        if running:
            evidence.append(f"npu-smi reports {running}")
        lines = ", ".join(chosen.hdk_supported)
        evidence.append(f"set {chosen.name} (stack-matrix.yml) supports HDK {lines} "
                        f"(recommended {chosen.hdk})")
        if not installed or not chosen.hdk_accepts(installed):
            findings.append(_finding(
                "driver-version-mismatch", c.host,
                f"driver {installed or 'not installed'}, set {chosen.name} supports HDK {lines}",
                evidence))
        elif running and not _versions_equal(running, installed):
            findings.append(_finding(
                "driver-version-mismatch", c.host,
                f"npu-smi runs driver {running}, {installed} is installed (reboot pending?)",
                evidence))
    if ledger.get("reboot_pending") and str(ledger.get("reboot_pending")).lower() == "true":
        boot = (c.text("boot_id") or "").strip()
        if not ledger.get("reboot_pending_boot_id") or boot == ledger["reboot_pending_boot_id"]:
            findings.append(_finding(
                "reboot-pending", c.host, "the npu_driver role recorded a pending reboot",
                [f"ascend_npu_driver.fact: reboot_pending true (boot {boot})"]))
    firmware = c.cmd("firmware")
    wanted_fw = str(ledger.get("firmware_version") or "")
    if firmware is not None and wanted_fw:
        found = re.findall(r'"version"\s*:\s*"([^"]+)"', firmware[1])
        wrong = sorted({v for v in found if v != "NA" and v != wanted_fw})
        if firmware[0] != 0 or wrong:
            findings.append(_finding(
                "firmware-version-mismatch", c.host,
                f"firmware {', '.join(wrong) or 'unreadable'}, the role installed {wanted_fw}",
                [f"upgrade-tool --device_index -1 --system_version -> exit {firmware[0]}",
                 *firmware[1].strip().splitlines()[:4]]))
    # CANN against its set.
    cann = c.fact("ascend_cann") or {}
    cset, why = _set_of(ctx.matrix, cann.get("stack_set"))
    if why:
        unknown.append(f"cann: set {cann.get('stack_set')}: {why}")
    if cset is not None and cset.cann:
        findings += _cann_findings(c, cann, cset)
    # The serving environment against its set.
    env = c.fact("ascend_python_env") or {}
    eset, why = _set_of(ctx.matrix, env.get("stack_set"))
    if why:
        unknown.append(f"python_env: set {env.get('stack_set')}: {why}")
    if eset is not None:
        findings += _python_env_findings(c, env, eset)
        npu_set = chosen or cset
        if eset.platform == "ascend" and npu_set is not None and npu_set.name != eset.name:
            findings.append(_finding(
                "stack-set-mixed", c.host,
                f"serving environment {eset.name}, driver/CANN {npu_set.name}",
                [f"ascend_python_env.fact: stack_set {eset.name}",
                 f"ascend_npu_driver.fact / ascend_cann.fact: stack_set {npu_set.name}"]))
    if unknown:
        findings.append(_finding("stack-set-unknown", c.host, "; ".join(unknown)[:200], unknown))
    return findings


def _cann_findings(c: Collected, cann: dict[str, Any], cset: StackSet) -> list[Finding]:
    wanted = str(cset.cann)
    roots = c.value("toolkit.roots") or []
    root = str(cann.get("toolkit_root") or (roots[0] if roots else ""))
    parts: list[tuple[str, str | None, str]] = []
    problems: list[str] = []

    def part(what: str, section: str, reader: Callable[[str, str], dict[str, Any]],
             default_path: str) -> None:
        version, unreadable = _file_version(c, section, reader)
        if unreadable:
            problems.append(unreadable)
        parts.append((what, version,
                      str(c.sections.get(section, {}).get("path") or default_path)))

    part("toolkit", "toolkit.info:" + root, read_toolkit_install_info,
         f"{root}/<arch>-linux/ascend_toolkit_install.info")
    # The kernels/ops release is version_dir= of opp_kernel/version.info (CANN <= 8.3) or
    # opp/version.info (8.5+); the collector picked the file by the toolkit's release.
    part("kernels/ops", "kernels.info:" + root, read_component_version_info,
         f"{root}/opp_kernel/version.info")
    if cann.get("nnal", True) not in (False, "false", "False"):
        part("NNAL (ATB)", "nnal.version_info", read_nnal_atb_info, "nnal version.info")
    wrong = [(what, version, path) for what, version, path in parts
             if not version or not _versions_equal(version, wanted)]
    if not wrong:
        return []
    return [_finding(
        "cann-version-mismatch", c.host,
        ", ".join(f"{what} {version or 'missing'}" for what, version, _ in wrong)
        + f"; set {cset.name} needs CANN {wanted}",
        [f"{path}: {what} {version or 'missing'}" for what, version, path in parts]
        + problems + [f"set {cset.name} (stack-matrix.yml): CANN {wanted}"])]


def _python_env_findings(c: Collected, env: dict[str, Any], eset: StackSet) -> list[Finding]:
    result = c.cmd("python_env")
    if result is None:
        return []
    rc, out, err = result
    try:
        report = json.loads(out) if rc == 0 else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        return [_finding("python-env-mismatch", c.host,
                         f"the serving environment's interpreter {env.get('python')} does not run",
                         [f"{env.get('python')} -> exit {rc}", *(err.strip().splitlines()[-3:])])]
    dists = report.get("dists") or {}
    evidence: list[str] = []
    wrong: list[str] = []
    for name, wanted in sorted(eset.distributions().items()):
        have = dists.get(name)
        evidence.append(f"{name} {have or 'missing'} (set: {wanted})")
        if not have or not _versions_equal(str(have), wanted):
            wrong.append(f"{name} {have or 'missing'} (set: {wanted})")
    python = str(report.get("python") or "")
    if python and ".".join(python.split(".")[:2]) not in eset.python:
        wrong.append(f"Python {python} (set: {', '.join(eset.python)})")
        evidence.append(f"Python {python} (set: {', '.join(eset.python)})")
    if not wrong:
        return []
    return [_finding("python-env-mismatch", c.host,
                     f"{env.get('prefix', 'the serving environment')}: " + "; ".join(wrong),
                     [f"{env.get('python')} (set {eset.name}):", *evidence])]


def _npu_serving(c: Collected, launcher: Launcher | None) -> bool:
    env = c.fact("ascend_python_env") or {}
    if env.get("platform") == "ascend":
        return True
    return launcher is not None and "ASCEND_RT_VISIBLE_DEVICES" in launcher.exports


def _launcher(c: Collected) -> Launcher | None:
    text = c.text("launcher")
    return Launcher.parse(text) if text else None


def _environ(c: Collected) -> dict[str, str] | None:
    text = c.value("service.environ")
    return parse_kv(text) if isinstance(text, str) else None


def check_set_env(c: Collected, ctx: Context) -> list[Finding]:
    svc = c.fact("ascend_vllm_service")
    launcher = _launcher(c)
    if not svc or launcher is None:
        return []
    findings: list[Finding] = []
    sourced = c.value("launcher.sourced") or {}
    # In a container (vllm_service_runtime: container) the set_env scripts are the image's, so
    # the host's files say nothing about them; the env files are mounted from the host.
    in_image = svc.get("runtime") == "container"
    missing = [p for p in launcher.set_env if sourced.get(p) is False and not in_image]
    if missing:
        findings.append(_finding(
            "set-env-missing", c.host, ", ".join(missing) + " not found",
            [f"{svc.get('launcher')}: source {p}" for p in missing]
            + [f"{p}: does not exist" for p in missing]))
    if _npu_serving(c, launcher):
        toolkit = [p for p in launcher.set_env if "/nnal/" not in p]
        atb = [p for p in launcher.set_env if "/nnal/atb/" in p]
        absent = (["the CANN toolkit's set_env.sh"] if not toolkit else []) + (
            ["ATB's nnal/atb/set_env.sh"] if not atb else [])
        if absent:
            evidence = [f"{svc.get('launcher')} sources: "
                        + (", ".join(launcher.set_env) or "no set_env.sh")]
            evidence += launcher.lines_matching(r"ASCEND_RT_VISIBLE_DEVICES=|^exec ")
            profile = c.text("cann.profile_script")
            if profile:
                evidence += [f"(the login shells' {c.sections['cann.profile_script']['path']} "
                             f"has: {line.strip()})" for line in profile.splitlines()
                             if _SOURCE.match(line)]
            environ = _environ(c)
            if environ is not None:
                evidence.append("the running server's environment: ASCEND_TOOLKIT_HOME="
                                + environ.get("ASCEND_TOOLKIT_HOME", "(unset)") + ", ATB_HOME_PATH="
                                + environ.get("ATB_HOME_PATH", "(unset)"))
            findings.append(_finding("set-env-not-sourced", c.host,
                                     "the launcher of an NPU service does not source "
                                     + " and ".join(absent), evidence))
    missing_files = [p for p in launcher.env_files if sourced.get(p) is False]
    if missing_files:
        findings.append(_finding(
            "hccl-env-missing", c.host, ", ".join(missing_files) + " not found",
            [f"{svc.get('launcher')}: . {p} (missing)" for p in missing_files]))
    return findings


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
        return [_finding("hccn-unreadable", c.host, f"{tool} is missing",
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
            findings.append(_finding(name, c.host, f"{title} on device {', '.join(ids)}",
                                     bad[getter]))
    if len(set(tls.values())) > 1:
        findings.append(_finding("hccn-tls-mixed", c.host, "TLS on on some devices, off on others",
                                 [f"device {d}: tls {v}" for d, v in sorted(tls.items())]))
    if unreadable:
        findings.append(_finding("hccn-unreadable", c.host,
                                 f"{len(unreadable)} hccn_tool answer(s) unreadable", unreadable))
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
            return [_finding("hccl-env-missing", c.host, f"{path}: {c.file_error('hccl.env')}",
                             [f"ascend_hccl.fact: env_file {fact.get('env_file', path)}",
                              f"{path}: {c.file_error('hccl.env') or 'missing'}"])]
        return []
    env = parse_kv(text)
    findings: list[Finding] = []
    timeout = env.get("HCCL_CONNECT_TIMEOUT")
    if timeout is not None and (not timeout.isdigit() or not 120 <= int(timeout) <= 7200):
        findings.append(_finding(
            "hccl-timeout-invalid", c.host,
            f"HCCL_CONNECT_TIMEOUT={timeout} (HCCL accepts 120-7200 s)",
            [f"{path}: " + line.strip() for line in
             _kv_lines(text, ["HCCL_CONNECT_TIMEOUT"])]))
    exec_timeout = env.get("HCCL_EXEC_TIMEOUT")
    if exec_timeout is not None and (not exec_timeout.isdigit() or int(exec_timeout) <= 0):
        findings.append(_finding("hccl-timeout-invalid", c.host,
                                 f"HCCL_EXEC_TIMEOUT={exec_timeout} must be a positive number",
                                 [f"{path}: HCCL_EXEC_TIMEOUT={exec_timeout}"]))
    addresses, links = _host_interfaces(c)
    if_ip = env.get("HCCL_IF_IP")
    if if_ip is not None and addresses:
        mine = sorted(a for values in addresses.values() for a in values)
        if if_ip not in mine:
            findings.append(_finding(
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
            findings.append(_finding("hccl-ifname-absent", c.host,
                                     "no such interface on this host",
                                     [*absent, "interfaces: " + ", ".join(links)]))
    if env.get("HCCL_INTRA_PCIE_ENABLE") == "1" and env.get("HCCL_INTRA_ROCE_ENABLE") == "1":
        findings.append(_finding("hccl-intra-both", c.host, "both intra-node transports enabled",
                                 [f"{path}: " + line.strip() for line in _kv_lines(
                                     text, ["HCCL_INTRA_PCIE_ENABLE", "HCCL_INTRA_ROCE_ENABLE"])]))
    return findings


def _visible_devices(c: Collected) -> list[int] | None:
    launcher = _launcher(c)
    environ = _environ(c)
    value = (environ or {}).get("ASCEND_RT_VISIBLE_DEVICES") or (
        launcher.exports.get("ASCEND_RT_VISIBLE_DEVICES") if launcher else None)
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        return None


def check_service(c: Collected, ctx: Context) -> list[Finding]:
    svc = c.fact("ascend_vllm_service")
    if not svc:
        return []
    unit = str(c.value("unit.name") or svc.get("unit") or "ascend-vllm")
    findings: list[Finding] = []
    show = c.cmd("unit.show")
    props = dict(line.split("=", 1) for line in (show[1] if show else "").splitlines()
                 if "=" in line)
    state_line = " ".join(f"{k}={props[k]}" for k in (
        "ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus") if k in props)
    journal = c.cmd("journal")
    run_lines = latest_run(journal[1]) if journal and journal[0] == 0 else []
    if show is not None and props.get("LoadState") == "not-found":
        findings.append(_finding("service-missing", c.host, f"unit {unit} is not installed",
                                 [f"systemctl show {unit}: LoadState=not-found"]))
    elif props:
        active = props.get("ActiveState")
        if active != "active":
            systemd_lines = [line for line in run_lines if _SYSTEMD_LINE.search(line)]
            findings.append(_finding(
                "service-failed", c.host,
                f"{unit} is {active}/{props.get('SubState')} (result {props.get('Result')})",
                [f"systemctl show {unit}: {state_line}", *systemd_lines[-4:]]))
        else:
            health = c.value("service.health") or {}
            if health and health.get("status") != 200:
                findings.append(_finding(
                    "service-unhealthy", c.host, f"{health.get('url')}: "
                    f"{health.get('status') or health.get('error')}",
                    [f"GET {health.get('url')} -> {health.get('status') or health.get('error')}",
                     f"systemctl show {unit}: {state_line}"]))
    classified = classify_journal(run_lines)
    other_errors = classified.pop("service-errors", [])
    for pid, lines in classified.items():
        detail = {"service-oom": "out of memory in the service's latest start",
                  "host-oom-kill": "the OOM killer ended the service"}.get(
                      pid, f"the journal of {unit} shows it")
        findings.append(_finding(pid, c.host, detail,
                                 [f"journalctl -u {unit} (latest start):", *lines]))
    if other_errors and classified:
        # Error lines around a known problem (the traceback, "EngineCore failed") belong to it.
        first = next(f for f in findings if f.id in classified)
        first.evidence = [*first.evidence, "other error lines:", *other_errors][:MAX_EVIDENCE]
    elif other_errors:
        findings.append(_finding("service-errors", c.host,
                                 f"{len(other_errors)} error line(s) in the latest start",
                                 [f"journalctl -u {unit} (latest start):", *other_errors]))
    findings += _visible_findings(c)
    return findings


def _visible_findings(c: Collected) -> list[Finding]:
    launcher = _launcher(c)
    if launcher is None or not _npu_serving(c, launcher):
        return []
    findings: list[Finding] = []
    environ = _environ(c) or {}
    raw = environ.get("ASCEND_RT_VISIBLE_DEVICES") or launcher.exports.get(
        "ASCEND_RT_VISIBLE_DEVICES")
    chips, _ = _chips(c)
    if raw is not None:
        problems: list[str] = []
        items = [v.strip() for v in raw.split(",") if v.strip()]
        ids = [int(v) for v in items if v.isdigit()]
        if len(ids) != len(items):
            problems.append(f"not a list of device ids: {raw}")
        if len(set(ids)) != len(ids):
            problems.append(f"ids listed twice: {raw}")
        if chips is not None and any(i >= len(chips) for i in ids):
            problems.append(f"ids beyond this host's {len(chips)} chips (0-{len(chips) - 1})")
        tensor = launcher.flag("tensor-parallel-size") or "1"
        data = launcher.flag("data-parallel-size-local") or launcher.flag(
            "data-parallel-size") or "1"
        if tensor.isdigit() and data.isdigit() and len(set(ids)) < int(tensor) * int(data):
            problems.append(f"{len(set(ids))} device(s) for tensor {tensor} x local data "
                            f"{data} = {int(tensor) * int(data)} ranks")
        if problems:
            findings.append(_finding(
                "visible-devices-invalid", c.host, "; ".join(problems),
                [f"ASCEND_RT_VISIBLE_DEVICES={raw}",
                 *launcher.lines_matching(r"ASCEND_RT_VISIBLE_DEVICES|--tensor-parallel-size|"
                                          r"--data-parallel-size")]))
    if launcher.flag("distributed-executor-backend") == "ray":
        noset = environ.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES") or \
            launcher.exports.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES")
        if noset != "1":
            findings.append(_finding(
                "ray-visible-devices", c.host, "the launcher runs Ray without the NOSET variable",
                launcher.lines_matching(r"distributed-executor-backend|RAY_")))
    return findings


def check_swap_tuning(c: Collected, ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    swap = c.fact("ascend_swap") or {}
    swaps = c.text("swaps") or ""
    size = swap.get("size_gb") or 0
    if swap and float(size) > 0:
        listed = any(line.split()[:1] == [swap.get("file")] for line in swaps.splitlines())
        if str(swap.get("active")).lower() == "true" and not listed:
            findings.append(_finding(
                "swap-inactive", c.host, f"{swap.get('file')} is not in /proc/swaps",
                [f"ascend_swap.fact: file {swap.get('file')}, {size} GiB, active true",
                 "/proc/swaps: " + (" | ".join(swaps.strip().splitlines()[1:]) or "empty")]))
        elif str(swap.get("active")).lower() != "true" and not listed:
            findings.append(_finding(
                "swap-not-applied", c.host, str(swap.get("reason") or "not active")[:160],
                [f"ascend_swap.fact: {swap.get('file')} {size} GiB active false: "
                 f"{swap.get('reason', '')}"]))
    tuning = c.fact("ascend_host_tuning") or {}
    sysctl = tuning.get("sysctl") if isinstance(tuning.get("sysctl"), dict) else {}
    drift: list[str] = []
    for key, wanted in sorted((sysctl or {}).get("applied", {}).items()):
        running = c.text("sysctl:" + key)
        if running is None:
            continue
        if " ".join(running.split()) != " ".join(str(wanted).split()):
            drift.append(f"{key} = {running.strip()} (host_tuning applied {wanted})")
    if drift:
        findings.append(_finding("sysctl-drift", c.host, f"{len(drift)} setting(s) changed",
                                 drift))
    persisted = (sysctl or {}).get("persisted_only") or {}
    if persisted:
        findings.append(_finding(
            "sysctl-not-applied", c.host, ", ".join(sorted(persisted)),
            [f"{k}={v.get('value') if isinstance(v, dict) else v}: "
             f"{(v.get('reason') if isinstance(v, dict) else '') or ''}"[:200]
             for k, v in sorted(persisted.items())]))
    governor = tuning.get("cpu_governor") if isinstance(tuning.get("cpu_governor"), dict) else {}
    if governor and str(governor.get("applied")).lower() == "true":
        wanted = str(governor.get("wanted"))
        wrong = [f"{p}: {v}" for p, v in sorted((c.value("cpu.governors") or {}).items())
                 if v != wanted]
        if wrong:
            findings.append(_finding("governor-drift", c.host,
                                     f"{len(wrong)} CPU policy(ies) not {wanted}", wrong))
    jemalloc = c.value("jemalloc") or {}
    if jemalloc and not jemalloc.get("exists"):
        findings.append(_finding("jemalloc-missing", c.host, str(jemalloc.get("path")),
                                 [f"{jemalloc.get('path')}: missing"]))
    return findings


def check_collection(c: Collected, ctx: Context) -> list[Finding]:
    denied = sorted(name.removesuffix(".error") for name, section in c.sections.items()
                    if _DENIED.search(str(section.get("error") or "")
                                      + str(section.get("err") or "")
                                      + (str(section.get("value")) if name.endswith(".error")
                                         else "")))
    if not denied:
        return []
    return [_finding("collect-partial", c.host, f"{len(denied)} part(s) not readable",
                     [f"{name}: permission denied" for name in denied])]


# What a reader without the rights sees (open(), journalctl as a user outside adm).
_DENIED = re.compile(r"permission denied|insufficient permissions|not seeing messages from other",
                     re.IGNORECASE)


CHECKS: tuple[Check, ...] = (
    check_provisioned, check_npus, check_driver_install, check_versions, check_set_env,
    check_device_network, check_hccl, check_service, check_swap_tuning, check_collection,
)


def diagnose(c: Collected, ctx: Context) -> list[Finding]:
    """Every check over the collected data, worst first; one finding per problem id + detail."""
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for check in CHECKS:
        for item in check(c, ctx):
            key = (item.id, item.detail)
            if key not in seen:
                seen.add(key)
                findings.append(item)
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


# --- hosts ------------------------------------------------------------------------------------


@dataclass
class HostResult:
    report: HostReport
    collected: Collected | None


def examine(name: str, connect: Callable[[], Transport], command: Sequence[str],
            ctx: Context, timeout: float = 300.0) -> HostResult:
    """Connect, collect and diagnose one host; a failure to collect is the report's error."""
    start = time.monotonic()
    transport: Transport | None = None
    try:
        transport = connect()
        collected = collect(transport, command, timeout)
    except (TransportError, CollectError) as exc:
        return HostResult(HostReport(host=name, collected=False, error=redact(str(exc)),
                                     duration_s=round(time.monotonic() - start, 2)), None)
    finally:
        if transport is not None:
            transport.close()
    collected.host = name
    findings = diagnose(collected, ctx)
    return HostResult(HostReport(host=name, collected=True, findings=findings,
                                 duration_s=round(time.monotonic() - start, 2)), collected)


def examine_all(targets: Sequence[tuple[str, Callable[[], Transport]]],
                command: Sequence[str], ctx: Context, workers: int = 16,
                timeout: float = 300.0) -> list[HostResult]:
    """Every host concurrently; results in the order given."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        return list(pool.map(lambda t: examine(t[0], t[1], command, ctx, timeout), targets))


# --- the support bundle --------------------------------------------------------------------


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", name).strip("_") or "_"


def bundle_members(results: Sequence[HostResult]) -> dict[str, str]:
    """Path in the tarball -> text: per host its findings, every raw output, fact and config."""
    members: dict[str, str] = {
        "README.txt": (
            "ascend-serve doctor support bundle. Secrets (API keys, tokens, passwords, "
            "Authorization headers, vault blocks, private keys) were replaced by <redacted>.\n"
            "Per host: findings.json, collected.json (everything the collector read), and the "
            "same split into commands/, files/ and facts/.\n"),
        "report.json": json.dumps([r.report.model_dump() for r in results], indent=2) + "\n",
    }
    for result in results:
        host = _safe(result.report.host)
        members[f"{host}/findings.json"] = json.dumps(
            result.report.model_dump(), indent=2) + "\n"
        if result.collected is None:
            continue
        sections = result.collected.sections
        members[f"{host}/collected.json"] = json.dumps(sections, indent=2, sort_keys=True) + "\n"
        for name, section in sorted(sections.items()):
            if "argv" in section:
                members[f"{host}/commands/{_safe(name)}.txt"] = (
                    "$ " + " ".join(shlex.quote(str(a)) for a in section["argv"][:1])
                    + (" ..." if name == "python_env" else " " + " ".join(
                        shlex.quote(str(a)) for a in section["argv"][1:]))
                    + f"\n# exit {section.get('rc')}\n" + str(section.get("out") or "")
                    + ("\n# stderr:\n" + str(section["err"]) if section.get("err") else ""))
            elif name.startswith("fact:"):
                members[f"{host}/facts/{_safe(name[5:])}.fact"] = str(section.get("text") or "")
            elif section.get("text") is not None:
                members[f"{host}/files/{_safe(str(section.get('path') or name))}"] = str(
                    section["text"])
            elif "value" in section:
                value = section["value"]
                members[f"{host}/values/{_safe(name)}.txt"] = (
                    value if isinstance(value, str) else json.dumps(value, indent=2)) + "\n"
    # Everything in the bundle passes the redaction once more.
    return {path: redact(text) for path, text in members.items()}


def write_bundle(path: Path, results: Sequence[HostResult]) -> list[str]:
    """Write the support tarball (gzip); returns the member names."""
    members = bundle_members(results)
    root = path.name.removesuffix(".tar.gz").removesuffix(".tgz") or "doctor"
    now = time.time()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(members.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            info.mode = 0o600
            info.mtime = int(now)
            tar.addfile(info, io.BytesIO(data))
    path.chmod(0o600)
    return sorted(members)


def exit_code(results: Iterable[HostResult]) -> int:
    """0 nothing at warning level or above, 1 findings, 3 a host could not be collected."""
    results = list(results)
    if any(not r.report.collected for r in results):
        return EXIT_FAILED
    if any(f.severity in ("error", "warning") for r in results for f in r.report.findings):
        return EXIT_CHECK_FAILED
    return EXIT_OK
