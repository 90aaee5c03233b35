"""The model's torrent (made once per manifest digest on the mirror side) and the node-side
pieces of peer-to-peer staging that need no network: digest, addresses, ports, piece slices."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ansible_collections.ascend_serve.fleet.plugins.module_utils.model_p2p import (
    P2PError,
    address_in_network,
    manifest_digest,
    port_in_use,
    slice_priorities,
    web_seed_url,
)
from ascend_serve.cli.main import app
from ascend_serve.serving.manifest import build_manifest, write
from ascend_serve.serving.p2p import TorrentError, digest_of, make_torrent

lt = pytest.importorskip("libtorrent")
runner = CliRunner()

IP_OUTPUT = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 192.0.2.10/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever
3: eth1    inet 198.51.100.7/26 brd 198.51.100.63 scope global eth1\\       valid_lft forever
"""


def model(tmp_path: Path) -> Path:
    root = tmp_path / "mirror" / "tiny"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}\n')
    (root / "model.safetensors").write_bytes(bytes(range(256)) * 700)
    (root / "sub" / "tokenizer.json").write_text("{}\n" * 40)
    write(root, build_manifest(root, "tiny"))
    return root


def test_the_torrent_is_made_once_per_manifest_digest_and_lists_its_files(tmp_path: Path) -> None:
    root = model(tmp_path)
    manifest = build_manifest(root, "tiny")
    first = make_torrent(root, manifest, 16384)
    assert first.made and first.path.name == f"ascend-serve-{digest_of(manifest)[:32]}.torrent"
    again = make_torrent(root, manifest, 16384)
    assert not again.made and again.path == first.path and again.pieces == first.pieces
    info = lt.torrent_info(str(first.path))
    assert info.name() == "tiny"
    files = info.layout()
    listed = sorted(
        (files.file_path(i).replace("\\", "/"), files.file_size(i))
        for i in range(files.num_files())
        if not files.file_flags(i) & lt.file_storage.flag_pad_file)
    assert listed == sorted((f"tiny/{f.path}", f.size) for f in manifest.files)
    # Other bytes, another manifest: another torrent file.
    (root / "config.json").write_text('{"a": 2}\n')
    changed = build_manifest(root, "tiny")
    assert make_torrent(root, changed, 16384).path != first.path


def test_a_file_that_does_not_match_the_manifest_is_refused(tmp_path: Path) -> None:
    root = model(tmp_path)
    manifest = build_manifest(root, "tiny")
    (root / "model.safetensors").write_bytes(b"short")
    with pytest.raises(TorrentError, match="has 5 bytes, the manifest 179200"):
        make_torrent(root, manifest)
    with pytest.raises(TorrentError, match="not a power of two"):
        make_torrent(root, manifest, 20000)


def test_the_cli_makes_it_and_says_so(tmp_path: Path) -> None:
    root = model(tmp_path)
    result = runner.invoke(app, ["model", "torrent", str(root), "--piece-size-kib", "16",
                                 "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["made"] and out["piece_size"] == 16384 and Path(out["torrent"]).is_file()
    again = runner.invoke(app, ["model", "torrent", str(root), "--json"])
    assert again.exit_code == 0 and not json.loads(again.output)["made"]
    missing = runner.invoke(app, ["model", "torrent", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2


def test_the_digest_ignores_file_order_and_case_of_the_hex() -> None:
    files = [{"path": "b", "size": 1, "sha256": "A" * 64}, {"path": "a", "size": 2,
                                                            "sha256": "b" * 64}]
    assert manifest_digest("m", files) == manifest_digest("m", list(reversed(files))) == \
        manifest_digest("m", [dict(f, sha256=str(f["sha256"]).lower()) for f in files])
    assert manifest_digest("m", files) != manifest_digest("n", files)


def test_the_peer_network_address_is_found_or_refused() -> None:
    assert address_in_network("198.51.100.0/26", IP_OUTPUT) == ("198.51.100.7", "eth1")
    assert address_in_network("192.0.2.0/24", IP_OUTPUT) == ("192.0.2.10", "eth0")
    with pytest.raises(P2PError, match=r"no address in the peer network 203\.0\.113\.0/24 .*"
                                       r"eth1 198\.51\.100\.7/26"):
        address_in_network("203.0.113.0/24", IP_OUTPUT)
    with pytest.raises(P2PError, match="not a CIDR network"):
        address_in_network("eth1", IP_OUTPUT)


def test_a_port_in_use_is_named() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        assert port_in_use("127.0.0.1", port) == f"TCP port {port} on 127.0.0.1 is already in use"
    assert port_in_use("127.0.0.1", port) is None


def test_each_piece_is_first_taken_by_exactly_one_node() -> None:
    nodes = ["10.0.0.10", "10.0.0.9", "10.0.0.11"]
    slices = [slice_priorities(100, me, [f"{n}:6881" for n in nodes if n != me]) for me in nodes]
    for piece in range(100):
        assert sorted(s[piece] for s in slices) == [1, 1, 7]
    # Sorted as addresses, not strings: 10.0.0.9 takes the first slice.
    assert slices[1][0] == 7 and slices[0][0] == 1
    assert slice_priorities(10, "10.0.0.9", []) == [7] * 10


def test_the_web_seed_is_the_directory_above_the_model() -> None:
    assert web_seed_url("http://m:8080/models/tiny/", "tiny") == "http://m:8080/models/"
    assert web_seed_url("http://m:8080/models/other", "tiny") is None
