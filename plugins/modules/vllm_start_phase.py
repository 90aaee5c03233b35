#!/usr/bin/python
"""Where a vLLM server's current start stands: its phase, read from the unit's journal."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_start_phase
short_description: Read which startup phase a vLLM server has reached, and why a start failed
description:
  - Reads the output of a vLLM server's current start, from the journal of its systemd unit
    (only the lines of one start, selected by the unit's invocation id,
    C(journalctl --output cat _SYSTEMD_UNIT=U _SYSTEMD_INVOCATION_ID=ID)) or from a log file,
    with the collection's one vLLM log reader (module_utils/vllm_log.py; every line it knows
    cites the vLLM or vllm-ascend source that prints it and was read off real logs).
  - Returns the furthest phase reached (engine starting, loading weights with vLLM's per-shard
    progress, weights loaded, torch.compile, KV cache, graph capture, engine ready, API server
    starting, application startup complete), since when, what the phases measured, whether the
    start failed (engine failed to start, vLLM's engine-ready timeout, out of memory, a KV cache
    or context that does not fit) with the error line, and the fix.
  - Meant for an C(until) loop that waits phase by phase. I(wait_for) names the milestone,
    I(timeout_s) the budget counted from the start of the service, and C(done) says the loop
    can stop (the milestone is reached, the start failed, the service died or restarted, or
    the budget is spent).
version_added: 0.3.0
options:
  unit:
    description:
      - The systemd unit running vLLM (C(.service) is added when the name has no suffix).
      - Exactly one of I(unit) and I(log_path) is required.
    type: str
  log_path:
    description:
      - A log file holding the whole output of one start (e.g. C(ascend-serve serve)'s
        C(vllm.log)).
    type: path
  invocation:
    description:
      - The invocation id of the start to read (C(systemctl show -p InvocationID)); default the
        unit's current one. Pass the C(invocation_id) an earlier reading returned to keep
        reading that start;
        when the unit has been restarted since, C(restarted) is true and the reading is that of
        the start that ended.
    type: str
  wait_for:
    description:
      - The milestone C(reached) refers to, a phase name or C(health) (I(health_url) answers
        200). A healthy server reaches every phase.
    type: str
    default: ready
    choices: [starting, loading_weights, weights_loaded, compiling, kv_cache, graph_capture,
              engine_ready, api_server, ready, health]
  timeout_s:
    description:
      - The budget for the whole start, in seconds since the service's main process started
        (the log's first time stamp for I(log_path)); C(timed_out) is true past it. 0 for none.
    type: float
    default: 0
  health_url:
    description: URL of vLLM's C(/health), asked once per call (no credentials needed).
    type: str
  lines:
    description: How many of the last log lines to return in C(last_lines).
    type: int
    default: 20
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
"""

EXAMPLES = r"""
- name: Read where vLLM's current start stands
  ascend_serve.fleet.vllm_start_phase:
    unit: ascend-vllm
  register: start

- name: "Wait for vLLM: weights loaded"
  ascend_serve.fleet.vllm_start_phase:
    unit: ascend-vllm
    invocation: "{{ start.invocation_id }}"
    wait_for: weights_loaded
    timeout_s: 3600
    health_url: http://127.0.0.1:8000/health
  register: phase
  until: phase.done
  retries: 400
  delay: 10
"""

RETURN = r"""
phase:
  description: The furthest startup phase the log shows (null before the first one).
  returned: always
  type: str
  sample: loading_weights
phase_title:
  description: The phase in words.
  returned: always
  type: str
  sample: loading weights
phase_index:
  description: Its index among the phases (-1 before the first one).
  returned: always
  type: int
  sample: 1
phases_total:
  description: How many phases a start goes through.
  returned: always
  type: int
  sample: 9
phases:
  description: The phases in the order the log reached them.
  returned: always
  type: list
  elements: str
  sample: [starting, loading_weights]
phase_stamp:
  description: vLLM's time stamp (MM-DD HH:MM:SS, local time) of the line that reached the phase.
  returned: always
  type: str
  sample: "12-05 00:00:42"
phase_since:
  description: That time in seconds since the epoch (null when the log has no time stamp).
  returned: always
  type: float
phase_seconds:
  description: How long the start has been in that phase, in seconds (null without a time stamp).
  returned: always
  type: float
  sample: 312.0
progress:
  description:
    - vLLM's progress bar of the current phase (shards while loading weights, graphs while
      capturing); null when the phase has none.
  returned: always
  type: dict
  sample: {what: shards, done: 57, total: 163, percent: 35, elapsed: "03:12", remaining: "05:50"}
facts:
  description:
    - What the phases printed (weights_gib, weights_seconds, load_seconds, filesystem,
      kv_cache_tokens, graph_seconds, engine_seconds, listen, ...).
  returned: always
  type: dict
  sample: {weights_gib: 35.9085, load_seconds: 360.99}
summary:
  description: The phase and its numbers in one line.
  returned: always
  type: str
  sample: loading weights (57/163 shards, 03:12 elapsed)
start_failed:
  description: The log shows that the start cannot succeed.
  returned: always
  type: bool
cause:
  description:
    - Why (engine_timeout, device_oom, kv_cache_memory, max_model_len, engine_failed), or
      null.
  returned: always
  type: str
error:
  description: The line that says why, or the last exception of a traceback; null without one.
  returned: always
  type: str
fix:
  description: What to change, when the start failed, died, or ran out of time ("" otherwise).
  returned: always
  type: str
last_line:
  description: The last line of the log.
  returned: always
  type: str
last_lines:
  description: The last I(lines) lines of the log.
  returned: always
  type: list
  elements: str
invocation_id:
  description:
    - The invocation id of the start that was read ("" for I(log_path)); pass it as I(invocation)
      to keep reading that start.
  returned: always
  type: str
restarted:
  description: The unit runs another start than I(invocation) (the one read has ended).
  returned: always
  type: bool
running:
  description:
    - The service's process is running (for a unit, active or activating and not waiting to
      restart).
  returned: always
  type: bool
unit_state:
  description:
    - The unit's ActiveState, SubState, Result, NRestarts, MainPID and current InvocationID
      (empty for I(log_path)).
  returned: always
  type: dict
uptime_s:
  description: Seconds since the service's main process started (null when unknown).
  returned: always
  type: float
healthy:
  description: I(health_url) answered 200 (null without I(health_url)).
  returned: always
  type: bool
reached:
  description: The start has reached I(wait_for).
  returned: always
  type: bool
timed_out:
  description: I(timeout_s) is set and the start has taken longer.
  returned: always
  type: bool
done:
  description:
    - A waiting loop can stop (reached, start failed, restarted, not running, or timed
      out).
  returned: always
  type: bool
"""

import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.vllm_log import (
    PHASE_NAMES,
    StartLog,
    advice,
    describe,
    phase_index,
    stamp_epoch,
)

UNIT_PROPERTIES = ("InvocationID", "ActiveState", "SubState", "Result", "NRestarts", "MainPID",
                   "ExecMainStartTimestampMonotonic")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

if TYPE_CHECKING:  # annotations only: the managed node's Python may be 3.8
    Runner = Callable[[list[str]], tuple[int, str, str]]


class StartPhaseError(Exception):
    """A tool failed: the module fails with this message."""


def unit_name(unit: str) -> str:
    return unit if "." in unit else unit + ".service"


def unit_state(runner: Runner, systemctl: str, unit: str) -> dict[str, str]:
    rc, out, err = runner([systemctl, "show", "--property=" + ",".join(UNIT_PROPERTIES), unit])
    if rc != 0:
        raise StartPhaseError(f"systemctl show {unit} failed (rc {rc}): {(err or out).strip()}")
    state = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            state[key.strip()] = value.strip()
    return state


def journal_text(runner: Runner, journalctl: str, unit: str, invocation: str) -> str:
    # --all: journalctl prints a message with control characters (tqdm's carriage returns, ANSI
    # colours) as "[N blob data]" without it.
    argv = [journalctl, "--no-pager", "--all", "--output", "cat",
            f"_SYSTEMD_UNIT={unit}", f"_SYSTEMD_INVOCATION_ID={invocation}"]
    rc, out, err = runner(argv)
    if rc != 0:
        raise StartPhaseError(f"journalctl for {unit} failed (rc {rc}): {(err or out).strip()}")
    return out


def last_lines(text: str, count: int) -> list[str]:
    """The last ``count`` non-blank lines (tqdm's carriage returns end a line too)."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    lines = [line for line in lines if line.strip()]
    return lines[-count:] if count > 0 else []


def healthy(url: str, timeout: float = 5.0) -> bool:
    """Whether ``url`` answers 200 (directly: a proxy of the environment is not used)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def run(params: dict[str, Any], runner: Runner, tools: dict[str, str], now: float | None = None,
        monotonic: float | None = None, probe: Callable[[str], bool] = healthy) -> dict[str, Any]:
    """The module's result for ``params`` (tools: paths of systemctl and journalctl)."""
    now = time.time() if now is None else now
    monotonic = time.monotonic() if monotonic is None else monotonic
    wait_for = params["wait_for"]
    unit_state_: dict[str, str] = {}
    invocation = ""
    restarted = False
    uptime: float | None = None
    log = StartLog()
    if params.get("unit"):
        unit = unit_name(params["unit"])
        unit_state_ = unit_state(runner, tools["systemctl"], unit)
        current = unit_state_.get("InvocationID", "")
        invocation = params.get("invocation") or current
        restarted = bool(current and invocation and invocation != current)
        text = journal_text(runner, tools["journalctl"], unit, invocation) if invocation else ""
        running = (unit_state_.get("ActiveState") in ("active", "activating", "reloading")
                   and unit_state_.get("SubState") != "auto-restart" and not restarted)
        started = unit_state_.get("ExecMainStartTimestampMonotonic", "0")
        if running and started.isdigit() and int(started) > 0:
            uptime = max(0.0, monotonic - int(started) / 1e6)
    else:
        path = params["log_path"]
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            raise StartPhaseError(f"cannot read {path}: {exc.strerror}") from exc
        running = True
    log.feed(text)
    log.close()
    reading = log.reading()
    if uptime is None and not params.get("unit"):
        first = stamp_epoch(log.first_stamp, now)
        uptime = None if first is None else max(0.0, now - first)
    since = stamp_epoch(reading["phase_stamp"], now)
    if since is not None and uptime is not None:
        # vLLM stamps its lines in its own local time, without a year: a phase cannot have begun
        # before the service did.
        since = max(since, now - uptime)
    is_healthy = probe(params["health_url"]) if params.get("health_url") and running else None
    if wait_for == "health":
        reached = is_healthy is True
    else:
        reached = reading["phase_index"] >= phase_index(wait_for) or is_healthy is True
    timeout = float(params.get("timeout_s") or 0)
    timed_out = bool(timeout and uptime is not None and uptime > timeout and not reached)
    done = reached or reading["start_failed"] or restarted or not running or timed_out
    fix = ""
    if done and not reached:
        result = unit_state_.get("Result") if (restarted or not running) else None
        fix = advice(reading, timed_out=timed_out and not reading["start_failed"],
                     unit_result=result)
    phases = [p["phase"] for p in reading["phases"]]
    return {
        "changed": False,
        "phase": reading["phase"],
        "phase_title": reading["phase_title"],
        "phase_index": reading["phase_index"],
        "phases_total": reading["phases_total"],
        "phases": phases,
        "phase_stamp": reading["phase_stamp"],
        "phase_since": since,
        "phase_seconds": None if since is None else max(0.0, round(now - since, 1)),
        "progress": reading["progress"],
        "facts": reading["facts"],
        "summary": describe(reading),
        "start_failed": reading["start_failed"],
        "cause": reading["cause"],
        "error": reading["error"],
        "fix": fix,
        "last_line": reading["last_line"],
        "last_lines": last_lines(text, int(params.get("lines") or 0)),
        "invocation_id": invocation,
        "restarted": restarted,
        "running": running,
        "unit_state": unit_state_,
        "uptime_s": None if uptime is None else round(uptime, 1),
        "healthy": is_healthy,
        "reached": reached,
        "timed_out": timed_out,
        "done": done,
    }


def run_module(module: Any) -> dict[str, Any]:
    """:func:`run` with the module's systemctl, journalctl and run_command."""
    tools = {}
    if module.params["unit"]:
        tools = {name: module.get_bin_path(name, required=True)
                 for name in ("systemctl", "journalctl")}

    def runner(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(argv, environ_update={"SYSTEMD_COLORS": "0",
                                                                "SYSTEMD_PAGER": ""})
        return rc, out, err

    return run(module.params, runner, tools)


def main() -> None:
    result_main(
        {
            "unit": {"type": "str"},
            "log_path": {"type": "path"},
            "invocation": {"type": "str"},
            "wait_for": {"type": "str", "default": "ready",
                         "choices": [*PHASE_NAMES, "health"]},
            "timeout_s": {"type": "float", "default": 0},
            "health_url": {"type": "str"},
            "lines": {"type": "int", "default": 20},
        },
        run_module,
        (StartPhaseError,),
        mutually_exclusive=[("unit", "log_path")],
        required_one_of=[("unit", "log_path")],
    )


if __name__ == "__main__":
    main()
