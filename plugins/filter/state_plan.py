"""Plan filters: from a role's one state read of a node and what the role wants, the list of
things to do, so that the role's YAML reads a verdict instead of comparing in Jinja
(issue 33: "decisions in Python, not in Jinja"); an empty list is a converged node::

    plan: "{{ _role_state | ascend_serve.fleet.state_plan(want) }}"
    unit: "{{ _role_state.unit | ascend_serve.fleet.unit_plan('vllm') }}"
    keys: "{{ _role_state | ascend_serve.fleet.sysctl_plan(wanted) }}"
    report: "{{ _role_state | ascend_serve.fleet.sysctl_report(wanted) }}"
    limits: "{{ _role_state.limits | ascend_serve.fleet.limits_plan(host_tuning_limits) }}"
    wrong: "{{ _role_state.devices | ascend_serve.fleet.device_address_problems(planned) }}"
    copy: "{{ _role_state | ascend_serve.fleet.copy_plan(src_dir, dest_dir, names) }}"
    write: "{{ _role_state.files | ascend_serve.fleet.content_plan(contents) }}"

The state is what the collection's state modules return (``files``: path -> the state
``module_utils/file_state.py`` reports; ``user``/``group``: ``module_utils/account_state.py``;
``units``: ``active``/``enabled``; ``links``: the target). The path comparison is
:func:`file_state.differences`, the one home of what "as wanted" means for a path. Controller
side: a file's wanted content is hashed here, a ``src`` file is read here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import differences
from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    plain,
)

# The account a role manages: the keys of want['account'].
ACCOUNT_KEYS = ("user", "group", "groups", "shell", "home")


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()  # noqa: S324 - a change detector, as the state read's


def _mapping(value: Any, what: str) -> dict[str, Any]:
    value = plain(value)
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"{what} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _wanted_file(entry: dict[str, Any]) -> dict[str, Any]:
    """A file entry of want['files'] as file_state.differences takes it: its content's sha1 from
    ``content`` (text), ``src`` (a controller file, read as bytes) or ``sha1``."""
    want = {"directory": False, **{k: entry.get(k) for k in ("mode", "owner", "group")}}
    if entry.get("content") is not None:
        want["sha1"] = _sha1(str(entry["content"]).encode("utf-8"))
    elif entry.get("src") is not None:
        try:
            with open(str(entry["src"]), "rb") as fh:
                want["sha1"] = _sha1(fh.read())
        except OSError as exc:
            raise AnsibleFilterError(f"state_plan: cannot read {entry['src']}: {exc}") from exc
    else:
        want["sha1"] = entry.get("sha1")
    return want


def account_differs(user: Mapping[str, Any], group: Mapping[str, Any] | None,
                    want: Mapping[str, Any]) -> bool:
    """Whether the account (account_state's ``user`` and ``group``, the latter None when not
    read) differs from ``want`` (``user``, ``group``, ``groups`` that must be among its
    supplementary groups, ``shell``, ``home``; a key left out is not compared): a missing group
    is a difference too."""
    if group is not None and not group.get("exists"):
        return True
    if not user.get("exists"):
        return True
    for key in ("group", "shell", "home"):
        if want.get(key) is not None and user.get(key) != want[key]:
            return True
    return bool(set(want.get("groups") or []) - set(user.get("groups") or []))


def state_plan(state: Any, want: Any) -> list[str]:
    """What to do on a node, in order: ``install P, Q`` (the state's ``missing_packages``),
    ``install the container engine`` and ``pull REF`` (want ``image``: the reference the node
    must hold; the state's ``image``: ``engine``, ``present``), ``account U`` (want
    ``account``), ``directory P`` (want ``dirs``: path, and optionally mode, owner, group),
    ``file P`` (want ``files``: path, one of content, src or sha1, and optionally mode, owner,
    group), ``remove P`` (want ``absent``: paths that must not exist), ``link L`` (want
    ``links``: link -> target) and ``start and enable U`` (want ``units``: names that must be
    active and enabled). Empty: nothing to do."""
    seen = _mapping(state, "state_plan: the state")
    wanted = _mapping(want, "state_plan: want")
    unknown = set(wanted) - {"image", "account", "dirs", "files", "absent", "links", "units"}
    if unknown:
        raise AnsibleFilterError(f"state_plan: unknown keys in want: {', '.join(sorted(unknown))}")
    files: dict[str, Any] = seen.get("files") or {}
    plan = []
    if seen.get("missing_packages"):
        plan.append("install " + ", ".join(seen["missing_packages"]))
    if wanted.get("image"):
        image = seen.get("image") or {}
        if not image.get("engine"):
            plan.append("install the container engine")
        if not image.get("present"):
            plan.append(f"pull {wanted['image']}")
    account = wanted.get("account")
    if account and account_differs(seen.get("user") or {}, seen.get("group"), account):
        plan.append(f"account {account['user']}")
    for entry in wanted.get("dirs") or []:
        want_dir = {"directory": True, **{k: entry.get(k) for k in ("mode", "owner", "group")}}
        if differences(files.get(entry["path"]), want_dir):
            plan.append(f"directory {entry['path']}")
    for entry in wanted.get("files") or []:
        if differences(files.get(entry["path"]), _wanted_file(entry)):
            plan.append(f"file {entry['path']}")
    plan += [f"remove {path}" for path in wanted.get("absent") or []
             if files.get(path) is not None]
    links: dict[str, Any] = seen.get("links") or {}
    plan += [f"link {link}" for link, target in (wanted.get("links") or {}).items()
             if links.get(link) != target]
    units: dict[str, Any] = seen.get("units") or {}
    for name in wanted.get("units") or []:
        unit = units.get(name) or {}
        if not (unit.get("active") and unit.get("enabled")):
            plan.append(f"start and enable {name}")
    return plan


def unit_plan(show: Any, name: Any) -> list[str]:
    """From a unit's ``systemctl show`` properties (LoadState, ActiveState, SubState, NRestarts,
    UnitFileState, NeedDaemonReload): ``reset-failed NAME`` when a loaded unit that is not
    running failed or was restarted by systemd (its start limit may be used up), and ``start and
    enable NAME`` when it is not running (active or activating), not enabled, or changed on disk
    since systemd read it. Empty: running, enabled and current."""
    unit = _mapping(show or {}, "unit_plan: the unit")
    active = unit.get("ActiveState", "")
    plan = []
    if unit.get("LoadState", "") == "loaded" and active != "active" and (
            active == "failed" or unit.get("SubState", "") == "auto-restart"
            or str(unit.get("NRestarts", "0")) != "0"):
        plan.append(f"reset-failed {name}")
    if (active not in ("active", "activating") or unit.get("UnitFileState", "") != "enabled"
            or unit.get("NeedDaemonReload", "no") == "yes"):
        plan.append(f"start and enable {name}")
    return plan


def _sysctl_value(value: Any) -> str:
    return " ".join(str(value).split())


def sysctl_plan(state: Any, wanted: Any) -> list[str]:
    """The kernel settings to write: those whose line in the sysctl file (the state's
    ``sysctl_file``: key -> value) differs from the wanted value, or whose running value (the
    state's ``sysctl``: key -> exists, writable, value) differs where /proc/sys/<key> can be
    written (whitespace as sysctl prints it)."""
    seen = _mapping(state, "sysctl_plan: the state")
    in_file: dict[str, Any] = seen.get("sysctl_file") or {}
    running: dict[str, Any] = seen.get("sysctl") or {}
    out = []
    for key, value in _mapping(wanted, "sysctl_plan: wanted").items():
        proc = running.get(key) or {}
        if in_file.get(key) != str(value) or (
                proc.get("exists") and proc.get("writable")
                and proc.get("value") != _sysctl_value(value)):
            out.append(key)
    return out


def sysctl_report(state: Any, wanted: Any) -> dict[str, dict[str, Any]]:
    """Each wanted kernel setting with its ``value``, whether it is ``applied`` (its /proc/sys
    file exists and can be written; else it is only persisted for the next boot) and the
    ``reason`` when it is not."""
    running: dict[str, Any] = _mapping(state, "sysctl_report: the state").get("sysctl") or {}
    out = {}
    for key, value in _mapping(wanted, "sysctl_report: wanted").items():
        proc = running.get(key) or {}
        path = "/proc/sys/" + key.replace(".", "/")
        if not proc.get("exists"):
            reason = f"this kernel has no {path} (the setting does not exist here)"
        elif not proc.get("writable"):
            now = proc.get("value") if proc.get("value") is not None else "unknown"
            reason = (f"{path} is not writable by this process (read-only /proc/sys, as in a"
                      f" container, or not root); running value {now}")
        else:
            reason = ""
        out[key] = {"value": str(value),
                    "applied": bool(proc.get("exists") and proc.get("writable")),
                    "reason": reason}
    return out


def limits_plan(seen: Any, limits: Any) -> list[dict[str, Any]]:
    """The PAM limits (domain, limit_type, limit_item, value) whose line is not in the file as
    the state read parsed it (``limits``: [domain, type, item, value] each)."""
    lines = [[str(v) for v in line] for line in plain(seen or [])]
    return [limit for limit in plain(limits or [])
            if [str(limit["domain"]), str(limit["limit_type"]), str(limit["limit_item"]),
                str(limit["value"])] not in lines]


def device_address_problems(seen: Any, planned: Any) -> list[str]:
    """For each planned device (device, address), a problem when the node's device (as
    hccn_facts reads them: device, address) has another address or none."""
    found = {d["device"]: d.get("address") for d in plain(seen or [])}
    out = []
    for dev in plain(planned or []):
        address = found.get(dev["device"])
        if address != dev["address"]:
            out.append(f"device {dev['device']}: address {address or 'none'}, planned"
                       f" {dev['address']}")
    return out


def copy_plan(state: Any, src_dir: Any, dest_dir: Any, names: Any, mode: str = "0644",
              owner: str = "root", group: str = "root") -> list[str]:
    """The ``names`` whose copy in ``dest_dir`` on the node (the state read's ``files``) differs
    from the controller's file in ``src_dir``: content (sha1), mode, owner or group, or missing."""
    files = _mapping(_mapping(state, "copy_plan's input").get("files") or {}, "the state's files")
    todo = []
    for name in [str(n) for n in plain(names or [])]:
        want = _wanted_file({"src": f"{src_dir}/{name}", "mode": mode, "owner": owner,
                             "group": group})
        if differences(files.get(f"{dest_dir}/{name}"), want):
            todo.append(name)
    return todo


def content_plan(files: Any, contents: Any, suffix: str = "", mode: str = "0644",
                 owner: str = "root", group: str = "root") -> list[str]:
    """The names of ``contents`` (name: text) whose file ``name + suffix`` in ``files`` (a state
    read's files, by path) differs from that text: content (sha1), mode, owner or group, or
    missing."""
    seen = _mapping(files or {}, "content_plan's input")
    todo = []
    for name, text in _mapping(contents or {}, "content_plan's contents").items():
        want = _wanted_file({"content": text, "mode": mode, "owner": owner, "group": group})
        if differences(seen.get(f"{name}{suffix}"), want):
            todo.append(name)
    return todo


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(state_plan, unit_plan, sysctl_plan, sysctl_report, limits_plan,
                               device_address_problems, copy_plan, content_plan)
