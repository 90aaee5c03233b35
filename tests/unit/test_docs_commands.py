"""Every command in the docs runs as written: the shell blocks of README.md and docs/*.md.

Each ```sh / ```bash / ```shell / ```console block is split into commands (continuation lines
joined, comments dropped, pipelines and ``&&`` lists split). Then, without network, containers
or hosts:

- ``ascend-serve ...``: the command is resolved in the real CLI (typer's click tree) and its
  arguments parsed with click's ``make_context``, which runs the parser and every type
  conversion but not the command: an unknown option, a missing value, a wrong type or arity, an
  unknown subcommand fails. Where the parsed command has an ``inventory`` option, the inventory
  must exist and each ``--limit`` must match a host of it. ``doctor`` over SSH: each host must
  be a host (name or ``ansible_host``) of the example inventory, and where that host's
  connection user is not root, ``--user`` (or ``user@``) must name it and ``--sudo`` must be
  given when the inventory becomes root (``ansible_become``). No role installs ascend-serve on
  the nodes, so a command documented as run "on a node" (its comment) fails.
- ``ansible-playbook ...``: ``--syntax-check`` with the inventory named (the real playbooks and
  collection), and each ``--limit`` must match a host of that inventory.

Placeholders map to the shipped examples (PLACEHOLDERS): ``inventories/mysite`` is
``inventories/prod``. Commands of other programs (kubectl, ssh, scripts) are not run. Blocks
that show a synopsis rather than a command use a ```text fence.
"""

from __future__ import annotations

import platform
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from paths import ROOT

from ascend_serve.cli.main import app

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCES = ("sh", "bash", "shell", "console")
# What a placeholder of the docs stands for when the command is checked.
PLACEHOLDERS = {
    "inventories/mysite": "inventories/prod",  # "copy inventories/prod and edit addresses"
}
# Shell substitutions the docs use, as the controller would expand them.
SUBSTITUTIONS = {"$(uname -m)": platform.machine()}
# The inventory a doctor command's SSH hosts belong to (doctor takes no inventory).
DOCTOR_INVENTORY = ROOT / "inventories" / "prod"
CHECKED = ("ascend-serve", "ansible-playbook")


@dataclass(frozen=True)
class Command:
    source: str  # file:line
    argv: tuple[str, ...]
    comment: str = ""  # the line's trailing shell comment

    def __str__(self) -> str:
        return f"{self.source}: {shlex.join(self.argv)}"


def _substitute(text: str) -> str:
    for placeholder, value in {**PLACEHOLDERS, **SUBSTITUTIONS}.items():
        text = text.replace(placeholder, value)
    return text


def _split_comment(line: str) -> tuple[str, str]:
    """The command and its trailing comment: the first # outside quotes after a blank."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index], line[index + 1:].strip()
    return line, ""


def commands_in(path: Path) -> list[Command]:
    found: list[Command] = []
    text = path.read_text(encoding="utf-8")
    for block in re.finditer(r"^```([a-z]*)[ \t]*\n(.*?)^```", text, re.M | re.S):
        if block.group(1) not in FENCES:
            continue
        first_line = text.count("\n", 0, block.start(2)) + 1
        lines = block.group(2).split("\n")
        index = 0
        while index < len(lines):
            start = index
            line = lines[index]
            while line.rstrip().endswith("\\") and index + 1 < len(lines):
                index += 1
                line = line.rstrip()[:-1] + " " + lines[index]
            index += 1
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            code, comment = _split_comment(_substitute(line))
            if not any(program in code for program in CHECKED):
                continue  # another program's command (cp, kubectl, ssh alone)
            tokens = shlex.split(code)
            part: list[str] = []
            for token in [*tokens, "|"]:
                if token in ("|", "||", "&&", ";"):
                    if part and part[0] in CHECKED:
                        found.append(Command(f"{path.relative_to(ROOT)}:{first_line + start}",
                                             tuple(part), comment))
                    part = []
                else:
                    part.append(token)
    return found


ALL = [c for doc in DOCS for c in commands_in(doc)]


def _hosts(inventory: Path, pattern: str = "all") -> dict[str, dict[str, Any]]:
    """The hosts of an inventory matching an Ansible pattern, with their variables (Ansible's
    own InventoryManager and VariableManager, as ansible-playbook reads them)."""
    from ansible.inventory.manager import InventoryManager  # type: ignore[import-untyped]
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]
    from ansible.plugins.vars import host_group_vars  # type: ignore[import-untyped]
    from ansible.vars.manager import VariableManager  # type: ignore[import-untyped]

    host_group_vars.FOUND.clear()
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    return {h.name: variables.get_vars(host=h) for h in manager.get_hosts(pattern=pattern)}


def _check_limit(command: Command, inventory: str | None, limit: str | None) -> None:
    if limit is None:
        return
    assert inventory is not None, f"{command}: --limit without an inventory"
    assert _hosts(ROOT / inventory, limit), (
        f"{command}: --limit {limit!r} matches no host of {inventory} "
        f"({', '.join(sorted(_hosts(ROOT / inventory)))})")


def _parse(command: Command) -> tuple[Any, Any]:
    """Resolve the command in the CLI and parse its arguments, without running it. (Typer
    carries its own copy of click, typer._click: its classes are matched by what they do.)"""
    current: Any = typer.main.get_command(app)
    args = list(command.argv[1:])
    parent: Any = None
    name = "ascend-serve"
    while True:
        try:
            ctx = current.make_context(name, args, parent=parent)
        except Exception as exc:
            if type(exc).__name__ == "Exit":  # an eager option (--version, --help) answered
                assert getattr(exc, "exit_code", 1) == 0, f"{command}: {exc!r}"
                return parent, current
            if hasattr(exc, "format_message"):  # click's usage and parameter errors
                pytest.fail(f"{command}: {exc.format_message()}", pytrace=False)
            raise
        if not hasattr(current, "resolve_command"):  # a command, not a group
            return ctx, current
        rest = [*ctx._protected_args, *ctx.args]  # click's split: subcommand and its arguments
        if not rest:
            return ctx, current
        sub_name, sub, remaining = current.resolve_command(ctx, rest)
        assert sub is not None and sub_name is not None, f"{command}: unknown command {rest[0]}"
        parent, current, name, args = ctx, sub, sub_name, remaining


def _check_doctor(command: Command, params: dict[str, Any]) -> None:
    hosts = params.get("hosts") or []
    if not hosts or params.get("local"):
        return
    inventory = _hosts(DOCTOR_INVENTORY)
    by_address = {str(v.get("ansible_host", name)): name for name, v in inventory.items()}
    for target in hosts:
        user, _, rest = target.rpartition("@")
        host = rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest
        name = host if host in inventory else by_address.get(host)
        assert name is not None, (
            f"{command}: {host} is not a host of the example {DOCTOR_INVENTORY.name} "
            f"({', '.join(f'{n} ({a})' for a, n in by_address.items())})")
        wanted = str(inventory[name].get("ansible_user", "root"))
        given = user or params.get("user") or "root"
        assert given == wanted, f"{command}: {name} is reached as {wanted}, not {given}"
        if inventory[name].get("ansible_become") and wanted != "root":
            assert params.get("sudo"), f"{command}: {name} needs --sudo (ansible_become)"


def test_the_docs_have_commands_to_check() -> None:
    """The extraction finds the documented commands (so the checks below are not vacuous)."""
    programs = {c.argv[0] for c in ALL}
    assert programs == set(CHECKED)
    assert len([c for c in ALL if c.argv[0] == "ascend-serve"]) >= 20
    sources = {c.source.split(":")[0] for c in ALL}
    assert {"README.md", "docs/mirror.md", "docs/monitoring.md"} <= sources


@pytest.mark.parametrize("command", [c for c in ALL if c.argv[0] == "ascend-serve"], ids=str)
def test_ascend_serve_command_parses(command: Command) -> None:
    assert not re.search(r"\bon (a|the|each) node\b", command.comment), (
        f"{command}: documented as run on a node ({command.comment!r}), where no role installs "
        f"ascend-serve: show how to run it from the controller")
    ctx, cmd = _parse(command)
    if ctx is None:  # ascend-serve --version
        return
    params = dict(ctx.params)
    names = {p.name for p in cmd.params}
    if "inventory" in names and params.get("inventory"):
        given = params["inventory"]
        for inventory in given if isinstance(given, list | tuple) else [given]:
            assert (ROOT / str(inventory)).exists(), f"{command}: no inventory {inventory}"
            _check_limit(command, str(inventory), params.get("limit"))
    if cmd.name == "doctor":
        _check_doctor(command, params)


def _option(argv: tuple[str, ...], *names: str) -> str | None:
    for index, token in enumerate(argv):
        for name in names:
            if token == name and index + 1 < len(argv):
                return argv[index + 1]
            if name.startswith("--") and token.startswith(name + "="):
                return token.split("=", 1)[1]
    return None


@pytest.mark.parametrize("command", [c for c in ALL if c.argv[0] == "ansible-playbook"],
                         ids=str)
def test_ansible_playbook_command_passes_syntax_check(command: Command) -> None:
    inventory = _option(command.argv, "-i", "--inventory")
    assert inventory is not None and (ROOT / inventory).exists(), (
        f"{command}: the inventory {inventory} does not exist")
    _check_limit(command, inventory, _option(command.argv, "-l", "--limit"))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), *command.argv[1:],
         "--syntax-check"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, f"{command}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
