"""Batches filter: the batches a play's ``serial`` makes, computed as Ansible computes them.

The logic lives in ``ascend_serve.fleet.batches`` on the controller (unit-tested there)::

    that: ansible_play_batch | sort == ansible_play_hosts_all
            | ascend_serve.fleet.serial_batch(ascend_upgrade_batches, ansible_play_batch | first)
            | sort
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    needs_package,
    plain,
)


def serial_batch(hosts: Any, serial: Any, host: Any) -> list[str]:
    """The play's hosts + a serial value + one host -> the batch that serial puts the host in."""
    with needs_package("serial_batch"):
        from ascend_serve.fleet import batches
    try:
        return batches.batch_of([str(h) for h in plain(hosts)], plain(serial), str(host))
    except batches.BatchError as exc:
        raise AnsibleFilterError(f"serial_batch: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(serial_batch)
