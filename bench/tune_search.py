#!/usr/bin/env python3
"""Search-based tuning (``ascend-serve tune --search``) against today's grid, on the tiny model.

1. The grid, measured for real: every setting of the space is served by the tiny CPU profile's
   server (``tiny-deepseek-v3``, started by :class:`ascend_serve.bench.tune.ProfileServer`, the
   launcher ``ascend-serve tune`` uses) and benchmarked at one client concurrency; its value is
   the trial value of ``tune --search``: request goodput, and whether the run met the SLO's
   p99 targets (a miss, or a server that does not start, counts 0 for the grid). The landscape
   is written to ``--record`` (JSON).
2. The grid's spread: best against median goodput (a flat landscape makes any search look
   good).
3. The search strategies (optuna TPE with the SLO as a constraint, as ``tune --search`` runs
   it; TPE told an SLO miss as 0; random sampling as the baseline) replayed on that
   recorded landscape for many seeds: the distinct settings each measures before one is within
   5% of the grid's best. Replaying costs no server; the values are the measured ones. A grid
   needs all its settings to know its best: its count is the grid's size.

``gpu-memory-utilization`` is left out of the default space: the tiny profile sets
``kv-cache-memory-bytes``, under which vLLM's CPU worker uses the fraction for nothing
(vllm/v1/worker/cpu_worker.py), so it would only multiply the grid with equal points.

Run from the repository root, in the project's venv, one vLLM at a time (about 15 minutes on
the 2-core machine)::

    flock /tmp/ascend-heavy.lock .venv/bin/python bench/tune_search.py [--seeds 25]
    .venv/bin/python bench/tune_search.py --replay .cache/bench/tune-search/landscape.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tiny_vllm import REPO, VLLM_VENV, free_port, tiny_model

from ascend_serve.bench import slo as slos
from ascend_serve.bench.runner import BenchConfig
from ascend_serve.bench.tune import ProfileServer, Setting, bench_measure, slo_violation
from ascend_serve.bench.tune_search import (
    NOT_STARTED,
    goodput_value,
    grid_settings,
    measure_setting,
    parse_space,
    replay,
    setting_of,
    trials_to_reach,
)

PROFILE = "tiny-deepseek-v3"
DEFAULT_SPACE = ["max-num-seqs=1,2,4,8,16", "max-num-batched-tokens=256,1024",
                 "enable-chunked-prefill=true,false"]
OUT = REPO / ".cache" / "bench" / "tune-search"


def measure_grid(space: dict[str, list[Any]], args: argparse.Namespace) -> dict[str, Any]:
    model = tiny_model()
    port = free_port()
    run_dir = OUT / time.strftime("%Y%m%dT%H%M%S")
    server = ProfileServer(PROFILE, overrides={"host": "127.0.0.1", "port": port},
                           profile_files=None, model_dir=model, env_dir=VLLM_VENV,
                           run_dir=run_dir / "servers", timeout=600.0)
    target = slos.resolve([args.slo])
    base = BenchConfig(url="http://127.0.0.1", model=PROFILE, num_prompts=args.num_prompts,
                       input_len=args.input_len, output_len=args.output_len,
                       tokenizer=str(model), warmup=1, slo=target, telemetry=False)
    measure = bench_measure(base, run_dir / "trials")
    points = []
    for i, setting in enumerate(grid_settings(space), start=1):
        start = time.monotonic()
        runs = measure_setting(setting, [args.concurrency], server, measure)
        value, violation, best = goodput_value(runs)
        feasible = violation <= 0
        seconds = time.monotonic() - start
        error = next((r.error.splitlines()[0] for r in runs if r.error), None)
        metrics = best.measurement.metrics if best and best.measurement else (
            runs[0].measurement.metrics if runs and runs[0].measurement else {})
        print(f"[{i:2d}] {setting.label:28s} goodput {value:6.3f} req/s "
              f"SLO {'met   ' if feasible else 'missed'}  "
              f"p99 TTFT {metrics.get('p99_ttft_ms', float('nan')):8.1f} ms  "
              f"p99 TPOT {metrics.get('p99_tpot_ms', float('nan')):7.1f} ms  "
              f"{seconds:5.1f} s" + (f"  ({error[:90]})" if error else ""), flush=True)
        points.append({"setting": setting.to_dict(), "label": setting.label,
                       "goodput": value if feasible else 0.0, "raw_goodput": value,
                       "slo_met": feasible, "slo_violation": violation,
                       "seconds": round(seconds, 1), "error": error,
                       "metrics": {k: metrics.get(k) for k in (
                           "request_throughput", "request_goodput", "output_throughput",
                           "p99_ttft_ms", "p99_tpot_ms", "completed", "failed")}})
    return {"profile": PROFILE, "slo": args.slo, "concurrency": args.concurrency,
            "num_prompts": args.num_prompts, "input_len": args.input_len,
            "output_len": args.output_len, "space": space, "points": points,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _landscape(record: dict[str, Any]) -> dict[Setting, tuple[float, float]]:
    """setting → (goodput, SLO violation) of a recorded grid, the violation computed from the
    recorded metrics against the recorded SLO as ``tune --search`` computes it."""
    fields = {"max-num-seqs": "max_num_seqs", "max-num-batched-tokens": "max_num_batched_tokens",
              "gpu-memory-utilization": "gpu_memory_utilization",
              "enable-chunked-prefill": "enable_chunked_prefill"}
    target = slos.resolve([record["slo"]])
    assert target is not None
    out = {}
    for p in record["points"]:
        setting = setting_of({k: p["setting"][f] for k, f in fields.items()
                              if k in record["space"]})
        if p["error"]:
            out[setting] = (0.0, NOT_STARTED)
            continue
        metrics = {k: v for k, v in p["metrics"].items() if v is not None}
        violation = slo_violation(slos.evaluate(metrics, target))
        out[setting] = (float(metrics.get("request_goodput") or 0.0), violation)
        if (violation <= 0) != (p["goodput"] > 0):
            raise SystemExit(f"{p['label']}: the recorded verdict and its metrics disagree")
    return out


METHODS = {"tpe": ("tpe", False), "tpe, SLO miss told as 0": ("tpe", True),
           "random": ("random", False)}


def compare(record: dict[str, Any], seeds: int) -> dict[str, Any]:
    space = record["space"]
    landscape = _landscape(record)
    values = [p["goodput"] for p in record["points"]]  # a miss counts 0
    best = max(values)
    if best <= 0:
        raise SystemExit("no grid point met the SLO: nothing to search for")
    target = 0.95 * best
    grid_n = len(values)
    result: dict[str, Any] = {
        "grid_points": grid_n, "best_goodput": best,
        "best": [p["label"] for p in record["points"] if p["goodput"] == best],
        "median_goodput": statistics.median(values),
        "median_goodput_started": statistics.median([p["goodput"] for p in record["points"]
                                                     if not p["error"]] or [0.0]),
        "within_5pct": [p["label"] for p in record["points"] if p["goodput"] >= target],
        "grid_order_first_within_5pct": trials_to_reach(values, target),
        "seeds": seeds, "methods": {}}
    for name, (sampler, as_zero) in METHODS.items():
        counts = [replay(landscape, space, sampler=sampler, seed=s, target=target,
                         infeasible_as_zero=as_zero) for s in range(seeds)]
        found = [c for c in counts if c is not None]
        result["methods"][name] = {
            "trials": counts, "median": statistics.median(found) if found else None,
            "never": len(counts) - len(found)}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", action="append", default=None,
                        help=f"KNOB=V1,V2 (repeatable; default: {' '.join(DEFAULT_SPACE)})")
    parser.add_argument("--slo", default="interactive", help="SLO preset or expressions")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--record", type=Path, default=OUT / "landscape.json",
                        help="where the measured grid is written")
    parser.add_argument("--replay", type=Path, default=None,
                        help="a recorded landscape: replay the search on it, measure nothing")
    args = parser.parse_args()
    if args.replay is not None:
        record = json.loads(args.replay.read_text(encoding="utf-8"))
    else:
        space = parse_space(args.space or DEFAULT_SPACE)
        started = time.monotonic()
        record = measure_grid(space, args)
        record["grid_wall_s"] = round(time.monotonic() - started, 1)
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"grid measured in {record['grid_wall_s']:.0f} s; landscape: {args.record}")
    summary = compare(record, args.seeds)
    record["comparison"] = summary
    if args.replay is None:
        args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    grid_n = summary["grid_points"]
    print(f"\ngrid: {grid_n} settings measured on the real server (SLO {record['slo']}, "
          f"concurrency {record['concurrency']})")
    nonzero = [p["goodput"] for p in record["points"] if p["goodput"] > 0]
    ratio = (f"best/median {summary['best_goodput'] / summary['median_goodput']:.2f}"
             if summary["median_goodput"] > 0 else "best/median: infinite (median 0)")
    print(f"spread: best goodput {summary['best_goodput']:.3f} req/s "
          f"({', '.join(summary['best'])}), median {summary['median_goodput']:.3f} ({ratio}); "
          f"median of the settings that started {summary['median_goodput_started']:.3f}; "
          f"{len(nonzero)} of {grid_n} settings met the SLO (median of those "
          f"{statistics.median(nonzero) if nonzero else 0:.3f})")
    print(f"within 5% of the best: {len(summary['within_5pct'])} of {grid_n} settings "
          f"({', '.join(summary['within_5pct'])}); the grid's own order reaches one at setting "
          f"{summary['grid_order_first_within_5pct']}, but needs all {grid_n} to know it")
    print(f"search strategies replayed on the recorded landscape, {summary['seeds']} seeds "
          "(distinct settings measured until one is within 5% of the grid's best):")
    for method, data in summary["methods"].items():
        median = data["median"]
        ratio = f"{median / grid_n:.2f} of the grid's trials" if median is not None else "n/a"
        print(f"  {method:24s}: median {median} trials ({ratio}); never reached: {data['never']}"
              f"; per seed {data['trials']}")
    tpe = summary["methods"]["tpe"]["median"]
    goal = "met" if tpe is not None and tpe <= grid_n / 3 else "NOT met"
    print(f"goal (TPE <= 1/3 of the grid's {grid_n} trials = {grid_n / 3:.1f}): {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
