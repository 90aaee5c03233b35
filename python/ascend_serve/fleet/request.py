"""The operator's input to ``ascend-serve deploy``, checked before anything runs.

:func:`prepare` resolves the project (a checkout with ``ansible.cfg``, or none: an installed wheel
runs the ``ascend_serve.fleet`` collection it ships), the playbook, the inventories, the extra
vars and the vault password files into a :class:`DeployRequest`; :func:`count_plays` tells the
progress display how many plays to expect.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ascend_serve.resources import COLLECTION, collection_dir

DEFAULT_PLAYBOOK = "site.yml"
DEFAULT_INVENTORY = Path("inventories/local/hosts.yml")  # under the project
PROJECT_ENV = "ASCEND_SERVE_PROJECT"


class DeployInputError(ValueError):
    """The operator's input is wrong; nothing was started (exit 2)."""


# --- input ---------------------------------------------------------------------------------------


def _is_project(path: Path) -> bool:
    return (path / "ansible.cfg").is_file() and (path / DEFAULT_PLAYBOOK).is_file()


def find_project(cwd: Path | None = None) -> Path | None:
    """The project whose ``ansible.cfg``, roles and collections the run uses; None for none.

    ``$ASCEND_SERVE_PROJECT``, else the current directory or the nearest parent holding
    ``ansible.cfg`` and ``site.yml``, else the checkout this package runs from (an editable
    install: the collection it finds is the checkout itself, through the link bootstrap makes).
    None from an installed wheel anywhere else: the run then uses the collection it ships.
    """
    env = os.environ.get(PROJECT_ENV)
    if env:
        path = Path(env).expanduser().resolve()
        if not (path / "ansible.cfg").is_file():
            raise DeployInputError(f"{PROJECT_ENV}={env} has no ansible.cfg")
        return path
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents, collection_dir().resolve()):
        if _is_project(candidate):
            return candidate
    return None


def resolve_playbook(name: str, project: Path | None, cwd: Path) -> Path:
    """A path as given (relative to ``cwd``), else one in the project, else a playbook of the
    ``ascend_serve.fleet`` collection by name (``network``, ``network.yml`` or
    ``ascend_serve.fleet.network``)."""
    given = Path(name).expanduser()
    candidates = [given if given.is_absolute() else cwd / given]
    playbooks = collection_dir() / "playbooks"
    if not given.is_absolute():
        if project is not None:
            candidates.append(project / given)
        if len(given.parts) == 1:
            stem = given.name.removeprefix(f"{COLLECTION}.")
            candidates += [playbooks / stem]
            if given.suffix not in (".yml", ".yaml"):
                candidates += [playbooks / f"{stem}.yml", playbooks / f"{stem}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    names = sorted(p.stem for p in playbooks.glob("*.yml"))
    raise DeployInputError(
        f"no playbook {name!r} (a file, a playbook of the project, or one of the collection's "
        f"playbooks: {', '.join(names) or 'none'})")


def resolve_inventories(values: list[str], project: Path | None, cwd: Path) -> list[str]:
    """Absolute inventory sources (ansible runs in the project directory, not here).

    A ``host1,host2,`` list is passed on as it is. Without ``-i`` the project's default
    (``inventories/local/hosts.yml``) is used; without a project, ``-i`` is required.
    """
    if not values:
        if project is None:
            raise DeployInputError(
                f"no inventory given (-i), and no project here to take its {DEFAULT_INVENTORY} "
                f"from (a checkout with ansible.cfg and {DEFAULT_PLAYBOOK}, or {PROJECT_ENV})")
        default = project / DEFAULT_INVENTORY
        if not default.exists():
            raise DeployInputError(f"no inventory given (-i) and no default {default}")
        return [str(default)]
    resolved = []
    for value in values:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else cwd / path
        if path.exists():
            resolved.append(str(path.resolve()))
        elif "," in value:
            resolved.append(value)  # an inline host list
        else:
            raise DeployInputError(f"inventory {value} does not exist")
    return resolved


class _TolerantLoader(yaml.SafeLoader):
    """Safe YAML that accepts Ansible's tags (``!vault``, ``!unsafe``) as plain values."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    return None


_TolerantLoader.add_multi_constructor("!", _any_tag)


def _load_mapping(text: str, what: str) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_TolerantLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise DeployInputError(f"{what} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DeployInputError(f"{what} is not a mapping of variables")
    return data


def _parse_kv(text: str) -> dict[str, Any]:
    from ansible.parsing.splitter import parse_kv  # type: ignore[import-untyped]

    try:
        data: dict[str, Any] = dict(parse_kv(text))
    except Exception as exc:  # ansible raises its own parser errors
        raise DeployInputError(f"-e {text!r}: {exc}") from exc
    raw = data.pop("_raw_params", None)
    if raw is not None or not data:
        raise DeployInputError(
            f"-e {text!r}: expected key=value pairs, YAML/JSON ({{...}}) or @FILE")
    return data


@dataclass(frozen=True)
class ExtraVars:
    """One ``-e``: a file of the operator's (``path``), or inline text kept out of the run dir."""

    given: str
    path: Path | None = None
    text: str | None = None  # YAML/JSON to hand over in a temporary file
    keys: tuple[str, ...] = ()

    def describe(self) -> str:
        """For summaries: the file, or the names set (values are never recorded)."""
        if self.path is not None:
            return f"@{self.path}"
        return "inline: " + ", ".join(self.keys)


def parse_extra_vars(value: str, cwd: Path) -> ExtraVars:
    """Check one ``-e`` the way ansible-playbook reads it (key=value, YAML/JSON, @FILE)."""
    if not value:
        raise DeployInputError("-e needs a value")
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        path = path if path.is_absolute() else cwd / path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DeployInputError(f"-e {value}: cannot read {path}: {exc.strerror}") from exc
        if not text.lstrip().startswith("$ANSIBLE_VAULT"):  # ansible decrypts it
            keys = tuple(_load_mapping(text, f"-e {value}"))
        else:
            keys = ()
        return ExtraVars(value, path=path.resolve(), keys=keys)
    if value[0] in "/.":
        raise DeployInputError(f"-e {value}: a file of variables is given as @{value}")
    if value[0] in "[{":
        data = _load_mapping(value, f"-e {value!r}")
        return ExtraVars(value, text=value, keys=tuple(str(k) for k in data))
    data = _parse_kv(value)
    bad = [k for k in data if not str(k).isidentifier()]
    if bad:
        raise DeployInputError(f"-e {value!r}: not a variable name: {', '.join(map(str, bad))}")
    return ExtraVars(value, text=json.dumps(data), keys=tuple(data))


@dataclass(frozen=True)
class DeployRequest:
    """Everything one run needs, checked."""

    project: Path | None  # None: the packaged collection and the operator's Ansible settings
    playbook: Path
    inventories: list[str]
    limit: str | None = None
    tags: list[str] = field(default_factory=list)
    skip_tags: list[str] = field(default_factory=list)
    check: bool = False
    diff: bool = False
    extra_vars: list[ExtraVars] = field(default_factory=list)
    vault_password_files: list[Path] = field(default_factory=list)
    forks: int | None = None
    # The inventory's values of the variables a play's serial reads, handed over as the first -e
    # (an operator's -e of the same name wins; see inventory_batches).
    serial_from_inventory: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The playbook as the operator knows it: a collection playbook by its FQCN, else relative
        to the project when inside it."""
        if self.in_collection:
            return f"{COLLECTION}.{self.playbook.stem}"
        if self.project is None:
            return str(self.playbook)
        try:
            return str(self.playbook.relative_to(self.project))
        except ValueError:
            return str(self.playbook)

    @property
    def in_collection(self) -> bool:
        """The playbook is one of the ``ascend_serve.fleet`` collection's."""
        return self.playbook.parent == (collection_dir() / "playbooks").resolve()

    @property
    def playbook_arg(self) -> str:
        """What ansible-playbook is given: a path, or (without a project) a collection playbook
        by name, found on the collections path."""
        return self.name if self.project is None and self.in_collection else str(self.playbook)


def _split_list(values: list[str]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def prepare(
    playbook: str = DEFAULT_PLAYBOOK,
    inventories: list[str] | None = None,
    *,
    limit: str | None = None,
    tags: list[str] | None = None,
    skip_tags: list[str] | None = None,
    check: bool = False,
    diff: bool = False,
    extra_vars: list[str] | None = None,
    vault_password_files: list[str] | None = None,
    forks: int | None = None,
    cwd: Path | None = None,
) -> DeployRequest:
    """Check the operator's input; raises :class:`DeployInputError` (nothing runs)."""
    here = (cwd or Path.cwd()).resolve()
    project = find_project(here)
    vault_files = []
    for value in vault_password_files or []:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else here / path
        if not path.is_file():
            raise DeployInputError(f"vault password file {value} does not exist")
        vault_files.append(path.resolve())
    if forks is not None and forks < 1:
        raise DeployInputError("--forks must be at least 1")
    if limit is not None and not limit.strip():
        raise DeployInputError("--limit needs a host pattern")
    book = resolve_playbook(playbook, project, here)
    sources = resolve_inventories(list(inventories or []), project, here)
    given = [parse_extra_vars(v, here) for v in extra_vars or []]
    batches = inventory_batches(book, sources, limit, {k for ev in given for k in ev.keys},
                                vault_files)
    if batches:
        given.insert(0, ExtraVars("inventory: " + ", ".join(batches), text=json.dumps(batches),
                                  keys=tuple(batches)))
    return DeployRequest(
        project=project,
        playbook=book,
        inventories=sources,
        limit=limit,
        tags=_split_list(tags or []),
        skip_tags=_split_list(skip_tags or []),
        check=check,
        diff=diff,
        extra_vars=given,
        vault_password_files=vault_files,
        forks=forks,
        serial_from_inventory=batches,
    )


def _plays(playbook: Path, _seen: frozenset[Path] = frozenset()) -> list[dict[str, Any]] | None:
    """The plays of a playbook in order, following ``import_playbook``; None when that is not
    knowable."""
    if playbook in _seen:
        return None
    try:
        data = yaml.load(playbook.read_text(encoding="utf-8"), Loader=_TolerantLoader)  # noqa: S506
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(data, list):
        return None
    plays: list[dict[str, Any]] = []
    for entry in data:
        if not isinstance(entry, dict):
            return None
        imported = entry.get("ansible.builtin.import_playbook", entry.get("import_playbook"))
        if imported is None:
            plays.append(entry)
            continue
        if not isinstance(imported, str) or "{{" in imported:
            return None
        if imported.startswith(f"{COLLECTION}."):  # a playbook of the collection, by FQCN
            stem = imported.removeprefix(f"{COLLECTION}.")
            target = collection_dir() / "playbooks" / f"{stem}.yml"
        else:
            target = Path(imported)
            target = target if target.is_absolute() else playbook.parent / target
        sub = _plays(target.resolve(), _seen | {playbook})
        if sub is None:
            return None
        plays += sub
    return plays


def count_plays(playbook: Path) -> int | None:
    """Plays in a playbook, following ``import_playbook``; None when that is not knowable."""
    plays = _plays(playbook)
    return None if plays is None else len(plays)


# --- batches (serial) from the inventory ---------------------------------------------------------


def serial_variables(playbook: Path) -> dict[str, str]:
    """The variables the playbook's plays template ``serial`` from, each with the ``hosts`` of
    the first play that does (``{"ascend_upgrade_batches": "ascend_nodes"}``).

    Ansible templates a play's ``serial`` before any host is known, with the play's own and the
    extra variables only: an inventory's value (group_vars, host_vars) never reaches it, so
    ``deploy`` hands the inventory's value over as an extra variable (:func:`inventory_batches`).
    """
    from jinja2 import Environment, TemplateSyntaxError, meta

    found: dict[str, str] = {}
    env = Environment(autoescape=False)  # noqa: S701 - parsed for names, never rendered
    for play in _plays(playbook) or []:
        serial, hosts = play.get("serial"), play.get("hosts", "all")
        if not isinstance(serial, str) or "{{" not in serial:
            continue
        try:
            names = meta.find_undeclared_variables(env.parse(serial))
        except TemplateSyntaxError:  # ansible-playbook reports a broken template itself
            names = set()
        own = play.get("vars")
        own = own if isinstance(own, dict) else {}
        for name in sorted(names):
            if name not in own:
                found.setdefault(name, hosts if isinstance(hosts, str) else ",".join(hosts))
    return found


_UNSET = object()


def _show(value: Any) -> str:
    return "(not set)" if value is _UNSET else json.dumps(value)


def inventory_batches(playbook: Path, inventories: list[str], limit: str | None,
                      given: set[str],
                      vault_password_files: list[Path] | None = None) -> dict[str, Any]:
    """The inventory's values of the variables the playbook's ``serial`` reads, for those the
    operator did not give with ``-e``; read by Ansible's inventory code
    (:func:`ascend_serve.mirror.inventory.read_hosts`) over the hosts of the play that reads it.
    Raises :class:`DeployInputError` when those hosts disagree."""
    from ascend_serve.mirror.inventory import InventoryError, NoHostsError, read_hosts

    values: dict[str, Any] = {}
    for name, hosts in serial_variables(playbook).items():
        if name in given:
            continue
        try:
            members = read_hosts(inventories, limit, pattern=hosts,
                                 vault_password_files=vault_password_files)
        except NoHostsError:
            continue
        except InventoryError as exc:
            raise DeployInputError(str(exc)) from exc
        try:
            seen: dict[str, list[str]] = {}
            for host in members:
                value = host.get(name, _UNSET)
                seen.setdefault(_show(value), []).append(host.name)
        except InventoryError as exc:
            raise DeployInputError(str(exc)) from exc
        if len(seen) > 1:
            parts = "; ".join(f"{', '.join(names)}: {shown}" for shown, names in seen.items())
            raise DeployInputError(
                f"the hosts of play {hosts!r} disagree about {name} (a play's batches are one "
                f"value for all its hosts): {parts}")
        (shown,) = seen
        if shown != _show(_UNSET):
            values[name] = json.loads(shown)
    return values
