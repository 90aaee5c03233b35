"""Every module of the collection documents itself the way ansible-doc reads it: its
documentation parses, its doc fragments resolve, ansible-doc renders it, and the options it
documents are its argument spec."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import yaml
from ansible_run import ansible_doc, bad_descriptions, rendered_docs
from paths import COLLECTION

MODULES_DIR = COLLECTION / "plugins" / "modules"
FRAGMENTS_DIR = COLLECTION / "plugins" / "doc_fragments"
PACKAGE = "ansible_collections.ascend_serve.fleet.plugins.modules"
NAMES = sorted(p.stem for p in MODULES_DIR.glob("*.py") if p.stem != "__init__")
FQCN = "ascend_serve.fleet."
# Ansible ships untyped; the class every module (or module_main) builds.
AnsibleModule = importlib.import_module("ansible.module_utils.basic").AnsibleModule


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    """ansible-doc's reading of every module (fragments merged), by module name."""
    return rendered_docs("module", NAMES)




@pytest.mark.parametrize("name", NAMES)
def test_documentation_parses_and_every_description_is_text(
    name: str, rendered: dict[str, dict[str, Any]]
) -> None:
    module = importlib.import_module(f"{PACKAGE}.{name}")
    raw = yaml.safe_load(module.DOCUMENTATION)
    assert raw["module"] == name
    assert yaml.safe_load(module.EXAMPLES)
    doc = rendered[name]["doc"]
    assert doc["module"] == name
    assert isinstance(doc["short_description"], str)
    assert doc["author"] == ["ascend-serve developers"]
    assert bad_descriptions(doc, "DOCUMENTATION") == []
    assert bad_descriptions(rendered[name]["return"] or {}, "RETURN") == []


def test_ansible_doc_renders_every_module_as_text() -> None:
    proc = ansible_doc("module", *(FQCN + name for name in NAMES))
    assert proc.returncode == 0, proc.stderr
    assert "[WARNING]" not in proc.stderr, proc.stderr
    for name in NAMES:
        assert f"> MODULE {FQCN}{name} (" in proc.stdout


def test_every_doc_fragment_is_used() -> None:
    used: set[str] = set()
    for name in NAMES:
        doc = yaml.safe_load(importlib.import_module(f"{PACKAGE}.{name}").DOCUMENTATION)
        # ascend_serve.fleet.<fragment>, or ascend_serve.fleet.<fragment>.<variable>
        fragments = doc.get("extends_documentation_fragment", [])
        used.update(".".join(fragment.split(".")[:3]) for fragment in fragments)
    assert {FQCN + p.stem for p in FRAGMENTS_DIR.glob("*.py")} <= used


# --- documentation matches the argument spec -----------------------------------------------------


class CapturedError(Exception):
    pass


def _options(options: dict[str, Any], nested: str) -> dict[str, Any]:
    """What an argument spec (nested: "options") or a documentation (nested: "suboptions") says of
    each option, with Ansible's defaults filled in."""
    return {name: {"type": entry.get("type", "str"), "required": entry.get("required", False),
                   "default": entry.get("default"), "elements": entry.get("elements"),
                   "choices": entry.get("choices"),
                   "options": _options(entry.get(nested) or {}, nested)}
            for name, entry in options.items()}


@pytest.mark.parametrize("name", NAMES)
def test_documentation_matches_argument_spec(
    name: str, rendered: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Options (with those of the fragments), check mode support: what main() asks for."""
    module = importlib.import_module(f"{PACKAGE}.{name}")
    captured: dict[str, Any] = {}

    def fake(self: Any, **kwargs: Any) -> None:
        captured.update(kwargs)
        raise CapturedError

    monkeypatch.setattr(AnsibleModule, "__init__", fake)
    with pytest.raises(CapturedError):
        module.main()

    doc = rendered[name]["doc"]
    assert (_options(captured["argument_spec"], "options")
            == _options(doc.get("options") or {}, "suboptions"))
    assert doc["attributes"]["check_mode"]["support"] == (
        "full" if captured.get("supports_check_mode") else "none")
    assert doc["attributes"]["diff_mode"]["support"] in ("full", "none")
