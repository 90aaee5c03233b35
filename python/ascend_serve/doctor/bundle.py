"""The ``ascend-serve doctor`` support bundle: a redacted tarball of everything collected."""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

from ascend_serve.doctor.findings import HostResult
from ascend_serve.doctor.redact import redact

# --- the support bundle --------------------------------------------------------------------


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", name).strip("_") or "_"


def bundle_members(results: Sequence[HostResult]) -> dict[str, str]:
    """Path in the tarball -> text: per host its findings, every raw output, fact and config."""
    members: dict[str, str] = {
        "README.txt": (
            "ascend-serve doctor support bundle. Secrets (API keys, tokens, passwords, "
            "Authorization headers, vault blocks, private keys) were replaced by <redacted>.\n"
            "Per host: findings.json, collected.json (everything the collector read), and the "
            "same split into commands/, files/ and facts/.\n"),
        "report.json": json.dumps([r.report.model_dump() for r in results], indent=2) + "\n",
    }
    for result in results:
        host = _safe(result.report.host)
        members[f"{host}/findings.json"] = json.dumps(
            result.report.model_dump(), indent=2) + "\n"
        if result.collected is None:
            continue
        sections = result.collected.sections
        members[f"{host}/collected.json"] = json.dumps(sections, indent=2, sort_keys=True) + "\n"
        for name, section in sorted(sections.items()):
            if "argv" in section:
                members[f"{host}/commands/{_safe(name)}.txt"] = (
                    "$ " + " ".join(shlex.quote(str(a)) for a in section["argv"][:1])
                    + (" ..." if name == "python_env" else " " + " ".join(
                        shlex.quote(str(a)) for a in section["argv"][1:]))
                    + f"\n# exit {section.get('rc')}\n" + str(section.get("out") or "")
                    + ("\n# stderr:\n" + str(section["err"]) if section.get("err") else ""))
            elif name.startswith("fact:"):
                members[f"{host}/facts/{_safe(name[5:])}.fact"] = str(section.get("text") or "")
            elif section.get("text") is not None:
                members[f"{host}/files/{_safe(str(section.get('path') or name))}"] = str(
                    section["text"])
            elif "value" in section:
                value = section["value"]
                members[f"{host}/values/{_safe(name)}.txt"] = (
                    value if isinstance(value, str) else json.dumps(value, indent=2)) + "\n"
    # Everything in the bundle passes the redaction once more.
    return {path: redact(text) for path, text in members.items()}


def write_bundle(path: Path, results: Sequence[HostResult]) -> list[str]:
    """Write the support tarball (gzip); returns the member names."""
    members = bundle_members(results)
    root = path.name.removesuffix(".tar.gz").removesuffix(".tgz") or "doctor"
    now = time.time()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(members.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            info.mode = 0o600
            info.mtime = int(now)
            tar.addfile(info, io.BytesIO(data))
    path.chmod(0o600)
    return sorted(members)
