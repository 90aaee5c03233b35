"""The sha256 of a file, read in chunks: what every artifact, blob and manifest is checked by."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20


def hash_path(path: Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex digest) of the file at ``path``."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
