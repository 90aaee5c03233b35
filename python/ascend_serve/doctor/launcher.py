"""The serving launcher script as ``ascend-serve doctor`` reads it (sourced files, exports)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ascend_serve.doctor.collected import Collected, parse_kv

# --- the launcher ---------------------------------------------------------------------------------

SOURCE_LINE = re.compile(r"^[ \t]*(?:source|\.)[ \t]+(\S+)[ \t]*$", re.MULTILINE)
_EXPORT = re.compile(r"^[ \t]*export[ \t]+([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.MULTILINE)


@dataclass
class Launcher:
    text: str
    set_env: list[str]  # sourced set_env.sh scripts
    env_files: list[str]  # other sourced files (KEY=value settings)
    exports: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> Launcher:
        sourced = [_unquote(m.group(1)) for m in SOURCE_LINE.finditer(text)]
        exports = {m.group(1): _unquote(m.group(2).strip()) for m in _EXPORT.finditer(text)}
        return cls(text=text,
                   set_env=[p for p in sourced if p.endswith("/set_env.sh")],
                   env_files=[p for p in sourced if not p.endswith("/set_env.sh")],
                   exports=exports)

    def flag(self, name: str) -> str | None:
        match = re.search(rf"--{re.escape(name)}(?:=|[ \t]+)(\S+)", self.text)
        return _unquote(match.group(1)) if match else None

    def lines_matching(self, pattern: str) -> list[str]:
        return [line for line in self.text.splitlines() if re.search(pattern, line)]


def _unquote(text: str) -> str:
    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    return parts[0] if len(parts) == 1 else text


# --- what the collected data says about the launcher -----------------------------------------


def npu_serving(c: Collected, launcher: Launcher | None) -> bool:
    env = c.fact("ascend_python_env") or {}
    if env.get("platform") == "ascend":
        return True
    return launcher is not None and "ASCEND_RT_VISIBLE_DEVICES" in launcher.exports


def read_launcher(c: Collected) -> Launcher | None:
    text = c.text("launcher")
    return Launcher.parse(text) if text else None


def service_environ(c: Collected) -> dict[str, str] | None:
    text = c.value("service.environ")
    return parse_kv(text) if isinstance(text, str) else None


def visible_devices(c: Collected) -> list[int] | None:
    launcher = read_launcher(c)
    environ = service_environ(c)
    value = (environ or {}).get("ASCEND_RT_VISIBLE_DEVICES") or (
        launcher.exports.get("ASCEND_RT_VISIBLE_DEVICES") if launcher else None)
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        return None
