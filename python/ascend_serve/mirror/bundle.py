"""A bundle directory: the artifacts of a plan, fetched from the site's sources and verified.

Layout (paths relative to the bundle): ``vendor/<installer>.run``, ``wheels/<set>/<target>/
<file>``, ``models/<name>/<path>``, ``os/<family>/<file>``, ``images/<registry>/<repository>/
<digest>/`` (an image as skopeo's ``dir:`` transport keeps it, :mod:`.images`), and
``bundle.json``, the manifest: every file with its kind, name, version, size and sha256.

Fetching never leaves a partial bundle that looks complete: every file is written under a
staging directory next to the bundle and hashed while it is copied; only when every artifact
arrived with its pinned sha256 are the files moved into the bundle and ``bundle.json`` written
(to a temporary name, then renamed). A mismatch names the artifact, the expected and the actual
sha256, and the bundle is left as it was.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html.parser
import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ascend_serve.mirror import images
from ascend_serve.mirror.digest import CHUNK, hash_path
from ascend_serve.mirror.plan import AT_FETCH, Artifact, Plan

MANIFEST = "bundle.json"
MODEL_MANIFEST = "ascend-serve-manifest.json"

Progress = Callable[[str], None]
"""Called with a label before each artifact is fetched or hashed (for progress bars)."""


class BundleError(RuntimeError):
    """Fetching or reading a bundle failed; the message names the artifact and the cause."""


class ChecksumMismatchError(BundleError):
    """An artifact's content is not what its pin says."""


class BundleFile(BaseModel):
    """One file of a bundle, as ``bundle.json`` records it."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    name: str
    version: str = ""
    path: str
    size: int = Field(ge=0)
    sha256: str
    pin: str = Field(default="", description="Where the expected sha256 came from.")
    source: str = ""


class BundleManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal[1] = 1
    created: str
    inventory: str
    files: list[BundleFile]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), indent=2) + "\n"


def read_manifest(bundle: Path) -> BundleManifest:
    path = bundle / MANIFEST
    try:
        return BundleManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValidationError as exc:
        raise BundleError(f"{path} is not a bundle manifest: {exc}") from exc


# ---- sources --------------------------------------------------------------------------------


def is_url(source: str) -> bool:
    return urllib.parse.urlsplit(source).scheme in ("http", "https", "file")


def _local(source: str) -> Path | None:
    """A directory source (a path, or a ``file:`` URL), else None."""
    parts = urllib.parse.urlsplit(source)
    if parts.scheme == "file":
        return Path(urllib.parse.unquote(parts.path))
    if parts.scheme in ("http", "https"):
        return None
    return Path(source)


def _join(base: str, *parts: str) -> str:
    """``base/part/...``: URL-quoted for an http(s) base, as they are for a directory."""
    if urllib.parse.urlsplit(base).scheme in ("http", "https"):
        return base.rstrip("/") + "/" + "/".join(urllib.parse.quote(p) for p in parts)
    return base.rstrip("/") + "/" + "/".join(parts)


class _Links(html.parser.HTMLParser):
    """The ``href`` of every anchor of a simple-index project page (or a directory listing).

    The simple repository API (https://packaging.python.org/en/latest/specifications/
    simple-repository-api/, PEP 503): ``<base>/<normalized name>/`` is an HTML page with one
    anchor per file, the file name as its text, a ``#sha256=`` fragment optional. The hash is
    checked on the downloaded bytes either way."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links += [v for k, v in attrs if k == "href" and v]


@dataclass
class Fetcher:
    """Where artifacts come from: the sources in order, one HTTP client for all URLs."""

    sources: list[str]
    client: httpx.Client = field(default_factory=lambda: httpx.Client(
        follow_redirects=True, timeout=httpx.Timeout(60.0, connect=15.0)))

    def copy(self, origin: str, dest: Path) -> tuple[int, str]:
        """Copy ``origin`` (a path or URL) to ``dest``, hashing on the way."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        digest, size = hashlib.sha256(), 0
        with dest.open("wb") as out:
            for chunk in self._read(origin):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        return size, digest.hexdigest()

    def _read(self, origin: str) -> Iterator[bytes]:
        local = _local(origin)
        if local is not None:
            with local.open("rb") as stream:
                while chunk := stream.read(CHUNK):
                    yield chunk
            return
        with self.client.stream("GET", origin) as response:
            if response.status_code != 200:
                raise FileNotFoundError(f"HTTP {response.status_code} from {origin}")
            yield from response.iter_bytes(CHUNK)

    def exists(self, origin: str) -> bool:
        local = _local(origin)
        if local is not None:
            return local.is_file()
        try:
            response = self.client.head(origin)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def listing(self, url: str) -> list[str]:
        """Absolute URLs (or paths) of the files a directory or index page lists."""
        local = _local(url)
        if local is not None:
            return sorted(str(p) for p in local.iterdir() if p.is_file()) if local.is_dir() \
                else []
        try:
            response = self.client.get(url.rstrip("/") + "/")
        except httpx.HTTPError:
            return []
        if response.status_code != 200:
            return []
        parser = _Links()
        parser.feed(response.text)
        return [urllib.parse.urljoin(str(response.url), link) for link in parser.links]


# ---- wheels: which file of a locked distribution fits the lock's target ------------------------


def target_tags(platform: str) -> list[Tag]:
    """The wheel tags a target accepts, best first: ``x86_64-manylinux_2_31 py3.11``.

    manylinux_X_Y wheels run on glibc X.Y and newer, manylinux2014 is manylinux_2_17
    (https://packaging.python.org/en/latest/specifications/platform-compatibility-tags/); the
    order is packaging's (``cpython_tags``, then ``compatible_tags``), as pip ranks them."""
    plat, _, py = platform.partition(" ")
    arch, _, manylinux = plat.partition("-manylinux_")
    major, _, minor = manylinux.partition("_")
    platforms = [f"manylinux_{major}_{m}_{arch}" for m in range(int(minor or 0), -1, -1)]
    if int(major or 0) == 2:
        legacy = (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))
        platforms += [f"{tag}_{arch}" for tag, level in legacy if int(minor or 0) >= level]
    platforms += [f"linux_{arch}"]
    version = tuple(int(x) for x in py.removeprefix("py").split("."))
    return [*cpython_tags(version, platforms=platforms),
            *compatible_tags(version, platforms=platforms)]


def _rank(filename: str, artifact: Artifact, tags: list[Tag]) -> int | None:
    """Where ``filename`` ranks for the artifact (lower is better), None if it does not fit."""
    name = urllib.parse.unquote(filename.rsplit("/", 1)[-1].split("#", 1)[0])
    try:
        if name.endswith(".whl"):
            dist, version, _, file_tags = parse_wheel_filename(name)
            order = [tags.index(t) for t in file_tags if t in tags]
            if not order:
                return None
            rank = min(order)
        elif name.endswith((".tar.gz", ".zip")):
            dist, version = parse_sdist_filename(name)
            rank = len(tags)
        else:
            return None
        wanted = Version(artifact.version)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    if canonicalize_name(dist) != canonicalize_name(artifact.name) or version != wanted:
        return None
    return rank


# ---- fetching -------------------------------------------------------------------------------


@dataclass
class FetchResult:
    files: list[BundleFile]
    reused: int
    copied: int


def _expected(artifact: Artifact) -> str:
    return artifact.sha256 or ", ".join(artifact.accepted[:3]) + (
        f" (one of {len(artifact.accepted)} the lock accepts)" if len(artifact.accepted) > 3
        else "")


def _candidates(artifact: Artifact, fetcher: Fetcher, extra: dict[str, list[str]]) -> list[str]:
    """Where an artifact may be: every source in order, then the inventory's own."""
    file_parts = artifact.path.split("/")[1:]
    out: list[str] = []
    for source in [*fetcher.sources, *extra.get(artifact.kind, [])]:
        if artifact.kind == "vendor":
            out += [_join(source, artifact.name), _join(source, "vendor", artifact.name)]
        elif artifact.kind == "model":
            name, rel = file_parts[0], file_parts[1:]
            if artifact.name == MODEL_MANIFEST and artifact.pin and not out:
                out.append(artifact.pin)  # the pinned manifest on the controller itself
            if source in extra.get("model", []):
                out.append(_join(source, *rel))
            else:
                out += [_join(source, "models", name, *rel), _join(source, name, *rel)]
    return out


def _wheel_candidates(artifact: Artifact, fetcher: Fetcher, cache: dict[str, list[str]]
                      ) -> list[str]:
    tags = target_tags(artifact.platform)
    found: list[tuple[int, str]] = []
    for source in fetcher.sources:
        local = _local(source)
        places = ([source, _join(source, *artifact.path.split("/"))] if local is not None
                  else [_join(source, canonicalize_name(artifact.name))])
        for place in places:
            if place not in cache:
                cache[place] = fetcher.listing(place)
            for entry in cache[place]:
                rank = _rank(entry, artifact, tags)
                if rank is not None:
                    found.append((rank, entry.split("#", 1)[0]))
    return [entry for _, entry in sorted(found, key=lambda x: x[0])]


def _fetch_one(artifact: Artifact, fetcher: Fetcher, staging: Path, bundle: Path,
               extra: dict[str, list[str]], listing_cache: dict[str, list[str]]
               ) -> tuple[BundleFile, bool]:
    """Fetch (or reuse from the bundle) one pinned artifact; True when it was copied."""
    if artifact.kind == "wheel":
        candidates = _wheel_candidates(artifact, fetcher, listing_cache)
    else:
        candidates = _candidates(artifact, fetcher, extra)
    mismatches: list[str] = []
    for origin in candidates:
        filename = urllib.parse.unquote(origin.rstrip("/").rsplit("/", 1)[-1])
        rel = f"{artifact.path}/{filename}" if artifact.kind == "wheel" else artifact.path
        present = bundle / rel
        if present.is_file():
            size, sha = hash_path(present)
            if artifact.accepts(sha):
                return BundleFile(kind=artifact.kind, name=artifact.name,
                                  version=artifact.version, path=rel, size=size, sha256=sha,
                                  pin=artifact.pin, source=origin), False
        if not fetcher.exists(origin):
            continue
        dest = staging / rel
        part = dest.with_name(dest.name + ".part")
        try:
            size, sha = fetcher.copy(origin, part)
        except (OSError, httpx.HTTPError) as exc:
            raise BundleError(f"{artifact.kind} {artifact.name}: cannot read {origin}: "
                              f"{exc}") from exc
        if not artifact.accepts(sha):
            part.unlink()
            mismatches.append(f"{origin}: expected sha256 {_expected(artifact)}, got {sha}")
            if artifact.kind != "wheel":
                break
            continue
        part.replace(dest)
        return BundleFile(kind=artifact.kind, name=artifact.name, version=artifact.version,
                          path=rel, size=size, sha256=sha, pin=artifact.pin, source=origin), True
    if mismatches:
        raise ChecksumMismatchError(f"checksum mismatch: {artifact.kind} {artifact.name}"
                               + (f" {artifact.version}" if artifact.kind == "wheel" else "")
                               + f" (pinned by {artifact.pin}): " + "; ".join(mismatches))
    raise BundleError(f"{artifact.kind} {artifact.name}"
                      + (f"=={artifact.version}" if artifact.kind == "wheel" else "")
                      + " is in none of the sources: " + (", ".join(candidates[:4])
                                                          or ", ".join(fetcher.sources)))


def _image_entries(artifact: Artifact, directory: Path, rel: str, origin: str
                   ) -> list[BundleFile]:
    out = []
    for path in sorted(directory.iterdir()):
        size, sha = hash_path(path)
        out.append(BundleFile(kind="image", name=artifact.name, version=artifact.version,
                              path=f"{rel}/{path.name}", size=size, sha256=sha,
                              pin=artifact.pin, source=origin))
    return out


def _fetch_image(artifact: Artifact, sources: list[str], staging: Path, bundle: Path,
                 insecure: Iterable[str]) -> tuple[list[BundleFile], bool]:
    """An image by digest (or reused from the bundle when its copy there is intact)."""
    rel = artifact.path
    present = bundle / rel
    if present.is_dir() and not images.check_copy(present, artifact.sha256 or ""):
        return _image_entries(artifact, present, rel, "bundle"), False
    try:
        origin = images.copy(artifact, sources, staging / rel, insecure=insecure)
    except images.ImageError as exc:
        if str(exc).startswith("checksum mismatch"):
            raise ChecksumMismatchError(str(exc)) from exc
        raise BundleError(str(exc)) from exc
    return _image_entries(artifact, staging / rel, rel, origin), True


def _fetch_os(artifacts: list[Artifact], staging: Path) -> list[BundleFile]:
    """OS packages through the controller's package manager, when this machine has it: the
    package manager resolves the versions and checks its repositories' signatures; the sha256
    recorded is that of the file it delivered. Both tools download into the current directory:
    ``apt-get download`` (apt-get(8), "download: will download the given binary package into
    the current directory") and ``dnf download`` (dnf-plugins-core's download plugin,
    dnf4-download(8): the download directory defaults to the current directory). Only the
    controller's own repositories are used; this path is not exercised by the tests."""
    files: list[BundleFile] = []
    by_family: dict[str, list[Artifact]] = {}
    for item in artifacts:
        by_family.setdefault(item.component, []).append(item)
    for family, items in by_family.items():
        names = [a.name for a in items if "$(" not in a.name]
        tool = ["apt-get", "download"] if family == "Debian" else ["dnf", "download"]
        if shutil.which(tool[0]) is None:
            raise BundleError(f"os packages of the {family} family: {tool[0]} is not on this "
                              "machine; fetch them on a machine of that family")
        out = staging / "os" / family
        out.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([*tool, *names], cwd=out, capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise BundleError(f"{' '.join(tool)} failed: {result.stderr.strip()[-800:]}")
        for path in sorted(out.iterdir()):
            size, sha = hash_path(path)
            files.append(BundleFile(kind="os", name=path.name, path=f"os/{family}/{path.name}",
                                    size=size, sha256=sha, pin=AT_FETCH,
                                    source=" ".join(tool)))
    return files


@contextmanager
def _staging(bundle: Path) -> Iterator[Path]:
    bundle.parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f".{bundle.name}.fetch-", dir=bundle.parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fetch(plan: Plan, artifacts: list[Artifact], sources: list[str], bundle: Path, *,
          extra_sources: dict[str, list[str]] | None = None,
          insecure_registries: Iterable[str] = (),
          progress: Progress | None = None) -> FetchResult:
    """Fetch ``artifacts`` (of ``plan``) into ``bundle``; all or nothing. Images come from
    the ``docker://`` sources, then their own registry (``insecure_registries``: plain HTTP or
    unchecked TLS)."""
    unpinned = [a for a in artifacts if a.kind != "os" and not a.pinned]
    if unpinned:
        raise BundleError("nothing fetched: not pinned: " + "; ".join(
            f"{a.kind} {a.name} ({a.note or 'no sha256'})" for a in unpinned))
    fetcher = Fetcher(sources)
    extra = extra_sources or {}
    files: list[BundleFile] = []
    copied = reused = 0
    cache: dict[str, list[str]] = {}
    with fetcher.client, _staging(bundle) as staging:
        for artifact in artifacts:
            if artifact.kind == "os":
                continue
            if progress is not None:
                progress(f"{artifact.kind} {artifact.name}")
            if artifact.kind == "image":
                entries, was_copied = _fetch_image(artifact, sources, staging, bundle,
                                                   insecure_registries)
                files += entries
                copied += was_copied
                reused += not was_copied
                continue
            entry, was_copied = _fetch_one(artifact, fetcher, staging, bundle, extra, cache)
            files.append(entry)
            copied += was_copied
            reused += not was_copied
        os_items = [a for a in artifacts if a.kind == "os"]
        if os_items:
            if progress is not None:
                progress(f"os packages ({len(os_items)})")
            os_files = _fetch_os(os_items, staging)
            files += os_files
            copied += len(os_files)
        _commit(staging, bundle, files, plan.inventory)
    return FetchResult(files=files, reused=reused, copied=copied)


def _commit(staging: Path, bundle: Path, files: list[BundleFile], inventory: str) -> None:
    """Move the staged files into the bundle, then write its manifest (last, atomically);
    entries of an earlier fetch that are still intact and not replaced are kept."""
    bundle.mkdir(parents=True, exist_ok=True)
    for entry in files:
        staged = staging / entry.path
        if staged.is_file():
            target = bundle / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, target)
    kept: list[BundleFile] = []
    if (bundle / MANIFEST).is_file():
        new = {f.path for f in files}
        try:
            kept = [f for f in read_manifest(bundle).files
                    if f.path not in new and (bundle / f.path).is_file()]
        except BundleError:
            kept = []
    manifest = BundleManifest(created=dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), inventory=inventory,
        files=sorted([*kept, *files], key=lambda f: f.path))
    write_atomic(bundle / MANIFEST, manifest.to_json())


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False, encoding="utf-8") as out:
        out.write(text)
        temp = Path(out.name)
    temp.chmod(0o644)
    os.replace(temp, path)


# ---- verifying ------------------------------------------------------------------------------


@dataclass
class Verdict:
    checked: int = 0
    problems: list[str] = field(default_factory=list)


def verify(bundle: Path, plan: Plan | None = None, *, kinds: Iterable[str] | None = None,
           progress: Progress | None = None) -> Verdict:
    """Re-hash every file of the bundle's manifest; with ``plan``, also check that every pinned
    artifact of the inventory is in the bundle with its pin."""
    manifest = read_manifest(bundle)
    verdict = Verdict()
    hashed: dict[str, str] = {}
    for entry in manifest.files:
        if progress is not None:
            progress(entry.path)
        path = bundle / entry.path
        verdict.checked += 1
        if not path.is_file():
            verdict.problems.append(f"{entry.path}: missing (bundle.json lists it)")
            continue
        size, sha = hash_path(path)
        hashed[entry.path] = sha
        if sha != entry.sha256 or size != entry.size:
            verdict.problems.append(f"{entry.path}: sha256 {sha} ({size} bytes), bundle.json "
                                    f"says {entry.sha256} ({entry.size} bytes)")
        named = images.HEX_RE.match(path.name) if entry.kind == "image" else None
        if named is not None and sha != named["hex"]:  # content-addressed: its name is its sha256
            verdict.problems.append(f"{entry.path}: sha256 {sha}, its name says {named['hex']}")
    if plan is None:
        return verdict
    wanted = set(kinds) if kinds is not None else None
    by_path: dict[str, list[BundleFile]] = {}
    for entry in manifest.files:
        key = entry.path.rsplit("/", 1)[0] if entry.kind in ("wheel", "image") else entry.path
        by_path.setdefault(key, []).append(entry)
    for artifact in plan.artifacts:
        if artifact.kind == "os" or (wanted is not None and artifact.kind not in wanted):
            continue
        if not artifact.pinned:
            verdict.problems.append(f"{artifact.kind} {artifact.name}: the inventory pins no "
                                    f"sha256 ({artifact.note})")
            continue
        entries = [e for e in by_path.get(artifact.path, [])
                   if artifact.kind != "wheel" or canonicalize_name(e.name) == artifact.name]
        if artifact.kind == "image":  # the pin is the manifest's; the blobs are named by theirs
            entries = [e for e in entries if e.path.endswith("/" + images.MANIFEST_FILE)]
        if not entries:
            verdict.problems.append(f"{artifact.kind} {artifact.name}: not in the bundle")
            continue
        for entry in entries:
            actual = hashed.get(entry.path)
            if actual is not None and not artifact.accepts(actual):
                verdict.problems.append(
                    f"{entry.path}: sha256 {actual}, the inventory pins {_expected(artifact)} "
                    f"({artifact.pin})")
    return verdict


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2)
