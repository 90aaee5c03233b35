"""An inventory's hosts and their variables, as a run of the collection's roles sees them.

Ansible's own machinery reads the inventory (``InventoryManager``: hosts.yml, group_vars,
host_vars, with their precedence) and resolves each host's variables (``VariableManager``). The
roles' defaults and vars files (``defaults/main.yml``, ``vars/main.yml`` of the roles that name
artifacts) sit under them, as in a play, and are templated with Ansible's ``Templar``, so file
names come out exactly as the roles compute them. What a role reads from the host at run time
(``ansible_facts['architecture']``) is given here, and the one fact the roles read the version
sets from, ``ascend_stack_resolved``, comes from the function the ``ascend_stack`` role's filter
calls (:func:`ascend_serve.stack.matrix.resolve_for_host`) over the same variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ansible is imported where it is used, not with this module: importing it patches the
# interpreter (sys.intern among others), which torch's compiler refuses, and every ascend-serve
# command imports this package through the CLI (ascend-serve model make-tiny imports torch).
from ascend_serve.resources import role_path
from ascend_serve.stack.matrix import CHOICE, Matrix, MatrixError, resolve_for_host

# The roles whose variables name artifacts, in the order a play of site.yml meets them (a later
# role's defaults never override an earlier one's: their names are prefixed with the role's).
ROLES = ("preflight", "ascend_stack", "os_base", "npu_driver", "cann", "python_env",
         "model_store", "vllm_service")


class InventoryError(ValueError):
    """The inventory cannot be read, or a variable the artifact list needs cannot be resolved."""


class NoHostsError(InventoryError):
    """No host of the inventory matches the pattern and limit."""


def _role_vars(loader: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for role in ROLES:
        for part in ("defaults", "vars"):
            path = role_path(role, part, "main.yml")
            if not Path(path).is_file():
                continue
            data = loader.load_from_file(str(path), trusted_as_template=True)
            if isinstance(data, Mapping):
                merged.update(data)
    return merged


@dataclass
class HostVars:
    """One host's variables; :meth:`get` templates a variable as the roles would."""

    name: str
    variables: dict[str, Any]
    loader: Any

    def with_vars(self, **extra: Any) -> HostVars:
        return HostVars(self.name, {**self.variables, **extra}, self.loader)

    def has(self, name: str) -> bool:
        return name in self.variables

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self.variables:
            return default
        from ansible.errors import AnsibleError  # type: ignore[import-untyped]
        from ansible.template import Templar  # type: ignore[import-untyped]

        templar = Templar(loader=self.loader, variables=self.variables)
        try:
            return _plain(templar.template(self.variables[name]))
        except AnsibleError as exc:
            raise InventoryError(f"host {self.name}: cannot resolve {name}: {exc}") from exc

    def role_file(self, role: str, variable: str, arch: str, stack: Mapping[str, Any]) -> str:
        """A file-name variable of a role for a host of CPU ``arch`` running set ``stack``."""
        value = self.with_vars(ascend_stack_resolved=dict(stack),
                               ansible_facts={"architecture": arch}).get(variable)
        if not isinstance(value, str) or not value:
            raise InventoryError(f"host {self.name}: {role}'s {variable} is empty")
        return value.strip()


def _plain(value: Any) -> Any:
    """Ansible's tagged strings, lists and dicts as plain Python values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool | int | float) or value is None:
        return value
    return value


def read_hosts(inventory: Path | list[str], limit: str | None = None,
               pattern: str | None = None,
               vault_password_files: list[Path] | None = None) -> list[HostVars]:
    """The inventory's hosts (``limit``: an Ansible host pattern) with their variables over the
    roles' defaults. ``inventory``: one path, or the sources ansible-playbook is given (``-i``,
    in order); ``pattern``: a play's ``hosts``, of which ``limit`` keeps a subset as ``--limit``
    does; ``vault_password_files``: for vault-encrypted variables, as ansible-playbook's
    ``--vault-password-file`` (ansible.cfg's ``vault_password_file`` is read too)."""
    sources = [str(inventory)] if isinstance(inventory, Path) else list(inventory)
    for source in sources:
        if "," not in source and not Path(source).exists():
            raise InventoryError(f"inventory {source} does not exist")
    from ansible.cli import CLI  # type: ignore[import-untyped]
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager  # type: ignore[import-untyped]
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]
    from ansible.plugins.vars import host_group_vars  # type: ignore[import-untyped]
    from ansible.vars.manager import VariableManager  # type: ignore[import-untyped]

    # The group_vars/host_vars plugin keeps the files it found per directory for the life of the
    # process; a second read in one process (fetch, then verify) must see files written since.
    host_group_vars.FOUND.clear()
    loader = DataLoader()
    try:
        loader.set_vault_secrets(CLI.setup_vault_secrets(
            loader, [], [str(p) for p in vault_password_files or []], auto_prompt=False,
            initialize_context=False))
        manager = InventoryManager(loader=loader, sources=sources)
        if pattern is None:
            hosts = manager.get_hosts(pattern=limit or "all")
        else:
            manager.subset(limit)
            hosts = manager.get_hosts(pattern=pattern)
        variables = VariableManager(loader=loader, inventory=manager)
        defaults = _role_vars(loader)
        result = [HostVars(h.name, {**defaults, **variables.get_vars(host=h)}, loader)
                  for h in hosts]
    except AnsibleError as exc:
        raise InventoryError(f"cannot read inventory {', '.join(sources)}: {exc}") from exc
    if not result:
        raise NoHostsError(f"inventory {', '.join(sources)} has no host"
                             + (f" matching {limit!r}" if limit else "")
                             + (f" in {pattern!r}" if pattern else ""))
    return result


def resolved_sets(host: HostVars, matrix: Matrix | None = None) -> dict[str, Any]:
    """The host's fact ``ascend_stack_resolved`` (its accelerator set, ``serving``: the set its
    serving environment installs), resolved from the host's choice variables by the function the
    ``ascend_stack`` role's filter ``stack_resolve`` calls, so the two cannot disagree."""
    try:
        return resolve_for_host({key: host.get(key) for key in CHOICE}, matrix)
    except MatrixError as exc:
        raise InventoryError(f"host {host.name}: {exc}") from exc
