"""The batches a play's ``serial`` makes, as Ansible makes them.

ansible-core 2.19's ``PlaybookExecutor._get_serialized_batches`` (``ansible/executor/
playbook_executor.py``): ``serial`` is one item or a list; each item is a host count or a
percentage of the play's hosts (rounded down, at least 1); the last item repeats until every
host is in a batch; a count of 0 or less (or an empty list) takes all the hosts left. The upgrade
playbook compares Ansible's batch with this one to refuse a run whose ``serial`` did not get the
inventory's batches (Ansible templates ``serial`` without inventory variables).
"""

from __future__ import annotations

from collections.abc import Sequence


class BatchError(ValueError):
    """A serial item that is neither a count nor a percentage."""


def _count(item: object, hosts: int) -> int:
    text = str(item).strip()
    try:
        if text.endswith("%"):
            return int(int(text[:-1]) / 100.0 * hosts) or 1
        return int(text)
    except ValueError as exc:
        raise BatchError(f"serial item {item!r} is neither a host count nor a percentage "
                         "such as '20%'") from exc


def split(hosts: Sequence[str], serial: object) -> list[list[str]]:
    """``hosts`` (the play's, in order) cut into the batches ``serial`` asks for."""
    items = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    items = items or [0]
    batches: list[list[str]] = []
    start = 0
    while start < len(hosts):
        count = _count(items[min(len(batches), len(items) - 1)], len(hosts))
        if count <= 0:
            count = len(hosts) - start
        batches.append(list(hosts[start:start + count]))
        start += count
    return batches


def batch_of(hosts: Sequence[str], serial: object, host: str) -> list[str]:
    """The batch ``serial`` puts ``host`` in; empty when ``host`` is not one of ``hosts``."""
    return next((b for b in split(hosts, serial) if host in b), [])
