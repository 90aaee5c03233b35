"""Container images in a bundle: copied from a registry by digest with skopeo, kept byte for byte.

An image is pinned by its reference's ``@sha256:`` digest, which a registry defines as the
sha256 of the manifest's bytes (OCI distribution-spec, "Pulling manifests"; OCI image-spec
``descriptor.md``, "Digests"). ``skopeo copy --preserve-digests --all docker://REF dir:DIR``
(skopeo-copy(1), skopeo 1.9) writes the manifest unchanged as ``DIR/manifest.json``, each blob
as ``DIR/<hex digest>`` and, for a multi-platform index, each platform's manifest as
``DIR/<hex digest>.manifest.json`` (containers/image ``directory/directory_transport.go``); so
every file of the copy is checked by hashing it: ``manifest.json`` against the pin, every other
file against its own name. The same tool copies the directory into the site's registry
(:func:`push`) with the same digest, so the pin stays valid there.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from ascend_serve.mirror.digest import hash_path
from ascend_serve.mirror.plan import Artifact

SKOPEO = "skopeo"
MANIFEST_FILE = "manifest.json"
HEX_RE = re.compile(r"^(?P<hex>[0-9a-f]{64})(?:\.manifest\.json)?$")
TIMEOUT_S = 3600


class ImageError(RuntimeError):
    """An image could not be copied or is not what its pin says; the message names it."""


def registry_of(repository: str) -> str:
    """The registry part of a repository (``host[:port]``), or docker.io when it has none."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def path_of(repository: str) -> str:
    """The repository without its registry."""
    first, _, rest = repository.partition("/")
    return rest if registry_of(repository) == first else repository


def candidates(artifact: Artifact, sources: Iterable[str]) -> list[str]:
    """``docker://`` references to try, in order: each ``docker://HOST[:PORT]`` source (a site
    registry or a pull-through mirror holding the same repository path), then the reference's
    own registry."""
    digest = f"@sha256:{artifact.sha256}"
    out = [f"docker://{s.removeprefix('docker://').rstrip('/')}/{path_of(artifact.name)}{digest}"
           for s in sources if s.startswith("docker://")]
    out.append(f"docker://{artifact.name}{digest}")
    return out


def _skopeo() -> str:
    found = shutil.which(SKOPEO)
    if found is None:
        raise ImageError("images are copied with skopeo, which is not on this machine "
                         "(Debian/openEuler package skopeo)")
    return found


def _tls(reference: str, insecure: Iterable[str], flag: str) -> list[str]:
    host = reference.removeprefix("docker://").split("/", 1)[0]
    return [f"{flag}=false"] if host in set(insecure) else []


def check_copy(directory: Path, digest: str) -> list[str]:
    """What is wrong with an image directory: ``manifest.json`` must hash to ``digest`` and
    every blob or platform manifest to its own name, and every blob the manifests name must be
    there. Empty when it is the image."""

    problems: list[str] = []
    top = directory / MANIFEST_FILE
    if not top.is_file():
        return [f"{top}: missing"]
    _, sha = hash_path(top)
    if sha != digest:
        problems.append(f"{top}: sha256 {sha}, the image is pinned at {digest}")
    present = {}
    for path in directory.iterdir():
        match = HEX_RE.match(path.name)
        if match is None:
            continue
        _, sha = hash_path(path)
        present[match["hex"]] = path
        if sha != match["hex"]:
            problems.append(f"{path}: sha256 {sha}, its name says {match['hex']}")
    for manifest in [top, *(p for p in directory.glob("*.manifest.json"))]:
        for needed in _referenced(manifest):
            if needed not in present and not (directory / f"{needed}.manifest.json").is_file():
                problems.append(f"{directory}: {needed} (named by {manifest.name}) is missing")
    return problems


def _referenced(manifest: Path) -> list[str]:
    """The blobs (config, layers) or platform manifests a manifest names, as hex digests."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ImageError(f"{manifest}: not a manifest ({exc})") from exc
    found = [d.get("digest", "") for d in data.get("manifests", [])]
    if "config" in data:
        found.append(data["config"].get("digest", ""))
    found += [d.get("digest", "") for d in data.get("layers", [])]
    return [d.removeprefix("sha256:") for d in found if d.startswith("sha256:")]


def copy(artifact: Artifact, sources: Iterable[str], dest: Path, *,
         insecure: Iterable[str] = ()) -> str:
    """Copy the pinned image into ``dest`` (which must not exist) from the first place that has
    it, checked; the reference it came from. A copy that does not match its pin is removed."""
    if not artifact.sha256:
        raise ImageError(f"image {artifact.name}: not pinned by digest ({artifact.note})")
    skopeo = _skopeo()
    tried: list[str] = []
    for reference in candidates(artifact, sources):
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        argv = [skopeo, "copy", "--quiet", "--all", "--preserve-digests",
                *_tls(reference, insecure, "--src-tls-verify"), reference, f"dir:{dest}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            tried.append(f"{reference}: no answer in {TIMEOUT_S} s")
            continue
        if done.returncode != 0:
            tried.append(f"{reference}: {(done.stderr or done.stdout).strip()[-300:]}")
            continue
        problems = check_copy(dest, artifact.sha256)
        if problems:
            shutil.rmtree(dest, ignore_errors=True)
            raise ImageError(f"checksum mismatch: image {artifact.name}@sha256:{artifact.sha256} "
                             f"from {reference}: " + "; ".join(problems))
        return reference
    shutil.rmtree(dest, ignore_errors=True)
    raise ImageError(f"image {artifact.name}@sha256:{artifact.sha256} is in none of the "
                     "sources: " + "; ".join(tried))


def push(directory: Path, repository: str, tag: str, registry: str, *,
         insecure: Iterable[str] = ()) -> str:
    """Copy a bundle's image directory into ``registry`` (same repository path, ``tag``); the
    pinned reference the hosts use there (``registry/path@sha256:...``)."""

    skopeo = _skopeo()
    _, sha = hash_path(directory / MANIFEST_FILE)
    target = f"docker://{registry.rstrip('/')}/{path_of(repository)}:{tag or 'sha256-' + sha}"
    argv = [skopeo, "copy", "--quiet", "--all", "--preserve-digests",
            *_tls(target, insecure, "--dest-tls-verify"), f"dir:{directory}", target]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise ImageError(f"pushing {directory} to {target} failed: "
                         f"{(done.stderr or done.stdout).strip()[-300:]}")
    return f"{registry.rstrip('/')}/{path_of(repository)}@sha256:{sha}"
