"""``ascend-serve doctor`` checks of the serving service: launcher, set_env, systemd, tuning."""

from __future__ import annotations

import re

from ascend_serve.doctor.checks_host import read_chips
from ascend_serve.doctor.collected import Collected
from ascend_serve.doctor.findings import MAX_EVIDENCE, Context, Finding, new_finding
from ascend_serve.doctor.journal import SYSTEMD_LINE, classify_journal, latest_run
from ascend_serve.doctor.launcher import (
    SOURCE_LINE,
    npu_serving,
    read_launcher,
    service_environ,
)


def check_set_env(c: Collected, ctx: Context) -> list[Finding]:
    svc = c.fact("ascend_vllm_service")
    launcher = read_launcher(c)
    if not svc or launcher is None:
        return []
    findings: list[Finding] = []
    sourced = c.value("launcher.sourced") or {}
    # In a container (vllm_service_runtime: container) the set_env scripts are the image's, so
    # the host's files say nothing about them; the env files are mounted from the host.
    in_image = svc.get("runtime") == "container"
    missing = [p for p in launcher.set_env if sourced.get(p) is False and not in_image]
    if missing:
        findings.append(new_finding(
            "set-env-missing", c.host, ", ".join(missing) + " not found",
            [f"{svc.get('launcher')}: source {p}" for p in missing]
            + [f"{p}: does not exist" for p in missing]))
    if npu_serving(c, launcher):
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
                             if SOURCE_LINE.match(line)]
            environ = service_environ(c)
            if environ is not None:
                evidence.append("the running server's environment: ASCEND_TOOLKIT_HOME="
                                + environ.get("ASCEND_TOOLKIT_HOME", "(unset)") + ", ATB_HOME_PATH="
                                + environ.get("ATB_HOME_PATH", "(unset)"))
            findings.append(new_finding("set-env-not-sourced", c.host,
                                        "the launcher of an NPU service does not source "
                                        + " and ".join(absent), evidence))
    missing_files = [p for p in launcher.env_files if sourced.get(p) is False]
    if missing_files:
        findings.append(new_finding(
            "hccl-env-missing", c.host, ", ".join(missing_files) + " not found",
            [f"{svc.get('launcher')}: . {p} (missing)" for p in missing_files]))
    return findings


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
        findings.append(new_finding("service-missing", c.host, f"unit {unit} is not installed",
                                    [f"systemctl show {unit}: LoadState=not-found"]))
    elif props:
        active = props.get("ActiveState")
        if active != "active":
            systemd_lines = [line for line in run_lines if SYSTEMD_LINE.search(line)]
            findings.append(new_finding(
                "service-failed", c.host,
                f"{unit} is {active}/{props.get('SubState')} (result {props.get('Result')})",
                [f"systemctl show {unit}: {state_line}", *systemd_lines[-4:]]))
        else:
            health = c.value("service.health") or {}
            if health and health.get("status") != 200:
                findings.append(new_finding(
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
        findings.append(new_finding(pid, c.host, detail,
                                    [f"journalctl -u {unit} (latest start):", *lines]))
    if other_errors and classified:
        # Error lines around a known problem (the traceback, "EngineCore failed") belong to it.
        first = next(f for f in findings if f.id in classified)
        first.evidence = [*first.evidence, "other error lines:", *other_errors][:MAX_EVIDENCE]
    elif other_errors:
        findings.append(new_finding("service-errors", c.host,
                                    f"{len(other_errors)} error line(s) in the latest start",
                                    [f"journalctl -u {unit} (latest start):", *other_errors]))
    findings += _visible_findings(c)
    return findings


def _visible_findings(c: Collected) -> list[Finding]:
    launcher = read_launcher(c)
    if launcher is None or not npu_serving(c, launcher):
        return []
    findings: list[Finding] = []
    environ = service_environ(c) or {}
    raw = environ.get("ASCEND_RT_VISIBLE_DEVICES") or launcher.exports.get(
        "ASCEND_RT_VISIBLE_DEVICES")
    chips, _ = read_chips(c)
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
            findings.append(new_finding(
                "visible-devices-invalid", c.host, "; ".join(problems),
                [f"ASCEND_RT_VISIBLE_DEVICES={raw}",
                 *launcher.lines_matching(r"ASCEND_RT_VISIBLE_DEVICES|--tensor-parallel-size|"
                                             r"--data-parallel-size")]))
    if launcher.flag("distributed-executor-backend") == "ray":
        noset = environ.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES") or \
            launcher.exports.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES")
        if noset != "1":
            findings.append(new_finding(
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
            findings.append(new_finding(
                "swap-inactive", c.host, f"{swap.get('file')} is not in /proc/swaps",
                [f"ascend_swap.fact: file {swap.get('file')}, {size} GiB, active true",
                 "/proc/swaps: " + (" | ".join(swaps.strip().splitlines()[1:]) or "empty")]))
        elif str(swap.get("active")).lower() != "true" and not listed:
            findings.append(new_finding(
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
        findings.append(new_finding("sysctl-drift", c.host, f"{len(drift)} setting(s) changed",
                                    drift))
    persisted = (sysctl or {}).get("persisted_only") or {}
    if persisted:
        findings.append(new_finding(
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
            findings.append(new_finding("governor-drift", c.host,
                                        f"{len(wrong)} CPU policy(ies) not {wanted}", wrong))
    jemalloc = c.value("jemalloc") or {}
    if jemalloc and not jemalloc.get("exists"):
        findings.append(new_finding("jemalloc-missing", c.host, str(jemalloc.get("path")),
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
    return [new_finding("collect-partial", c.host, f"{len(denied)} part(s) not readable",
                        [f"{name}: permission denied" for name in denied])]


# What a reader without the rights sees (open(), journalctl as a user outside adm).
_DENIED = re.compile(r"permission denied|insufficient permissions|not seeing messages from other",
                     re.IGNORECASE)
