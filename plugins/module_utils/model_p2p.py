"""Peer-to-peer model staging on libtorrent: the swarm part of ``model_stage``.

The engine is libtorrent (PyPI ``libtorrent``, BitTorrent with BEP 19 web seeds): the artifact
mirror is the web seed, the other nodes of the play are the peers, named explicitly (no tracker,
no DHT, no local peer discovery, no UPnP/NAT-PMP). The torrent (the piece map) is made once per
manifest digest on the mirror side (``ascend-serve model torrent``) and named after that digest,
so a node can only use the torrent of the manifest it stages.

This file holds what the node needs: the manifest digest (also imported by the package, one
home), the refusals that run before any change (the peer network's address on this host, the
listen port), and the swarm run. libtorrent is imported only by the swarm run: the rest is
stdlib (Python 3.8). Nothing here decides whether a file is good: the module verifies every file
against the manifest's sha256 after the transfer, and the swarm's piece hashes only guard the
transfer itself.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

TORRENT_PREFIX = "ascend-serve-"
TORRENT_SUFFIX = ".torrent"
POLL = 0.25
# A node that completes seeds at least this long (within seed_seconds), so that its peers see it
# complete, and stops once it has uploaded nothing for as long.
LINGER = 3.0


class P2PError(Exception):
    pass


def manifest_digest(name: str, files: list[dict[str, Any]]) -> str:
    """sha256 of the canonical form of a manifest (name, then files sorted by path)."""
    canonical = {
        "name": str(name),
        "files": sorted(
            ({"path": str(f["path"]), "size": int(f["size"]), "sha256": str(f["sha256"]).lower()}
             for f in files),
            key=lambda f: f["path"],
        ),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def torrent_file_name(digest: str) -> str:
    """The torrent's file name next to the manifest on the mirror: one per manifest digest."""
    return TORRENT_PREFIX + digest[:32] + TORRENT_SUFFIX


def ipv4_addresses(ip_output: str) -> list[tuple[str, Any]]:
    """(interface, IPv4Interface) pairs from ``ip -o -4 addr show``."""
    found = []
    for line in ip_output.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != "inet":
            continue
        try:
            found.append((fields[1].rstrip(":"), ipaddress.ip_interface(fields[3])))
        except ValueError:
            continue
    return found


def address_in_network(network: str, ip_output: str | None = None) -> tuple[str, str]:
    """This host's IPv4 address (and its interface) inside ``network`` (CIDR); P2PError if none."""
    try:
        net = ipaddress.ip_network(network, strict=False)
    except ValueError as exc:
        raise P2PError(f"the peer network {network!r} is not a CIDR network: {exc}") from exc
    if ip_output is None:
        proc = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise P2PError("cannot list this host's addresses: " + proc.stderr.strip())
        ip_output = proc.stdout
    pairs = ipv4_addresses(ip_output)
    for iface, addr in pairs:
        if addr.ip in net:
            return str(addr.ip), iface
    have = ", ".join(f"{i} {a}" for i, a in pairs) or "none"
    raise P2PError(f"this host has no address in the peer network {net} "
                   f"(its IPv4 addresses: {have})")


def port_in_use(address: str, port: int) -> str | None:
    """The reason the port cannot be bound on address (TCP, and UDP for uTP), or None."""
    for kind, label in ((socket.SOCK_STREAM, "TCP"), (socket.SOCK_DGRAM, "UDP")):
        sock = socket.socket(socket.AF_INET, kind)
        try:
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"{label} port {port} on {address} is already in use"
            return f"cannot bind {label} port {port} on {address}: {exc.strerror}"
        finally:
            sock.close()
    return None


def web_seed_url(source: str, torrent_name: str) -> str | None:
    """The BEP 19 web seed for a multi-file torrent: the directory above the model's one.

    A client appends ``<torrent name>/<file path>`` to a web seed URL that ends in ``/``, so the
    mirror's model directory must carry the torrent's name (the manifest's ``name``)."""
    base = source.rstrip("/")
    parent, _, last = base.rpartition("/")
    if last != torrent_name or "://" not in parent + "/":
        return None
    return parent + "/"


def _import_libtorrent():
    try:
        import libtorrent  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise P2PError(f"libtorrent cannot be imported by this interpreter ({sys.executable}): "
                       f"{exc}") from exc
    return libtorrent


def check_engine(python=""):
    """The libtorrent version that python (empty: this interpreter) imports; P2PError if none."""
    if not python:
        return _import_libtorrent().__version__
    try:
        proc = subprocess.run([python, "-c", "import libtorrent; print(libtorrent.__version__)"],
                              capture_output=True, text=True, check=False, timeout=60)
    except OSError as exc:
        raise P2PError(f"cannot run {python}: {exc.strerror}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise P2PError(f"libtorrent cannot be imported by {python}: {last}")
    return proc.stdout.strip()


def run_swarm_with(python, script_dir, kwargs, torrent_bytes):
    """run_swarm in another interpreter (one that imports libtorrent): this file's source runs
    there as a script, with the torrent and the arguments in files under script_dir."""
    script = os.path.join(script_dir, "swarm.py")
    with open(script, "w") as handle:
        handle.write(_own_source())
    with open(os.path.join(script_dir, "swarm.torrent"), "wb") as handle:
        handle.write(torrent_bytes)
    with open(os.path.join(script_dir, "swarm.json"), "w") as handle:
        json.dump(kwargs, handle)
    proc = subprocess.run([python, script, script_dir], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise P2PError(f"the swarm under {python} failed: {last}")
    return json.loads(proc.stdout)


def _own_source():
    import inspect  # pylint: disable=import-outside-toplevel

    return inspect.getsource(sys.modules[__name__])


def _layout(info):
    """The torrent's files (torrent_info.layout() since libtorrent 2.1; files() before)."""
    return info.layout() if hasattr(info, "layout") else info.files()


def torrent_files(info, lt):
    """(name, sorted [(path, size)]) of a torrent_info, pad files left out."""
    storage = _layout(info)
    listed = []
    for index in range(storage.num_files()):
        if storage.file_flags(index) & lt.file_storage.flag_pad_file:
            continue
        path = storage.file_path(index).replace(os.sep, "/")
        head, _, rest = path.partition("/")
        listed.append((rest if head == info.name() else path, storage.file_size(index)))
    return info.name(), sorted(listed)


def slice_priorities(num_pieces: int, address: str, peers: list[str]) -> list[int]:
    """Piece priorities that spread the mirror's work: the nodes (this one and its peers, sorted
    by address) each take one contiguous slice of the pieces first (priority 7), the rest later
    (priority 1). Every node's web seed then starts on different pieces, which its peers fetch
    from it rather than from the mirror. A node alone takes every piece at priority 7."""
    nodes = sorted({address} | {peer.rpartition(":")[0] for peer in peers},
                   key=lambda a: ipaddress.ip_address(a))
    me, count = nodes.index(address), len(nodes)
    return [7 if piece * count // max(num_pieces, 1) == me else 1 for piece in range(num_pieces)]


def run_swarm(torrent_bytes, save_path, wanted, address, port, peers, expected, web_seed=None,
              upload_rate=0, download_rate=0, seed_seconds=0, stall_seconds=60,
              log=None, parent_pid=None):
    """Download the ``wanted`` files of the torrent into save_path/<name>/ from the peers and the
    web seed, then seed until seed_seconds have passed or every connected peer is complete.

    expected is the manifest's name and [path, size] list: a torrent that lists other files is
    refused (P2PError). Returns a dict: ``complete`` (paths whose every piece arrived),
    ``state`` (finished, stalled), byte counters and the peers seen. Stops (does not raise)
    when nothing arrived for stall_seconds: the caller falls back to HTTP for what is missing.
    Run as a script for the module (parent_pid), it also stops when the module is gone."""
    lt = _import_libtorrent()
    try:
        info = lt.torrent_info(lt.bdecode(torrent_bytes))
    except RuntimeError as exc:
        raise P2PError(f"the torrent cannot be read: {exc}") from exc
    name, listed = torrent_files(info, lt)
    if name != expected["name"] or listed != sorted(tuple(f) for f in expected["files"]):
        raise P2PError("the torrent does not list this manifest's files")
    settings = {
        "listen_interfaces": f"{address}:{port}",
        "outgoing_interfaces": address,
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        # TCP only: uTP (UDP, congestion control in user space) costs CPU and a LAN needs none.
        "enable_outgoing_utp": False,
        "enable_incoming_utp": False,
        "upload_rate_limit": int(upload_rate),
        "download_rate_limit": int(download_rate),
        "alert_mask": (lt.alert.category_t.error_notification
                       | lt.alert.category_t.connect_notification
                       | lt.alert.category_t.peer_notification),
        # Peers of one fleet share a subnet: allow several per IP, do not rate-limit the LAN.
        "allow_multiple_connections_per_ip": True,
        "rate_limit_ip_overhead": False,
        # One piece per web seed request, so that the slices below hold (default 16 MiB).
        "urlseed_max_request_bytes": info.piece_length(),
    }
    session = lt.session(settings)
    params = lt.add_torrent_params()
    params.ti = info
    params.save_path = save_path
    params.flags &= ~lt.torrent_flags.auto_managed
    params.flags &= ~lt.torrent_flags.paused
    storage = _layout(info)
    wanted_set = set(wanted)
    priorities = []
    index_by_path = {}
    for index in range(storage.num_files()):
        path = storage.file_path(index).replace(os.sep, "/")
        rel = path.split("/", 1)[1] if "/" in path else path
        index_by_path[rel] = index
        priorities.append(4 if rel in wanted_set else 0)
    params.file_priorities = priorities
    handle = session.add_torrent(params)
    if all(priorities):
        handle.prioritize_pieces(slice_priorities(info.num_pieces(), address, peers))
    if web_seed:
        handle.add_url_seed(web_seed)
    for peer in peers:
        host, _, peer_port = peer.rpartition(":")
        try:
            handle.connect_peer((host, int(peer_port)))
        except (RuntimeError, ValueError) as exc:
            if log:
                log(f"peer {peer}: {exc}")
    peer_ips = {peer.rpartition(":")[0] for peer in peers}
    seen, seeds = set(), set()
    last_bytes, last_progress = -1, time.monotonic()
    last_upload, upload_moved = -1, time.monotonic()
    finished_at = None
    state = "stalled"
    while True:
        time.sleep(POLL)
        if parent_pid is not None and os.getppid() != parent_pid:
            state = "orphaned"  # the module was killed: leave the swarm, keep the pieces
            break
        # Alerts are queued: a connection that opened and closed between two polls still counts.
        for alert in session.pop_alerts():
            if not isinstance(alert, (lt.incoming_connection_alert, lt.peer_disconnected_alert)):
                continue
            if alert.endpoint[0] not in peer_ips:
                continue
            if isinstance(alert, lt.incoming_connection_alert):
                seen.add(alert.endpoint[0])
                continue
            # Two complete peers drop their connection ("upload to upload", "torrent finished").
            reason = alert.error.message()
            if "upload to upload" in reason or "torrent finished" in reason:
                seen.add(alert.endpoint[0])
                seeds.add(alert.endpoint[0])
        for peer in handle.get_peer_info():
            if peer.flags & (lt.peer_info.connecting | lt.peer_info.handshake):
                continue  # not (yet) a peer: a connection attempt or an unfinished handshake
            if peer.ip[0] in peer_ips:
                seen.add(peer.ip[0])
                if peer.flags & lt.peer_info.seed:
                    seeds.add(peer.ip[0])
        status = handle.status()
        done = status.total_wanted_done
        if done != last_bytes:
            last_bytes, last_progress = done, time.monotonic()
        if status.total_payload_upload != last_upload:
            last_upload, upload_moved = status.total_payload_upload, time.monotonic()
        if status.total_wanted and done >= status.total_wanted:
            if finished_at is None:
                finished_at = time.monotonic()
            # Seeding ends after seed_seconds, or earlier once every named peer is complete or
            # nobody asked this node for anything for LINGER seconds.
            now = time.monotonic()
            seeded = now - finished_at
            if seeded >= seed_seconds or not peer_ips or (seeded >= LINGER and (
                    peer_ips <= seeds or now - upload_moved >= LINGER)):
                state = "finished"
                break
        elif time.monotonic() - last_progress > stall_seconds:
            break
    progress = handle.file_progress()
    complete = [rel for rel, index in index_by_path.items()
                if rel in wanted_set and progress[index] == storage.file_size(index)]
    status = handle.status()
    result = {
        "state": state,
        "complete": sorted(complete),
        "bytes_downloaded": int(status.total_payload_download),
        "bytes_uploaded": int(status.total_payload_upload),
        "peers_seen": sorted(seen),
        "peers_complete": sorted(seeds),
    }
    session.remove_torrent(handle)
    del session
    return result


def _script(script_dir):
    with open(os.path.join(script_dir, "swarm.json")) as handle:
        kwargs = json.load(handle)
    with open(os.path.join(script_dir, "swarm.torrent"), "rb") as handle:
        torrent = handle.read()
    sys.stdout.write(json.dumps(run_swarm(torrent, parent_pid=os.getppid(), **kwargs)))


if __name__ == "__main__":
    _script(sys.argv[1])
