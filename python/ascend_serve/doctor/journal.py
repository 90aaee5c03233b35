"""The service's journal as ``ascend-serve doctor`` reads it: the latest run, classified lines."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ascend_serve.doctor.faults import classifier

# --- journal -------------------------------------------------------------------------------------

SYSTEMD_LINE = re.compile(r"\bsystemd\[1\]: ")
_RUN_START = re.compile(r"\bsystemd\[1\]: (?:Starting|Started) ")

# Line classes of the vLLM journal that are not fault codes: known problem -> pattern (first
# match wins). Codes and the vendor's fault messages are the fault classifier's
# (ascend_serve.doctor.faults): a line it knows is never matched here.
JOURNAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("host-oom-kill", re.compile(
        r"killed by the OOM killer|oom-kill|Out of memory: Killed process|oom_reaper",
        re.IGNORECASE)),
    ("service-oom", re.compile(
        r"(?:NPU|npu|device|HBM)\s+out of memory|OutOfMemoryError|out of memory|"
        r"ACL_ERROR_RT_MEMORY_ALLOCATION|Not enough memory|"
        r"No available memory for the cache blocks", re.IGNORECASE)),
    ("npu-device-busy", re.compile(
        r"device (?:or resource )?busy|is occupied by", re.IGNORECASE)),
    ("hccl-timeout-in-log", re.compile(
        r"\bHCCL\b[^\n]*\btime(?:d)?[ -]?out\b|"
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
            if SYSTEMD_LINE.search(lines[i]):
                if "Starting " in lines[i]:
                    first = i
                break
    # journald orders lines by arrival: a process that fails at once can have its output logged
    # before systemd's "Starting" line, in the same second. Such lines belong to this run; an
    # earlier run's output is older, or separated by systemd's lines about its end.
    started = _stamp(lines[first])
    while (first > 0 and started and not SYSTEMD_LINE.search(lines[first - 1])
           and _stamp(lines[first - 1]) >= started):
        first -= 1
    return lines[first:]


def _stamp(line: str) -> str:
    """The ``short-iso`` time stamp a journal line starts with ('' when it has none)."""
    head = line.split(" ", 1)[0]
    return head if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", head) else ""


def classify_journal(lines: Sequence[str]) -> dict[str, list[str]]:
    """Known problem id -> the journal lines that show it; ``service-errors`` for other errors.

    A line with a fault the classifier knows goes to the known problem its rule names; a known
    fault without one (a chip code, a Mooncake timeout) is left to the fault check
    (:mod:`ascend_serve.doctor.checks_faults`), never counted as an unexplained error."""
    found: dict[str, list[str]] = {}
    clf = classifier()
    for line in lines:
        if SYSTEMD_LINE.search(line) and not re.search(r"OOM killer", line):
            continue  # systemd's own lines about the unit: read from its state instead
        hits, _ = clf.scan_line(line)
        problems = sorted((clf.rank(h.fault_class), p) for h in hits
                          if (p := clf.problem_of(h)) is not None)
        if problems:
            found.setdefault(problems[0][1], []).append(line)
            continue
        if hits:
            continue
        for pid, pattern in JOURNAL_PATTERNS:
            if pattern.search(line):
                found.setdefault(pid, []).append(line)
                break
        else:
            if _ERROR_LINE.search(line):
                found.setdefault("service-errors", []).append(line)
    return found
