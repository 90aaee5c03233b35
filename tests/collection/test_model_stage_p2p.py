"""Peer-to-peer staging in model_stage (libtorrent, the mirror as web seed), with small files.

The refusals run on loopback. The swarm tests put a mirror and two nodes in network namespaces
made here, on one bridge (192.0.2.0/24, in a hub namespace), and delete exactly those. The module
runs as Ansible runs it, in the node's namespace. No timing is asserted: bytes, states, files.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ansible_run import module_result
from paths import COLLECTION, COLLECTIONS
from simnet import _netns_usable, ip

from ascend_serve.serving.manifest import Manifest
from ascend_serve.serving.p2p import make_torrent, torrent_path

lt = pytest.importorskip("libtorrent")

MODULE = COLLECTION / "plugins" / "modules" / "model_stage.py"
PIECE = 64 * 1024
NAME = "tiny"


def make_model(root: Path, big: int = 1_500_000) -> dict[str, Any]:
    """A model of three files under root/NAME and its manifest (the mirror's directory)."""
    contents = {
        "config.json": b'{"model_type": "deepseek_v3"}\n',
        "model-00001.safetensors": os.urandom(big),
        "model-00002.safetensors": os.urandom(big // 2),
    }
    files = []
    for rel, data in contents.items():
        path = root / NAME / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"format": 1, "name": NAME, "files": sorted(files, key=lambda f: str(f["path"]))}
    (root / NAME / "ascend-serve-manifest.json").write_text(json.dumps(manifest))
    return manifest


def torrent_for(model_dir: Path, manifest: dict[str, Any]) -> Path:
    return make_torrent(model_dir, Manifest.model_validate(manifest), PIECE).path


def assert_verified(dest: Path, manifest: dict[str, Any]) -> None:
    for entry in manifest["files"]:
        data = (dest / entry["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["path"]
    assert json.loads((dest / "ascend-serve-manifest.json").read_text())["files"] == \
        manifest["files"]


# --- refusals, before any change (loopback) ------------------------------------------------


def args_for(tmp_path: Path, manifest: dict[str, Any], **p2p: Any) -> dict[str, Any]:
    return {"manifest": manifest, "dest": str(tmp_path / "models" / NAME),
            "staging_dir": str(tmp_path / "models" / f".{NAME}.staging"),
            "source_kind": "http", "source": f"http://127.0.0.1:9/{NAME}", "p2p": p2p}


def test_a_peer_network_the_host_lacks_is_refused_before_any_change(tmp_path: Path) -> None:
    manifest = make_model(tmp_path / "mirror")
    for plan_only in (True, False):
        result = module_result("model_stage", {**args_for(tmp_path, manifest,
                                                          network="203.0.113.0/24"),
                                               "plan_only": plan_only}, tmp_path)
        assert result["failed"], result
        assert "no address in the peer network 203.0.113.0/24" in result["msg"], result["msg"]
        assert "Nothing was changed" in result["msg"]
    assert not (tmp_path / "models").exists()


def test_a_listen_port_in_use_is_refused_before_any_change(tmp_path: Path) -> None:
    manifest = make_model(tmp_path / "mirror")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = module_result("model_stage", args_for(tmp_path, manifest, network="127.0.0.0/8",
                                                       port=port), tmp_path)
    assert result["failed"], result
    assert f"TCP port {port} on 127.0.0.1 is already in use" in result["msg"], result["msg"]
    assert not (tmp_path / "models").exists()


def test_p2p_needs_the_http_mirror(tmp_path: Path) -> None:
    manifest = make_model(tmp_path / "mirror")
    result = module_result("model_stage", {**args_for(tmp_path, manifest, network="127.0.0.0/8"),
                                           "source_kind": "path",
                                           "source": str(tmp_path / "mirror" / NAME)}, tmp_path)
    assert result["failed"] and "p2p needs source_kind http" in result["msg"], result


def test_a_staged_model_needs_no_swarm_and_no_peer_network(tmp_path: Path) -> None:
    manifest = make_model(tmp_path / "mirror")
    staged = module_result("model_stage", {
        "manifest": manifest, "dest": str(tmp_path / "models" / NAME),
        "staging_dir": str(tmp_path / "models" / f".{NAME}.staging"), "source_kind": "path",
        "source": str(tmp_path / "mirror" / NAME)}, tmp_path)
    assert staged["complete"], staged
    again = module_result("model_stage", args_for(tmp_path, manifest, network="203.0.113.0/24"),
                          tmp_path)
    assert not again.get("failed") and not again["changed"] and again["p2p"] == {}, again


# --- swarms in namespaces ----------------------------------------------------------------------

needs_netns = pytest.mark.skipif(_netns_usable() is not None, reason=str(_netns_usable()))


@dataclass
class Net:
    suffix: str
    hub: str
    nodes: dict[str, str]  # name -> namespace
    addrs: dict[str, str]  # name -> address

    def run(self, node: str, args: dict[str, Any], workdir: Path) -> subprocess.Popen[str]:
        args_file = workdir / f"{node}-args.json"
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        return subprocess.Popen(
            ["ip", "netns", "exec", self.nodes[node], sys.executable, str(MODULE),
             str(args_file)],
            env={**os.environ, "PYTHONPATH": str(COLLECTIONS)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)


def answer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=300)
    assert out, err
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture
def net() -> Iterator[Net]:
    suffix = secrets.token_hex(3)
    hub = f"p2p-{suffix}-hub"
    names = ("mirror", "a", "b")
    made: list[str] = []
    try:
        ip("netns", "add", hub)
        made.append(hub)
        ip("-n", hub, "link", "add", "br0", "type", "bridge")
        ip("-n", hub, "link", "set", "br0", "up")
        nodes, addrs = {}, {}
        for index, name in enumerate(names, start=1):
            ns = f"p2p-{suffix}-{name}"
            ip("netns", "add", ns)
            made.append(ns)
            ip("-n", hub, "link", "add", f"v{index}", "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            ip("-n", hub, "link", "set", f"v{index}", "master", "br0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", f"192.0.2.{index}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            nodes[name], addrs[name] = ns, f"192.0.2.{index}"
        yield Net(suffix, hub, nodes, addrs)
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture
def mirror(net: Net, tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], Path]]:
    """The mirror's root (models under it), the manifest, the request log."""
    root = tmp_path / "mirror"
    manifest = make_model(root)
    torrent_for(root / NAME, manifest)
    log = tmp_path / "mirror.jsonl"
    server = subprocess.Popen(
        ["ip", "netns", "exec", net.nodes["mirror"], sys.executable, "-m", "ascend_sim.httpd",
         str(root), "--bind", net.addrs["mirror"], "--port", "8080", "--log", str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            probe = subprocess.run(
                ["ip", "netns", "exec", net.nodes["a"], sys.executable, "-c",
                 "import socket; socket.create_connection(('192.0.2.1', 8080), 1)"],
                capture_output=True, check=False)
            if probe.returncode == 0:
                break
            time.sleep(0.1)
        yield root, manifest, log
    finally:
        server.terminate()
        server.wait(timeout=10)


def node_args(net: Net, node: str, tmp_path: Path, manifest: dict[str, Any],
              **p2p: Any) -> dict[str, Any]:
    peers = [f"{addr}:6881" for name, addr in net.addrs.items() if name not in ("mirror", node)]
    return {"manifest": manifest, "dest": str(tmp_path / node / "models" / NAME),
            "staging_dir": str(tmp_path / node / "models" / f".{NAME}.staging"),
            "source_kind": "http", "source": f"http://{net.addrs['mirror']}:8080/{NAME}",
            "p2p": {"network": "192.0.2.0/24", "peers": peers, **p2p}}


def total(manifest: dict[str, Any]) -> int:
    return sum(int(f["size"]) for f in manifest["files"])


@needs_netns
def test_a_node_whose_peers_are_absent_stages_from_the_web_seed(
    net: Net, mirror: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, manifest, _ = mirror
    # The swarm runs in another interpreter (the way a node runs it in the serving environment).
    result = answer(net.run("a", node_args(net, "a", tmp_path, manifest, seed_seconds=0,
                                           python=sys.executable), tmp_path))
    assert result["complete"] and not result.get("failed"), result
    p2p = result["p2p"]
    assert p2p["peer"] == f"{net.addrs['a']}:6881" and p2p["state"] == "finished", p2p
    assert p2p["bytes_downloaded"] >= total(manifest), p2p
    assert p2p["fallback"] == "" and p2p["peers_seen"] == []
    assert_verified(tmp_path / "a" / "models" / NAME, manifest)
    assert not (tmp_path / "a" / "models" / f".{NAME}.staging").exists()


@needs_netns
def test_a_node_without_the_web_seed_gets_every_byte_from_its_peer(
    net: Net, mirror: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, manifest, log = mirror
    # A fetches from the mirror and seeds until B is complete; B may only use A.
    a = net.run("a", node_args(net, "a", tmp_path, manifest, seed_seconds=120), tmp_path)
    b = net.run("b", node_args(net, "b", tmp_path, manifest, web_seed=False, stall_seconds=60),
                tmp_path)
    got_b, got_a = answer(b), answer(a)
    assert got_b["complete"] and not got_b.get("failed"), got_b
    assert got_b["p2p"]["fallback"] == "" and got_b["p2p"]["bytes_downloaded"] >= total(manifest)
    assert got_b["p2p"]["peers_seen"] == [net.addrs["a"]], got_b["p2p"]
    assert got_a["complete"] and got_a["p2p"]["bytes_uploaded"] >= total(manifest), got_a
    assert got_a["p2p"]["state"] == "finished" and got_a["p2p"]["peers_seen"] == [net.addrs["b"]]
    # The mirror served one copy (A's web seed), not two.
    served = [json.loads(line) for line in log.read_text().splitlines()]
    assert sum(e["sent"] for e in served if not e["path"].endswith(".torrent")) < \
        2 * total(manifest)
    for node in ("a", "b"):
        assert_verified(tmp_path / node / "models" / NAME, manifest)


@needs_netns
def test_a_swarm_that_stalls_falls_back_to_http(
    net: Net, mirror: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, manifest, log = mirror
    result = answer(net.run("a", node_args(net, "a", tmp_path, manifest, web_seed=False,
                                           stall_seconds=2), tmp_path))
    assert result["complete"] and not result.get("failed"), result
    assert result["p2p"]["state"] == "stalled" and "mirror serves them over HTTP" in \
        result["p2p"]["fallback"], result["p2p"]
    assert sorted(result["fetched"]) == [f["path"] for f in manifest["files"]]
    plain = [json.loads(line) for line in log.read_text().splitlines()]
    assert sum(e["sent"] for e in plain if not e["path"].endswith(".torrent")) == total(manifest)
    assert_verified(tmp_path / "a" / "models" / NAME, manifest)


@needs_netns
def test_no_torrent_for_this_manifest_means_plain_http(
    net: Net, mirror: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    root, manifest, _ = mirror
    torrent_path(root / NAME, Manifest.model_validate(manifest)).unlink()
    result = answer(net.run("a", node_args(net, "a", tmp_path, manifest), tmp_path))
    assert result["complete"] and not result.get("failed"), result
    assert "no torrent for manifest digest" in result["p2p"]["fallback"], result["p2p"]
    assert_verified(tmp_path / "a" / "models" / NAME, manifest)


@needs_netns
def test_what_the_swarm_delivers_is_still_gated_by_the_manifest_sha256(
    net: Net, mirror: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    root, manifest, _ = mirror
    # The mirror's bytes (and a torrent made from them) differ from the manifest's pin.
    bad = root / NAME / "model-00002.safetensors"
    bad.write_bytes(os.urandom(bad.stat().st_size))
    torrent_for(root / NAME, manifest).unlink()
    torrent_for(root / NAME, manifest)
    result = answer(net.run("a", node_args(net, "a", tmp_path, manifest, seed_seconds=0),
                            tmp_path))
    assert result["failed"] and not result["complete"], result
    assert "model-00002.safetensors failed verification and was discarded" in result["msg"]
    assert "the swarm's copy has sha256" in json.dumps(result.get("warnings", []))
    dest = tmp_path / "a" / "models" / NAME
    assert not (dest / "model-00002.safetensors").exists()
    assert not (dest / "ascend-serve-manifest.json").exists()


@needs_netns
def test_a_killed_swarm_resumes_where_it_stopped(
    net: Net, mirror: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, manifest, _ = mirror
    # A slow mirror link (8 Mbit/s) so that the kill lands mid-transfer.
    ip("-n", net.nodes["mirror"], "link", "set", "eth0", "txqueuelen", "100")
    subprocess.run(["tc", "-n", net.nodes["mirror"], "qdisc", "add", "dev", "eth0", "root", "tbf",
                    "rate", "8mbit", "burst", "16kb", "latency", "400ms"], check=True)
    args = node_args(net, "a", tmp_path, manifest, seed_seconds=0)
    first = net.run("a", args, tmp_path)
    swarm_dir = tmp_path / "a" / "models" / f".{NAME}.staging" / ".p2p" / NAME
    have = 0
    while first.poll() is None and have < total(manifest) // 3:
        time.sleep(0.05)
        have = sum(p.stat().st_blocks * 512 for p in swarm_dir.rglob("*") if p.is_file()) \
            if swarm_dir.is_dir() else 0
    assert first.poll() is None, "the transfer ended before the kill"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not (tmp_path / "a" / "models" / NAME / "ascend-serve-manifest.json").exists()
    again = answer(net.run("a", args, tmp_path))
    assert again["complete"] and not again.get("failed"), again
    assert again["p2p"]["bytes_downloaded"] < total(manifest), again["p2p"]
    assert_verified(tmp_path / "a" / "models" / NAME, manifest)
