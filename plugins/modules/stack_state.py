#!/usr/bin/python
"""Read, in one round trip, the state every role of a play will read: the play's one state read."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_state
short_description: One read of a host for all the roles of a play, which the roles' reads then take
description:
  - Runs, in one module run on the host, the state reads of several roles - each the code of
    that role's own read module (C(os_base_state), C(npu_driver_facts), C(cann_facts),
    C(host_runtime_facts)) with the arguments given for it - and sets the answers as
    C(ansible_facts.ascend_state_cache), stamped with the play it belongs to.
  - A role's read task later in the same play whose arguments equal those given here takes
    that answer instead of running its module on the host (its action plugin compares the
    arguments, after checking both against the module's argument spec). Each answer is taken
    once; a read later in the play (after an install, say) runs on the host again. A read whose
    arguments differ, or a read not given here, runs on the host as it would without this task.
  - The arguments to give are those the roles recorded in their ledgers the last time they read
    (C(ansible_local.<ledger>.read)); a host never converged has none, and its roles read alone.
  - A read that fails here (a file in a layout it cannot read, an argument its module refuses)
    is left out of the answers, with its reason in RV(refused); the role's own read then runs and
    fails with the role's message.
version_added: 0.9.0
options:
  reads:
    description:
      - The reads to do, by the name of the module that does each alone; the value is that
        module's arguments. A null value is left out (a role with nothing recorded).
      - Required without O(settle); with it, the action plugin reads by default what the roles
        recorded, each role's read with the arguments in its ledger (C(read)), and
        C(host_runtime_facts) with those of the fact C(ascend_host_runtime) or else of the ledger
        C(ascend_stack_settled).
    type: dict
    default: {}
  settle:
    description:
      - Roles of C(stack.yml) (C(os_base), C(npu_driver), C(cann)) to fingerprint from the
        answers, the host's variables, facts and ledgers and the collection's code (done by the
        action plugin, on the controller; see C(plugins/plugin_utils/settle.py)).
      - Without O(entered), the fact C(ascend_stack_settle) says which of them to enter, those
        whose fingerprint differs from the one recorded in the ledger C(ascend_stack_settled)
        (all of them in a run tagged C(verify), or with the variable C(ascend_settle) false).
    type: list
    elements: str
  entered:
    description:
      - The roles a full run entered; with O(settle), RV(settled) is then the ledger's new
        record (the role C(stack_settle) writes it).
    type: list
    elements: str
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Read, in one round trip, what the stack's roles recorded they read
  ascend_serve.fleet.stack_state:
    reads:
      os_base_state: "{{ ansible_local['ascend_os_base']['read'] | default(none) }}"
      npu_driver_facts: "{{ ansible_local['ascend_npu_driver']['read'] | default(none) }}"
      cann_facts: "{{ ansible_local['ascend_cann']['read'] | default(none) }}"
      host_runtime_facts:
        python: /usr/bin/python3

- name: Read the host once, and find which roles a full run left settled (stack.yml)
  ascend_serve.fleet.stack_state:
    settle: [os_base, npu_driver, cann]
"""

RETURN = r"""
ansible_facts:
  description: The facts set on the host.
  returned: always
  type: dict
  contains:
    ascend_stack_settle:
      description: With O(settle) and without O(entered), C(roles) (those of O(settle)) and
        C(enter) (those of them the play must enter).
      returned: with O(settle)
      type: dict
    ascend_state_cache:
      description: C(play) (the play's id, set by the action plugin) and C(reads), by module
        name, each C(request) (the arguments as given) and C(result) (what that module would
        have returned).
      returned: always
      type: dict
refused:
  description: The reads left out, by module name, with the reason.
  returned: always
  type: dict
fingerprints:
  description: Each role of O(settle) with its fingerprint (null when a read it needs has no
    answer).
  returned: with O(settle)
  type: dict
settled:
  description: The new record of the ledger C(ascend_stack_settled), C(roles) (role to
    fingerprint, the roles this run left settled) and C(reads) (the arguments that were read).
  returned: with O(settle) and O(entered)
  type: dict
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend_serve.fleet.plugins.module_utils.state_reads import (
    ReadRefusedError,
    run_read,
)


def main() -> None:
    module = AnsibleModule(argument_spec={
        "reads": {"type": "dict", "default": {}},
        # Taken by the action plugin (the fingerprints are the controller's); never sent here.
        "settle": {"type": "list", "elements": "str"},
        "entered": {"type": "list", "elements": "str"},
    }, supports_check_mode=True)
    answers: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for name, request in module.params["reads"].items():
        if request is None:
            continue
        if not isinstance(request, dict):
            refused[name] = "its arguments are not a mapping"
            continue
        try:
            answers[name] = {"request": request, "result": run_read(module, name, request)}
        except ReadRefusedError as exc:
            refused[name] = str(exc)
    module.exit_json(changed=False, refused=refused,
                     ansible_facts={"ascend_state_cache": {"play": "", "reads": answers}})


if __name__ == "__main__":
    main()
