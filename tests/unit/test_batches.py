"""The batches a play's serial makes (ascend_serve.fleet.batches), against ansible-core's own
split (PlaybookExecutor._get_serialized_batches) run on the same hosts and values."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.executor.playbook_executor import PlaybookExecutor  # type: ignore[import-untyped]
from ansible.playbook.play import Play  # type: ignore[import-untyped]
from ansible.template import Templar  # type: ignore[import-untyped]

from ascend_serve.fleet import batches

HOSTS = [f"h{i}" for i in range(1, 11)]


class _Inventory:
    def get_hosts(self, pattern: Any, order: Any = None) -> list[str]:
        return list(HOSTS)


def _ansible(serial: Any) -> list[list[str]]:
    executor = PlaybookExecutor.__new__(PlaybookExecutor)
    executor._inventory = _Inventory()
    play = Play.load({"hosts": "all", "serial": serial, "tasks": []})
    play.post_validate(templar=Templar(loader=None))
    return [list(map(str, b)) for b in executor._get_serialized_batches(play)]


@pytest.mark.parametrize("serial", [1, "1", ["1", "20%"], [2], ["30%"], ["1", "50%"], [0], [],
                                    ["5%"], [3, 1], "100%", [-1]])
def test_split_is_ansibles(serial: Any) -> None:
    assert batches.split(HOSTS, serial) == _ansible(serial)


def test_batch_of_a_host_and_a_host_outside_the_play() -> None:
    assert batches.batch_of(HOSTS, [2], "h4") == ["h3", "h4"]
    assert batches.batch_of(HOSTS, ["1", "20%"], "h1") == ["h1"]
    assert batches.batch_of(HOSTS, ["1", "20%"], "h2") == ["h2", "h3"]
    assert batches.batch_of(HOSTS, [2], "nope") == []


def test_a_value_that_is_no_count_is_refused() -> None:
    with pytest.raises(batches.BatchError, match="'two' is neither a host count"):
        batches.split(HOSTS, ["two"])
