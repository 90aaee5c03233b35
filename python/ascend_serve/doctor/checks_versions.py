"""``ascend-serve doctor`` checks of installed versions against the version matrix."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import (
    read_component_version_info,
    read_driver_info,
    read_nnal_atb_info,
    read_toolkit_install_info,
)
from ascend_serve.doctor.collected import Collected, file_version, kv_lines
from ascend_serve.doctor.findings import Context, Finding, new_finding
from ascend_serve.stack.matrix import Matrix, MatrixError, StackSet, resolve
from ascend_serve.stack.npusmi import (
    parse_version,
)


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


def check_versions(c: Collected, ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    unknown: list[str] = []
    # The driver against its set (npu_driver's ledger names the set).
    ledger = c.fact("ascend_npu_driver") or {}
    chosen, why = _set_of(ctx.matrix, ledger.get("stack_set"))
    if why:
        unknown.append(f"npu_driver: set {ledger.get('stack_set')}: {why}")
    info_text = c.text("driver.version_info")
    installed, unreadable = file_version(c, "driver.version_info", read_driver_info)
    smi = c.cmd("npu-smi.info")
    running = parse_version(smi[1]) if smi and smi[0] == 0 else None
    if chosen is not None and chosen.hdk:
        evidence = [f"{c.sections.get('driver.version_info', {}).get('path', 'version.info')}: "
                    + (" ".join(line.strip() for line in kv_lines(info_text, ["Version"]))
                       or "missing")]
        if unreadable:
            evidence.append(unreadable)
        if running:
            evidence.append(f"npu-smi reports {running}")
        lines = ", ".join(chosen.hdk_supported)
        evidence.append(f"set {chosen.name} (stack-matrix.yml) supports HDK {lines} "
                        f"(recommended {chosen.hdk})")
        if not installed or not chosen.hdk_accepts(installed):
            findings.append(new_finding(
                "driver-version-mismatch", c.host,
                f"driver {installed or 'not installed'}, set {chosen.name} supports HDK {lines}",
                evidence))
        elif running and not _versions_equal(running, installed):
            findings.append(new_finding(
                "driver-version-mismatch", c.host,
                f"npu-smi runs driver {running}, {installed} is installed (reboot pending?)",
                evidence))
    if ledger.get("reboot_pending") and str(ledger.get("reboot_pending")).lower() == "true":
        boot = (c.text("boot_id") or "").strip()
        if not ledger.get("reboot_pending_boot_id") or boot == ledger["reboot_pending_boot_id"]:
            findings.append(new_finding(
                "reboot-pending", c.host, "the npu_driver role recorded a pending reboot",
                [f"ascend_npu_driver.fact: reboot_pending true (boot {boot})"]))
    firmware = c.cmd("firmware")
    wanted_fw = str(ledger.get("firmware_version") or "")
    if firmware is not None and wanted_fw:
        found = re.findall(r'"version"\s*:\s*"([^"]+)"', firmware[1])
        wrong = sorted({v for v in found if v != "NA" and v != wanted_fw})
        if firmware[0] != 0 or wrong:
            findings.append(new_finding(
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
            findings.append(new_finding(
                "stack-set-mixed", c.host,
                f"serving environment {eset.name}, driver/CANN {npu_set.name}",
                [f"ascend_python_env.fact: stack_set {eset.name}",
                 f"ascend_npu_driver.fact / ascend_cann.fact: stack_set {npu_set.name}"]))
    if unknown:
        findings.append(new_finding("stack-set-unknown", c.host, "; ".join(unknown)[:200], unknown))
    return findings


def _cann_findings(c: Collected, cann: dict[str, Any], cset: StackSet) -> list[Finding]:
    wanted = str(cset.cann)
    roots = c.value("toolkit.roots") or []
    root = str(cann.get("toolkit_root") or (roots[0] if roots else ""))
    parts: list[tuple[str, str | None, str]] = []
    problems: list[str] = []

    def part(what: str, section: str, reader: Callable[[str, str], dict[str, Any]],
             default_path: str) -> None:
        version, unreadable = file_version(c, section, reader)
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
    return [new_finding(
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
        return [new_finding(
            "python-env-mismatch", c.host,
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
    return [new_finding("python-env-mismatch", c.host,
                        f"{env.get('prefix', 'the serving environment')}: " + "; ".join(wrong),
                        [f"{env.get('python')} (set {eset.name}):", *evidence])]
