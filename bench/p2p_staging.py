#!/usr/bin/env python3
"""Model staging across N simulated nodes: plain HTTP from the mirror vs peer-to-peer (issue 33).

Kept out of CI (root, network namespaces, ``tc``, minutes of wall time). For each N and mode it

1. builds, once, a random model of ``--size-mb`` in ``--shards`` files with its manifest and its
   torrent (``ascend_serve.serving.p2p.make_torrent``: the mirror-side step) under ``--workdir``;
2. makes a hub namespace with a bridge, a mirror namespace (``ascend_sim.httpd``, HTTP Range) and
   N node namespaces, each on the bridge by a veth pair; every link is shaped with ``tc tbf`` at
   ``--rate`` in both directions (the namespace's end and the hub's end), the mirror's included;
3. starts ``model_stage`` (the collection's module, run as Ansible runs it) in every node at once:
   ``http`` stages from the mirror alone; ``p2p`` adds the swarm (the other nodes as peers, the
   mirror as web seed, seeding until every peer is complete);
4. records the time until every node holds the verified model (every module answered
   ``complete``; the module checks every file's sha256 against the manifest), each node's CPU
   seconds and peak RSS (``wait4`` on its process), and the bytes the mirror sent (its link's
   counters);
5. deletes the namespaces it made.

The ratios use plain HTTP at N = 1 as the denominator.

    flock /tmp/ascend-heavy.lock .venv/bin/python bench/p2p_staging.py --size-mb 1024
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "plugins" / "modules" / "model_stage.py"
COLLECTIONS = ROOT / ".cache" / "collections"
NAME = "bench-model"
PORT = 6881


@dataclass
class Run:
    mode: str
    nodes: int
    seconds: float
    cpu_s_per_node: float
    max_rss_mib: float
    mirror_sent_mib: float
    ok: bool


def sh(*args: str) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def build_model(workdir: Path, size_mb: int, shards: int, piece_kib: int) -> dict[str, Any]:
    from ascend_serve.serving.manifest import build_manifest, load, write
    from ascend_serve.serving.p2p import make_torrent

    model = workdir / "mirror" / NAME
    stamp = model / ".built"
    if not stamp.is_file() or stamp.read_text() != f"{size_mb}/{shards}":
        shutil.rmtree(model, ignore_errors=True)
        model.mkdir(parents=True)
        per = size_mb * (1 << 20) // shards
        for index in range(shards):
            with open(model / f"model-{index + 1:05d}-of-{shards:05d}.safetensors", "wb") as out:
                left = per
                while left:
                    block = min(left, 8 << 20)
                    out.write(os.urandom(block))
                    left -= block
        (model / "config.json").write_text('{"model_type": "deepseek_v3"}\n')
        write(model, build_manifest(model, NAME))
        stamp.write_text(f"{size_mb}/{shards}")
    manifest = load(model)
    make_torrent(model, manifest, piece_kib * 1024)
    data: dict[str, Any] = json.loads(manifest.to_json())
    return data


class Fabric:
    """The hub (a bridge), the mirror and N nodes, every link shaped at rate."""

    def __init__(self, nodes: int, rate: str) -> None:
        self.tag = secrets.token_hex(2)
        self.hub = f"p2pb-{self.tag}-hub"
        self.made: list[str] = []
        self.ns: dict[str, str] = {}
        self.addr: dict[str, str] = {}
        self.rate = rate
        sh("ip", "netns", "add", self.hub)
        self.made.append(self.hub)
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        for index, name in enumerate(["mirror", *(f"n{i}" for i in range(1, nodes + 1))]):
            self._add(index, name)

    def _shape(self, ns: str, dev: str) -> None:
        sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
           "burst", "256kb", "latency", "50ms")

    def _add(self, index: int, name: str) -> None:
        ns = f"p2pb-{self.tag}-{name}"
        sh("ip", "netns", "add", ns)
        self.made.append(ns)
        hub_end = f"v{index}"
        sh("ip", "-n", self.hub, "link", "add", hub_end, "type", "veth", "peer", "name", "eth0",
           "netns", ns)
        sh("ip", "-n", self.hub, "link", "set", hub_end, "master", "br0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        address = f"10.77.0.{index + 1}"
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        self._shape(ns, "eth0")
        self._shape(self.hub, hub_end)
        self.ns[name], self.addr[name] = ns, address

    def tx_bytes(self, name: str) -> int:
        stats = json.loads(sh("ip", "-n", self.ns[name], "-s", "-j", "link", "show", "eth0"))
        return int(stats[0]["stats64"]["tx"]["bytes"])

    def close(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def wait_port(fabric: Fabric, node: str, host: str, port: int) -> None:
    probe = f"import socket; socket.create_connection(({host!r}, {port}), 1)"
    for _ in range(100):
        if subprocess.run(["ip", "netns", "exec", fabric.ns[node], sys.executable, "-c", probe],
                          capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.1)
    raise SystemExit(f"the mirror on {host}:{port} does not answer")


def one_run(workdir: Path, manifest: dict[str, Any], mode: str, nodes: int, rate: str,
            seed_seconds: int) -> Run:
    fabric = Fabric(nodes, rate)
    server = None
    try:
        server = subprocess.Popen(
            ["ip", "netns", "exec", fabric.ns["mirror"], sys.executable, "-m",
             "ascend_sim.httpd", str(workdir / "mirror"), "--bind", fabric.addr["mirror"],
             "--port", "8080"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(fabric, "n1", fabric.addr["mirror"], 8080)
        names = [f"n{i}" for i in range(1, nodes + 1)]
        procs: dict[int, tuple[str, Path]] = {}
        before = fabric.tx_bytes("mirror")
        started = time.monotonic()
        for name in names:
            node_dir = workdir / "nodes" / name
            shutil.rmtree(node_dir, ignore_errors=True)
            node_dir.mkdir(parents=True)
            args: dict[str, Any] = {
                "manifest": manifest, "dest": str(node_dir / NAME),
                "staging_dir": str(node_dir / f".{NAME}.staging"), "source_kind": "http",
                "source": f"http://{fabric.addr['mirror']}:8080/{NAME}", "timeout": 120}
            if mode == "p2p":
                args["p2p"] = {
                    "network": "10.77.0.0/24", "port": PORT, "seed_seconds": seed_seconds,
                    "stall_seconds": 120,
                    "peers": [f"{fabric.addr[o]}:{PORT}" for o in names if o != name]}
            args_file = node_dir / "args.json"
            args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
            out = node_dir / "answer.json"
            with open(out, "w") as answer:
                proc = subprocess.Popen(
                    ["ip", "netns", "exec", fabric.ns[name], sys.executable, str(MODULE),
                     str(args_file)], stdout=answer, stderr=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONPATH": str(COLLECTIONS)})
            procs[proc.pid] = (name, out)
        cpu, rss, ok = [], [], True
        last = started
        while procs:
            pid, _, usage = os.wait4(-1, 0)
            if pid not in procs:
                continue
            last = time.monotonic()
            name, out = procs.pop(pid)
            cpu.append(usage.ru_utime + usage.ru_stime)
            rss.append(usage.ru_maxrss / 1024)
            try:
                result = json.loads(out.read_text())
            except ValueError:
                result = {"failed": True, "msg": "no answer"}
            swarm = result.get("p2p") or {}
            if swarm.get("state"):
                print(f"  {name}: {swarm['state']}, peers seen {len(swarm['peers_seen'])}, "
                      f"complete {len(swarm['peers_complete'])}, "
                      f"up {swarm['bytes_uploaded'] >> 20} MiB, "
                      f"down {swarm['bytes_downloaded'] >> 20} MiB {swarm['fallback']}",
                      file=sys.stderr, flush=True)
            if result.get("failed") or not result.get("complete"):
                ok = False
                print(f"{mode} N={nodes} {name}: {result.get('msg')}", file=sys.stderr)
        sent = fabric.tx_bytes("mirror") - before
        return Run(mode, nodes, round(last - started, 1), round(sum(cpu) / len(cpu), 2),
                   round(max(rss), 1), round(sent / (1 << 20), 1), ok)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        fabric.close()
        shutil.rmtree(workdir / "nodes", ignore_errors=True)


def table(runs: list[Run], size_mb: int, rate: str) -> str:
    base = next((r.seconds for r in runs if r.mode == "http" and r.nodes == 1), None)
    lines = [f"model {size_mb} MiB, every link {rate}", "",
             "| mode | N | time to all verified (s) | ratio to HTTP N=1 | CPU-s per node | "
             "peak RSS per node (MiB) | mirror sent (MiB) | all verified |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        ratio = f"{r.seconds / base:.2f}" if base else "-"
        lines.append(f"| {r.mode} | {r.nodes} | {r.seconds} | {ratio} | {r.cpu_s_per_node} | "
                     f"{r.max_rss_mib} | {r.mirror_sent_mib} | {'yes' if r.ok else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--piece-kib", type=int, default=1024)
    parser.add_argument("--rate", default="200mbit", help="tc rate of every link")
    parser.add_argument("--nodes", default="1,4,8")
    parser.add_argument("--modes", default="http,p2p")
    parser.add_argument("--seed-seconds", type=int, default=300)
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "ascend-p2p-bench")
    parser.add_argument("--json", type=Path, help="also write the runs as JSON here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces, tc)")
    manifest = build_model(args.workdir, args.size_mb, args.shards, args.piece_kib)
    runs = []
    for mode in args.modes.split(","):
        for count in (int(n) for n in args.nodes.split(",")):
            run = one_run(args.workdir, manifest, mode, count, args.rate, args.seed_seconds)
            print(json.dumps(asdict(run)), flush=True)
            runs.append(run)
    print(table(runs, args.size_mb, args.rate))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2) + "\n")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
