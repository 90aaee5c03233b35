"""Readers of the Ascend install tree's version files: one reader per file format.

Every format here was read off real files (``tests/data/corpus/versions/``, with ``SOURCES``):

- driver ``<install_path>/driver/version.info`` and firmware
  ``<install_path>/firmware/version.info``: ``key=value`` lines; ``Version=`` is the driver
  release (``25.0.rc1.1``) or the firmware number (``7.7.0.1.231``), ``package_version=`` the
  HDK release (absent in older driver files);
- ``<toolkit>/<arch>-linux/ascend_toolkit_install.info``: ``key=value``, lower-case ``version=``
  and ``path=`` (the real versioned directory);
- component ``version.info`` files (``opp_kernel/`` up to CANN 8.3, ``opp/`` from 8.5,
  ``toolkit/``): ``Version=`` is an internal build (``8.2.0.0.201``, ``8.3.T5.0.B028``), the
  release is ``version_dir=`` (``8.2.RC1``, ``8.5.0``);
- NNAL ATB ``nnal/atb/latest/version.info``: ``key : value`` lines indented by four spaces
  (``Ascend-cann-atb : 8.2.RC1``, ``Ascend-cann-atb Version : 8.2.RC1.B150``);
- ``ascend-toolkit/latest/version.cfg``: ``<component>_<state>_version=[<build>:<release>]...``.

Leading whitespace (spaces or tabs, as pasted files show) is ignored. A line a reader cannot read,
or a file without the line that carries the version, raises :class:`AscendFileError` naming the
file and the line: an unreadable file is never taken for "not installed".

Standard library only; runs on managed nodes (Python 3.8+): annotations are not evaluated.
"""

from __future__ import annotations

import re
from typing import Any

# The kernels/ops package writes opp_kernel/version.info up to CANN 8.3; from CANN 8.5 (package
# renamed Ascend-cann-<chip>-ops) the release is in opp/version.info (corpus:
# opp-version-8.5.0.2.220-pypto-doc.txt, opp-kernel-version-8.2.RC1.txt).
OPS_RENAMED_IN = (8, 5)
_KV_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$")
_ATB_RE = re.compile(r"^(\S(?:.*?\S)?)\s+:\s+(\S.*?)\s*$")
_CFG_ENTRY_RE = re.compile(r"\[([^:\]]+):([^\]]+)\]")
_CFG_VALUE_RE = re.compile(r"(?:\[[^:\]]+:[^\]]+\])+")


class AscendFileError(ValueError):
    """A version file this module cannot read (the message names the file and the line)."""


def _fail(path: str, number: int, line: str, why: str) -> AscendFileError:
    return AscendFileError(f"{path}: line {number} {line.strip()!r}: {why}")


def release_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a CANN release: ``8.3.RC2`` -> (8, 3), ``9.1.0-beta.3`` -> (9, 1)."""
    match = re.match(r"^\s*(\d+)(?:\.(\d+))?", version or "")
    if not match:
        return (0, 0)
    return int(match.group(1)), int(match.group(2) or 0)


def ops_version_info(toolkit_version: str) -> str:
    """Where a toolkit root's kernels/ops release is: relative path of its version.info."""
    if release_tuple(toolkit_version) >= OPS_RENAMED_IN:
        return "opp/version.info"
    return "opp_kernel/version.info"


def parse_key_values(text: str, path: str = "version.info") -> dict[str, str]:
    """``key=value`` lines, leading whitespace ignored, values verbatim (quotes kept).

    Blank lines and ``#`` comments are skipped; any other line without ``key=`` raises.
    """
    fields: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _KV_RE.match(line)
        if not match:
            raise _fail(path, number, raw, "not a key=value line")
        fields[match.group(1)] = match.group(2).strip()
    return fields


def _require(fields: dict[str, str], key: str, path: str, sep: str = "=") -> str:
    """``fields[key]``, or an error naming the file and the line it lacks (``key=``,
    or ``key : `` in NNAL's form)."""
    value = fields.get(key, "")
    if not value:
        line = f"{key}=" if sep == "=" else f"'{key}{sep}'"
        raise AscendFileError(f"{path}: no {line} line; not a known layout of this file")
    return value


def read_driver_info(text: str, path: str = "driver/version.info") -> dict[str, Any]:
    """Driver ``version.info``: the release in ``Version=`` (``package_version=`` agrees)."""
    fields = parse_key_values(text, path)
    version = fields.get("Version") or fields.get("package_version", "")
    if not version:
        raise AscendFileError(f"{path}: no Version= line; not a known layout of this file")
    return {"version": version, "fields": fields}


def read_firmware_info(text: str, path: str = "firmware/version.info") -> dict[str, Any]:
    """Firmware ``version.info``: the firmware number and the HDK release it shipped in."""
    fields = parse_key_values(text, path)
    return {
        "version": _require(fields, "Version", path),
        "hdk_package_version": fields.get("package_version", ""),
        "fields": fields,
    }


def read_toolkit_install_info(
    text: str, path: str = "ascend_toolkit_install.info"
) -> dict[str, Any]:
    """``ascend_toolkit_install.info``: release, arch and the real install dir (``path=``)."""
    fields = parse_key_values(text, path)
    return {
        "version": _require(fields, "version", path),
        "arch": fields.get("arch", ""),
        "install_dir": fields.get("path", ""),
        "fields": fields,
    }


def read_component_version_info(text: str, path: str = "version.info") -> dict[str, Any]:
    """A CANN component's ``version.info``: release ``version_dir=``, internal ``Version=``."""
    fields = parse_key_values(text, path)
    component = _require(fields, "Version", path)
    return {
        "version": _require(fields, "version_dir", path),
        "component_version": component,
        "fields": fields,
    }


def read_nnal_atb_info(text: str, path: str = "nnal/atb/latest/version.info") -> dict[str, Any]:
    """NNAL ATB ``version.info``: ``Ascend-cann-atb : <release>``, ``... Version : <build>``."""
    fields: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        match = _ATB_RE.match(line)
        if not match:
            raise _fail(path, number, raw, "not a 'key : value' line")
        fields[match.group(1)] = match.group(2)
    return {
        "version": _require(fields, "Ascend-cann-atb", path, sep=" : "),
        "build": fields.get("Ascend-cann-atb Version", ""),
        "fields": fields,
    }


def read_version_cfg(text: str, path: str = "version.cfg") -> dict[str, Any]:
    """``ascend-toolkit/latest/version.cfg``: the running toolkit release and build."""
    fields = parse_key_values(text, path)
    for key, value in fields.items():
        if not _CFG_VALUE_RE.fullmatch(value):
            raise AscendFileError(f"{path}: {key}={value}: not [<build>:<release>] entries")
    running = _CFG_ENTRY_RE.findall(_require(fields, "toolkit_running_version", path))
    installed: list[str] = []
    for _build, release in _CFG_ENTRY_RE.findall(fields.get("toolkit_installed_version", "")):
        if release not in installed:
            installed.append(release)
    return {
        "version": running[-1][1],
        "component_version": running[-1][0],
        "installed_versions": installed,
        "fields": fields,
    }


def read_file(reader: Any, path: str) -> dict[str, Any] | None:
    """Run ``reader`` on the file at ``path``; None when the file does not exist."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    result: dict[str, Any] = reader(text, path)
    return result
