"""Model manifests: what a model directory must hold, with sizes and SHA-256 sums.

A manifest is ``ascend-serve-manifest.json`` inside the model directory::

    {"format": 1, "name": "tiny-deepseek_v3",
     "files": [{"path": "config.json", "size": 1234, "sha256": "<64 hex digits>"}, ...]}

Paths are relative POSIX paths, sorted, unique. The manifest itself and hidden entries (any
path component starting with ``.``, such as ``.cache/`` or ``.gitattributes``) are never listed.
Symbolic links to files are read through (a Hugging Face cache snapshot is all links);
links to directories are not followed.

The ``model_store`` role and ``ascend-serve serve`` use :func:`load` and :func:`verify` to
tell a complete, intact model directory from a partial or corrupted one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

MANIFEST_NAME = "ascend-serve-manifest.json"
MANIFEST_FORMAT: Final = 1
CHUNK_SIZE = 1 << 20  # hash in 1 MiB reads

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

ProgressCallback = Callable[[int], None]
"""Called with the number of bytes just read, for progress bars."""


class ManifestError(Exception):
    """A manifest that cannot be read, parsed or built."""


def _check_relative_path(path: str) -> str:
    if not path or "\\" in path or "\x00" in path:
        raise ValueError(f"not a relative POSIX path: {path!r}")
    pure = PurePosixPath(path)
    if pure.is_absolute() or str(pure) != path:
        raise ValueError(f"not a normalized relative POSIX path: {path!r}")
    for part in pure.parts:
        if part in (".", ".."):
            raise ValueError(f"path leaves the model directory: {path!r}")
        if part.startswith("."):
            raise ValueError(f"hidden entries are never listed: {path!r}")
    if path == MANIFEST_NAME:
        raise ValueError(f"the manifest does not list itself: {path!r}")
    return path


class ManifestFile(BaseModel):
    """One file of the model directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Relative POSIX path inside the model directory.")
    size: int = Field(ge=0, description="Size in bytes.")
    sha256: str = Field(description="SHA-256 of the content, lower-case hex.")

    @field_validator("path")
    @classmethod
    def _path_is_relative(cls, value: str) -> str:
        return _check_relative_path(value)

    @field_validator("sha256")
    @classmethod
    def _sha256_is_hex(cls, value: str) -> str:
        if not _SHA256_RE.match(value):
            raise ValueError("sha256 must be 64 lower-case hex digits")
        return value


class Manifest(BaseModel):
    """The whole manifest of one model directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[1]
    name: str = Field(min_length=1, description="Model name (served model name by default).")
    files: list[ManifestFile]

    @model_validator(mode="after")
    def _files_sorted_unique(self) -> Manifest:
        paths = [f.path for f in self.files]
        for before, after in itertools.pairwise(paths):
            if before == after:
                raise ValueError(f"file listed twice: {before!r}")
            if before > after:
                raise ValueError(f"files are not sorted: {before!r} before {after!r}")
        return self

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), indent=2, ensure_ascii=False) + "\n"


class Problem(BaseModel):
    """One difference between a model directory and its manifest."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: Literal["missing", "size", "sha256"]
    expected: str
    found: str

    def __str__(self) -> str:
        what = {"missing": "missing", "size": "size mismatch", "sha256": "sha256 mismatch"}
        return f"{self.path}: {what[self.kind]} (expected {self.expected}, found {self.found})"


def manifest_path(model_dir: Path) -> Path:
    """Where the manifest of ``model_dir`` lies."""
    return Path(model_dir) / MANIFEST_NAME


def hash_file(path: Path, progress: ProgressCallback | None = None) -> tuple[int, str]:
    """Size and SHA-256 (hex) of a file, read in :data:`CHUNK_SIZE` chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(CHUNK_SIZE):
            digest.update(chunk)
            size += len(chunk)
            if progress is not None:
                progress(len(chunk))
    return size, digest.hexdigest()


def list_files(model_dir: Path) -> list[str]:
    """The relative POSIX paths a manifest of ``model_dir`` lists, sorted."""
    root = Path(model_dir)
    if not root.is_dir():
        raise ManifestError(f"{root} is not a directory")
    found: list[str] = []
    for current, dirs, files in os.walk(root, onerror=_raise_walk_error):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel_dir = PurePosixPath(Path(current).relative_to(root).as_posix())
        for name in files:
            if name.startswith("."):
                continue
            rel = (rel_dir / name).as_posix()
            if rel == MANIFEST_NAME:
                continue
            full = Path(current) / name
            if not full.is_file():  # dangling link, socket, fifo
                raise ManifestError(f"{full} is not a regular file (or a link to one)")
            found.append(rel)
    return sorted(found)


def _raise_walk_error(error: OSError) -> None:
    raise ManifestError(f"cannot read {error.filename}: {error.strerror}") from error


def build_manifest(
    model_dir: Path, name: str, progress: ProgressCallback | None = None
) -> Manifest:
    """Hash every (non-hidden) file of ``model_dir`` into a manifest named ``name``."""
    root = Path(model_dir)
    entries: list[ManifestFile] = []
    for rel in list_files(root):
        try:
            size, sha256 = hash_file(root / rel, progress)
        except OSError as exc:
            raise ManifestError(f"cannot read {root / rel}: {exc.strerror}") from exc
        entries.append(ManifestFile(path=rel, size=size, sha256=sha256))
    try:
        return Manifest(format=MANIFEST_FORMAT, name=name, files=entries)
    except ValidationError as exc:
        raise ManifestError(f"cannot build a manifest of {root}: {exc}") from exc


def total_bytes(model_dir: Path) -> int:
    """Bytes :func:`build_manifest` will read (for a progress bar's total)."""
    root = Path(model_dir)
    return sum((root / rel).stat().st_size for rel in list_files(root))


def write(model_dir: Path, manifest: Manifest) -> Path:
    """Write ``manifest`` into ``model_dir`` atomically; return its path."""
    target = manifest_path(model_dir)
    scratch = target.with_name(f".{MANIFEST_NAME}.tmp")  # hidden: never listed itself
    try:
        scratch.write_text(manifest.to_json(), encoding="utf-8")
        os.replace(scratch, target)
    except OSError as exc:
        scratch.unlink(missing_ok=True)
        raise ManifestError(f"cannot write {target}: {exc.strerror}") from exc
    return target


def parse(text: str, source: str = "manifest") -> Manifest:
    """Parse manifest JSON text; ``source`` names it in errors."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"{source} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{source} must hold a JSON object, not {type(data).__name__}")
    if "format" not in data:
        raise ManifestError(f"{source} is not a manifest: it has no \"format\" key")
    if data["format"] != MANIFEST_FORMAT:
        raise ManifestError(
            f"{source} has format {data['format']!r}; this ascend-serve reads format "
            f"{MANIFEST_FORMAT} only"
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ManifestError(f"{source} is not a valid manifest: {details}") from exc


def load(model_dir_or_file: Path) -> Manifest:
    """Read the manifest of a model directory (or a manifest file given directly)."""
    given = Path(model_dir_or_file)
    path = manifest_path(given) if given.is_dir() else given
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(
            f"no manifest at {path}; write one with `ascend-serve model manifest {given}`"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ManifestError(f"cannot read {path}: {reason}") from exc
    return parse(text, str(path))


def _describe(path: Path) -> str:
    if path.is_dir():
        return "a directory"
    if path.is_symlink():
        return "a dangling link"
    return "no file" if not path.exists() else "not a regular file"


def verify(
    model_dir: Path,
    manifest: Manifest,
    progress: ProgressCallback | None = None,
    hashes: bool = True,
) -> list[Problem]:
    """Check every listed file's presence, size and SHA-256; return the differences.

    A file whose size differs is not hashed. Files present but not listed are not problems.
    ``hashes=False`` checks presence and sizes only (seconds instead of an hour for 700 GB).
    """
    root = Path(model_dir)
    problems: list[Problem] = []
    for entry in manifest.files:
        path = root / entry.path
        if not path.is_file():
            problems.append(Problem(path=entry.path, kind="missing",
                                    expected=f"a file of {entry.size} bytes",
                                    found=_describe(path)))
            if progress is not None:
                progress(entry.size)
            continue
        try:
            size = path.stat().st_size
            if size != entry.size:
                problems.append(Problem(path=entry.path, kind="size",
                                        expected=f"{entry.size} bytes", found=f"{size} bytes"))
                if progress is not None:
                    progress(entry.size)
                continue
            if not hashes:
                if progress is not None:
                    progress(entry.size)
                continue
            _, sha256 = hash_file(path, progress)
        except OSError as exc:
            problems.append(Problem(path=entry.path, kind="missing",
                                    expected=f"a file of {entry.size} bytes",
                                    found=f"unreadable ({exc.strerror})"))
            continue
        if sha256 != entry.sha256:
            problems.append(Problem(path=entry.path, kind="sha256",
                                    expected=entry.sha256, found=sha256))
    return problems
