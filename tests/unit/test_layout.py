"""The package's layout rules, read from the source (the AST) of every module of ascend_serve.

Every import counts: at module level, inside functions and under ``if TYPE_CHECKING``.

- The domain packages (every package but ``cli``, and the top-level modules) never import
  ``ascend_serve.cli``: exit codes live in :mod:`ascend_serve.exitcodes`.
- ``node/`` runs on managed nodes with their system Python: it imports the standard library and
  other ``node/`` modules only (``validate.py`` also httpx, which every vLLM environment has), and
  it parses as Python 3.8.
- ``cli/``: one module per command. A command module imports, of ``cli``, only ``console`` and
  ``options`` (what commands share); ``console`` and ``options`` import no command; ``main``
  assembles every command module.
- No module finds files through ``__file__``: package data comes through
  :mod:`ascend_serve.resources` (importlib.resources), so an installed wheel finds it too.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import ROOT

PACKAGE_DIR = ROOT / "python" / "ascend_serve"
CLI = "ascend_serve.cli"
NODE = "ascend_serve.node"
CLI_SHARED = {f"{CLI}.console", f"{CLI}.options"}
CLI_MAIN = f"{CLI}.main"
# Third-party imports a node module may make, and why.
NODE_EXTRA = {f"{NODE}.validate": {"httpx"}}  # runs with the serving environment's vLLM Python
NODE_PYTHON = (3, 8)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports, absolute (``from a import b``: ``a.b``)
    line: int

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


def _module_files() -> dict[str, Path]:
    """Every module of the package by dotted name; the packaged collection is data, not code."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(PACKAGE_DIR):  # links to directories: not entered
        dirnames[:] = sorted(d for d in dirnames if d not in ("_collections", "__pycache__"))
        for filename in sorted(filenames):
            if filename.endswith(".py"):
                path = Path(dirpath) / filename
                parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                found[name] = path
    return found


MODULES = _module_files()


def _tree(name: str) -> ast.Module:
    return ast.parse(MODULES[name].read_text(encoding="utf-8"), filename=str(MODULES[name]))


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def imports_in(tree: ast.AST, name: str, package: str) -> list[Import]:
    """Every import in ``tree`` (module ``name`` of ``package``), anywhere in it, relative
    imports made absolute; ``from a import b`` gives ``a`` and ``a.b`` (b may be a module)."""
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.append(Import(name, base, node.lineno))
            found += [Import(name, f"{base}.{alias.name}", node.lineno) for alias in node.names
                      if alias.name != "*"]
    return found


def imports_of(name: str) -> list[Import]:
    return imports_in(_tree(name), name, _package_of(name))


def _within(target: str, package: str) -> bool:
    return target == package or target.startswith(f"{package}.")


def _cli_modules() -> list[str]:
    return sorted(n for n in MODULES if _within(n, CLI) and n != CLI)


def _command_modules() -> list[str]:
    return [n for n in _cli_modules() if n not in CLI_SHARED and n != CLI_MAIN]


def test_the_package_is_read() -> None:
    """The walk sees the packages and the node modules that are links into the collection."""
    assert {CLI_MAIN, f"{CLI}.deploy", "ascend_serve.fleet.deploy", f"{NODE}.validate",
            f"{NODE}.hccn", "ascend_serve.resources", "ascend_serve.exitcodes"} <= set(MODULES)
    assert not any("_collections" in n for n in MODULES)


def test_the_reader_sees_every_kind_of_import() -> None:
    """Inside functions and under TYPE_CHECKING, relative, and ``from package import module``."""
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from ascend_serve import cli\n"
              "def f() -> None:\n    from ..cli import console\n    import ascend_serve.cli.bench\n"
              "    from . import matrix\n")
    targets = {i.target for i in imports_in(ast.parse(source), "ascend_serve.stack.probe",
                                            "ascend_serve.stack")}
    assert {"ascend_serve.cli", "ascend_serve.cli.console", "ascend_serve.cli.bench",
            "ascend_serve.stack.matrix"} <= targets


def test_domain_never_imports_the_cli() -> None:
    bad = [str(i) for name in MODULES if not _within(name, CLI) for i in imports_of(name)
           if _within(i.target, CLI)]
    assert not bad, "domain code imports the command line:\n" + "\n".join(bad)


def test_node_imports_the_standard_library_and_node_only() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = []
    for name in (n for n in MODULES if _within(n, NODE)):
        for i in imports_of(name):
            top = i.target.split(".")[0]
            allowed = (_within(i.target, NODE) or (top in stdlib and top != "ascend_serve")
                       or top in NODE_EXTRA.get(name, set()))
            if not allowed:
                bad.append(str(i))
    assert not bad, "node code imports beyond the standard library:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _within(n, NODE)))
def test_node_parses_as_python_3_8(name: str) -> None:
    ast.parse(MODULES[name].read_text(encoding="utf-8"), filename=str(MODULES[name]),
              feature_version=NODE_PYTHON)


def test_commands_do_not_import_each_other() -> None:
    commands = set(_command_modules())
    assert {f"{CLI}.serve", f"{CLI}.profiles", f"{CLI}.tune", f"{CLI}.bench"} <= commands
    bad = []
    for name in commands | CLI_SHARED:
        allowed = CLI_SHARED - {name} if name in commands else {f"{CLI}.console"} - {name}
        for i in imports_of(name):
            if not _within(i.target, CLI) or i.target == CLI:
                continue
            if not any(_within(i.target, ok) for ok in allowed):
                bad.append(str(i))
    assert not bad, ("a command imports another (shared options go in cli/options.py, "
                     "shared output in cli/console.py):\n" + "\n".join(bad))


def test_main_assembles_every_command() -> None:
    imported = {i.target.rpartition(".")[0] if i.target.rpartition(".")[0] in MODULES
                else i.target for i in imports_of(CLI_MAIN)}
    missing = [n for n in _command_modules() if n not in imported]
    assert not missing, f"commands main.py does not register: {', '.join(missing)}"


def test_no_module_finds_files_through_dunder_file() -> None:
    bad = [f"{name} (line {node.lineno})" for name in MODULES for node in ast.walk(_tree(name))
           if isinstance(node, ast.Name) and node.id == "__file__"]
    assert not bad, ("package data comes through ascend_serve.resources "
                     "(importlib.resources), not __file__:\n" + "\n".join(bad))

