"""Collecting a host's state for ``ascend-serve doctor``: the collector's command, its answer
(redacted before anything else reads it) and small readers over the collected text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import (
    AscendFileError,
)
from ascend_serve.doctor.redact import redact
from ascend_serve.doctor.remote import Transport
from ascend_serve.node import doctor_collect


@dataclass
class Collected:
    """What the collector brought back from one host (already redacted)."""

    host: str
    sections: dict[str, dict[str, Any]]
    raw_error: str | None = None
    _facts: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        section = self.sections.get(name) or {}
        value = section.get("text")
        return value if isinstance(value, str) else None

    def file_error(self, name: str) -> str | None:
        section = self.sections.get(name) or {}
        value = section.get("error")
        return str(value) if value else None

    def cmd(self, name: str) -> tuple[int, str, str] | None:
        section = self.sections.get(name)
        if not section or "rc" not in section:
            return None
        return int(section["rc"]), str(section.get("out") or ""), str(section.get("err") or "")

    def value(self, name: str) -> Any:
        section = self.sections.get(name) or {}
        return section.get("value")

    def fact(self, name: str) -> dict[str, Any] | None:
        if name not in self._facts:
            text = self.text("fact:" + name)
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = None
            self._facts[name] = data if isinstance(data, dict) else None
        return self._facts[name]


# --- collection ----------------------------------------------------------------------------------


class CollectError(RuntimeError):
    """The host answered, but not with the collector's report."""


def collector_command(python: str = "python3", *, facts_dir: str = "/etc/ansible/facts.d",
                      journal_lines: int = 300, sudo: bool = False) -> list[str]:
    """The argument list that runs the collector on a host (``python3 -c SOURCE ARGS``)."""
    source = files("ascend_serve.node").joinpath("doctor_collect.py").read_text(encoding="utf-8")
    argv = [python, "-c", source, f"--facts-dir={facts_dir}",
            f"--journal-lines={journal_lines}"]
    return ["sudo", "-n", "--", *argv] if sudo else argv


def redact_sections(sections: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every string in the collected sections, redacted."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return {name: walk(section) for name, section in sections.items()}


def parse_collected(host: str, rc: int, out: str, err: str) -> Collected:
    """The collector's answer as :class:`Collected`; CollectError when it is not one."""
    text = out.strip()
    if rc != 0 or not text.startswith("{"):
        detail = (err.strip() or out.strip() or "no output").splitlines()[-3:]
        if rc == 127 or "not found" in " ".join(detail):
            hint = " (is python3 installed on the host? --remote-python names another)"
        elif "sudo" in " ".join(detail):
            hint = " (sudo needs a password: allow NOPASSWD for the collector, or connect as root)"
        else:
            hint = ""
        raise CollectError(f"the collector failed on {host} (exit {rc}): "
                           f"{redact(' | '.join(detail))}{hint}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CollectError(f"the collector's answer from {host} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != doctor_collect.FORMAT:
        raise CollectError(f"the collector's answer from {host} has an unknown format")
    sections = data.get("sections")
    if not isinstance(sections, dict):
        raise CollectError(f"the collector's answer from {host} has no sections")
    return Collected(host=host, sections=redact_sections(sections))


def collect(transport: Transport, command: Sequence[str], timeout: float = 300.0) -> Collected:
    rc, out, err = transport.run(command, timeout=timeout)
    return parse_collected(transport.name, rc, out, err)


# --- helpers -------------------------------------------------------------------------------

def parse_kv(text: str | None, sep: str = "=") -> dict[str, str]:
    """``key=value`` lines (env files); comments and blanks skipped.

    The vendor's version files are read by the collection's ``module_utils/ascend_files.py`` (one
    reader per format, shared with the collection's modules), never here.
    """
    result: dict[str, str] = {}
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or sep not in stripped:
            continue
        key, _, value = stripped.partition(sep)
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        result[key] = value
    return result


def file_version(c: Collected, section: str,
                  reader: Callable[[str, str], dict[str, Any]]) -> tuple[str | None, str | None]:
    """(release, None) read from a collected version file; (None, why) when it cannot be read;
    (None, None) when the file was not there."""
    text = c.text(section)
    if not text:
        return None, None
    path = str(c.sections.get(section, {}).get("path") or section)
    try:
        return str(reader(text, path)["version"]) or None, None
    except AscendFileError as exc:
        return None, str(exc)


def kv_lines(text: str | None, keys: Iterable[str]) -> list[str]:
    wanted = set(keys)
    return [line for line in (text or "").splitlines()
            if line.strip().partition("=")[0].strip().removeprefix("export ").strip() in wanted]
