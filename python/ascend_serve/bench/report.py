"""The reports of ``ascend-serve bench``: JSON result files, a markdown report, PNG plots.

One run writes ``bench.json`` (``vllm bench serve --save-result --save-detailed``'s fields plus
``config``, ``server``, ``slo`` and ``telemetry``), ``bench.md`` and ``latency.png`` (the
cumulative distributions of TTFT, TPOT, ITL and E2E latency). A sweep over concurrencies writes
``bench-c<N>.json`` and ``latency-c<N>.png`` per run, ``sweep.json`` (a row of scalar metrics
and the verdict per run), ``bench.md`` covering every run and ``sweep.png`` (output throughput
and p99 E2E latency against concurrency). Plots use matplotlib's Agg backend (no display).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ascend_serve.bench.cost import cost_line
from ascend_serve.bench.metrics import MS, percentile_label
from ascend_serve.bench.runner import BenchResult

# The rows of the markdown metrics table: (label, vLLM field or None for the percentiles).
_RATE_ROWS = (
    ("Successful requests", "completed", "{:.0f}"),
    ("Failed requests", "failed", "{:.0f}"),
    ("Benchmark duration (s)", "duration", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:.0f}"),
    ("Total generated tokens", "total_output_tokens", "{:.0f}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Request goodput (req/s)", "request_goodput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:.2f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:.2f}"),
    ("Peak output token throughput (tok/s)", "max_output_tokens_per_s", "{:.0f}"),
)
_LATENCY_NAMES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))


def run_label(result: BenchResult) -> str:
    c = result.config.max_concurrency
    rate = result.config.request_rate
    parts = [f"concurrency {c}" if c is not None else "no concurrency cap"]
    if not math.isinf(rate):
        parts.append(f"{rate:g} req/s ({result.config.arrival})")
    return ", ".join(parts)


def _fmt(value: Any, pattern: str = "{:.2f}") -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)):
        return pattern.format(value)
    return str(value)


def latency_rows(result: BenchResult) -> list[tuple[str, str]]:
    """The latency rows of a metrics table, (label, vLLM field): the mean, median and reported
    percentiles of TTFT, TPOT, ITL and E2EL, e.g. ``("P99 TTFT (ms)", "p99_ttft_ms")``."""
    percentiles = [f"p{percentile_label(p)}" for p in result.config.all_percentiles()]
    stats = ["mean", "median", *percentiles]
    return [(f"{stat.capitalize() if stat in ('mean', 'median') else stat.upper()} {title} (ms)",
             f"{stat}_{name}_ms") for name, title in _LATENCY_NAMES for stat in stats]


def markdown(results: Sequence[BenchResult], plots: Sequence[str] = ()) -> str:
    """A report of one run or a sweep: setup, metrics per run, SLO verdicts, telemetry."""
    if not results:
        raise ValueError("no result to report")
    first = results[0]
    cfg = first.config
    prompts = (f"dataset {cfg.dataset}" if cfg.dataset else
               f"random, {cfg.input_len} input tokens")
    output = f"{cfg.output_len} output tokens" if cfg.output_len else "default output length"
    lines = [
        f"# Benchmark of {first.server.model} at {cfg.url}",
        "",
        f"- Date: {first.date}; endpoint: `{cfg.endpoint}`; prompts: {prompts}, {output}, "
        f"{cfg.num_prompts} per run (+{cfg.warmup} warm-up), seed {cfg.seed}, ignore_eos "
        f"{cfg.ignore_eos}",
        f"- Tokenizer: `{first.tokenizer_id}`; server max_model_len: "
        f"{first.server.max_model_len or 'unknown'}",
        f"- Load: {'; '.join(run_label(r) for r in results)}",
        "",
        "## Metrics",
        "",
        "| Metric | " + " | ".join(run_label(r) for r in results) + " |",
        "|---|" + "---:|" * len(results),
    ]
    for label, key, pattern in _RATE_ROWS:
        lines.append(f"| {label} | "
                     + " | ".join(_fmt(r.metrics.get(key), pattern) for r in results) + " |")
    for label, key in latency_rows(first):
        lines.append(f"| {label} | " + " | ".join(_fmt(r.metrics.get(key)) for r in results)
                     + " |")
    for r in results:
        errors = r.first_errors()
        if errors:
            lines += ["", f"First errors ({run_label(r)}): "
                      + "; ".join(f"`{e[:160]}`" for e in errors)]
    verdicts = [(r, v) for r in results if (v := r.verdict) is not None]
    if verdicts:
        slo = verdicts[0][1].slo
        lines += ["", f"## SLO `{slo.name}`", "", slo.description or "", ""]
        if slo.per_request_ms:
            lines.append("Per-request thresholds (goodput): " + ", ".join(
                f"{k} <= {v:g} ms" for k, v in slo.per_request_ms.items()))
            lines.append("")
        if slo.workload:
            lines.append("Reference workload: " + ", ".join(
                f"{k} {v}" for k, v in slo.workload.items()))
            lines.append("")
        lines += ["| Run | Target | Measured | Result |", "|---|---|---:|---|"]
        for r, verdict in verdicts:
            for check in verdict.results:
                measured = "n/a" if check.measured is None else f"{check.measured:.4g}"
                note = f" ({check.note})" if check.note else ""
                lines.append(f"| {run_label(r)} | {check.target.text(verdict.cards)} | "
                             f"{measured} | {'PASS' if check.passed else 'FAIL'}{note} |")
        overall = all(v.passed for _, v in verdicts)
        lines += ["", f"**Verdict: {'PASS' if overall else 'FAIL'}**"]
    telemetry = [(r, t) for r in results if (t := r.telemetry) is not None]
    if telemetry:
        lines += ["", "## Energy and telemetry", ""]
        for r, t in telemetry:
            if not t.get("available", True):
                lines.append(f"- {run_label(r)}: energy not measured ({t.get('reason')})")
                continue
            tpj = t.get("tokens_per_joule")
            imbalance = t.get("imbalance") or {}
            spread = ", ".join(f"{k} spread {v.get('spread_pct')}% (busiest {v.get('busiest')}, "
                               f"idlest {v.get('idlest')})" for k, v in imbalance.items())
            source = (f"host {t.get('meter')} ({', '.join(t.get('sensors') or [])})"
                      if t.get("kind") == "host" else "npu-smi")
            lines.append(
                f"- {run_label(r)}: {source}, {t.get('samples')} samples, energy "
                f"{_fmt(t.get('energy_j'), '{:.1f}')} J, mean power "
                f"{_fmt(t.get('mean_power_w'), '{:.1f}')} W, tokens/J {_fmt(tpj, '{:.3f}')}"
                + (f"; {spread}" if spread else ""))
    costs = [(r, r.cost) for r in results if r.cost is not None]
    if costs:
        lines += ["", "## Cost", ""]
        for r, cost in costs:
            lines.append(f"- {run_label(r)}: {cost_line(cost)}"
                         + "".join(f"; {n}" for n in cost.get("notes", [])))
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(lines) + "\n"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display): every plot of bench's reports."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency(result: BenchResult, path: Path) -> Path:
    """CDFs of TTFT, TPOT, ITL and E2E latency (ms) of one run, percentiles marked."""
    plt = pyplot()
    done = [r for r in result.records if r.success]
    series = {
        "TTFT": [r.ttft * MS for r in done],
        "TPOT": [r.tpot * MS for r in done if r.output_len > 1],
        "ITL": [gap * MS for r in done for gap in r.itl],
        "E2E latency": [r.latency * MS for r in done],
    }
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (name, values) in zip(axes.flat, series.items(), strict=True):
        ax.set_title(f"{name} ({len(values)} values)")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction ≤ x")
        ax.grid(True, alpha=0.3)
        if not values:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            continue
        data = np.sort(np.asarray(values))
        ax.step(data, np.arange(1, data.size + 1) / data.size, where="post")
        marks = []
        for p in result.config.all_percentiles():
            x = float(np.percentile(data, p))
            ax.axvline(x, linestyle=":", color="grey", alpha=0.7)
            marks.append(f"p{percentile_label(p)} {x:.1f} ms")
        ax.text(0.98, 0.04, "\n".join(marks), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=8, bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8})
    fig.suptitle(f"{result.server.model}: {run_label(result)}, {result.completed} requests")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_sweep(results: Sequence[BenchResult], path: Path) -> Path:
    """Output throughput and p99 E2E latency against concurrency."""
    plt = pyplot()
    runs = sorted((r for r in results if r.config.max_concurrency is not None),
                  key=lambda r: r.config.max_concurrency or 0)
    xs = [r.config.max_concurrency or 0 for r in runs]
    top = max(runs[0].config.all_percentiles()) if runs else 99.0
    tail = f"p{percentile_label(99.0 if 99.0 in runs[0].config.all_percentiles() else top)}" \
        if runs else "p99"
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(xs, [r.output_throughput for r in runs], "o-", color="tab:blue",
            label="output throughput (tok/s)")
    ax.set_xlabel("max concurrency")
    ax.set_ylabel("output tokens/s", color="tab:blue")
    if len(xs) > 1 and min(xs) > 0 and max(xs) / min(xs) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(xs, [r.metrics.get(f"{tail}_e2el_ms", 0.0) for r in runs], "s--",
             color="tab:red", label=f"{tail} E2E latency (ms)")
    ax2.set_ylabel(f"{tail} E2E latency (ms)", color="tab:red")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="upper left")
    fig.suptitle(f"{runs[0].server.model if runs else ''}: throughput and latency "
                 "against concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def sweep_rows(results: Sequence[BenchResult]) -> list[dict[str, Any]]:
    """A row per run: the concurrency, the scalar metrics and the verdict."""
    return [{"max_concurrency": r.config.max_concurrency, **r.headline(),
             "slo_passed": r.verdict.passed if r.verdict is not None else None}
            for r in results]


def write_reports(results: Sequence[BenchResult], out: Path, sweep: bool = False) -> list[Path]:
    """Every report file of ``results`` under ``out`` (created); the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    plots: list[str] = []
    if sweep:
        for r in results:
            tag = f"c{r.config.max_concurrency}"
            written.append(write_json(out / f"bench-{tag}.json", r.to_json_dict()))
            plots.append(str(plot_latency(r, out / f"latency-{tag}.png")))
        written.append(write_json(out / "sweep.json", {"runs": sweep_rows(results)}))
        plots.insert(0, str(plot_sweep(results, out / "sweep.png")))
    else:
        written.append(write_json(out / "bench.json", results[0].to_json_dict()))
        plots.append(str(plot_latency(results[0], out / "latency.png")))
    md = out / "bench.md"
    md.write_text(markdown(results, plots), encoding="utf-8")
    written.append(md)
    written.extend(Path(p) for p in plots)
    return written
