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
  :mod:`ascend_serve.resources`, so an installed wheel finds it too.
- The collection's node-side code (``plugins/module_utils``, ``plugins/modules``) imports the
  standard library, Ansible's own ``module_utils`` and the collection's ``module_utils`` only
  (``module_utils/validate.py`` also httpx), and parses as Python 3.8; the package imports the
  node-side readers from there, never through links.
- No import cycles among the package's and the collection's modules.
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
COLLECTION_PKG = "ansible_collections.ascend_serve.fleet"
MODULE_UTILS = f"{COLLECTION_PKG}.plugins.module_utils"
ANSIBLE_MODULES = f"{COLLECTION_PKG}.plugins.modules"
CLI = "ascend_serve.cli"
NODE = "ascend_serve.node"
CLI_SHARED = {f"{CLI}.console", f"{CLI}.options"}
CLI_MAIN = f"{CLI}.main"
# Third-party imports a node module may make, and why.
NODE_EXTRA = {
    f"{MODULE_UTILS}.validate": {"httpx"},  # runs with the serving environment's vLLM Python
    # the swarm run only, in a subprocess of the interpreter model_store_p2p_python names
    f"{MODULE_UTILS}.model_p2p": {"libtorrent"},
}
NODE_PYTHON = (3, 8)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports, absolute (``from a import b``: ``a.b``)
    line: int

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


def _module_files(top: Path, prefix: str) -> dict[str, Path]:
    """Every module under ``top`` by dotted name (``prefix`` + its path)."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(top):  # links to directories: not entered
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for filename in sorted(filenames):
            if filename.endswith(".py"):
                path = Path(dirpath) / filename
                parts = path.relative_to(top).with_suffix("").parts
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                found[".".join((prefix, *parts))] = path
    return found


MODULES = _module_files(PACKAGE_DIR, "ascend_serve")
# The collection's Python (the repository root is the collection): plugins by dotted name.
PLUGINS = _module_files(ROOT / "plugins", f"{COLLECTION_PKG}.plugins")
NODE_SIDE = sorted(n for n in PLUGINS if n.startswith((MODULE_UTILS, ANSIBLE_MODULES)))


ALL = {**MODULES, **PLUGINS}


def _tree(name: str) -> ast.Module:
    return ast.parse(ALL[name].read_text(encoding="utf-8"), filename=str(ALL[name]))


def _package_of(name: str) -> str:
    return name if ALL[name].name == "__init__.py" else name.rpartition(".")[0]


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


def test_the_package_and_the_collection_are_read() -> None:
    assert {CLI_MAIN, f"{CLI}.deploy", "ascend_serve.fleet.deploy", f"{NODE}.doctor_collect",
            "ascend_serve.resources", "ascend_serve.exitcodes"} <= set(MODULES)
    assert {f"{MODULE_UTILS}.validate", f"{MODULE_UTILS}.npu_smi", f"{ANSIBLE_MODULES}.ledger",
            f"{COLLECTION_PKG}.plugins.filter.stack"} <= set(PLUGINS)


def test_no_links_share_code() -> None:
    """One home per file: no link anywhere in the package or the collection's content."""
    tops = [PACKAGE_DIR, *(ROOT / d for d in ("roles", "playbooks", "plugins", "data",
                                             "templates", "meta"))]
    links = [str(p.relative_to(ROOT)) for top in tops for p in top.rglob("*") if p.is_symlink()]
    assert links == []


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


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _within(n, NODE)) + NODE_SIDE)
def test_node_parses_as_python_3_8(name: str) -> None:
    ast.parse(ALL[name].read_text(encoding="utf-8"), filename=str(ALL[name]),
              feature_version=NODE_PYTHON)


def test_the_collections_node_side_imports_the_standard_library_and_its_own() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = []
    for name in NODE_SIDE:
        for i in imports_of(name):
            top = i.target.split(".")[0]
            allowed = (_within(i.target, MODULE_UTILS) or _within(i.target, "ansible.module_utils")
                       or (top in stdlib and top != "ansible")
                       or top in NODE_EXTRA.get(name, set()))
            if not allowed:
                bad.append(str(i))
    assert not bad, "node-side collection code imports beyond its own:\n" + "\n".join(bad)


def test_the_package_reaches_the_collection_only_through_module_utils() -> None:
    """The package imports the node-side readers from the collection (their one home) and
    nothing else of it; the collection's filters import the package plainly."""
    bad = [str(i) for name in MODULES for i in imports_of(name)
           if _within(i.target, "ansible_collections") and not _within(i.target, MODULE_UTILS)]
    assert not bad, "\n".join(bad)


def _first_party(target: str) -> str | None:
    """The module of ours an import names (``from a import b``: b when it is a module)."""
    while target:
        if target in ALL:
            return target
        target = target.rpartition(".")[0]
    return None


def test_no_import_cycles() -> None:
    """Among the package's and the collection's modules, module-level imports and lazy ones
    alike (a package's ``__init__`` importing its own modules is not a cycle)."""
    graph: dict[str, set[str]] = {name: set() for name in ALL}
    for name in ALL:
        for i in imports_of(name):
            target = _first_party(i.target)
            if target and target != name and not (
                    ALL[target].name == "__init__.py" and _within(name, target)):
                graph[name].add(target)
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


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

