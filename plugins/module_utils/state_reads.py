"""The roles' state reads, by the name of the module that runs each alone, and one read of them
as the combined module ``stack_state`` does it: the arguments checked against the read's own
argument spec, the result shaped as that module would return it.

A read's module is the registry's key; its module_utils module holds ``ARGUMENT_SPEC``,
``read(module)``, ``FACT`` (the fact it sets; empty for a module whose result is the read's
dict) and ``ERRORS`` (the exceptions that fail it). Runs on managed nodes and, for the argument
check, on the controller (``plugin_utils/state_cache.py``).
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.ascend_serve.fleet.plugins.module_utils import (
    cann_read,
    host_runtime_read,
    host_tuning_read,
    npu_driver_read,
    os_base_read,
    python_env_read,
)

READS: dict[str, Any] = {
    "os_base_state": os_base_read,
    "npu_driver_facts": npu_driver_read,
    "cann_facts": cann_read,
    "host_runtime_facts": host_runtime_read,
    "host_tuning_state": host_tuning_read,
    "python_env_state": python_env_read,
}


class ReadRefusedError(Exception):
    """A read that cannot be done in the combined module: the role's own read will do it, and
    fail there with its own message if it fails."""


def checked_arguments(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the module would see them (types converted, defaults filled), or
    ReadRefusedError naming what is wrong."""
    if name not in READS:
        raise ReadRefusedError(f"no state read is named {name}")
    validator = ArgumentSpecValidator(READS[name].ARGUMENT_SPEC)
    result = validator.validate(dict(arguments))
    if result.error_messages:
        raise ReadRefusedError("; ".join(result.error_messages))
    return dict(result.validated_parameters)


class _PartModule:
    """What a read uses of AnsibleModule, for one read inside another module."""

    def __init__(self, module: Any, params: dict[str, Any]) -> None:
        self.params = params
        self.run_command = module.run_command

    def fail_json(self, msg: str, **_: Any) -> None:
        raise ReadRefusedError(msg)


def run_read(module: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The result the read's own module would return for ``arguments`` on this host."""
    params = checked_arguments(name, arguments)
    reader = READS[name]
    try:
        value = reader.read(_PartModule(module, params))
    except reader.ERRORS as exc:
        raise ReadRefusedError(str(exc)) from exc
    if reader.FACT:
        return {"changed": False, "ansible_facts": {reader.FACT: value}}
    return dict(value)
