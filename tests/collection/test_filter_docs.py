"""Every filter of the collection documents itself the way ansible-doc reads it: a YAML file per
filter next to its plugin (``plugins/filter/<filter>.yml``, the form for filters that live several
to a file), which ansible-doc renders, whose options are the filter function's parameters."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import ansible_doc, bad_descriptions, rendered_docs
from paths import COLLECTION

FILTER_DIR = COLLECTION / "plugins" / "filter"
PACKAGE = "ansible_collections.ascend_serve.fleet.plugins.filter"
FQCN = "ascend_serve.fleet."


def _filters() -> dict[str, Callable[..., Any]]:
    """Every filter the plugins define (FilterModule().filters()), by name."""
    found: dict[str, Callable[..., Any]] = {}
    for plugin in sorted(FILTER_DIR.glob("*.py")):
        if plugin.stem == "__init__":
            continue
        module = importlib.import_module(f"{PACKAGE}.{plugin.stem}")
        for name, function in module.FilterModule().filters().items():
            assert name not in found, f"filter {name} is defined twice"
            found[name] = function
    return found


FILTERS = _filters()
NAMES = sorted(FILTERS)


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    """ansible-doc's reading of every filter, by filter name."""
    return rendered_docs("filter", NAMES)




def test_the_plugins_define_filters() -> None:
    assert len(NAMES) >= 14


def test_every_doc_file_documents_a_filter() -> None:
    """No documentation of a filter that is gone (or misspelt)."""
    assert sorted(p.stem for p in FILTER_DIR.glob("*.yml")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_documentation_renders_with_a_description(
    name: str, rendered: dict[str, dict[str, Any]]
) -> None:
    entry = rendered[name]
    doc = entry["doc"]
    assert doc["name"] == name
    assert Path(doc["filename"]).resolve() == (FILTER_DIR / f"{name}.yml").resolve()
    assert isinstance(doc["short_description"], str) and doc["short_description"]
    assert doc["description"] and all(isinstance(d, str) and d for d in doc["description"])
    assert doc["author"] == "ascend-serve developers"
    assert bad_descriptions(doc, "DOCUMENTATION") == []
    assert yaml.safe_load(entry["examples"])
    assert f"ascend_serve.fleet.{name}" in entry["examples"]
    assert set(entry["return"]) == {"_value"}
    assert entry["return"]["_value"]["type"]
    assert bad_descriptions(entry["return"], "RETURN") == []


@pytest.mark.parametrize("name", NAMES)
def test_documented_options_are_the_filter_parameters(
    name: str, rendered: dict[str, dict[str, Any]]
) -> None:
    """The input is ``_input`` (the first parameter), every other parameter an option under its
    own name (a keyword too); required where it has no default, else with that default (None:
    none documented); ``positional`` lists them in the function's order."""
    parameters = list(inspect.signature(FILTERS[name]).parameters.values())
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters)
    names = ["_input", *(p.name for p in parameters[1:])]
    doc = rendered[name]["doc"]
    options = doc["options"]
    assert set(options) == set(names)
    assert [s.strip() for s in doc["positional"].split(",")] == names
    for option, parameter in zip(names, parameters, strict=True):
        entry = options[option]
        assert entry.get("type"), option
        required = parameter.default is inspect.Parameter.empty
        assert entry.get("required", False) is required, option
        if not required:
            assert entry.get("default") == parameter.default, option


def test_ansible_doc_lists_and_renders_every_filter_as_text() -> None:
    listed = ansible_doc("filter", "-l", "ascend_serve.fleet")
    assert listed.returncode == 0, listed.stderr
    for name in NAMES:
        line = next(line for line in listed.stdout.splitlines()
                    if line.split() and line.split()[0] == FQCN + name)
        assert "UNDOCUMENTED" not in line, line
    proc = ansible_doc("filter", *(FQCN + name for name in NAMES))
    assert proc.returncode == 0, proc.stderr
    assert "[WARNING]" not in proc.stderr, proc.stderr
    for name in NAMES:
        assert f"> FILTER {FQCN}{name} (" in proc.stdout
