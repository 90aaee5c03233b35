"""What a package index lists for a project: every file of every version, with its sha256.

One request per project (the simple API, PEP 503/691: ``/simple/NAME/``), JSON where the index
offers it (``application/vnd.pypi.simple.v1+json``), its HTML page where not; both carry each
file's name and sha256 without downloading the file. A local wheel directory (a wheelhouse, a
``--find-links`` location) is read as an index that holds only the files it has: its files are
hashed on this machine. Nothing here resolves; ``lock.py`` uses this to check that every file a
lock pins is still on the index with the sha256 the lock records.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    canonicalize_version,
    parse_sdist_filename,
    parse_wheel_filename,
)

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
# PEP 691: JSON preferred, the PEP 503 HTML page accepted from an index without the JSON form.
_ACCEPT = f"{SIMPLE_JSON}, text/html;q=0.1"
_ANCHOR = re.compile(r'<a\s[^>]*href="([^"#]+)#sha256=([0-9a-fA-F]{64})"[^>]*>([^<]+)</a>')
_ATTEMPTS = 3

# version (canonical) -> {sha256: filename}
Files = dict[str, dict[str, str]]


class IndexUnreachableError(RuntimeError):
    """The index could not be read (network, HTTP error, a missing directory): this says nothing
    about the locks, only that they could not be checked against it."""


@dataclass(frozen=True)
class Listing:
    """What one index lists for one project. ``complete``: every file of the version is listed
    (an index); a directory lists only the files it happens to hold."""

    location: str
    files: Files
    complete: bool


def _version_of(filename: str, project: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    if name != canonicalize_name(project):
        return None
    return canonicalize_version(version, strip_trailing_zero=False)


def _group(project: str, entries: Iterable[tuple[str, str]]) -> Files:
    files: Files = {}
    for filename, sha256 in entries:
        version = _version_of(filename, project)
        if version is not None:
            files.setdefault(version, {})[sha256.lower()] = filename
    return files


def parse_simple(project: str, content_type: str, body: str) -> Files:
    """The files of a project page, JSON (PEP 691) or HTML (PEP 503); files without a sha256
    are left out (they cannot match a locked hash)."""
    if content_type.split(";")[0].strip() == SIMPLE_JSON:
        data = json.loads(body)
        return _group(project, ((f["filename"], f["hashes"]["sha256"])
                                for f in data.get("files", []) if "sha256" in f.get("hashes", {})))
    return _group(project, ((text.strip(), sha) for _, sha, text in _ANCHOR.findall(body)))


def _read_directory(directory: Path, project: str, wanted: set[str]) -> Files:
    """The files of ``project`` in a wheel directory, hashed here (only the wanted versions)."""
    if not directory.is_dir():
        raise IndexUnreachableError(f"{directory} is not a directory")
    files: Files = {}
    for path in sorted(directory.iterdir()):
        version = _version_of(path.name, project)
        if version is None or version not in wanted or not path.is_file():
            continue
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        files.setdefault(version, {})[digest.hexdigest()] = path.name
    return files


class IndexReader:
    """Reads project listings from indexes and directories, a few requests at a time, each
    project once per location."""

    def __init__(self, *, concurrency: int = 8, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.concurrency = concurrency
        self._client = httpx.Client(timeout=timeout, follow_redirects=True, transport=transport,
                                    headers={"Accept": _ACCEPT})
        self.requests = 0

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> IndexReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, url: str) -> httpx.Response:
        error: Exception | None = None
        for _ in range(_ATTEMPTS):
            try:
                self.requests += 1
                response = self._client.get(url)
            except httpx.TransportError as exc:
                error = exc
                continue
            if response.status_code >= 500:
                error = httpx.HTTPStatusError(f"HTTP {response.status_code}",
                                              request=response.request, response=response)
                continue
            return response
        raise IndexUnreachableError(f"cannot read {url}: {error}")

    def listing(self, location: str, project: str, wanted: set[str]) -> Listing:
        """``project``'s files at ``location`` (an index URL or a wheel directory); a project the
        index does not know (404) lists no files; ``wanted``: versions a directory hashes."""
        if not location.startswith(("http://", "https://")):
            return Listing(location, _read_directory(Path(location), project, wanted), False)
        url = f"{location.rstrip('/')}/{canonicalize_name(project)}/"
        response = self._get(url)
        if response.status_code == 404:
            return Listing(location, {}, True)
        if response.status_code != 200:
            raise IndexUnreachableError(f"cannot read {url}: HTTP {response.status_code}")
        return Listing(location, parse_simple(project, response.headers.get("content-type", ""),
                                              response.text), True)

    def listings(self, wanted: Mapping[tuple[str, str], set[str]]
                 ) -> dict[tuple[str, str], Listing | IndexUnreachableError]:
        """Every (location, project) of ``wanted`` (mapped to the versions asked for), read
        concurrently; a location that cannot be read gives its error instead of a listing."""
        def one(key: tuple[str, str]) -> Listing | IndexUnreachableError:
            try:
                return self.listing(key[0], key[1], wanted[key])
            except IndexUnreachableError as exc:
                return exc
        keys = sorted(wanted)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return dict(zip(keys, pool.map(one, keys), strict=True))


ALARM = "ALARM: pinned file gone or hash changed on the index"


@dataclass(frozen=True)
class Pin:
    """A pinned distribution and the sha256 of every file the lock allows for it."""

    package: str
    version: str
    hashes: frozenset[str]

    @property
    def canonical_version(self) -> str:
        return canonicalize_version(self.version, strip_trailing_zero=False)


@dataclass
class IndexCheck:
    """``verified``: pins whose every recorded sha256 the index lists; ``alarms``: files gone or
    changed; ``unchecked``: pins only an unreachable index or a partial wheel directory could
    show; ``unreachable``: location -> why it could not be read."""

    verified: int = 0
    alarms: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    requests: int = 0


def _short(hashes: Iterable[str]) -> str:
    ordered = sorted(hashes)
    more = f" and {len(ordered) - 3} more" if len(ordered) > 3 else ""
    return ", ".join(ordered[:3]) + more


def _judge(where: str, pin: Pin, results: list[tuple[str, Listing | IndexUnreachableError]],
           report: IndexCheck) -> bool:
    """Record ``pin``'s verdict from what each location lists; True when verified."""
    version = pin.canonical_version
    found: set[str] = set()
    on_complete, partial, notes = False, [], []
    for location, result in results:
        if isinstance(result, IndexUnreachableError):
            report.unreachable.setdefault(location, str(result))
            partial.append(f"{location} unreachable")
            continue
        files = result.files.get(version, {})
        found |= set(files)
        on_complete |= bool(files) and result.complete
        if not result.complete:
            partial.append(f"{location} holds {len(files)} file(s) of it")
        elif not files:
            notes.append(f"{location} has no file of it")
    missing = pin.hashes - found
    if not missing and pin.hashes:
        report.verified += 1
        return True
    if on_complete or not partial:
        what = (f"sha256 {_short(missing)} not listed" if on_complete
                else f"{pin.version} is not on the index (sha256 {_short(pin.hashes)})")
        report.alarms.append(f"{ALARM}: {where}: {pin.package}=={pin.version}: {what} "
                             f"({', '.join(loc for loc, _ in results)})")
    else:
        report.unchecked.append(f"{where}: {pin.package}=={pin.version}: cannot be checked "
                                f"online ({'; '.join(notes + partial)})")
    return False


def check_on_index(entries: Iterable[tuple[str, Pin, list[str]]], *, index_url: str,
                   reader: IndexReader | None = None) -> IndexCheck:
    """Each pin (``where`` it is locked, the pin, the named indexes its set also reads) looked
    up by sha256 in the index's own listing: one small request per project, nothing
    downloaded. A pin the default index does not show with every recorded sha256 is looked up
    in the named indexes too."""
    owned = reader is None
    reader = reader or IndexReader()
    report = IndexCheck()
    entries = list(entries)

    def wanted(pairs: Iterable[tuple[str, Pin]]) -> dict[tuple[str, str], set[str]]:
        asked: dict[tuple[str, str], set[str]] = {}
        for location, pin in pairs:
            asked.setdefault((location, pin.package), set()).add(pin.canonical_version)
        return asked

    try:
        first = reader.listings(wanted((index_url, pin) for _, pin, _ in entries))
        later: list[tuple[str, Pin, list[str]]] = []
        for where, pin, named in entries:
            result = first[(index_url, pin.package)]
            shown = (isinstance(result, Listing)
                     and pin.hashes <= set(result.files.get(pin.canonical_version, {})))
            if named and not shown:
                later.append((where, pin, [index_url, *named]))
            else:
                _judge(where, pin, [(index_url, result)], report)
        second = reader.listings(wanted((loc, pin) for _, pin, locations in later
                                        for loc in locations[1:]))
        listings = first | second
        for where, pin, locations in later:
            _judge(where, pin, [(loc, listings[(loc, pin.package)]) for loc in locations],
                   report)
    finally:
        report.requests = reader.requests
        if owned:
            reader.close()
    return report
