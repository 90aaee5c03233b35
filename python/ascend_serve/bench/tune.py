"""``ascend-serve tune``: find the batch settings of a profile by experiment, as the deployment
guide asks ("batch size found by experiment, 32/64"), and keep the evidence.

For every server setting (``max-num-seqs`` x ``max-num-batched-tokens``) the profile's server is
started from the same launcher ``ascend-serve serve`` renders, benchmarked at every client
concurrency, and stopped; a setting vLLM refuses (or that dies) is recorded as failed and the
sweep goes on. The winner is the trial with the highest objective (output tokens/s by default)
among those that met the SLO. The outputs: ``tune.json`` (every trial), ``tune.md`` (a table),
``<profile>-tuned.yml`` (a profile file for ``--profiles``: the profile with the winning flags,
named ``<profile>-tuned``) and ``inventory-overrides.yml`` (``vllm_service_overrides`` for the
vllm_service role).

The sweep itself (:func:`sweep`) takes the server and the measurement as callables, so its
bookkeeping is tested without a server; :class:`ProfileServer` is the real one.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ascend_serve.bench.report import write_json
from ascend_serve.bench.runner import BenchConfig, BenchError, run_benchmark
from ascend_serve.bench.slo import Verdict
from ascend_serve.serving import launcher
from ascend_serve.serving.nodecheck import ascend_set_env
from ascend_serve.serving.profiles import Profile, ProfileError, load_raw, merge
from ascend_serve.serving.profiles import resolve as resolve_profile
from ascend_serve.serving.server import ServerError, ServerProcess

OBJECTIVES = ("output_throughput", "request_throughput", "total_token_throughput")


class TuneError(ValueError):
    """Bad tune input (an empty or invalid grid, an unknown objective)."""


@dataclass(frozen=True)
class Setting:
    """One server configuration: the vLLM engine arguments a trial sets (None: the profile's
    value, or vLLM's default). vLLM reads all of them when its engine starts, so a new value
    means a new server."""

    max_num_seqs: int
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    enable_chunked_prefill: bool | None = None

    @property
    def label(self) -> str:
        parts = [f"seqs{self.max_num_seqs}"]
        if self.max_num_batched_tokens is not None:
            parts.append(f"bt{self.max_num_batched_tokens}")
        if self.gpu_memory_utilization is not None:
            parts.append(f"gmu{self.gpu_memory_utilization:g}")
        if self.enable_chunked_prefill is not None:
            parts.append("cp" if self.enable_chunked_prefill else "nocp")
        return "-".join(parts)

    def vllm_flags(self) -> dict[str, int | float | bool]:
        """The profile's ``vllm`` entries of this setting. Chunked prefill is a
        ``BooleanOptionalAction`` flag in vLLM (``--enable-chunked-prefill`` /
        ``--no-enable-chunked-prefill``, vllm/engine/arg_utils.py); the launcher renders a
        ``true`` entry as the bare flag and drops a ``false`` one, so both spellings are set and
        the unwanted one is ``false`` (it also drops a profile's opposite entry)."""
        flags: dict[str, int | float | bool] = {"max-num-seqs": self.max_num_seqs}
        if self.max_num_batched_tokens is not None:
            flags["max-num-batched-tokens"] = self.max_num_batched_tokens
        if self.gpu_memory_utilization is not None:
            flags["gpu-memory-utilization"] = self.gpu_memory_utilization
        if self.enable_chunked_prefill is not None:
            flags["enable-chunked-prefill"] = self.enable_chunked_prefill
            flags["no-enable-chunked-prefill"] = not self.enable_chunked_prefill
        return flags

    def to_dict(self) -> dict[str, Any]:
        return {"max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "enable_chunked_prefill": self.enable_chunked_prefill}


@dataclass
class Measurement:
    """What one benchmark run at one concurrency gave (filled by the bench adapter)."""

    metrics: dict[str, float]
    slo_ok: bool
    slo_detail: list[str] = field(default_factory=list)
    telemetry: dict[str, Any] | None = None
    result_file: str | None = None
    slo_miss: float | None = None  # how far the SLO was missed (slo_violation); None: unknown

    @property
    def violation(self) -> float:
        """0 when the SLO was met; else how far it was missed (1 when that is unknown)."""
        if self.slo_ok:
            return 0.0
        return self.slo_miss if self.slo_miss is not None and self.slo_miss > 0 else 1.0


def slo_violation(verdict: Verdict) -> float:
    """How far a run missed its SLO: the sum over the failed targets of the miss relative to
    the threshold (p99 TTFT 3000 ms against 2000: 0.5), a target with no value counting 1;
    0 when every target passed."""
    total = 0.0
    for r in verdict.results:
        if r.passed:
            continue
        if r.measured is None:
            total += 1.0
            continue
        scale = abs(r.threshold) if r.threshold else 1.0
        total += max(abs(r.measured - r.threshold) / scale, 1e-6)
    return total


@dataclass
class Trial:
    setting: Setting
    concurrency: int | None
    measurement: Measurement | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.measurement is not None

    @property
    def meets_slo(self) -> bool:
        return self.ok and self.measurement is not None and self.measurement.slo_ok

    def to_dict(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "setting": self.setting.to_dict(),
            "label": self.setting.label,
            "concurrency": self.concurrency,
            "error": self.error,
            "metrics": m.metrics if m else None,
            "slo_ok": m.slo_ok if m else False,
            "slo_detail": m.slo_detail if m else [],
            "telemetry": m.telemetry if m else None,
            "result_file": m.result_file if m else None,
        }


def grid(max_num_seqs: Sequence[int], max_num_batched_tokens: Sequence[int]) -> list[Setting]:
    """Every combination; no batched-token values means the profile's (or vLLM's) default."""
    if not max_num_seqs:
        raise TuneError("give at least one --max-num-seqs value")
    for value in [*max_num_seqs, *max_num_batched_tokens]:
        if value < 1:
            raise TuneError(f"sweep values must be positive integers, got {value}")
    tokens: list[int | None] = list(dict.fromkeys(max_num_batched_tokens)) or [None]
    return [Setting(s, t) for s in dict.fromkeys(max_num_seqs) for t in tokens]


def pick(trials: Sequence[Trial], objective: str = "output_throughput") -> Trial | None:
    """The trial with the highest ``objective`` among those that met the SLO (ties: the one
    with fewer sequences, i.e. less memory; then the lower concurrency)."""
    if objective not in OBJECTIVES:
        raise TuneError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    best: Trial | None = None
    best_key: tuple[float, int, int] | None = None
    for trial in trials:
        if not trial.meets_slo or trial.measurement is None:
            continue
        value = trial.measurement.metrics.get(objective)
        if value is None or math.isnan(value):
            continue
        key = (value, -trial.setting.max_num_seqs, -(trial.concurrency or 0))
        if best_key is None or key > best_key:
            best, best_key = trial, key
    return best


Serve = Callable[[Setting], contextlib.AbstractContextManager[str]]
Measure = Callable[[str, Setting, int], Measurement]
Notify = Callable[[str, Setting, int | None, str], None]


def bench_measure(base: BenchConfig, trials_dir: Path) -> Measure:
    """The real measurement: ``ascend-serve bench``'s run of ``base`` at the server's URL and
    the trial's concurrency, its result kept as ``trials_dir/<setting>-c<concurrency>.json``."""

    def measure(url: str, setting: Setting, concurrency: int) -> Measurement:
        label = f"{setting.label}-c{concurrency}"
        result = run_benchmark(replace(base, url=url, max_concurrency=concurrency, label=label))
        if result.completed == 0:
            raise BenchError(f"no request completed: {'; '.join(result.first_errors())}")
        trials_dir.mkdir(parents=True, exist_ok=True)
        path = write_json(trials_dir / f"{label}.json", result.to_json_dict())
        verdict = result.verdict
        return Measurement(
            metrics=result.headline(), slo_ok=verdict is not None and verdict.passed,
            slo_detail=[line for line in (verdict.lines() if verdict else [])
                        if line.startswith("FAIL")],
            telemetry=result.telemetry, result_file=str(path),
            slo_miss=slo_violation(verdict) if verdict is not None else None)

    return measure


def sweep(settings: Sequence[Setting], concurrencies: Sequence[int], serve: Serve,
          measure: Measure, notify: Notify | None = None) -> list[Trial]:
    """Start the server per setting (``serve`` yields its URL), ``measure`` each concurrency.

    A setting whose server does not start gives one failed trial (concurrency None); a failed
    measurement gives a failed trial and the sweep goes on.
    """
    if not concurrencies or any(c < 1 for c in concurrencies):
        raise TuneError("give at least one positive --concurrency value")
    say = notify or (lambda event, setting, concurrency, detail: None)
    trials: list[Trial] = []
    for setting in settings:
        say("starting", setting, None, "")
        try:
            with serve(setting) as url:
                say("ready", setting, None, url)
                for concurrency in concurrencies:
                    say("measuring", setting, concurrency, "")
                    try:
                        result = measure(url, setting, concurrency)
                    except Exception as exc:  # any failure is the trial's result; the sweep goes on
                        trials.append(Trial(setting, concurrency, error=str(exc)))
                        say("failed", setting, concurrency, str(exc))
                        continue
                    trials.append(Trial(setting, concurrency, result))
                    say("measured", setting, concurrency, "")
        except ServerError as exc:
            detail = f"{exc}; last log lines:\n{exc.log_tail}"
            trials.append(Trial(setting, None, error=detail))
            say("failed", setting, None, str(exc))
    return trials


@dataclass
class ProfileServer:
    """Starts the profile's server with a setting's flags, as ``ascend-serve serve`` would."""

    profile_name: str
    _: KW_ONLY
    overrides: dict[str, Any]
    profile_files: list[Path] | None
    model_dir: Path
    env_dir: Path
    run_dir: Path
    timeout: float | None = None
    api_key: str | None = None

    def profile(self, setting: Setting | None = None) -> Profile:
        """The profile with the operator's overrides and, if given, the setting's flags."""
        extra = {"vllm": setting.vllm_flags()} if setting is not None else {}
        return resolve_profile(self.profile_name, merge(self.overrides, extra),
                               self.profile_files)

    @contextlib.contextmanager
    def __call__(self, setting: Setting) -> Iterator[str]:
        profile = self.profile(setting)
        if profile.nodes != 1:
            raise ProfileError(f"tune starts one server; profile {profile.name} spans "
                               f"{profile.nodes} nodes")
        state = self.run_dir / setting.label
        ctx = launcher.context(
            profile, model_path=str(self.model_dir), vllm=str(self.env_dir / "bin" / "vllm"),
            state_dir=str(state), rendered_by="ascend-serve tune",
            set_env=ascend_set_env() if profile.device == "npu" else [],
        )
        server = ServerProcess.in_run_dir(launcher.render(ctx), state, self.api_key)
        url = launcher.health_url(profile)
        try:
            server.start()
            server.wait_healthy(f"{url}/health", self.timeout or profile.health_timeout_s)
            yield url
        finally:
            server.stop()
            if server.group_alive():
                raise ServerError(f"processes of the server for {setting.label} are left after "
                                  "stopping it", "")


def tuned_profile(profiles_files: list[Path] | None, name: str, overrides: dict[str, Any],
                  winner: Trial) -> dict[str, Any]:
    """The raw profile ``<name>-tuned``: the profile with the operator's overrides and the
    winner's flags, as a profiles-file entry."""
    raw = load_raw(profiles_files)[name]
    tuned = merge(merge(raw, overrides), {"vllm": winner.setting.vllm_flags()})
    tuned["name"] = f"{name}-tuned"
    concurrency = f" at client concurrency {winner.concurrency}" if winner.concurrency else ""
    tuned["description"] = (f"{raw.get('description', name)} (tuned by ascend-serve tune: "
                            f"{winner.setting.label}{concurrency})")
    return tuned


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


def markdown(name: str, trials: Sequence[Trial], winner: Trial | None, objective: str,
             slo: str) -> str:
    lines = [f"# ascend-serve tune: {name}", "",
             f"Objective: highest `{objective}` meeting the SLO `{slo}`.", ""]
    if winner is None:
        lines += ["**No setting met the SLO.**", ""]
    else:
        best = (winner.measurement.metrics if winner.measurement else {}).get(objective)
        lines += [f"**Winner:** `{winner.setting.label}` at concurrency {winner.concurrency}: "
                  f"{_fmt(best)} ({objective}).", ""]
    cols = ["request_throughput", "output_throughput", "p99_ttft_ms", "p99_tpot_ms",
            "p99_e2el_ms"]
    if objective not in cols:
        cols.insert(0, objective)
    lines.append("| setting | concurrency | " + " | ".join(cols) + " | SLO | note |")
    lines.append("|---" * (len(cols) + 4) + "|")
    for t in trials:
        metrics = t.measurement.metrics if t.measurement else {}
        slo_cell = "pass" if t.meets_slo else ("fail" if t.ok else "-")
        note = (t.error or "").splitlines()[0] if t.error else "; ".join(
            t.measurement.slo_detail if t.measurement and not t.measurement.slo_ok else [])
        mark = " **(winner)**" if t is winner else ""
        lines.append(f"| {t.setting.label}{mark} | {t.concurrency or '-'} | "
                     + " | ".join(_fmt(metrics.get(c)) for c in cols)
                     + f" | {slo_cell} | {note} |")
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, *, name: str, trials: Sequence[Trial], winner: Trial | None,
                  objective: str, slo: str, tuned: dict[str, Any] | None,
                  search: dict[str, Any] | None = None) -> dict[str, Path]:
    """tune.json, tune.md and, with a winner, the profile file and the inventory overrides;
    ``search``: the study of ``tune --search`` (kept under ``search`` in tune.json)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "tune.json", "markdown": out / "tune.md"}
    report: dict[str, Any] = {
        "profile": name, "objective": objective, "slo": slo,
        "winner": winner.to_dict() if winner else None,
        "trials": [t.to_dict() for t in trials],
    }
    if search is not None:
        report["search"] = search
    paths["json"].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(name, trials, winner, objective, slo),
                                 encoding="utf-8")
    if winner is not None and tuned is not None:
        paths["profile"] = out / f"{tuned['name']}.yml"
        paths["profile"].write_text(
            "---\n# Written by ascend-serve tune; use with --profiles FILE.\n"
            + yaml.safe_dump({"profiles": [tuned]}, sort_keys=False), encoding="utf-8")
        paths["overrides"] = out / "inventory-overrides.yml"
        paths["overrides"].write_text(
            "---\n# Written by ascend-serve tune: the winning flags for the vllm_service role.\n"
            + yaml.safe_dump({"vllm_service_overrides": {"vllm": winner.setting.vllm_flags()}},
                             sort_keys=False), encoding="utf-8")
    return paths
