"""Objects as ``kubectl``-applicable YAML: one multi-document stream, or one file per object
plus a ``kustomization.yaml`` that lists them (``kubectl kustomize DIR``, ``kubectl apply -k``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION = "kustomization.yaml"


class _Dumper(yaml.SafeDumper):
    """Safe YAML with scripts and JSON as literal blocks (readable in a review)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(obj: Any) -> str:
    """One YAML document (keys in the order built)."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def stream(objs: Iterable[dict[str, Any]]) -> str:
    """A multi-document YAML stream, ``---`` before each document."""
    return "".join(f"---\n{dump(o)}" for o in objs)


def file_name(obj: dict[str, Any]) -> str:
    """``<kind>-<name>.yaml``, lower case: unique within one render."""
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def kustomization(files: list[str]) -> dict[str, Any]:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": files}


def planned_files(objs: list[dict[str, Any]], with_kustomization: bool) -> dict[str, str]:
    """File name -> text of every file a render writes to a directory."""
    texts = {file_name(o): dump(o) for o in objs}
    if with_kustomization:
        texts[KUSTOMIZATION] = dump(kustomization(list(texts)))
    return texts


def write(directory: Path, texts: dict[str, str]) -> list[Path]:
    """Write ``texts`` under ``directory`` (created if absent); raises ``OSError``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in texts.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
