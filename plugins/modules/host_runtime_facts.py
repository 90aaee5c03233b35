#!/usr/bin/python
"""Read the host's glibc and kernel and the version of the Python serving will use."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_runtime_facts
short_description: The host's glibc, kernel and serving Python version, for the version-set check
description:
  - Reads what the C(ascend_serve.fleet.ascend_stack) role checks a host against the locked
    version sets with - the glibc release (C(platform.libc_ver)), the running kernel
    (C(platform.release)) and the C(major.minor) version of O(python) - and sets them as
    C(ansible_facts.ascend_host_runtime).
  - When O(python) is the interpreter the module runs in (or is empty), nothing is started;
    otherwise that Python is run once with a short C(-c) probe (an argument list, no shell).
  - Inside a play whose C(ascend_serve.fleet.stack_state) task already read it with the same
    arguments, the answer comes from that read and no module runs on the host.
version_added: 0.9.0
options:
  python:
    description: The Python serving will run (the role's C(ascend_stack_python)).
    type: str
    default: ""
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Read the host's glibc, kernel and the serving Python's version
  ascend_serve.fleet.host_runtime_facts:
    python: /usr/bin/python3
"""

RETURN = r"""
ansible_facts:
  description: The facts set on the host.
  returned: always
  type: dict
  contains:
    ascend_host_runtime:
      description: C(glibc) (for example C(2.36); empty where it is not glibc), C(kernel) (the
        running kernel's release) and C(python) (C(3.11)).
      returned: always
      type: dict
      sample: {"glibc": "2.36", "kernel": "6.1.0-28-arm64", "python": "3.11"}
"""

from ansible_collections.ascend_serve.fleet.plugins.module_utils.host_runtime_read import (
    ARGUMENT_SPEC,
    ERRORS,
    FACT,
    FAILURE,
    read,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import facts_main


def main() -> None:
    facts_main(FACT, read, ARGUMENT_SPEC, FAILURE, ERRORS)


if __name__ == "__main__":
    main()
