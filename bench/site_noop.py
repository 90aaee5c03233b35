#!/usr/bin/env python3
"""What a no-op re-run of ``site.yml`` costs on the main job's node, against its first converge.

1. ``scripts/local-deploy.sh --fresh``: the README's main command on a new simulated Atlas 800 A2
   node (container ``ascend-local-a2``, podman connection): the first converge, timed (wall), with
   the controller's CPU (this process's children: ansible-playbook, its workers, ``podman exec``)
   and the node's (the container's cgroup);
2. ``--reruns`` no-op re-runs of ``ansible-playbook site.yml -i inventories/local/hosts.yml``, each
   with the ``ascend_serve.fleet.run_counts`` callback (tasks, module runs, fact gatherings,
   package-manager runs per host); each must report ``changed=0``;
3. prints a table and, with ``--json FILE``, the figures as JSON: first converge wall, re-run wall
   (median, min-max), re-run / first, controller and node CPU seconds of a re-run (median,
   min-max), and the counts (deterministic, so the same in every re-run).

The local inventory reaches its node with ``podman exec`` (no SSH): each module run is one
``podman exec``; bench/scale.py measures the SSH side (executions per host) on a fleet.

Run from the repository root as root, in the project's venv::

    source .venv/bin/activate
    python bench/site_noop.py [--reruns 3] [--json FILE] [--keep-logs DIR] [--no-fresh]

``--no-fresh`` measures re-runs of the node as it is (after a ``local-deploy.sh``), with no first
converge. The node is left running (as ``local-deploy.sh`` leaves it). Exit status 1 when a run
fails or a re-run changes anything.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE = "ascend-local-a2"
RECAP_RE = re.compile(rf"^{NODE}\s+:\s+ok=\d+\s+changed=(?P<changed>\d+)\s+unreachable=0\s+"
                      r"failed=0", re.MULTILINE)
COUNTS = ("tasks", "module_runs", "fact_gatherings", "package_manager_runs", "skipped")


@dataclass
class Run:
    wall: float
    controller_cpu: float
    node_cpu: float
    counts: dict[str, int] = field(default_factory=dict)


def log(message: str) -> None:
    print(f"[site-noop {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def node_cpu() -> float:
    """CPU seconds of the node's container so far (cgroup v2 cpu.stat, or v1 cpuacct)."""
    pid = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", NODE],
                         capture_output=True, text=True, check=True).stdout.strip()
    cgroup = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in cgroup:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            stat = Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat"
            fields = dict(x.split() for x in stat.read_text().splitlines())
            return int(fields["usage_usec"]) / 1e6
        if "cpuacct" in controllers.split(","):
            usage = Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/") / "cpuacct.usage"
            return int(usage.read_text()) / 1e9
    raise RuntimeError(f"no CPU accounting cgroup for {NODE}")


def timed(cmd: Sequence[str], env: dict[str, str], log_file: Path | None) -> tuple[Run, str]:
    cpu, ncpu, started = children_cpu(), node_cpu(), time.monotonic()
    proc = subprocess.run(list(cmd), cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    run = Run(time.monotonic() - started, children_cpu() - cpu, node_cpu() - ncpu)
    if log_file is not None:
        log_file.write_text(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}")
    return run, proc.stdout


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--reruns", type=int, default=3, help="no-op re-runs (default 3)")
    parser.add_argument("--no-fresh", action="store_true",
                        help="no first converge: re-run the node as it is")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--keep-logs", type=Path, help="write each run's output to this folder")
    args = parser.parse_args(argv)
    if args.keep_logs:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PY_COLORS": "0", "ANSIBLE_FORCE_COLOR": "0"}
    first: Run | None = None
    if not args.no_fresh:
        log("first converge: scripts/local-deploy.sh --fresh")
        started = time.monotonic()
        cpu = children_cpu()
        proc = subprocess.run(["scripts/local-deploy.sh", "--fresh"], cwd=ROOT, env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              check=False)
        # A fresh container: its cgroup's whole CPU time is this converge's (and its start).
        first = Run(time.monotonic() - started, children_cpu() - cpu, node_cpu())
        if args.keep_logs:
            (args.keep_logs / "first.log").write_text(proc.stdout)
        if proc.returncode != 0:
            raise SystemExit(f"local-deploy.sh --fresh exited {proc.returncode}:\n"
                             f"{proc.stdout[-3000:]}")
        log(f"first converge {first.wall:.1f} s")
    reruns: list[Run] = []
    counts_file = ROOT / ".artifacts" / "site-noop-counts.jsonl"
    counts_file.parent.mkdir(parents=True, exist_ok=True)
    for i in range(args.reruns):
        counts_file.unlink(missing_ok=True)
        run, out = timed(
            ["ansible-playbook", "site.yml", "-i", "inventories/local/hosts.yml"],
            {**env, "ANSIBLE_CALLBACKS_ENABLED": "ascend_serve.fleet.run_counts",
             "ASCEND_SERVE_RUN_COUNTS": str(counts_file)},
            args.keep_logs / f"rerun{i}.log" if args.keep_logs else None)
        recap = RECAP_RE.search(out)
        if recap is None or recap["changed"] != "0":
            raise SystemExit(f"re-run {i + 1} is not a no-op:\n{out[-3000:]}")
        run.counts = json.loads(counts_file.read_text().splitlines()[-1])["hosts"][NODE]
        log(f"re-run {i + 1}: {run.wall:.1f} s, CPU s controller {run.controller_cpu:.1f}, "
            f"node {run.node_cpu:.1f}")
        reruns.append(run)
    walls = [r.wall for r in reruns]
    rows = [
        ("first converge wall s", f"{first.wall:.1f}" if first else "-"),
        ("no-op re-run wall s", spread(walls)),
        ("re-run / first converge", f"{statistics.median(walls) / first.wall:.3f}"
         if first else "-"),
        ("re-run controller CPU-s", spread([r.controller_cpu for r in reruns])),
        ("re-run node CPU-s", spread([r.node_cpu for r in reruns])),
        ("re-run CPU-s (controller + node)",
         spread([r.controller_cpu + r.node_cpu for r in reruns])),
        *((name, str(reruns[-1].counts.get(name, 0))) for name in COUNTS),
    ]
    print(f"site.yml on {NODE} (1 host; median [min-max] of {len(reruns)} re-runs; load "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)")
    for name, value in rows:
        print(f"  {name:<34} {value}")
    if args.json:
        args.json.write_text(json.dumps({
            "first": first.__dict__ if first else None,
            "reruns": [r.__dict__ for r in reruns]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
