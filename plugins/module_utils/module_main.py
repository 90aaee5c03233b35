"""The ``main()`` the collection's modules share: build the AnsibleModule, run, exit or fail.

A module keeps its own argument spec, work and messages; what is the same in every one (check
mode support, ``changed=False`` facts, a failure with its partial result, ``diff`` only in diff
mode) is here once. Runs on managed nodes inside every module's payload: standard library and
Ansible's own module_utils only, Python 3.8+ (annotations are not evaluated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible.module_utils.basic import AnsibleModule

if TYPE_CHECKING:
    from collections.abc import Callable

# The vendor's install path of the NPU driver and CANN (doc fragment
# ascend_serve.fleet.common.install_path).
INSTALL_PATH_ARG: dict[str, dict[str, Any]] = {
    "install_path": {"type": "path", "default": "/usr/local/Ascend"},
}


def facts_main(
    fact: str,
    read: Callable[[AnsibleModule], Any],
    argument_spec: dict[str, Any] | None = None,
    failure: str = "",
    errors: tuple[type[Exception], ...] = (),
) -> None:
    """A facts module: ``read(module)`` is set as ``ansible_facts[fact]``; nothing changes.

    An exception of ``errors`` fails the task as ``"<failure>: <exception>"``; ``read`` may fail
    it with a message of its own (``module.fail_json``).
    """
    module = AnsibleModule(argument_spec=argument_spec or {}, supports_check_mode=True)
    try:
        value = read(module)
    except errors as exc:
        module.fail_json(msg=f"{failure}: {exc}")
    module.exit_json(changed=False, ansible_facts={fact: value})


def result_main(
    argument_spec: dict[str, Any],
    run: Callable[[AnsibleModule], dict[str, Any]],
    errors: tuple[type[Exception], ...] = (),
    **module_options: Any,
) -> None:
    """A module whose ``run(module)`` returns its whole result.

    An exception of ``errors`` fails the task with its ``msg`` (else its text) and the partial
    result in its ``result`` dict, if any. A ``diff`` in the result is returned in diff mode
    only. ``module_options`` go to AnsibleModule (mutually_exclusive, ...).
    """
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           **module_options)
    try:
        result = run(module)
    except errors as exc:
        module.fail_json(msg=getattr(exc, "msg", None) or str(exc),
                         **getattr(exc, "result", {}))
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)
