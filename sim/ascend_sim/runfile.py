"""Build vendor-style self-extracting ``.run`` installers for any version string.

Like the vendor's makeself packages, a ``.run`` file is a shell header followed by an archive:
the header verifies the archive's checksum on every start (``--check`` does only that), extracts
it to a temporary directory and runs the installer in it. The archive carries the installer logic
and, for the driver, the ``npu-smi`` / ``upgrade-tool`` / ``hccn_tool`` programs.
Archives are byte-for-byte reproducible, so a pinned sha256 stays valid across rebuilds.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

DEVTOOLS = Path(__file__).parent / "devtools"
KINDS = ("driver", "firmware", "toolkit", "kernels", "nnal")

HEADER = """\
#!/bin/bash
# {filename}
# Self-extracting Ascend package: header, then a base64 tar.gz archive.
PAYLOAD_SHA256="{sha256}"
HEADER_LINES={lines}
self="$0"
payload() {{ tail -n +$((HEADER_LINES + 1)) "$self"; }}
if [ "$(payload | sha256sum | cut -d' ' -f1)" != "$PAYLOAD_SHA256" ]; then
  echo "Verifying archive integrity... Error in checksums: {filename} is corrupted" >&2
  exit 1
fi
echo "Verifying archive integrity...  100%   All good."
extract_to=""; noexec=0
for arg in "$@"; do
  case "$arg" in
    --check) exit 0 ;;
    --extract=*) extract_to="${{arg#--extract=}}" ;;
    --noexec) noexec=1 ;;
  esac
done
if [ -n "$extract_to" ]; then
  mkdir -p "$extract_to" && payload | base64 -d | tar -xz -C "$extract_to" || exit 1
  [ "$noexec" = 1 ] && exit 0
fi
tmp=$(mktemp -d "${{TMPDIR:-/tmp}}/ascend-run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
payload | base64 -d | tar -xz -C "$tmp" || exit 1
cd "$tmp" || exit 1
ASCEND_RUN_PAYLOAD="$tmp" PYTHONDONTWRITEBYTECODE=1 python3 -m ascend_devtools.installer "$@"
exit $?
"""


@dataclass(frozen=True)
class Package:
    kind: str
    version: str
    chip: str = "910b"  # "910b" (A2), "a3" (A3), "310p"
    arch: str = "aarch64"
    hdk: str = ""  # firmware only: the driver (HDK) release it belongs to

    @property
    def filename(self) -> str:
        """The vendor's file name (the sources are cited in roles/npu_driver and roles/cann
        defaults/main.yml, which compute the same names)."""
        v, a, c = self.version, self.arch, self.chip
        # HDK: A3 is Atlas-A3-hdk-npu-*, the others Ascend-hdk-<chip>-npu-*; the driver's x86
        # name is linux-x86-64 (CANN's is linux-x86_64).
        hdk = "Atlas-A3-hdk-npu" if c == "a3" else f"Ascend-hdk-{c}-npu"
        if self.kind == "driver":
            return f"{hdk}-driver_{v}_linux-{a.replace('_', '-')}.run"
        if self.kind == "firmware":
            return f"{hdk}-firmware_{v}.run"
        if self.kind == "toolkit":
            return f"Ascend-cann-toolkit_{v}_linux-{a}.run"
        if self.kind == "kernels":
            # kernels up to CANN 8.3, renamed ops from 8.5.0
            numbers = [int(n) for n in re.findall(r"\d+", v)[:2]] + [0, 0]
            if (numbers[0], numbers[1]) >= (8, 5):
                return f"Ascend-cann-{'A3' if c == 'a3' else c}-ops_{v}_linux-{a}.run"
            if c == "a3":
                return f"Atlas-A3-cann-kernels_{v}_linux-{a}.run"
            return f"Ascend-cann-kernels-{c}_{v}_linux-{a}.run"
        if self.kind == "nnal":
            return f"Ascend-cann-nnal_{v}_linux-{a}.run"
        raise ValueError(f"unknown package kind {self.kind!r}; known: {', '.join(KINDS)}")

    @property
    def package_name(self) -> str:
        return self.filename.split("_", 1)[0]


def _payload(pkg: Package) -> bytes:
    manifest = {
        "kind": pkg.kind,
        "version": pkg.version,
        "chip": pkg.chip,
        "arch": pkg.arch,
        "hdk": pkg.hdk,
        "filename": pkg.filename,
        "package": pkg.package_name,
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))

        add("manifest.json", json.dumps(manifest, sort_keys=True).encode())
        for src in sorted(DEVTOOLS.glob("*.py")):
            add(f"ascend_devtools/{src.name}", src.read_bytes())
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def build(pkg: Package, out_dir: Path, corrupt: bool = False) -> Path:
    """Write ``pkg`` into ``out_dir``; ``corrupt`` damages the archive after checksumming."""
    encoded = base64.encodebytes(_payload(pkg))
    sha = hashlib.sha256(encoded).hexdigest()
    header = HEADER.format(filename=pkg.filename, sha256=sha, lines=0)
    lines = header.count("\n")
    header = HEADER.format(filename=pkg.filename, sha256=sha, lines=lines)
    if corrupt:
        middle = len(encoded) // 2
        flipped = b"A" if encoded[middle : middle + 1] != b"A" else b"B"
        encoded = encoded[:middle] + flipped + encoded[middle + 1 :]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / pkg.filename
    path.write_bytes(header.encode() + encoded)
    path.chmod(0o755)
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
