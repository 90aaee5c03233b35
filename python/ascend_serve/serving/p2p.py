"""The torrent of a model (its piece map), made once per manifest digest on the mirror side.

Nodes staging with ``model_store_p2p_enabled`` fetch ``ascend-serve-<digest>.torrent`` from the
mirror's model directory, next to the manifest (``model_stage``, ``plugins/module_utils/
model_p2p.py``). The torrent lists exactly the manifest's files, in a directory named after the
manifest's ``name`` (a web seed URL ends in that name), and its file name carries the digest of
the manifest, so a node never uses a torrent made for other bytes. Hashing the pieces reads the
whole model once; an existing torrent for the same digest is kept.

libtorrent (PyPI ``libtorrent``) makes the torrent; it is imported only here, when a torrent is
made.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.ascend_serve.fleet.plugins.module_utils.model_p2p import (
    manifest_digest,
    torrent_file_name,
)
from ascend_serve.serving.manifest import Manifest


class TorrentError(Exception):
    """The torrent cannot be made (missing engine, a file that does not match the manifest)."""


@dataclass(frozen=True)
class TorrentInfo:
    path: Path
    digest: str
    pieces: int
    piece_size: int
    made: bool


def digest_of(manifest: Manifest) -> str:
    """The manifest's digest (the same function the node uses)."""
    return manifest_digest(manifest.name, [f.model_dump() for f in manifest.files])


def torrent_path(model_dir: Path, manifest: Manifest) -> Path:
    return Path(model_dir) / torrent_file_name(digest_of(manifest))


def _check_sizes(model_dir: Path, manifest: Manifest) -> None:
    for entry in manifest.files:
        path = model_dir / entry.path
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise TorrentError(f"{path}: {exc.strerror}") from exc
        if size != entry.size:
            raise TorrentError(f"{path} has {size} bytes, the manifest {entry.size}: run "
                               "`ascend-serve model verify` (or `manifest`) first")


def make_torrent(model_dir: Path, manifest: Manifest, piece_size: int = 0,
                 force: bool = False) -> TorrentInfo:
    """Write the torrent of ``manifest`` into ``model_dir`` (kept when it exists, unless force).

    piece_size 0 lets libtorrent choose (a power of two, at least 16 KiB)."""
    model_dir = Path(model_dir)
    digest = digest_of(manifest)
    target = torrent_path(model_dir, manifest)
    try:
        import libtorrent as lt
    except ImportError as exc:
        raise TorrentError(f"making a torrent needs libtorrent (pip install libtorrent): {exc}"
                           ) from exc
    if target.is_file() and not force:
        info = lt.torrent_info(str(target))
        return TorrentInfo(target, digest, info.num_pieces(), info.piece_length(), made=False)
    if piece_size and (piece_size < 16384 or piece_size & (piece_size - 1)):
        raise TorrentError(f"piece size {piece_size} is not a power of two of at least 16 KiB")
    _check_sizes(model_dir, manifest)
    entries = [lt.create_file_entry(f"{manifest.name}/{entry.path}", entry.size)
               for entry in manifest.files]
    creator = lt.create_torrent(entries, piece_size)
    creator.set_creator("ascend-serve")
    creator.set_comment(f"ascend-serve manifest {manifest.name} sha256 {digest}")
    # The files lie in model_dir, whatever its name: hash them through a link named as the torrent.
    with tempfile.TemporaryDirectory(prefix=".torrent-", dir=model_dir.parent) as scratch:
        (Path(scratch) / manifest.name).symlink_to(model_dir.resolve())
        try:
            lt.set_piece_hashes(creator, scratch)
        except RuntimeError as exc:
            raise TorrentError(f"cannot hash {model_dir}: {exc}") from exc
    data = lt.bencode(creator.generate())
    scratch_file = target.with_name(f".{target.name}.tmp")
    scratch_file.write_bytes(data)
    scratch_file.replace(target)
    return TorrentInfo(target, digest, creator.num_pieces(), creator.piece_length(), made=True)
