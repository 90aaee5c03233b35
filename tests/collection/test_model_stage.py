"""The model_stage module, run as Ansible runs it (a process with a JSON argument file).

Sources are a local directory (the NFS case) and the simulator's ranged HTTP mirror on loopback,
including a mirror that drops the connection mid-file and one that ignores Range requests.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ansible_run import module_result

from ascend_sim.httpd import MirrorServer


def run_module(tmp_path: Path, check_mode: bool = False, **params: Any) -> dict[str, Any]:
    return module_result("model_stage", params, tmp_path, check_mode)


def make_source(root: Path) -> dict[str, Any]:
    """A small model: three files (one in a subdirectory) and their manifest."""
    contents = {
        "config.json": b'{"model_type": "deepseek_v3"}\n',
        "model.safetensors": os.urandom(300_000),
        "tokenizer/tokenizer.json": b'{"version": "1.0"}\n' * 50,
    }
    files = []
    for rel, data in contents.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"format": 1, "name": "tiny", "files": sorted(files, key=lambda f: f["path"])}


def from_path(src: Path, manifest: dict[str, Any], dest: Path, staging: Path) -> dict[str, Any]:
    """The module's arguments to stage ``manifest`` from the directory ``src`` into ``dest``."""
    return {"manifest": manifest, "dest": str(dest), "staging_dir": str(staging),
            "source_kind": "path", "source": str(src)}


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    src = tmp_path / "mirror" / "tiny"
    return src, make_source(src)


def test_path_source_stages_and_a_rerun_hashes_nothing(
    tmp_path: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    src, manifest = source
    dest, staging = tmp_path / "models" / "tiny", tmp_path / "models" / ".tiny.staging"
    common = from_path(src, manifest, dest, staging)
    first = run_module(tmp_path, **common)
    assert first["changed"] and first["complete"], first
    assert sorted(first["fetched"]) == [f["path"] for f in manifest["files"]]
    for entry in manifest["files"]:
        data = (dest / entry["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    written = json.loads((dest / "ascend-serve-manifest.json").read_text())
    assert written["files"] == manifest["files"]
    assert not staging.exists()  # emptied staging directory removed

    again = run_module(tmp_path, **common)
    assert not again["changed"] and again["fetched"] == [] and again["hashed"] == []

    # A file whose mtime moved is hashed once (same bytes: nothing fetched) ...
    os.utime(dest / "config.json", (1, 1))
    touched = run_module(tmp_path, **common)
    assert touched["hashed"] == ["config.json"] and touched["fetched"] == []
    # ... and recorded, so the next run hashes nothing again.
    assert run_module(tmp_path, **common)["hashed"] == []

    full = run_module(tmp_path, verify="full", **common)
    assert sorted(full["hashed"]) == [f["path"] for f in manifest["files"]]
    assert not full["changed"]


def test_damage_in_the_model_directory_is_repaired_by_full_verify(
    tmp_path: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    src, manifest = source
    dest = tmp_path / "models" / "tiny"
    common = from_path(src, manifest, dest, tmp_path / "stage")
    run_module(tmp_path, **common)
    target = dest / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[10] ^= 0xFF
    stat = target.stat()
    target.write_bytes(bytes(data))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    # fast trusts the ledger (size + mtime); full finds and repairs the damage.
    assert run_module(tmp_path, **common)["fetched"] == []
    repaired = run_module(tmp_path, verify="full", **common)
    assert repaired["fetched"] == ["model.safetensors"]
    assert hashlib.sha256(target.read_bytes()).hexdigest() == manifest["files"][1]["sha256"]


def test_a_damaged_source_file_is_discarded_and_named(
    tmp_path: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    src, manifest = source
    (src / "model.safetensors").write_bytes(os.urandom(300_000))  # same size, other bytes
    dest, staging = tmp_path / "models" / "tiny", tmp_path / "stage"
    result = run_module(tmp_path, **from_path(src, manifest, dest, staging))
    assert result["failed"]
    assert "model.safetensors failed verification and was discarded" in result["msg"]
    assert manifest["files"][1]["sha256"] in result["msg"]
    assert not (dest / "model.safetensors").exists()
    assert not list(staging.rglob("*.partial"))
    assert not (dest / "ascend-serve-manifest.json").exists()
    ledger = json.loads((dest / ".ascend-serve-ledger.json").read_text())
    assert ledger["complete"] is False


def test_not_enough_disk_is_refused_with_numbers_before_any_change(
    tmp_path: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    src, manifest = source
    dest = tmp_path / "models" / "tiny"
    result = run_module(tmp_path, **from_path(src, manifest, dest, tmp_path / "stage"),
                        min_free_bytes=1 << 60)
    assert result["failed"]
    assert "not enough disk for model tiny" in result["msg"]
    assert "3 of 3 files" in result["msg"] and "Nothing was changed" in result["msg"]
    assert not dest.exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with room for bytes but only 6 inodes: it fills up half-way through staging."""
    if os.geteuid() != 0:
        pytest.fail("mounting a small tmpfs needs root (the test machines run as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=6", "tmpfs", str(disk)],
                   check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_disk_that_fills_up_while_staging_fails_clearly_and_a_rerun_resumes(
    tmp_path: Path, source: tuple[Path, dict[str, Any]], small_disk: Path
) -> None:
    src, manifest = source
    dest = small_disk / "models" / "tiny"
    common = from_path(src, manifest, dest, small_disk / "models" / ".tiny.staging")
    full = run_module(tmp_path, **common)
    assert full["failed"] and full["complete"] is False
    assert full["msg"].startswith(f"disk full while staging model tiny in {dest}"), full["msg"]
    assert "No space left on device" in full["msg"] and "run again" in full["msg"]
    # What is in the model directory is whole and verified; it is not marked complete.
    present = {e["path"] for e in manifest["files"] if (dest / e["path"]).exists()}
    for entry in manifest["files"]:
        if entry["path"] in present:
            data = (dest / entry["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert len(present) < len(manifest["files"])
    assert not list(small_disk.rglob("*.partial"))
    assert not (dest / "ascend-serve-manifest.json").exists()
    # Room again (the operator freed space): the re-run stages the rest and completes.
    subprocess.run(["mount", "-o", "remount,nr_inodes=100", str(small_disk)], check=True)
    again = run_module(tmp_path, **common)
    assert again.get("failed") is not True and again["complete"], again
    # Only what was missing is fetched; the whole files staged before the disk filled are kept.
    assert sorted(again["fetched"]) == sorted({f["path"] for f in manifest["files"]} - present)
    written = json.loads((dest / "ascend-serve-manifest.json").read_text())
    assert written["files"] == manifest["files"]


def test_check_mode_and_plan_only_change_nothing(
    tmp_path: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    src, manifest = source
    dest = tmp_path / "models" / "tiny"
    common = from_path(src, manifest, dest, tmp_path / "stage")
    checked = run_module(tmp_path, check_mode=True, **common)
    assert checked["changed"] and len(checked["plan"]) == 3 and not dest.exists()
    planned = run_module(tmp_path, plan_only=True, **common)
    assert not planned["changed"] and planned["bytes_to_fetch"] == sum(
        f["size"] for f in manifest["files"])
    assert not dest.exists()


def test_plan_says_whether_a_run_would_change_anything_and_who_owns_the_model(
    tmp_path: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    """What model_store decides from on a converged host (one round trip): converged, owned."""
    src, manifest = source
    dest = tmp_path / "models" / "tiny"
    common = from_path(src, manifest, dest, tmp_path / "stage")
    me = pwd.getpwuid(os.getuid()).pw_name
    mine = grp.getgrgid(os.getgid()).gr_name
    before = run_module(tmp_path, plan_only=True, owner=me, group=mine, **common)
    assert (before["converged"], before["owned"]) == (False, False)  # no directory yet
    run_module(tmp_path, **common)
    after = run_module(tmp_path, plan_only=True, owner=me, group=mine, **common)
    assert (after["converged"], after["owned"], after["changed"]) == (True, True, False)
    assert after["plan"] == [] and after["complete"]
    assert run_module(tmp_path, plan_only=True, **common)["owned"] is None
    assert run_module(tmp_path, plan_only=True, owner="no-such-user-ascend",
                      **common)["owned"] is False
    (dest / "config.json").unlink()
    assert run_module(tmp_path, plan_only=True, **common)["converged"] is False


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "../escape", "size": 1, "sha256": "0" * 64},
        {"path": ".hidden", "size": 1, "sha256": "0" * 64},
        {"path": "ok", "size": 1, "sha256": "xyz"},
    ],
)
def test_bad_manifests_are_refused(tmp_path: Path, entry: dict[str, Any]) -> None:
    result = run_module(tmp_path, manifest={"name": "bad", "files": [entry]},
                        dest=str(tmp_path / "m"), staging_dir=str(tmp_path / "s"))
    assert result["failed"] and "bad manifest entry" in result["msg"]
    assert not (tmp_path / "m").exists()


@pytest.fixture
def mirror(tmp_path: Path, source: tuple[Path, dict[str, Any]]) -> Iterator[MirrorServer]:
    server = MirrorServer(("127.0.0.1", 0), source[0].parent, tmp_path / "mirror.jsonl",
                          {"tiny/model.safetensors": 100_000})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_http_download_that_breaks_off_resumes_with_range(
    tmp_path: Path, source: tuple[Path, dict[str, Any]], mirror: MirrorServer
) -> None:
    _, manifest = source
    url = f"http://127.0.0.1:{mirror.server_address[1]}/tiny"
    dest, staging = tmp_path / "models" / "tiny", tmp_path / "models" / ".tiny.staging"
    common: dict[str, Any] = {
        "manifest": manifest, "dest": str(dest), "staging_dir": str(staging),
        "source_kind": "http", "source": url}
    broken = run_module(tmp_path, **common)
    assert broken["failed"] and "the partial file is kept" in broken["msg"]
    partial_file = staging / "model.safetensors.partial"
    assert partial_file.stat().st_size == 100_000
    assert not (dest / "model.safetensors").exists()

    resumed = run_module(tmp_path, **common)
    assert resumed["complete"] and "model.safetensors" in resumed["fetched"], resumed
    log = [json.loads(line) for line in (tmp_path / "mirror.jsonl").read_text().splitlines()]
    ranged = [e for e in log if e["path"] == "/tiny/model.safetensors" and e["range"]]
    assert ranged == [{"path": "/tiny/model.safetensors", "range": "bytes=100000-",
                       "status": 206, "sent": 200_000}]
    assert hashlib.sha256((dest / "model.safetensors").read_bytes()).hexdigest() == \
        manifest["files"][1]["sha256"]


def test_http_mirror_without_range_support_restarts_the_file(
    tmp_path: Path, source: tuple[Path, dict[str, Any]]
) -> None:
    src, manifest = source
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(src.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        staging = tmp_path / "stage"
        staging.mkdir()
        (staging / "model.safetensors.partial").write_bytes(b"x" * 1000)  # stale partial
        result = run_module(
            tmp_path, manifest=manifest, dest=str(tmp_path / "models" / "tiny"),
            staging_dir=str(staging), source_kind="http",
            source=f"http://127.0.0.1:{server.server_address[1]}/tiny")
    finally:
        server.shutdown()
        server.server_close()
    assert result["complete"] and not result.get("failed"), result
